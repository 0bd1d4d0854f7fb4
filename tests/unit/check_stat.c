/* Unit tests for base/stat.c (the per-process table) and for the `fabsock`
 * command that reads it (run when the harness sets FABSOCK_BIN). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "base/aside.h"
#include "base/proc.h"
#include "base/reason.h"
#include "base/stat.h"
#include "tests/unit/pagemap.h"
#include "tests/unit/check_run.h"

#define HDR sizeof(struct fs_stat_header)
#define SLOT sizeof(struct fs_stat_conn)
#define FILE_LEN (HDR + (size_t)FS_STAT_SLOTS * SLOT)

static char tmpdir[PATH_MAX];

/* Checked fixture: runs in the test's own process (Check forks per test). */
static void setup(void)
{
  snprintf(tmpdir, sizeof tmpdir, "%s/check_stat.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  char real[PATH_MAX];
  ck_assert_ptr_nonnull(realpath(tmpdir, real));
  strcpy(tmpdir, real);
  setenv("FABSOCK_STATDIR", tmpdir, 1);
  unsetenv("FABSOCK_STAT");
}

static void teardown(void)
{
  DIR *d = opendir(tmpdir);
  if (d) {
    char p[PATH_MAX + 300];
    for (struct dirent *e; (e = readdir(d)) != NULL;)
      if (e->d_name[0] != '.') {
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
      }
    closedir(d);
  }
  rmdir(tmpdir);
}

static void table_path(int pid, char *out, size_t len)
{
  snprintf(out, len, "%s/fabsock.%d.stat", tmpdir, pid);
}

/* Read len bytes at off of pid's table file; 0 or -1 if it is not there. */
static int read_table(int pid, void *buf, size_t len, off_t off)
{
  char p[PATH_MAX + 64];
  table_path(pid, p, sizeof p);
  int fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t n = pread(fd, buf, len, off);
  close(fd);
  return n == (ssize_t)len ? 0 : -1;
}

static int read_header(int pid, struct fs_stat_header *h)
{
  return read_table(pid, h, sizeof *h, 0);
}

static int read_slot(int pid, unsigned i, struct fs_stat_conn *c)
{
  return read_table(pid, c, sizeof *c, (off_t)(HDR + i * SLOT));
}

static int table_exists(int pid)
{
  char p[PATH_MAX + 64];
  table_path(pid, p, sizeof p);
  return access(p, F_OK) == 0;
}

/* starttime of /proc/PID/stat (field 22), 0 if unreadable. */
static uint64_t proc_start_of(int pid)
{
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  for (int field = 2; p && field < 22; field++)
    p = strchr(p + 1, ' ');
  return p ? strtoull(p + 1, NULL, 10) : 0;
}

static uint64_t my_proc_start(void)
{
  uint64_t v = proc_start_of((int)getpid());
  ck_assert(v != 0);
  return v;
}

static void publish(struct fs_stat_conn *s, int fd)
{
  s->fd = fd;
  s->family = AF_INET;
  __atomic_store_n(&s->used, 1, __ATOMIC_RELEASE);
}

/* The first slot makes the table in private memory: no file until
 * fs_stat_publish, which copies what is there (a row written before) and
 * maps the file in its place, so that pointers held stay valid. */
START_TEST(test_lazy_create_and_header)
{
  int pid = (int)getpid();
  ck_assert(!table_exists(pid));
  errno = 4242;
  struct fs_stat_conn *a = fs_stat_slot_alloc();
  ck_assert_int_eq(errno, 4242);
  ck_assert_ptr_nonnull(a);
  ck_assert(!table_exists(pid)); /* a one-shot client's: no file */
  publish(a, 7);
  a->tx_bytes = 11;
  mode_t old_umask = umask(077); /* readable by all whatever the umask */
  errno = 4242;
  fs_stat_publish();
  ck_assert_int_eq(errno, 4242);
  umask(old_umask);
  struct fs_stat_conn row;
  ck_assert_int_eq(read_slot(pid, 0, &row), 0);
  ck_assert(row.used == 1 && row.fd == 7 && row.tx_bytes == 11);
  a->tx_bytes = 12; /* the pointer now writes into the file */
  ck_assert_int_eq(read_slot(pid, 0, &row), 0);
  ck_assert_uint_eq(row.tx_bytes, 12);
  fs_stat_publish(); /* once */

  char p[PATH_MAX + 64];
  struct stat st;
  table_path(pid, p, sizeof p);
  ck_assert_int_eq(stat(p, &st), 0);
  ck_assert_int_eq(st.st_mode & 07777, 0644);
  ck_assert_uint_eq((size_t)st.st_size, FILE_LEN);

  struct fs_stat_header h;
  ck_assert_int_eq(read_header(pid, &h), 0);
  ck_assert_uint_eq(h.magic, FS_STAT_MAGIC);
  ck_assert_uint_eq(h.version, FS_STAT_VERSION);
  ck_assert_int_eq(h.pid, pid);
  ck_assert_uint_eq(h.nslots, FS_STAT_SLOTS);
  ck_assert_uint_eq(h.hi_water, 1);
  ck_assert(h.start_ns > 0);
  /* No starttime (three system calls of a process's first socket): the
   * boot time at creation, after this process started, names it. */
  ck_assert_uint_eq(h.proc_start, 0);
  struct timespec bt;
  clock_gettime(CLOCK_BOOTTIME, &bt);
  long hz = sysconf(_SC_CLK_TCK);
  ck_assert(h.boot_ns <= (uint64_t)bt.tv_sec * 1000000000u + (uint64_t)bt.tv_nsec);
  ck_assert(h.boot_ns >= my_proc_start() * (1000000000u / (uint64_t)hz));

  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  ck_assert(n > 0);
  exe[n] = '\0';
  char expect[64] = { 0 };
  strncpy(expect, strrchr(exe, '/') + 1, sizeof expect - 1);
  ck_assert_str_eq(h.program, expect);
}
END_TEST

START_TEST(test_alloc_free_layout)
{
  int pid = (int)getpid();
  struct fs_stat_conn *a = fs_stat_slot_alloc(), *b = fs_stat_slot_alloc(), *c = fs_stat_slot_alloc();
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_eq(b, a + 1);
  ck_assert_ptr_eq(c, a + 2);
  ck_assert_uint_eq(a->used, 0); /* the caller publishes */
  fs_stat_publish();

  publish(a, 5);
  publish(b, 6);
  b->lport = 8080;
  b->tx_bytes = 99;
  struct fs_stat_conn s;
  ck_assert_int_eq(read_slot(pid, 1, &s), 0);
  ck_assert_uint_eq(s.used, 1);
  ck_assert_int_eq(s.fd, 6);
  ck_assert_uint_eq(s.lport, 8080);
  ck_assert_uint_eq(s.tx_bytes, 99);

  struct fs_stat_header h;
  ck_assert_int_eq(read_header(pid, &h), 0);
  ck_assert_uint_eq(h.hi_water, 3);

  errno = 77;
  fs_stat_slot_free(b);
  ck_assert_int_eq(errno, 77);
  ck_assert_int_eq(read_slot(pid, 1, &s), 0);
  static const struct fs_stat_conn zero;
  ck_assert_mem_eq(&s, &zero, sizeof s);
  /* The lowest free slot is reused; hi_water does not go back. */
  ck_assert_ptr_eq(fs_stat_slot_alloc(), b);
  ck_assert_ptr_eq(fs_stat_slot_alloc(), a + 3);
  ck_assert_int_eq(read_header(pid, &h), 0);
  ck_assert_uint_eq(h.hi_water, 4);
  ck_assert_int_eq(read_slot(pid, 0, &s), 0);
  ck_assert_int_eq(s.fd, 5);

  fs_stat_slot_free(NULL); /* ignored */
  struct fs_stat_conn foreign;
  fs_stat_slot_free(&foreign); /* not ours: ignored */
}
END_TEST

START_TEST(test_exhaustion)
{
  struct fs_stat_conn *first = fs_stat_slot_alloc();
  ck_assert_ptr_nonnull(first);
  fs_stat_publish();
  for (unsigned i = 1; i < FS_STAT_SLOTS; i++)
    ck_assert_ptr_eq(fs_stat_slot_alloc(), first + i);
  errno = 11;
  ck_assert_ptr_null(fs_stat_slot_alloc());
  ck_assert_int_eq(errno, 11);
  struct fs_stat_header h;
  ck_assert_int_eq(read_header((int)getpid(), &h), 0);
  ck_assert_uint_eq(h.hi_water, FS_STAT_SLOTS);
  fs_stat_slot_free(first + 1000);
  ck_assert_ptr_eq(fs_stat_slot_alloc(), first + 1000);
  ck_assert_ptr_null(fs_stat_slot_alloc());
}
END_TEST

START_TEST(test_disabled)
{
  setenv("FABSOCK_STAT", "0", 1);
  ck_assert_ptr_null(fs_stat_slot_alloc());
  ck_assert(!table_exists((int)getpid()));
  fs_stat_atfork_child(false); /* no table: nothing to do */
  fs_stat_shutdown();
}
END_TEST

/* No file can be made: the table stays in private memory, unlisted, and
 * its slots go on working; no retry. */
START_TEST(test_bad_dir)
{
  setenv("FABSOCK_STATDIR", "/nonexistent/fabsock-stat-dir", 1);
  errno = 3;
  struct fs_stat_conn *a = fs_stat_slot_alloc();
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq(errno, 3);
  fs_stat_publish();
  ck_assert_int_eq(errno, 3);
  unsetenv("FABSOCK_STATDIR");
  fs_stat_publish(); /* settled: no second try, even where it would work */
  ck_assert(!table_exists((int)getpid()));
  publish(a, 4);
  ck_assert_ptr_eq(fs_stat_slot_alloc(), a + 1);
  fs_stat_slot_free(a);
  ck_assert_ptr_eq(fs_stat_slot_alloc(), a);
}
END_TEST

START_TEST(test_stale_file_replaced)
{
  int pid = (int)getpid();
  char p[PATH_MAX + 64];
  table_path(pid, p, sizeof p);
  FILE *f = fopen(p, "w");
  ck_assert_ptr_nonnull(f);
  fputs("stale junk", f);
  fclose(f);
  ck_assert_ptr_nonnull(fs_stat_slot_alloc());
  fs_stat_publish();
  struct fs_stat_header h;
  ck_assert_int_eq(read_header(pid, &h), 0);
  ck_assert_uint_eq(h.magic, FS_STAT_MAGIC);
  ck_assert_int_eq(h.pid, pid);
}
END_TEST

START_TEST(test_shutdown)
{
  int pid = (int)getpid();
  struct fs_stat_conn *a = fs_stat_slot_alloc();
  ck_assert_ptr_nonnull(a);
  fs_stat_publish();
  ck_assert(table_exists(pid));
  errno = 9;
  fs_stat_shutdown();
  ck_assert_int_eq(errno, 9);
  ck_assert(!table_exists(pid));
  /* The mapping stays: late updates and frees are harmless. */
  a->tx_bytes = 1;
  fs_stat_slot_free(a);
  ck_assert_ptr_null(fs_stat_slot_alloc());
  ck_assert(!table_exists(pid));
  fs_stat_shutdown();
}
END_TEST

#define NTHREADS 8
#define HELD 16

/* Threads allocate, publish, check and free concurrently: no slot is ever
 * handed to two owners at once. */
static void *churn(void *arg)
{
  int id = (int)(intptr_t)arg;
  struct fs_stat_conn *mine[HELD];
  for (int round = 0; round < 500; round++) {
    for (int i = 0; i < HELD; i++) {
      mine[i] = fs_stat_slot_alloc();
      if (mine[i] == NULL)
        return (void *)1;
      if (mine[i]->used != 0 || mine[i]->fd != 0)
        return (void *)2;
      mine[i]->fd = id * 1000 + i;
      __atomic_store_n(&mine[i]->used, 1, __ATOMIC_RELEASE);
    }
    for (int i = 0; i < HELD; i++) {
      if (mine[i]->fd != id * 1000 + i)
        return (void *)3;
      fs_stat_slot_free(mine[i]);
    }
  }
  return NULL;
}

START_TEST(test_threads)
{
  pthread_t t[NTHREADS];
  fs_stat_slot_free(fs_stat_slot_alloc()); /* the table, private */
  for (int i = 0; i < NTHREADS; i++)
    ck_assert_int_eq(pthread_create(&t[i], NULL, churn, (void *)(intptr_t)(i + 1)), 0);
  /* Published while they allocate and free (under the table's lock, with
   * the bitmap in the process's own memory): nothing is handed out twice. */
  fs_stat_publish();
  for (int i = 0; i < NTHREADS; i++) {
    void *rv;
    pthread_join(t[i], &rv);
    ck_assert_ptr_null(rv);
  }
  struct fs_stat_header h;
  ck_assert_int_eq(read_header((int)getpid(), &h), 0);
  ck_assert_uint_le(h.hi_water, NTHREADS * HELD);
  /* Everything was freed: the next slot is the first one. */
  struct fs_stat_conn *s = fs_stat_slot_alloc();
  ck_assert_ptr_nonnull(s);
  ck_assert_uint_eq(h.hi_water > 0, 1);
  struct fs_stat_conn c;
  for (unsigned i = 0; i < h.hi_water; i++) {
    ck_assert_int_eq(read_slot((int)getpid(), i, &c), 0);
    ck_assert_uint_eq(c.used, 0);
  }
}
END_TEST

/* In the child: report the first failed check by exit code. */
#define CHILD_CHECK(n, cond) do { if (!(cond)) _exit(n); } while (0)

/* In the parent: the child exited 0, or the number of its failed check. */
static void child_passed(pid_t pid)
{
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child check %d failed (status %#x)",
                WEXITSTATUS(status), status);
}

/* A published table of three slots, the middle one freed (fds 10 and 12,
 * 500 bytes sent on the last): the parent's side of the fork tests. */
static struct fs_stat_conn *three_rows(void)
{
  struct fs_stat_conn *s = fs_stat_slot_alloc();
  fs_stat_publish(); /* the file (private until a row matters) */
  ck_assert_ptr_nonnull(s);
  ck_assert_ptr_eq(fs_stat_slot_alloc(), s + 1);
  ck_assert_ptr_eq(fs_stat_slot_alloc(), s + 2);
  publish(&s[0], 10);
  publish(&s[1], 11);
  publish(&s[2], 12);
  s[2].tx_bytes = 500;
  fs_stat_slot_free(&s[1]);
  return s;
}

START_TEST(test_fork_rehome)
{
  int ppid = (int)getpid();
  struct fs_stat_conn *s = three_rows();
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    int me = (int)getpid();
    errno = 21;
    fs_stat_atfork_child(false);
    CHILD_CHECK(2, errno == 21);
    CHILD_CHECK(3, table_exists(me));
    struct fs_stat_header h;
    struct fs_stat_conn c;
    CHILD_CHECK(4, read_header(me, &h) == 0 && h.magic == FS_STAT_MAGIC && h.pid == me);
    /* No /proc read in the child: its creation time on CLOCK_BOOTTIME
     * instead, which is after its start. */
    struct timespec bt;
    clock_gettime(CLOCK_BOOTTIME, &bt);
    uint64_t now_ns = (uint64_t)bt.tv_sec * 1000000000u + (uint64_t)bt.tv_nsec;
    uint64_t tick_ns = 1000000000u / (uint64_t)sysconf(_SC_CLK_TCK);
    CHILD_CHECK(5, h.hi_water == 3 && h.proc_start == 0 && h.boot_ns <= now_ns &&
                     h.boot_ns >= proc_start_of(me) * tick_ns);
    CHILD_CHECK(6, read_slot(me, 0, &c) == 0 && c.used == 1 && c.fd == 10);
    CHILD_CHECK(7, read_slot(me, 1, &c) == 0 && c.used == 0);
    CHILD_CHECK(8, read_slot(me, 2, &c) == 0 && c.used == 1 && c.fd == 12 && c.tx_bytes == 500);
    /* Old pointers now write into the child's file, not the parent's. */
    s[0].tx_bytes = 777;
    CHILD_CHECK(9, read_slot(me, 0, &c) == 0 && c.tx_bytes == 777);
    CHILD_CHECK(10, read_slot(ppid, 0, &c) == 0 && c.tx_bytes == 0);
    /* The child allocates from its own bitmap. */
    CHILD_CHECK(11, fs_stat_slot_alloc() == &s[1]);
    fs_stat_shutdown();
    CHILD_CHECK(12, !table_exists(me) && table_exists(ppid));
    _exit(0);
  }
  child_passed(child);
  ck_assert(table_exists(ppid));
  struct fs_stat_header h;
  struct fs_stat_conn c;
  ck_assert_int_eq(read_header(ppid, &h), 0);
  ck_assert_int_eq(h.pid, ppid);
  s[0].rx_bytes = 5;
  ck_assert_int_eq(read_slot(ppid, 0, &c), 0);
  ck_assert_int_eq(c.fd, 10);
  ck_assert_uint_eq(c.tx_bytes, 0);
  ck_assert_uint_eq(c.rx_bytes, 5);
  ck_assert_ptr_eq(fs_stat_slot_alloc(), &s[1]);
}
END_TEST

