/* Unit tests for policy/conffile.c and fs_policy_get(): where the process's
 * policy comes from, and what a bad one does (log, run unaccelerated). */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "policy/conffile.h"
#include "policy/policy.h"
#include "tests/unit/check_run.h"

static char errbuf[512];
static struct fs_policy_action act;

static const struct fs_policy_action *m(const struct fs_policy *p, const char *prog)
{
  struct fs_policy_query q = { prog, FS_DIR_CONNECT, NULL, NULL };
  fs_policy_match(p, &q, &act);
  return &act;
}

static void write_file(const char *path, const char *text)
{
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* ---- fs_conffile_load ------------------------------------------------- */

static const char *cf_path, *cf_spin;

static const char *cf_get(const char *name)
{
  if (strcmp(name, "FABSOCK_CONFIG") == 0)
    return cf_path;
  if (strcmp(name, "FABSOCK_SPIN_US") == 0)
    return cf_spin;
  return NULL;
}

/* Load with FABSOCK_CONFIG=path; returns rc, message in errbuf. */
static int cf_load(const char *path, const char *spin, struct fs_policy **p)
{
  cf_path = path;
  cf_spin = spin;
  *p = (struct fs_policy *)1;
  int rc = fs_conffile_load(cf_get, p, errbuf, sizeof errbuf);
  if (rc < 0)
    ck_assert_ptr_null(*p);
  return rc;
}

START_TEST(conffile_load)
{
  char dir[] = "/tmp/check_policy.XXXXXX", path[128], want[256];
  struct fs_policy *p;
  ck_assert_ptr_nonnull(mkdtemp(dir));

  snprintf(path, sizeof path, "%s/good.conf", dir);
  write_file(path, "default timeout=3\nrule program=a fabric=shm");
  ck_assert_int_eq(cf_load(path, NULL, &p), 0);
  ck_assert_uint_eq(fs_policy_rule_count(p), 1);
  ck_assert_uint_eq(m(p, "a")->timeout_ms, 3);
  fs_policy_free(p);
  ck_assert_int_eq(cf_load(path, "busy", &p), 0); /* variables apply after the file */
  ck_assert(m(p, "a")->busy_poll);
  fs_policy_free(p);
  ck_assert_int_eq(cf_load(path, "x", &p), -EINVAL); /* ... and a bad one fails the load */
  ck_assert_str_eq(errbuf, "FABSOCK_SPIN_US: bad value 'x': expected adaptive, busy or microseconds");
  ck_assert_int_eq(cf_load("", NULL, &p), 0);      /* set but empty: no file */
  ck_assert_uint_eq(fs_policy_rule_count(p), 0);
  fs_policy_free(p);

  snprintf(path, sizeof path, "%s/bad.conf", dir);
  write_file(path, "rule\r\nrule dir=sideways\r\n");
  ck_assert_int_eq(cf_load(path, NULL, &p), -EINVAL);
  snprintf(want, sizeof want, "%s:2: dir: bad value 'sideways': expected connect, accept or any", path);
  ck_assert_str_eq(errbuf, want);

  snprintf(path, sizeof path, "%s/missing.conf", dir);
  ck_assert_int_eq(cf_load(path, NULL, &p), -ENOENT);
  snprintf(want, sizeof want, "%s: No such file or directory", path);
  ck_assert_str_eq(errbuf, want);

  ck_assert_int_eq(cf_load(dir, NULL, &p), -EINVAL);
  snprintf(want, sizeof want, "%s: not a regular file", dir);
  ck_assert_str_eq(errbuf, want);

  snprintf(path, sizeof path, "%s/fifo", dir); /* must not block in open */
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  ck_assert_int_eq(cf_load(path, NULL, &p), -EINVAL);
  snprintf(want, sizeof want, "%s: not a regular file", path);
  ck_assert_str_eq(errbuf, want);

  /* 1 MiB exactly is fine, one byte more is not. */
  snprintf(path, sizeof path, "%s/big.conf", dir);
  FILE *f = fopen(path, "w");
  for (int i = 0; i < (1 << 20); i++)
    fputc(i % 64 == 63 ? '\n' : '#', f);
  fclose(f);
  ck_assert_int_eq(cf_load(path, NULL, &p), 0);
  fs_policy_free(p);
  f = fopen(path, "a");
  fputc('\n', f);
  fclose(f);
  ck_assert_int_eq(cf_load(path, NULL, &p), -EINVAL);
  snprintf(want, sizeof want, "%s: larger than 1 MiB", path);
  ck_assert_str_eq(errbuf, want);

  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- fs_policy_get (process-wide, so each case runs in a child) -------- */

static char tmpdir[64];

static void *get_thread(void *arg)
{
  bool d;
  return (void *)fs_policy_get(&d);
}

/* Run fs_policy_get in a child with env "K=V\0K=V\0\0"; check the result and
 * what it logged to stderr. */
static void get_case(const char *env, bool want_disabled, int want_fabric, const char *want_log)
{
  char logpath[128];
  snprintf(logpath, sizeof logpath, "%s/log", tmpdir);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    FILE *f = freopen(logpath, "w", stderr);
    if (f == NULL)
      _exit(10);
    unsetenv("FABSOCK_CONFIG");
    unsetenv("FABSOCK_DISABLE");
    unsetenv("FABSOCK_TRANSPORT");
    unsetenv("FABSOCK_LOG");
    setenv("FABSOCK_CONFIG", "", 1); /* no sysconfdir file unless a case names one */
    for (const char *e = env; *e; e += strlen(e) + 1) {
      char kv[512];
      snprintf(kv, sizeof kv, "%s", e);
      char *eq = strchr(kv, '=');
      *eq = '\0';
      setenv(kv, eq + 1, 1);
    }
    pthread_t th[4];
    void *res[4];
    for (int i = 0; i < 4; i++)
      pthread_create(&th[i], NULL, get_thread, NULL);
    for (int i = 0; i < 4; i++)
      pthread_join(th[i], &res[i]);
    bool disabled = !want_disabled;
    errno = 4242;
    const struct fs_policy *p = fs_policy_get(&disabled);
    if (errno != 4242)
      _exit(11);
    for (int i = 0; i < 4; i++)
      if (res[i] != p)
        _exit(12);
    if (p == NULL || disabled != want_disabled)
      _exit(13);
    struct fs_policy_query q = { "prog", FS_DIR_CONNECT, NULL, NULL };
    struct fs_policy_action a;
    fs_policy_match(p, &q, &a);
    if ((int)a.fabric != want_fabric)
      _exit(14);
    _exit(0);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child for '%s' failed: %d", env, st);
  char log[1024] = "";
  FILE *f = fopen(logpath, "r");
  ck_assert_ptr_nonnull(f);
  size_t n = fread(log, 1, sizeof log - 1, f);
  log[n] = '\0';
  fclose(f);
  if (want_log == NULL)
    ck_assert_str_eq(log, "");
  else
    ck_assert_msg(strstr(log, want_log) != NULL, "log '%s' lacks '%s'", log, want_log);
}

START_TEST(get_process_policy)
{
  char env[1024], path[128];
  strcpy(tmpdir, "/tmp/check_policy.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));

  get_case("\0", false, FS_FABRIC_AUTO, NULL);
  get_case("FABSOCK_DISABLE=1\0", true, FS_FABRIC_TCP, NULL);
  get_case("FABSOCK_DISABLE=0\0FABSOCK_TRANSPORT=shm\0", false, FS_FABRIC_SHM, NULL);

  snprintf(path, sizeof path, "%s/good.conf", tmpdir);
  write_file(path, "# test\nrule program=prog dir=connect fabric=rdma\n");
  snprintf(env, sizeof env, "FABSOCK_CONFIG=%s%c", path, 0);
  get_case(env, false, FS_FABRIC_RDMA, NULL);

  snprintf(env, sizeof env, "FABSOCK_CONFIG=%s%cFABSOCK_SPIN_US=soon%c", path, 0, 0);
  get_case(env, true, FS_FABRIC_TCP,
           "error: FABSOCK_SPIN_US: bad value 'soon': expected adaptive, busy or microseconds; running unaccelerated");

  snprintf(path, sizeof path, "%s/bad.conf", tmpdir);
  write_file(path, "rule fabric=shm\nrule remote=10.0.0.0/33\n");
  snprintf(env, sizeof env, "FABSOCK_CONFIG=%s%c", path, 0);
  char want[256];
  snprintf(want, sizeof want,
           "error: %s:2: remote: bad value '10.0.0.0/33': prefix /33 is longer than 32; running unaccelerated", path);
  get_case(env, true, FS_FABRIC_TCP, want);
  snprintf(env, sizeof env, "FABSOCK_CONFIG=%s%cFABSOCK_LOG=off%c", path, 0, 0);
  get_case(env, true, FS_FABRIC_TCP, NULL);

  snprintf(path, sizeof path, "%s/missing.conf", tmpdir);
  snprintf(env, sizeof env, "FABSOCK_CONFIG=%s%c", path, 0);
  snprintf(want, sizeof want, "%s: No such file or directory; running unaccelerated", path);
  get_case(env, true, FS_FABRIC_TCP, want);

  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* fs_policy_needs_local: a rule naming a local address or port, and only
 * such a rule, makes a connecting end learn its own address at connect
 * (engine/sock.c).  Each case in a child: the policy is process-wide. */
static void local_case(const char *conf, bool want)
{
  char path[160];
  snprintf(path, sizeof path, "%s/local.conf", tmpdir);
  write_file(path, conf);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    unsetenv("FABSOCK_DISABLE");
    unsetenv("FABSOCK_TRANSPORT");
    setenv("FABSOCK_LOG", "off", 1);
    setenv("FABSOCK_CONFIG", path, 1);
    bool d = true;
    if (fs_policy_get(&d) == NULL || d)
      _exit(10);
    _exit(fs_policy_needs_local() == want ? 0 : 11);
  }
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "'%s': %d", conf, st);
}

START_TEST(needs_local)
{
  strcpy(tmpdir, "/tmp/check_policy.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  local_case("# none\n", false);
  local_case("rule remote=10.0.0.0/8 fabric=tcp\nrule program=x local=* fabric=tcp\n", false);
  local_case("rule remote=10.0.0.0/8 fabric=tcp\nrule local=127.0.0.1 fabric=tcp\n", true);
  local_case("rule local=*:5432 fabric=tcp\n", true);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("conffile");
  TCase *tc = tcase_create("load");
  tcase_add_test(tc, conffile_load);
  tcase_add_test(tc, get_process_policy);
  tcase_add_test(tc, needs_local);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
