/* `fabsock run`: set the FABSOCK_* variables, prepend libfabsock.so to
 * LD_PRELOAD and exec the program. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tools/fabsock.h"
#include "tools/reach.h"

#ifndef FS_LIBDIR
#define FS_LIBDIR "/usr/local/lib"
#endif
#define FS_LIBNAME "libfabsock.so"

void fs_tool_run_usage(FILE *out)
{
  fputs("fabsock run [OPTIONS] [--] PROGRAM [ARGS...]\n"
        "  Execute PROGRAM with libfabsock preloaded (prepended to LD_PRELOAD).\n"
        "  --transport auto|rdma|shm|tcp\n"
        "                  fabric for every connection (sets FABSOCK_TRANSPORT)\n"
        "  --config FILE   policy file, fabsock.conf(5) (sets FABSOCK_CONFIG to\n"
        "                  its absolute path)\n"
        "  --log LEVEL     off|error|warn|info|debug, optionally \",syslog\", \",time\"\n"
        "                  (sets FABSOCK_LOG)\n"
        "  -h, --help      show this help\n"
        "  The library is $FABSOCK_LIB if set, else .libs/" FS_LIBNAME " beside the\n"
        "  fabsock executable (a build tree), else " FS_LIBDIR "/" FS_LIBNAME ".\n"
        "  A warning on stderr says when PROGRAM cannot be reached by LD_PRELOAD\n"
        "  (a Go program, a static one, one for another machine, or one the\n"
        "  loader runs in secure-execution mode: set-user-ID, file capabilities);\n"
        "  --log off or error silences it.\n",
        out);
}

static const char *fs_tool_cmd = "run"; /* the subcommand whose options are parsed */

static int fs_tool_run_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int fs_tool_run_usage_error(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fabsock %s: ", fs_tool_cmd);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry 'fabsock %s --help'.\n", fs_tool_cmd);
  return FS_TOOL_EXIT_USAGE;
}

/* FABSOCK_LOG grammar (base/log.h): comma-separated level words, "syslog", "time". */
static int fs_tool_log_valid(const char *spec)
{
  static const char *const words[] = { "off", "error", "warn", "info", "debug", "syslog", "time" };
  if (*spec == '\0')
    return 0;
  while (*spec) {
    size_t n = strcspn(spec, ",");
    int ok = 0;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
      if (strlen(words[i]) == n && strncasecmp(spec, words[i], n) == 0)
        ok = 1;
    if (!ok)
      return 0;
    spec += n;
    if (*spec == ',' && *++spec == '\0')
      return 0;
  }
  return 1;
}

/* Absolute path of the library into out (PATH_MAX); 0, or -1 after a message. */
static int fs_tool_find_lib(char *out)
{
  const char *env = getenv("FABSOCK_LIB");
  if (env != NULL && *env != '\0') {
    if (realpath(env, out) == NULL) {
      fprintf(stderr, "fabsock %s: FABSOCK_LIB=%s: %s\n", fs_tool_cmd, env, strerror(errno));
      return -1;
    }
    return 0;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    char cand[PATH_MAX + 32];
    if (slash != NULL) {
      *slash = '\0';
      snprintf(cand, sizeof cand, "%s/.libs/%s", exe, FS_LIBNAME);
      if (access(cand, R_OK) == 0 && realpath(cand, out) != NULL)
        return 0;
    }
  }
  if (access(FS_LIBDIR "/" FS_LIBNAME, R_OK) == 0 && realpath(FS_LIBDIR "/" FS_LIBNAME, out) != NULL)
    return 0;
  fprintf(stderr, "fabsock %s: cannot find %s (looked in %s); set FABSOCK_LIB\n", fs_tool_cmd, FS_LIBNAME,
          FS_LIBDIR);
  return -1;
}

/* "lib:old entries", without repeating lib.  ld.so splits LD_PRELOAD on
 * spaces and colons, so the path itself must contain neither. */
static char *fs_tool_preload(const char *lib)
{
  const char *old = getenv("LD_PRELOAD");
  size_t cap = strlen(lib) + (old ? strlen(old) : 0) + 2;
  char *out = malloc(cap);
  if (out == NULL)
    return NULL;
  strcpy(out, lib);
  size_t len = strlen(lib);
  while (old != NULL && *old != '\0') {
    size_t n = strcspn(old, ": ");
    if (n > 0 && !(n == strlen(lib) && strncmp(old, lib, n) == 0)) {
      out[len++] = ':';
      memcpy(out + len, old, n);
      len += n;
    }
    old += n;
    if (*old != '\0')
      old++;
  }
  out[len] = '\0';
  return out;
}