/* A fork child of a published table that holds no row another process
 * needs yet keeps its rows in its own memory (engine/sockfork.c decides):
 * no file at the fork, the parent's left alone by every path that removes
 * a table (exit, _exit, exec), and the file made with the child's rows
 * once fs_stat_publish is called (the child's end crossed its threshold). */
START_TEST(test_fork_keeps_private)
{
  int ppid = (int)getpid();
  struct fs_stat_conn *s = three_rows();
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    int me = (int)getpid();
    errno = 21;
    fs_stat_atfork_child(true);
    CHILD_CHECK(2, errno == 21);
    CHILD_CHECK(3, !table_exists(me));
    /* Its rows as they were, in memory of its own. */
    CHILD_CHECK(4, s[0].used == 1 && s[0].fd == 10 && s[1].used == 0 && s[2].fd == 12 && s[2].tx_bytes == 500);
    s[0].tx_bytes = 777;
    struct fs_stat_conn c;
    CHILD_CHECK(5, read_slot(ppid, 0, &c) == 0 && c.tx_bytes == 0);
    CHILD_CHECK(6, fs_stat_slot_alloc() == &s[1]);
    publish(&s[1], 13);
    /* Nothing of the parent's goes. */
    fs_stat_exit_quick_slow();
    fs_stat_exec_slow(false);
    fs_stat_exec_slow(true);
    CHILD_CHECK(7, table_exists(ppid) && !table_exists(me));
    /* Published: the child's file, its rows. */
    errno = 22;
    fs_stat_publish();
    CHILD_CHECK(8, errno == 22 && table_exists(me));
    struct fs_stat_header h;
    CHILD_CHECK(9, read_header(me, &h) == 0 && h.magic == FS_STAT_MAGIC && h.pid == me && h.hi_water == 3);
    CHILD_CHECK(10, h.closed[3] == 0);
    CHILD_CHECK(11, read_slot(me, 0, &c) == 0 && c.used == 1 && c.fd == 10 && c.tx_bytes == 777);
    CHILD_CHECK(12, read_slot(me, 1, &c) == 0 && c.used == 1 && c.fd == 13);
    CHILD_CHECK(13, read_slot(me, 2, &c) == 0 && c.used == 1 && c.fd == 12 && c.tx_bytes == 500);
    s[2].rx_bytes = 9; /* the mapping is the file now */
    CHILD_CHECK(14, read_slot(me, 2, &c) == 0 && c.rx_bytes == 9);
    fs_stat_shutdown();
    CHILD_CHECK(15, !table_exists(me) && table_exists(ppid));
    _exit(0);
  }
  child_passed(child);
  struct fs_stat_conn c;
  ck_assert(table_exists(ppid));
  ck_assert_int_eq(read_slot(ppid, 0, &c), 0);
  ck_assert_int_eq(c.fd, 10);
  ck_assert_uint_eq(c.tx_bytes, 0);
}
END_TEST

