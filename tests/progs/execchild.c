/* execchild: a connection inherited across exec.
 *
 *   execchild -p port -m fork|spawn|system|popen [-6] [-n bytes]
 *   execchild --child FD BYTES SEED          (the re-executed child)
 *
 * The parent connects to an echo server and does a verified round trip.
 * Then a new program image uses the same fd:
 *   fork    fork() + execv(self, --child fd ...): the child does a verified
 *           round trip on the inherited fd and exits 0.
 *   spawn   the same through posix_spawn().
 *   system  system() runs a shell pipeline writing a line to the fd and
 *           reading its echo back (head -c) into a file, which is checked.
 *   popen   the same through popen(), reading the pipeline's stdout.
 * The parent then does another round trip on the fd (the stream must have
 * resumed exactly where the child left it), shuts down and expects EOF.
 * Prints "ok MODE" and exits 0, or a reason and exits 1. */
#include "tests/progs/common.h"

#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int child_main(int argc, char **argv)
{
  char err[256];
  if (argc != 5)
    it_die(2, "usage: execchild --child FD BYTES SEED");
  int fd = atoi(argv[2]);
  if (it_echo_roundtrip(fd, it_size(argv[3]), it_size(argv[4]), 65536, err, sizeof err) != 0)
    it_die(1, "child round trip on inherited fd %d: %s", fd, err);
  return 0;
}

static int wait_ok(pid_t pid, const char *what)
{
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR)
      it_die(1, "waitpid:");
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
    return 1;
  if (WIFSIGNALED(st))
    printf("FAIL %s: child killed by signal %d\n", what, WTERMSIG(st));
  else
    printf("FAIL %s: child exit status %d\n", what, WEXITSTATUS(st));
  return 0;
}

static int check_text(const char *what, const char *got, const char *want)
{
  if (strcmp(got, want) == 0)
    return 1;
  printf("FAIL %s: pipeline read back '%s', expected '%s'\n", what, got, want);
  return 0;
}

int main(int argc, char **argv)
{
  int v6 = 0, port = 0, opt;
  const char *mode = NULL, *host = NULL;
  uint64_t bytes = 1 << 20;
  char err[256], self[4096], fdarg[16], narg[32], cmd[8192];
  const char *line = "hello-from-a-shell-pipeline";

  it_prog = "execchild";
  if (argc > 1 && strcmp(argv[1], "--child") == 0)
    return child_main(argc, argv);
  while ((opt = getopt(argc, argv, "p:m:6H:n:")) != -1) {
    switch (opt) {
    case 'p': port = atoi(optarg); break;
    case 'm': mode = optarg; break;
    case '6': v6 = 1; break;
    case 'H': host = optarg; break;
    case 'n': bytes = it_size(optarg); break;
    default: it_die(2, "usage: execchild -p port -m fork|spawn|system|popen [-6] [-n bytes]");
    }
  }
  if (!port || !mode)
    it_die(2, "need -p and -m");
  signal(SIGPIPE, SIG_IGN);
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl < 0)
    it_die(2, "readlink /proc/self/exe:");
  self[sl] = 0;

  int fd = it_connect(v6, host, port);
  if (fd < 0)
    it_die(1, "connect:");
  if (it_echo_roundtrip(fd, bytes, 11, 65536, err, sizeof err) != 0) {
    printf("FAIL before %s: %s\n", mode, err);
    return 1;
  }
  snprintf(fdarg, sizeof fdarg, "%d", fd);
  snprintf(narg, sizeof narg, "%llu", (unsigned long long)bytes);
  char *cargv[] = { self, "--child", fdarg, narg, "22", NULL };
  int ok = 1;

  if (strcmp(mode, "fork") == 0) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
      it_die(1, "fork:");
    if (pid == 0) {
      execv(self, cargv);
      _exit(127);
    }
    ok = wait_ok(pid, "fork+exec");
  } else if (strcmp(mode, "spawn") == 0) {
    pid_t pid;
    int e = posix_spawn(&pid, self, NULL, NULL, cargv, environ);
    if (e != 0) {
      errno = e;
      it_die(1, "posix_spawn:");
    }
    ok = wait_ok(pid, "posix_spawn");
  } else if (strcmp(mode, "system") == 0) {
    char out[4096], got[256] = "";
    const char *tmp = getenv("TMPDIR");
    snprintf(out, sizeof out, "%s/execchild.%d.out", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    snprintf(cmd, sizeof cmd, "printf '%%s' '%s' >&%d && head -c %zu <&%d > '%s'", line, fd, strlen(line), fd, out);
    int st = system(cmd);
    FILE *f = fopen(out, "r");
    if (f) {
      size_t n = fread(got, 1, sizeof got - 1, f);
      got[n] = 0;
      fclose(f);
      unlink(out);
    }
    if (st != 0) {
      printf("FAIL system: status %d\n", st);
      ok = 0;
    } else {
      ok = check_text("system", got, line);
    }
  } else if (strcmp(mode, "popen") == 0) {
    char got[256] = "";
    snprintf(cmd, sizeof cmd, "printf '%%s' '%s' >&%d && head -c %zu <&%d", line, fd, strlen(line), fd);
    FILE *p = popen(cmd, "r");
    if (!p)
      it_die(1, "popen:");
    size_t n = fread(got, 1, sizeof got - 1, p);
    got[n] = 0;
    int st = pclose(p);
    if (st != 0) {
      printf("FAIL popen: status %d\n", st);
      ok = 0;
    } else {
      ok = check_text("popen", got, line);
    }
  } else {
    it_die(2, "unknown mode '%s'", mode);
  }
  if (!ok)
    return 1;

  if (it_echo_roundtrip(fd, bytes, 33, 65536, err, sizeof err) != 0 || it_echo_finish(fd, err, sizeof err) != 0) {
    printf("FAIL parent after %s: %s\n", mode, err);
    return 1;
  }
  close(fd);
  printf("ok %s\n", mode);
  return 0;
}