int fs_tool_env_parse(int argc, char **argv, const char *cmd, struct fs_tool_env *e)
{
  static const struct option opts[] = {
    { "transport", required_argument, NULL, 't' },
    { "config", required_argument, NULL, 'c' },
    { "log", required_argument, NULL, 'l' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  memset(e, 0, sizeof *e);
  int c;
  opterr = 0;
  optind = 1;
  fs_tool_cmd = cmd;
  /* '+': options end at PROGRAM, whose own options are left alone. */
  while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
    switch (c) {
    case 't':
      e->transport = optarg;
      break;
    case 'c':
      e->config = optarg;
      break;
    case 'l':
      e->log = optarg;
      break;
    case 'h':
      return FS_TOOL_HELP;
    case ':':
      return fs_tool_run_usage_error("option '%s' needs an argument", argv[optind - 1]);
    default:
      if (optopt != 0)
        return fs_tool_run_usage_error("unknown option '-%c'", optopt);
      return fs_tool_run_usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  e->optind = optind;
  const char *transport = e->transport;
  if (transport != NULL && strcmp(transport, "auto") != 0 && strcmp(transport, "rdma") != 0 &&
      strcmp(transport, "shm") != 0 && strcmp(transport, "tcp") != 0)
    return fs_tool_run_usage_error("--transport %s: expected auto, rdma, shm or tcp", transport);
  if (e->log != NULL && !fs_tool_log_valid(e->log))
    return fs_tool_run_usage_error("--log %s: expected off, error, warn, info or debug, "
                                   "optionally followed by ,syslog and ,time", e->log);
  if (e->config != NULL) {
    if (realpath(e->config, e->config_abs) == NULL || access(e->config_abs, R_OK) != 0) {
      fprintf(stderr, "fabsock %s: --config %s: %s\n", cmd, e->config, strerror(errno));
      return FS_TOOL_EXIT_USAGE;
    }
  }
  if (fs_tool_find_lib(e->lib) < 0)
    return FS_TOOL_EXIT_NOEXEC;
  if (strpbrk(e->lib, ": ") != NULL) {
    fprintf(stderr, "fabsock %s: %s: LD_PRELOAD cannot carry a path with ':' or ' '\n", cmd, e->lib);
    return FS_TOOL_EXIT_NOEXEC;
  }
  return FS_TOOL_PARSED;
}

/* Say so before the exec where LD_PRELOAD cannot reach PROGRAM at all
 * (tools/reach.h): it would run as without the library, silently.  A
 * warning, so --log off or error (or FABSOCK_LOG, when --log is not given)
 * keeps it quiet. */
static void fs_tool_run_reach(const char *prog, const struct fs_tool_env *e)
{
  const char *log = e->log ? e->log : getenv("FABSOCK_LOG");
  if (log && (strncmp(log, "off", 3) == 0 || strncmp(log, "error", 5) == 0))
    return;
  char path[PATH_MAX], why[512];
  if (fs_tool_reach_find(prog, path, sizeof path) < 0)
    return; /* execvp says what is wrong */
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  if (fs_tool_reach_fd(fd, getuid(), getgid(), why, sizeof why) != FS_REACH_OK)
    fprintf(stderr, "fabsock run: warning: %s %s; its connections stay on kernel TCP\n", path, why);
  close(fd);
}

int fs_tool_run_main(int argc, char **argv)
{
  struct fs_tool_env e;
  int rc = fs_tool_env_parse(argc, argv, "run", &e);
  if (rc == FS_TOOL_HELP) {
    fs_tool_run_usage(stdout);
    return FS_TOOL_EXIT_OK;
  }
  if (rc != FS_TOOL_PARSED)
    return rc;
  if (e.optind >= argc)
    return fs_tool_run_usage_error("no PROGRAM given");
  char *preload = fs_tool_preload(e.lib);
  if (preload == NULL || setenv("LD_PRELOAD", preload, 1) < 0 ||
      (e.transport && setenv("FABSOCK_TRANSPORT", e.transport, 1) < 0) ||
      (e.config && setenv("FABSOCK_CONFIG", e.config_abs, 1) < 0) ||
      (e.log && setenv("FABSOCK_LOG", e.log, 1) < 0)) {
    fprintf(stderr, "fabsock run: %s\n", strerror(errno));
    free(preload);
    return FS_TOOL_EXIT_NOEXEC;
  }
  free(preload);
  fs_tool_run_reach(argv[e.optind], &e);
  execvp(argv[e.optind], argv + e.optind);
  fprintf(stderr, "fabsock run: %s: %s\n", argv[e.optind], strerror(errno));
  return FS_TOOL_EXIT_NOEXEC;
}