/* _exit (no exit handlers): a child's own table goes with it, but a child
 * still on its parent's table (vfork shares the memory, not the pid) must
 * leave the parent's file alone.  Without this, every forked child that
 * _exits (sshd's, os._exit in Python workers) left its table behind. */
START_TEST(test_exit_quick)
{
  int ppid = (int)getpid();
  struct fs_stat_conn *s = fs_stat_slot_alloc();
  fs_stat_publish(); /* the file (private until a row matters) */
  ck_assert_ptr_nonnull(s);
  publish(&s[0], 10);
  pid_t own = fork();
  ck_assert_int_ge(own, 0);
  if (own == 0) {
    fs_stat_atfork_child(false);
    CHILD_CHECK(2, table_exists((int)getpid()));
    errno = 33;
    fs_stat_exit_quick();
    CHILD_CHECK(3, errno == 33);
    CHILD_CHECK(4, !table_exists((int)getpid()) && table_exists(ppid));
    _exit(0);
  }
  pid_t shared = fork();
  ck_assert_int_ge(shared, 0);
  if (shared == 0) {
    /* No fork handler ran: as a vfork child, it sees the parent's table. */
    fs_stat_exit_quick();
    CHILD_CHECK(5, table_exists(ppid));
    _exit(0);
  }
  child_passed(own);
  ck_assert(!table_exists(own));
  child_passed(shared);
  ck_assert(table_exists(ppid));
  fs_stat_exit_quick(); /* the parent's own, as its _exit would */
  ck_assert(!table_exists(ppid));
}
END_TEST

START_TEST(test_fork_fallback)
{
  int ppid = (int)getpid();
  struct fs_stat_conn *s = fs_stat_slot_alloc();
  fs_stat_publish(); /* the file (private until a row matters) */
  ck_assert_ptr_nonnull(s);
  publish(s, 10);
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    /* The child cannot create its file (no descriptor left: its place is
     * the parent's, named once per image): stats go off, pointers stay
     * valid and no longer reach the parent's file. */
    struct rlimit rl, none;
    CHILD_CHECK(5, getrlimit(RLIMIT_NOFILE, &rl) == 0);
    none = (struct rlimit){ 0, rl.rlim_max };
    CHILD_CHECK(5, setrlimit(RLIMIT_NOFILE, &none) == 0);
    fs_stat_atfork_child(false);
    CHILD_CHECK(6, setrlimit(RLIMIT_NOFILE, &rl) == 0);
    s->tx_bytes = 31337;
    struct fs_stat_conn c;
    CHILD_CHECK(2, read_slot(ppid, 0, &c) == 0 && c.tx_bytes == 0 && c.fd == 10);
    CHILD_CHECK(3, fs_stat_slot_alloc() == NULL);
    fs_stat_slot_free(s);
    fs_stat_shutdown();
    CHILD_CHECK(4, table_exists(ppid));
    _exit(0);
  }
  child_passed(child);
  ck_assert_uint_eq(s->tx_bytes, 0);
  ck_assert_uint_eq(s->used, 1);
}
END_TEST

/* The child's table is as high as what it holds; a slot it takes above that
 * (one its parent had used) raises the header's hi_water, or readers, who
 * read no further, would miss the row. */
START_TEST(test_fork_child_slot_above_its_rows)
{
  struct fs_stat_conn *s = fs_stat_slot_alloc();
  fs_stat_publish(); /* the file (private until a row matters) */
  ck_assert_ptr_nonnull(s);
  for (int i = 1; i < 4; i++)
    ck_assert_ptr_eq(fs_stat_slot_alloc(), s + i);
  for (int i = 0; i < 4; i++)
    publish(&s[i], 10 + i);
  fs_stat_slot_free(&s[3]); /* the parent's file says hi_water 4 */
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    int me = (int)getpid();
    fs_stat_atfork_child(false);
    struct fs_stat_header h;
    struct fs_stat_conn c;
    CHILD_CHECK(2, read_header(me, &h) == 0 && h.hi_water == 3);
    CHILD_CHECK(3, fs_stat_slot_alloc() == &s[3]);
    publish(&s[3], 20);
    CHILD_CHECK(4, read_header(me, &h) == 0 && h.hi_water == 4);
    CHILD_CHECK(5, read_slot(me, 3, &c) == 0 && c.used == 1 && c.fd == 20);
    _exit(0);
  }
  child_passed(child);
}
END_TEST

