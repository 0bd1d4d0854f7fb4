/* `fabsock run`: set the FABSOCK_* variables, prepend libfabsock.so to
 * LD_PRELOAD and exec the program. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tools/fabsock.h"

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
        "  --log LEVEL     off|error|warn|info|debug, optionally \",syslog\"\n"
        "                  (sets FABSOCK_LOG)\n"
        "  -h, --help      show this help\n"
        "  The library is $FABSOCK_LIB if set, else .libs/" FS_LIBNAME " beside the\n"
        "  fabsock executable (a build tree), else " FS_LIBDIR "/" FS_LIBNAME ".\n",
        out);
}

static int fs_tool_run_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int fs_tool_run_usage_error(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fputs("fabsock run: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nTry 'fabsock run --help'.\n", stderr);
  return FS_TOOL_EXIT_USAGE;
}

/* FABSOCK_LOG grammar (base/log.h): comma-separated level words and "syslog". */
static int fs_tool_log_valid(const char *spec)
{
  static const char *const words[] = { "off", "error", "warn", "info", "debug", "syslog" };
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
      fprintf(stderr, "fabsock run: FABSOCK_LIB=%s: %s\n", env, strerror(errno));
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
  fprintf(stderr, "fabsock run: cannot find %s (looked in %s); set FABSOCK_LIB\n", FS_LIBNAME,
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

int fs_tool_run_main(int argc, char **argv)
{
  static const struct option opts[] = {
    { "transport", required_argument, NULL, 't' },
    { "config", required_argument, NULL, 'c' },
    { "log", required_argument, NULL, 'l' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  const char *transport = NULL, *config = NULL, *log = NULL;
  int c;
  opterr = 0;
  optind = 1;
  /* '+': options end at PROGRAM, whose own options are left alone. */
  while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
    switch (c) {
    case 't':
      transport = optarg;
      break;
    case 'c':
      config = optarg;
      break;
    case 'l':
      log = optarg;
      break;
    case 'h':
      fs_tool_run_usage(stdout);
      return FS_TOOL_EXIT_OK;
    case ':':
      return fs_tool_run_usage_error("option '%s' needs an argument", argv[optind - 1]);
    default:
      if (optopt != 0)
        return fs_tool_run_usage_error("unknown option '-%c'", optopt);
      return fs_tool_run_usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind >= argc)
    return fs_tool_run_usage_error("no PROGRAM given");
  if (transport != NULL && strcmp(transport, "auto") != 0 && strcmp(transport, "rdma") != 0 &&
      strcmp(transport, "shm") != 0 && strcmp(transport, "tcp") != 0)
    return fs_tool_run_usage_error("--transport %s: expected auto, rdma, shm or tcp", transport);
  if (log != NULL && !fs_tool_log_valid(log))
    return fs_tool_run_usage_error("--log %s: expected off, error, warn, info or debug, "
                                   "optionally followed by ,syslog", log);
  char config_abs[PATH_MAX];
  if (config != NULL) {
    if (realpath(config, config_abs) == NULL || access(config_abs, R_OK) != 0) {
      fprintf(stderr, "fabsock run: --config %s: %s\n", config, strerror(errno));
      return FS_TOOL_EXIT_USAGE;
    }
  }

  char lib[PATH_MAX];
  if (fs_tool_find_lib(lib) < 0)
    return FS_TOOL_EXIT_NOEXEC;
  if (strpbrk(lib, ": ") != NULL) {
    fprintf(stderr, "fabsock run: %s: LD_PRELOAD cannot carry a path with ':' or ' '\n", lib);
    return FS_TOOL_EXIT_NOEXEC;
  }
  char *preload = fs_tool_preload(lib);
  if (preload == NULL || setenv("LD_PRELOAD", preload, 1) < 0 ||
      (transport && setenv("FABSOCK_TRANSPORT", transport, 1) < 0) ||
      (config && setenv("FABSOCK_CONFIG", config_abs, 1) < 0) ||
      (log && setenv("FABSOCK_LOG", log, 1) < 0)) {
    fprintf(stderr, "fabsock run: %s\n", strerror(errno));
    free(preload);
    return FS_TOOL_EXIT_NOEXEC;
  }
  free(preload);
  execvp(argv[optind], argv + optind);
  fprintf(stderr, "fabsock run: %s: %s\n", argv[optind], strerror(errno));
  return FS_TOOL_EXIT_NOEXEC;
}