/* A private table forked: the child's is fork's copy, its own (no file for
 * either, no call at the fork); each publishes its own rows under its pid. */
START_TEST(test_fork_private)
{
  int ppid = (int)getpid();
  struct fs_stat_conn *s = fs_stat_slot_alloc();
  ck_assert_ptr_nonnull(s);
  publish(s, 10);
  s->tx_bytes = 5;
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    int me = (int)getpid();
    fs_stat_atfork_child(false);
    CHILD_CHECK(2, !table_exists(me) && !table_exists(ppid));
    s->tx_bytes = 6; /* its own copy */
    CHILD_CHECK(3, fs_stat_slot_alloc() == s + 1);
    fs_stat_publish();
    struct fs_stat_header h;
    struct fs_stat_conn c;
    CHILD_CHECK(4, read_header(me, &h) == 0 && h.pid == me && h.hi_water == 2);
    CHILD_CHECK(5, read_slot(me, 0, &c) == 0 && c.used == 1 && c.fd == 10 && c.tx_bytes == 6);
    fs_stat_shutdown();
    CHILD_CHECK(6, !table_exists(me));
    _exit(0);
  }
  child_passed(child);
  ck_assert(!table_exists(ppid));
  ck_assert_uint_eq(s->tx_bytes, 5);
  ck_assert_ptr_eq(fs_stat_slot_alloc(), s + 1); /* the child's slot was its own */
  fs_stat_publish();
  struct fs_stat_conn c;
  ck_assert_int_eq(read_slot(ppid, 0, &c), 0);
  ck_assert(c.fd == 10 && c.tx_bytes == 5);
}
END_TEST

static void *idle_thread(void *arg)
{
  return arg;
}

/* A table made private gets its file at the first slot after the process
 * has a second thread: no copy while another thread may write a row. */
START_TEST(test_thread_publishes)
{
  int pid = (int)getpid();
  struct fs_stat_conn *a = fs_stat_slot_alloc();
  ck_assert_ptr_nonnull(a);
  publish(a, 3);
  ck_assert(!table_exists(pid));
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, idle_thread, NULL), 0);
  pthread_join(t, NULL);
  struct fs_stat_conn *b = fs_stat_slot_alloc();
  ck_assert_ptr_eq(b, a + 1);
  ck_assert(table_exists(pid));
  struct fs_stat_conn c;
  ck_assert_int_eq(read_slot(pid, 0, &c), 0);
  ck_assert(c.used == 1 && c.fd == 3);
}
END_TEST

/* A child of a process that never made a table resets nothing, and touches
 * none of the module's pages (base/proc.h: each is a fault in a child). */
START_TEST(test_fork_without_table_touches_nothing)
{
  (void)fs_proc_fork_work_has(0); /* as the library's fork does */
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    struct pm_snap a = { 0 }, b = { 0 };
    if (pm_take(&b) < 0 || pm_take(&a) < 0)
      _exit(2);
    fs_stat_atfork_child(false);
    pm_take(&b);
    _exit(pm_changed(&a, &b, NULL) == 0 ? 0 : 1);
  }
  int status;
  ck_assert_int_eq(waitpid(child, &status, 0), child);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "the child touched a page (1) or could not tell (2): status %d", status);
}
END_TEST

/* ---- the fabsock command ------------------------------------------------ */

static const char *fabsock_bin(void)
{
  const char *bin = getenv("FABSOCK_BIN");
  if (bin == NULL || *bin == '\0' || access(bin, X_OK) != 0) {
    fprintf(stderr, "# SKIP: FABSOCK_BIN not set or not executable\n");
    return NULL;
  }
  return bin;
}

/* Output of a shell command line (malloc'ed) and its exit status. */
static char *run_cmd(const char *cmd, int *status)
{
  FILE *f = popen(cmd, "r");
  ck_assert_ptr_nonnull(f);
  size_t cap = 4096, len = 0;
  char *out = malloc(cap);
  size_t n;
  while ((n = fread(out + len, 1, cap - len - 1, f)) > 0) {
    len += n;
    if (cap - len < 1024)
      out = realloc(out, cap *= 2);
  }
  out[len] = '\0';
  int st = pclose(f);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

static void write_fake_table_at(int pid, uint64_t proc_start, uint64_t boot_ns, const char *program)
{
  char p[PATH_MAX + 64];
  table_path(pid, p, sizeof p);
  struct fs_stat_header h = { .magic = FS_STAT_MAGIC, .version = FS_STAT_VERSION, .pid = pid,
                              .nslots = FS_STAT_SLOTS, .proc_start = proc_start, .hi_water = 1,
                              .boot_ns = boot_ns };
  struct fs_stat_conn c = { .used = 1, .fd = 42, .family = AF_INET, .state = 1, .fabric = 1, .lport = 1,
                            .resumes = 2 };
  strncpy(h.program, program, sizeof h.program - 1);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, &h, sizeof h, 0), (ssize_t)sizeof h);
  ck_assert_int_eq(pwrite(fd, &c, sizeof c, HDR), (ssize_t)sizeof c);
  close(fd);
}

static void write_fake_table(int pid, uint64_t proc_start, const char *program)
{
  write_fake_table_at(pid, proc_start, 0, program);
}

/* A child that waits to be killed: a live pid for a fake table. */
static pid_t spawn_sleeper(void)
{
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    pause();
    _exit(0);
  }
  return pid;
}

static void reap(pid_t pid)
{
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

static void has_all(const char *out, const char *const *want, size_t n)
{
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(strstr(out, want[i]) != NULL, "missing %s in %s", want[i], out);
}

START_TEST(test_tool_stat)
{
  const char *bin = fabsock_bin();
  if (bin == NULL)
    return;
  char cmd[PATH_MAX * 2];
  int rc, me = (int)getpid();

  snprintf(cmd, sizeof cmd, "'%s' stat --json", bin);
  char *out = run_cmd(cmd, &rc);
  ck_assert_int_eq(rc, 0);
  ck_assert_str_eq(out, "{\"processes\":[]}\n");
  free(out);

  struct fs_stat_conn *a = fs_stat_slot_alloc(), *l = fs_stat_slot_alloc();
  fs_stat_publish(); /* the file (private until a row matters) */
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(l);
  a->fd = 7;
  a->family = AF_INET;
  a->state = 1;  /* tcp */
  a->fabric = 3; /* tcp */
  a->reason = 1; /* pending */
  a->dir = 1;
  inet_pton(AF_INET, "127.0.0.1", a->laddr);
  inet_pton(AF_INET, "10.1.2.3", a->paddr);
  a->lport = 5000;
  a->pport = 6000;
  a->tx_bytes = 1234;
  a->rx_msgs = 3;
  __atomic_store_n(&a->used, 1, __ATOMIC_RELEASE);
  l->fd = 8;
  l->family = AF_INET6;
  l->state = 5;
  l->listening = 1;
  inet_pton(AF_INET6, "::1", l->laddr);
  l->lport = 7000;
  __atomic_store_n(&l->used, 1, __ATOMIC_RELEASE);

  /* Tables of a dead process, a zombie and a reused pid: all removed. */
  pid_t dead = fork();
  if (dead == 0)
    _exit(0);
  waitpid(dead, NULL, 0);
  write_fake_table((int)dead, 1, "ghost");
  pid_t zombie = fork();
  if (zombie == 0)
    _exit(0);
  siginfo_t si;
  waitid(P_PID, (id_t)zombie, &si, WEXITED | WNOWAIT); /* exited, not reaped */
  ck_assert(proc_start_of((int)zombie) != 0);
  write_fake_table((int)zombie, proc_start_of((int)zombie), "zombie");
  pid_t live = spawn_sleeper();
  write_fake_table((int)live, 1, "reused");
  /* A forked child's table has no starttime, only its boot time at
   * creation: a process that started after that is another one. */
  pid_t later = spawn_sleeper();
  write_fake_table_at((int)later, 0, 1000, "reused-boot");

  snprintf(cmd, sizeof cmd, "'%s' stat --json", bin);
  out = run_cmd(cmd, &rc);
  kill(live, SIGKILL);
  waitpid(live, NULL, 0);
  kill(later, SIGKILL);
  waitpid(later, NULL, 0);
  waitpid(zombie, NULL, 0);
  ck_assert_int_eq(rc, 0);
  char pidkey[64];
  snprintf(pidkey, sizeof pidkey, "{\"processes\":[{\"pid\":%d,", me);
  ck_assert_msg(strstr(out, pidkey) != NULL, "%s", out);
  static const char *const want[] = {
    "\"fd\":7,\"state\":\"tcp\",\"fabric\":\"tcp\",\"reason\":\"pending\"",
    "\"dir\":\"connect\"",
    "\"local\":\"127.0.0.1:5000\",\"local_addr\":\"127.0.0.1\",\"local_port\":5000",
    "\"peer\":\"10.1.2.3:6000\",\"peer_addr\":\"10.1.2.3\",\"peer_port\":6000",
    "\"tx_bytes\":1234,\"rx_bytes\":0,\"tx_msgs\":0,\"rx_msgs\":3",
    "\"fabric_rx_bytes\":0,\"resumes\":0}",
    "\"fd\":8,\"state\":\"listen\"",
    "\"local\":\"[::1]:7000\"",
    "\"peer\":null",
  };
  has_all(out, want, sizeof want / sizeof want[0]);
  ck_assert_msg(strstr(out, "ghost") == NULL && strstr(out, "reused") == NULL && strstr(out, "reused-boot") == NULL &&
                strstr(out, "zombie") == NULL, "%s", out);
  ck_assert(!table_exists((int)dead));
  ck_assert(!table_exists((int)zombie));
  ck_assert(!table_exists((int)live));
  ck_assert(!table_exists((int)later));
  free(out);

  /* A table of a live process with the right start time is listed. */
  pid_t other = spawn_sleeper();
  uint64_t start = proc_start_of((int)other);
  ck_assert(start != 0);
  write_fake_table((int)other, start, "fake prog");
  snprintf(cmd, sizeof cmd, "'%s' stat %d", bin, (int)other);
  out = run_cmd(cmd, &rc);
  /* The same as a forked child writes it: no starttime, its boot time at
   * creation (after the start): listed too, not taken for stale. */
  {
    struct timespec bt;
    clock_gettime(CLOCK_BOOTTIME, &bt);
    char *first = out;
    write_fake_table_at((int)other, 0, (uint64_t)bt.tv_sec * 1000000000u + (uint64_t)bt.tv_nsec, "fake prog");
    out = run_cmd(cmd, &rc);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(out, "fake?prog") != NULL, "a child's table was taken for stale: %s", out);
    ck_assert(table_exists((int)other));
    free(out);
    out = first;
  }
  kill(other, SIGKILL);
  waitpid(other, NULL, 0);
  ck_assert_int_eq(rc, 0);
  ck_assert_msg(strstr(out, "PID  PROGRAM") != NULL, "%s", out);
  ck_assert_msg(strstr(out, "  REASON\n") != NULL, "%s", out);
  ck_assert_msg(strstr(out, "fake?prog") != NULL, "%s", out);
  ck_assert_msg(strstr(out, "0.0.0.0:1") != NULL, "%s", out);
  ck_assert_msg(strstr(out, " rdma(resumed 2) ") != NULL, "%s", out); /* a healed channel says so */
  free(out);
}
END_TEST

/* A closed connection is counted in its table's header by the fabric that
 * carried some of its data (kept after it went back to TCP), TCP when none
 * did; listeners and sockets that never connected are not counted; a forked
 * child's counts start at 0; `fabsock stat` shows them (JSON and table). */
START_TEST(test_closed_counts)
{
  int me = (int)getpid();
  struct fs_stat_conn *a = fs_stat_slot_alloc(), *b = fs_stat_slot_alloc(), *l = fs_stat_slot_alloc(),
                      *u = fs_stat_slot_alloc();
  fs_stat_publish(); /* the file (private until a row matters) */
  ck_assert(a && b && l && u);
  publish(a, 3);
  a->dir = 1;
  fs_stat_set_fabric(a, 2);               /* shm */
  fs_stat_set_fabric(a, FS_STAT_FABRIC_TCP); /* back to TCP (exec, fd passing) */
  ck_assert_uint_eq(a->fabric, FS_STAT_FABRIC_TCP);
  ck_assert_uint_eq(a->fabric_used, 2);
  publish(b, 4);
  b->dir = 2;
  fs_stat_set_fabric(b, FS_STAT_FABRIC_TCP);
  publish(l, 5);
  l->listening = 1;
  publish(u, 6); /* socket() and close(), never connected */
  fs_stat_slot_free(a);
  fs_stat_slot_free(b);
  fs_stat_slot_free(l);
  fs_stat_slot_free(u);
  struct fs_stat_header h;
  ck_assert_int_eq(read_header(me, &h), 0);
  ck_assert_uint_eq(h.closed[1], 0);
  ck_assert_uint_eq(h.closed[2], 1);
  ck_assert_uint_eq(h.closed[FS_STAT_FABRIC_TCP], 1);
  ck_assert_uint_eq(h.closed[0], 0);
  /* The slot starts clean for the next connection. */
  struct fs_stat_conn *again = fs_stat_slot_alloc();
  ck_assert_ptr_eq(again, a);
  ck_assert_uint_eq(again->fabric_used, 0);

  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    fs_stat_atfork_child(false);
    struct fs_stat_header ch;
    CHILD_CHECK(2, read_header((int)getpid(), &ch) == 0 && ch.closed[2] == 0 && ch.closed[3] == 0);
    fs_stat_shutdown();
    _exit(0);
  }
  int st;
  ck_assert_int_eq(waitpid(child, &st, 0), child);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);

  const char *bin = fabsock_bin();
  if (bin == NULL)
    return;
  char cmd[PATH_MAX * 2];
  int rc;
  snprintf(cmd, sizeof cmd, "'%s' stat --json %d", bin, me);
  char *out = run_cmd(cmd, &rc);
  ck_assert_int_eq(rc, 0);
  ck_assert_msg(strstr(out, "\"closed\":{\"rdma\":0,\"shm\":1,\"tcp\":1}") != NULL, "%s", out);
  free(out);
  snprintf(cmd, sizeof cmd, "'%s' stat %d", bin, me);
  out = run_cmd(cmd, &rc);
  ck_assert_int_eq(rc, 0);
  ck_assert_msg(strstr(out, "\nclosed connections, by the fabric that carried their data:\n") != NULL, "%s", out);
  const char *foot = strstr(out, "carried their data:\n");
  ck_assert_msg(foot != NULL, "%s", out);
  foot = strchr(strchr(foot, '\n') + 1, '\n'); /* past the heading (PID PROGRAM SHM RDMA TCP) */
  ck_assert_ptr_nonnull(foot);
  int pid = 0;
  char prog[64];
  unsigned long shm = 9, rdma = 9, tcp = 9;
  ck_assert_msg(sscanf(foot + 1, "%d %63s %lu %lu %lu", &pid, prog, &shm, &rdma, &tcp) == 5, "%s", out);
  ck_assert_int_eq(pid, me);
  ck_assert_msg(shm == 1 && rdma == 0 && tcp == 1, "%s", out);
  free(out);
}
END_TEST

/* A live TCP end on 127.0.0.1 at both ends, published. */
static void loopback_end(struct fs_stat_conn *c, int fd, int dir, int reason, uint16_t lport, uint16_t pport)
{
  c->fd = fd;
  c->family = AF_INET;
  c->state = 1;
  c->fabric = FS_STAT_FABRIC_TCP;
  c->reason = (uint8_t)reason;
  c->dir = (uint8_t)dir;
  inet_pton(AF_INET, "127.0.0.1", c->laddr);
  inet_pton(AF_INET, "127.0.0.1", c->paddr);
  c->lport = lport;
  c->pport = pport;
  __atomic_store_n(&c->used, 1, __ATOMIC_RELEASE);
}

/* An accepted end still pending (or whose channel the peer gave up
 * unattached: rejected) whose connecting end (in another table,
 * addresses reversed) settled on TCP is shown with that end's reason: JSON
 * peer_reason, "peer:REASON" in the table.  Matched across an IPv4-mapped
 * and a plain IPv4 end; not from the same process, not from an end that is
 * itself pending, not for a port that differs; `stat PID` still reads the
 * other tables for it. */
START_TEST(test_tool_peer_reason)
{
  const char *bin = fabsock_bin();
  if (bin == NULL)
    return;
  int me = (int)getpid();
  /* Ours: the connecting ends.  fork (v4), pending (v4), policy (v4, our
   * own accepted end's twin below must not take it). */
  struct fs_stat_conn *f = fs_stat_slot_alloc(), *p = fs_stat_slot_alloc(), *q = fs_stat_slot_alloc();
  fs_stat_publish(); /* the file (private until a row matters) */
  ck_assert(f && p && q);
  struct fs_stat_conn *ends[3] = { f, p, q };
  const uint16_t cport[3] = { 40001, 40002, 40003 };
  const uint8_t reason[3] = { FS_REASON_FORK, FS_REASON_PENDING, FS_REASON_POLICY };
  for (int i = 0; i < 3; i++)
    loopback_end(ends[i], 10 + i, 1, reason[i], cport[i], 5555);
  /* Our own accepted end for the policy one: the same process is no peer. */
  struct fs_stat_conn *own = fs_stat_slot_alloc();
  ck_assert_ptr_nonnull(own);
  loopback_end(own, 20, 2, FS_REASON_PENDING, 5555, 40003);

  /* The other process: accepted ends on a dual-stack listener (mapped). */
  pid_t other = spawn_sleeper();
  uint64_t start = proc_start_of((int)other);
  ck_assert(start != 0);
  char path[PATH_MAX + 64];
  table_path((int)other, path, sizeof path);
  struct fs_stat_header h = { .magic = FS_STAT_MAGIC, .version = FS_STAT_VERSION, .pid = (int)other,
                              .nslots = FS_STAT_SLOTS, .proc_start = start, .hi_water = 4 };
  strcpy(h.program, "server");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, &h, sizeof h, 0), (ssize_t)sizeof h);
  const uint16_t pport[4] = { 40001, 40002, 40003, 40009 };
  for (int i = 0; i < 4; i++) {
    struct fs_stat_conn c = { .used = 1, .fd = 30 + i, .family = AF_INET6, .state = 1,
                              .fabric = FS_STAT_FABRIC_TCP, .dir = 2,
                              .reason = i == 2 ? FS_REASON_REJECTED : FS_REASON_PENDING,
                              .lport = 5555, .pport = pport[i] };
    inet_pton(AF_INET6, "::ffff:127.0.0.1", c.laddr);
    inet_pton(AF_INET6, "::ffff:127.0.0.1", c.paddr);
    ck_assert_int_eq(pwrite(fd, &c, sizeof c, (off_t)(HDR + (size_t)i * sizeof c)), (ssize_t)sizeof c);
  }
  close(fd);

  char cmd[PATH_MAX * 2];
  int rc;
  snprintf(cmd, sizeof cmd, "'%s' stat --json %d", bin, (int)other);
  char *out = run_cmd(cmd, &rc);
  char cmd2[PATH_MAX * 2];
  snprintf(cmd2, sizeof cmd2, "'%s' stat", bin);
  char *table = run_cmd(cmd2, &rc);
  reap(other);
  unlink(path);
  ck_assert_int_eq(rc, 0);
  static const char *const want[] = {
    "\"fd\":30,\"state\":\"tcp\",\"fabric\":\"tcp\",\"reason\":\"pending\",\"reason_code\":1,\"peer_reason\":\"fork\"",
    "\"fd\":31,\"state\":\"tcp\",\"fabric\":\"tcp\",\"reason\":\"pending\",\"reason_code\":1,\"peer_reason\":null",
    "\"fd\":32,\"state\":\"tcp\",\"fabric\":\"tcp\",\"reason\":\"rejected\",\"reason_code\":8,\"peer_reason\":\"policy\"",
    "\"fd\":33,\"state\":\"tcp\",\"fabric\":\"tcp\",\"reason\":\"pending\",\"reason_code\":1,\"peer_reason\":null",
  };
  has_all(out, want, sizeof want / sizeof want[0]);
  char mine[32];
  snprintf(mine, sizeof mine, "\"pid\":%d", me);
  ck_assert_msg(strstr(out, mine) == NULL, "stat PID listed another process: %s", out);
  free(out);
  /* The table: the server's fd 30 and 32 with their peers' reasons, our
   * own accepted end (fd 20) still pending. */
  const char *pf = strstr(table, "  peer:fork\n");
  ck_assert_msg(pf != NULL, "%s", table);
  const char *bol = pf;
  while (bol > table && bol[-1] != '\n')
    bol--;
  ck_assert_msg(memmem(bol, (size_t)(pf - bol), "]:40001", 7) != NULL, "%s", table);
  ck_assert_msg(strstr(table, "]:40003  ") != NULL && strstr(table, "  peer:policy\n") != NULL, "%s", table);
  ck_assert_msg(strstr(pf + 3, "peer:fork") == NULL, "%s", table); /* once */
  /* Our own accepted end (fd 20, plain IPv4 at both ends): pending. */
  int seen = 0;
  char *save = NULL;
  for (char *ln = strtok_r(table, "\n", &save); ln != NULL; ln = strtok_r(NULL, "\n", &save))
    if (strstr(ln, "127.0.0.1:5555 ") == strstr(ln, "127.0.0.1:") && strstr(ln, " 127.0.0.1:40003 ") != NULL &&
        strchr(ln, '[') == NULL) {
      seen++;
      ck_assert_msg(strcmp(ln + strlen(ln) - 9, "  pending") == 0, "%s", ln);
    }
  ck_assert_int_eq(seen, 1);
  free(table);
  fs_stat_slot_free(f);
  fs_stat_slot_free(p);
  fs_stat_slot_free(q);
  fs_stat_slot_free(own);
}
END_TEST

START_TEST(test_tool_cli)
{
  const char *bin = fabsock_bin();
  if (bin == NULL)
    return;
  char cmd[PATH_MAX * 3], lib[PATH_MAX + 32], conf[PATH_MAX + 32];
  int rc;
  snprintf(lib, sizeof lib, "%s/libfake.so", tmpdir);
  snprintf(conf, sizeof conf, "%s/fabsock.conf", tmpdir);
  FILE *f = fopen(lib, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  f = fopen(conf, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);

  /* ld.so complains about the fake library on stderr and runs env anyway. */
  snprintf(cmd, sizeof cmd,
           "cd '%s' && FABSOCK_LIB=libfake.so LD_PRELOAD='/nonexistent/other.so %s' '%s' run "
           "--transport shm --log debug,syslog,time --config=fabsock.conf -- env 2>/dev/null",
           tmpdir, lib, bin);
  char *env = run_cmd(cmd, &rc);
  /* Every variable on a line of its own, the first one too. */
  char *out = malloc(strlen(env) + 2);
  out[0] = '\n';
  strcpy(out + 1, env);
  free(env);
  ck_assert_int_eq(rc, 0);
  char want[PATH_MAX * 2];
  snprintf(want, sizeof want, "\nLD_PRELOAD=%s:/nonexistent/other.so\n", lib);
  ck_assert_msg(strstr(out, want) != NULL, "%s", out);
  ck_assert_msg(strstr(out, "\nFABSOCK_TRANSPORT=shm\n") != NULL, "%s", out);
  ck_assert_msg(strstr(out, "\nFABSOCK_LOG=debug,syslog,time\n") != NULL, "%s", out);
  snprintf(want, sizeof want, "\nFABSOCK_CONFIG=%s\n", conf);
  ck_assert_msg(strstr(out, want) != NULL, "%s", out);
  free(out);

  static const struct { const char *args; int status; } cases[] = {
    { "run -- sh -c 'exit 3'", 3 },
    { "run -- /nonexistent/program", 127 },
    { "run --transport bogus -- true", 2 },
    { "run --log loud -- true", 2 },
    { "run --config /nonexistent/fabsock.conf -- true", 2 },
    { "run --transport", 2 },
    { "run --bogus -- true", 2 },
    { "run", 2 },
    { "stat --bogus", 2 },
    { "stat 12 34", 2 },
    { "stat notapid", 2 },
    { "bogus", 2 },
    { "", 2 },
    { "--help", 0 },
    { "run --help", 0 },
    { "stat --help", 0 },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(cmd, sizeof cmd, "FABSOCK_LIB='%s' '%s' %s >/dev/null 2>&1", lib, bin, cases[i].args);
    free(run_cmd(cmd, &rc));
    ck_assert_msg(rc == cases[i].status, "fabsock %s: exit %d, want %d", cases[i].args, rc,
                  cases[i].status);
  }
  snprintf(cmd, sizeof cmd, "FABSOCK_LIB=/nonexistent/lib.so '%s' run -- true 2>/dev/null", bin);
  free(run_cmd(cmd, &rc));
  ck_assert_int_eq(rc, 127);

  snprintf(cmd, sizeof cmd, "'%s' --version", bin);
  out = run_cmd(cmd, &rc);
  ck_assert_int_eq(rc, 0);
  ck_assert_msg(strstr(out, PACKAGE_VERSION) != NULL, "%s", out);
  free(out);
}
END_TEST

/* Write a table for pid by hand: nslots rows of which row `at` is a live
 * connection on inode (hi_water as given: a hostile table may lie). */
static void write_table(int pid, uint32_t hi_water, off_t size, unsigned at, uint32_t inode, int listening)
{
  char p[PATH_MAX + 64];
  table_path(pid, p, sizeof p);
  int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, size), 0);
  struct fs_stat_header h = { 0 };
  h.magic = FS_STAT_MAGIC;
  h.version = FS_STAT_VERSION;
  h.pid = pid;
  h.nslots = FS_STAT_SLOTS;
  h.hi_water = hi_water;
  ck_assert_int_eq(pwrite(fd, &h, sizeof h, 0), (ssize_t)sizeof h);
  struct fs_stat_conn c = { 0 };
  c.used = 1;
  c.inode = inode;
  c.listening = (uint8_t)listening;
  c.state = 1;
  if ((off_t)(HDR + (at + 1) * SLOT) <= size)
    ck_assert_int_eq(pwrite(fd, &c, sizeof c, (off_t)(HDR + at * SLOT)), (ssize_t)sizeof c);
  close(fd);
}

START_TEST(test_holders)
{
  pid_t a = spawn_sleeper(), b = spawn_sleeper(), dead = spawn_sleeper();
  reap(dead);
  int pids[4] = { 0 };
  write_table((int)a, 100, (off_t)(HDR + 100 * SLOT), 70, 4242, 0);
  ck_assert_int_eq(fs_stat_holders(4242, pids, 4), 1);
  ck_assert_int_eq(pids[0], (int)a);
  ck_assert_int_eq(fs_stat_holders(4243, pids, 4), 0);
  /* A listening socket with that inode does not hold a connection. */
  write_table((int)b, 10, (off_t)(HDR + 10 * SLOT), 3, 4243, 1);
  ck_assert_int_eq(fs_stat_holders(4243, pids, 4), 0);
  /* ... but it is a listener on its port (write_table's lport: 0, so set it). */
  ck_assert_int_eq(fs_stat_listeners(8080, pids, 4), 0);
  {
    char p[PATH_MAX + 64];
    table_path((int)b, p, sizeof p);
    int fd = open(p, O_RDWR);
    uint16_t port = 8080;
    ck_assert_int_eq(pwrite(fd, &port, sizeof port, (off_t)(HDR + 3 * SLOT + offsetof(struct fs_stat_conn, lport))),
                     (ssize_t)sizeof port);
    close(fd);
  }
  ck_assert_int_eq(fs_stat_listeners(8080, pids, 4), 1);
  ck_assert_int_eq(pids[0], (int)b);
  ck_assert_int_eq(fs_stat_listeners(8081, pids, 4), 0);
  ck_assert_int_eq(fs_stat_listeners(0, pids, 4), -EINVAL);
  /* Two holders, max 1: the count says two. */
  write_table((int)b, 10, (off_t)(HDR + 10 * SLOT), 3, 4242, 0);
  ck_assert_int_eq(fs_stat_holders(4242, pids, 1), 2);
  /* A table of a process that is gone is skipped, and removed. */
  write_table((int)dead, 10, (off_t)(HDR + 10 * SLOT), 0, 4242, 0);
  ck_assert(table_exists((int)dead));
  ck_assert_int_eq(fs_stat_holders(4242, pids, 4), 2);
  ck_assert(!table_exists((int)dead));
  /* Hostile tables: a hi_water past the file's end (short reads, no
   * SIGBUS), a row past hi_water, a header of another pid, bad magic. */
  write_table((int)b, 0xffffffffu, (off_t)(HDR + 2 * SLOT), 1, 5000, 0);
  ck_assert_int_eq(fs_stat_holders(5000, pids, 4), 1);
  write_table((int)b, 2, (off_t)(HDR + 10 * SLOT), 5, 5001, 0);
  ck_assert_int_eq(fs_stat_holders(5001, pids, 4), 0);
  write_table((int)b, 10, (off_t)(HDR + 10 * SLOT), 1, 5002, 0);
  ck_assert_int_eq(fs_stat_holders(5002, pids, 4), 1);
  write_table((int)b, 10, 7, 1, 5002, 0); /* shorter than a header */
  ck_assert_int_eq(fs_stat_holders(5002, pids, 4), 0);
  ck_assert_int_eq(fs_stat_holders(0, pids, 4), -EINVAL);
  ck_assert_int_eq(fs_stat_listeners(0, pids, 4), -EINVAL);
  /* Our own table never counts: the caller asks about others. */
  struct fs_stat_conn *mine = fs_stat_slot_alloc();
  ck_assert_ptr_nonnull(mine);
  mine->inode = 6000;
  publish(mine, 9);
  ck_assert_int_eq(fs_stat_holders(6000, pids, 4), 0);
  fs_stat_slot_free(mine);
  reap(a);
  reap(b);
}
END_TEST

/* A thread that keeps asking whether fd `fd` is open. */
struct fd_watch {
  int fd, stop, seen;
};

static void *watch_fd(void *arg)
{
  struct fd_watch *w = arg;
  while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE))
    if (fcntl(w->fd, F_GETFD) >= 0)
      __atomic_fetch_add(&w->seen, 1, __ATOMIC_RELAXED);
  return NULL;
}

/* The lookups open the directory and every table in it.  Made in the
 * application's table, each would take its lowest free number for a while
 * (the agent scans while the application may be closing everything: an fd
 * it just closed would be open again).  Aside, no number is ever taken. */
START_TEST(test_scan_takes_no_app_number)
{
  enum { N = 24 };
  pid_t kids[N];
  for (int i = 0; i < N; i++) {
    kids[i] = spawn_sleeper();
    write_table((int)kids[i], 10, (off_t)(HDR + 10 * SLOT), 1, 7000u + (uint32_t)i, 0);
  }
  int low = dup(0); /* the number the application's next open() gets */
  ck_assert_int_ge(low, 0);
  close(low);
  struct fd_watch w = { low, 0, 0 };
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, watch_fd, &w), 0);
  int pids[2];
  for (int k = 0; k < 200; k++)
    ck_assert_int_eq(fs_stat_holders(7000u + (uint32_t)(k % N), pids, 2), 1);
  __atomic_store_n(&w.stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  ck_assert_msg(w.seen == 0, "the scans held fd %d, the application's next number (seen open %d times)", low,
                w.seen);
  ck_assert_msg(fs_aside_active(), "the scans did not run aside");
  ck_assert_int_eq(fcntl(low, F_GETFD), -1);
  for (int i = 0; i < N; i++)
    reap(kids[i]);
}
END_TEST

/* A connecting end's row without its own address (lport 0: the library
 * learns it at the upgrade) is shown with the kernel's, from /proc, for a
 * real connected socket; not when the fd's peer is not the row's (the
 * number reused since), nor for an fd that is no socket. */
START_TEST(test_tool_local_from_proc)
{
  const char *bin = fabsock_bin();
  if (bin == NULL)
    return;
  int l = socket(AF_INET, SOCK_STREAM, 0), cl = socket(AF_INET, SOCK_STREAM, 0), pfd[2];
  ck_assert(l >= 0 && cl >= 0 && pipe(pfd) == 0);
  struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
  socklen_t al = sizeof a;
  ck_assert_int_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
  ck_assert_int_eq(listen(l, 4), 0);
  ck_assert_int_eq(getsockname(l, (struct sockaddr *)&a, &al), 0);
  ck_assert_int_eq(connect(cl, (struct sockaddr *)&a, sizeof a), 0);
  struct sockaddr_in me;
  socklen_t ml = sizeof me;
  ck_assert_int_eq(getsockname(cl, (struct sockaddr *)&me, &ml), 0);
  uint16_t sport = ntohs(a.sin_port);
  struct fs_stat_conn *real = fs_stat_slot_alloc(), *other = fs_stat_slot_alloc(), *nosock = fs_stat_slot_alloc();
  fs_stat_publish(); /* the file (private until a row matters) */
  ck_assert(real && other && nosock);
  loopback_end(real, cl, 1, FS_REASON_PENDING, 0, sport);
  loopback_end(other, cl, 1, FS_REASON_PENDING, 0, (uint16_t)(sport + 1));
  loopback_end(nosock, pfd[0], 1, FS_REASON_PENDING, 0, sport);
  memset(real->laddr, 0, 16), memset(other->laddr, 0, 16), memset(nosock->laddr, 0, 16); /* as the library leaves them */
  char cmd[PATH_MAX * 2], want[128];
  int rc;
  snprintf(cmd, sizeof cmd, "'%s' stat --json %d", bin, (int)getpid());
  char *out = run_cmd(cmd, &rc);
  ck_assert_int_eq(rc, 0);
  snprintf(want, sizeof want, "\"fd\":%d,", cl);
  const char *r1 = strstr(out, want);
  ck_assert_msg(r1 != NULL, "%s", out);
  snprintf(want, sizeof want, "\"local\":\"127.0.0.1:%u\",\"local_addr\":\"127.0.0.1\",\"local_port\":%u,"
           "\"peer\":\"127.0.0.1:%u\"", (unsigned)ntohs(me.sin_port), (unsigned)ntohs(me.sin_port), (unsigned)sport);
  ck_assert_msg(strstr(out, want) != NULL, "want %s in %s", want, out);
  snprintf(want, sizeof want, "\"local\":null,\"local_addr\":null,\"local_port\":0,\"peer\":\"127.0.0.1:%u\"",
           (unsigned)(sport + 1));
  ck_assert_msg(strstr(out, want) != NULL, "want %s in %s", want, out);
  snprintf(want, sizeof want, "\"fd\":%d,", pfd[0]);
  const char *r3 = strstr(out, want);
  ck_assert_msg(r3 != NULL && strstr(r3, "\"local\":null,") != NULL && strstr(r3, "\"local\":null,") < strstr(r3, "}"),
                "%s", out);
  free(out);
  close(cl), close(l), close(pfd[0]), close(pfd[1]);
}
END_TEST

/* Write s to file path: 0, or -1. */
static int put_file(const char *path, const char *s)
{
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  ssize_t n = write(fd, s, strlen(s));
  close(fd);
  return n == (ssize_t)strlen(s) ? 0 : -1;
}

/* A 64 KiB tmpfs on tmpdir, in a mount namespace of this test's own (root,
 * or an unprivileged user namespace): 0, or -1 where neither is allowed. */
static int tiny_tmpfs(void)
{
  if (geteuid() == 0) {
    if (unshare(CLONE_NEWNS) < 0)
      return -1;
  } else {
    uid_t uid = geteuid();
    gid_t gid = getegid();
    char map[64];
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0)
      return -1;
    (void)put_file("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "%u %u 1", (unsigned)uid, (unsigned)uid);
    if (put_file("/proc/self/uid_map", map) < 0)
      return -1;
    snprintf(map, sizeof map, "%u %u 1", (unsigned)gid, (unsigned)gid);
    if (put_file("/proc/self/gid_map", map) < 0)
      return -1;
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
    return -1;
  return mount("tmpfs", tmpdir, "tmpfs", 0, "size=64k,mode=0777");
}

/* The table's directory full (a container's 64 MB /dev/shm that the
 * application filled): a slot whose page has no block yet is refused
 * instead of handed out, since the first store into it would raise
 * SIGBUS and kill the process (it did, at a program's 31st socket).
 * Slots whose page is there still work; room made later is used. */
START_TEST(test_full_dir)
{
  if (tiny_tmpfs() < 0) {
    fprintf(stderr, "# SKIP test_full_dir: cannot mount a small tmpfs (needs root or user namespaces): %s\n",
            strerror(errno));
    return;
  }
  struct fs_stat_conn *first = fs_stat_slot_alloc(); /* the table: its header page written */
  fs_stat_publish(); /* the file (private until a row matters) */
  ck_assert_ptr_nonnull(first);
  publish(first, 3);
  char fill[PATH_MAX + 16];
  snprintf(fill, sizeof fill, "%s/fill", tmpdir);
  int fd = open(fill, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  ck_assert_int_ge(fd, 0);
  static char junk[4096];
  while (write(fd, junk, sizeof junk) == (ssize_t)sizeof junk)
    ;
  ck_assert_int_eq(errno, ENOSPC);
  close(fd);
  /* Slots 1-29 share the header's page (256 + 29 * 128 + 128 = 4096). */
  unsigned in_page0 = (unsigned)((4096 - HDR) / SLOT);
  for (unsigned i = 1; i < in_page0; i++) {
    struct fs_stat_conn *s = fs_stat_slot_alloc();
    ck_assert_ptr_eq(s, first + i);
    publish(s, (int)i + 3);
  }
  errno = 7;
  ck_assert_ptr_null(fs_stat_slot_alloc()); /* the next page has no block: refused, no SIGBUS */
  ck_assert_int_eq(errno, 7);
  ck_assert_ptr_null(fs_stat_slot_alloc());
  struct fs_stat_conn row;
  ck_assert_int_eq(read_slot((int)getpid(), in_page0 - 1, &row), 0);
  ck_assert_int_eq(row.fd, (int)in_page0 + 2);
  ck_assert_int_eq(unlink(fill), 0); /* room again */
  struct fs_stat_conn *s = fs_stat_slot_alloc();
  ck_assert_ptr_eq(s, first + in_page0);
  publish(s, 99);
  ck_assert_int_eq(read_slot((int)getpid(), in_page0, &row), 0);
  ck_assert_int_eq(row.fd, 99);
  fs_stat_shutdown();
  ck_assert_int_eq(umount2(tmpdir, MNT_DETACH), 0);
}
END_TEST

static Suite *stat_suite(void)
{
  Suite *s = suite_create("stat");
  TCase *tc = tcase_create("table");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_lazy_create_and_header);
  tcase_add_test(tc, test_alloc_free_layout);
  tcase_add_test(tc, test_exhaustion);
  tcase_add_test(tc, test_full_dir);
  tcase_add_test(tc, test_disabled);
  tcase_add_test(tc, test_bad_dir);
  tcase_add_test(tc, test_stale_file_replaced);
  tcase_add_test(tc, test_shutdown);
  tcase_add_test(tc, test_threads);
  tcase_add_test(tc, test_fork_rehome);
  tcase_add_test(tc, test_fork_keeps_private);
  tcase_add_test(tc, test_fork_fallback);
  tcase_add_test(tc, test_exit_quick);
  tcase_add_test(tc, test_fork_without_table_touches_nothing);
  tcase_add_test(tc, test_fork_child_slot_above_its_rows);
  tcase_add_test(tc, test_fork_private);
  tcase_add_test(tc, test_thread_publishes);
  tcase_add_test(tc, test_holders);
  tcase_add_test(tc, test_scan_takes_no_app_number);
  suite_add_tcase(s, tc);
  TCase *tool = tcase_create("tool");
  tcase_add_checked_fixture(tool, setup, teardown);
  tcase_add_test(tool, test_tool_stat);
  tcase_add_test(tool, test_tool_cli);
  tcase_add_test(tool, test_closed_counts);
  tcase_add_test(tool, test_tool_peer_reason);
  tcase_add_test(tool, test_tool_local_from_proc);
  suite_add_tcase(s, tool);
  return s;
}

int main(void)
{
  /* The table is per-process state with no reset: every test needs its own
   * process, whatever CK_FORK says. */
  return run_suite(stat_suite(), true);
}
