/* base/kcopy: copies the kernel makes into and out of our own shared
 * mappings: the bytes land, errno is kept, a bad address copies nothing
 * (and turns nothing off), and the copy is refused under a seccomp
 * filter present at the first use, and once a filter was
 * installed (fs_kcopy_forbid).  Each test in a process of its own: the
 * decision is made once per process. */
#include <check.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/kcopy.h"
#include "tests/unit/check_run.h"

#define LEN (1u << 20)

/* A fresh shared mapping of a memfd, as fabric/shm maps a channel. */
static uint8_t *fresh_map(void)
{
  int fd = memfd_create("check_kcopy", MFD_CLOEXEC);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, LEN), 0);
  void *m = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ck_assert_ptr_ne(m, MAP_FAILED);
  close(fd);
  return m;
}

/* Is this test process free of seccomp filters (a container's profile)?
 * There the library must refuse, and the tests say so instead. */
static bool unfiltered(void)
{
  char buf[4096] = { 0 };
  FILE *f = fopen("/proc/self/status", "r");
  ck_assert_ptr_nonnull(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *s = strstr(buf, "\nSeccomp:");
  return s != NULL && strncmp(s, "\nSeccomp:\t0\n", 12) == 0;
}

START_TEST(t_copies_both_ways)
{
  uint8_t *m = fresh_map(), *src = malloc(LEN), *dst = malloc(LEN);
  ck_assert(src && dst);
  for (size_t i = 0; i < LEN; i++)
    src[i] = (uint8_t)(i * 7 + 3);
  if (!unfiltered()) {
    ck_assert(!fs_kcopy_usable());
    ck_assert_uint_eq(fs_kcopy_to_map(m, src, LEN), 0);
    fprintf(stderr, "# check_kcopy: under a seccomp filter: refused, as it must be\n");
    return;
  }
  ck_assert(fs_kcopy_usable());
  errno = 4242;
  ck_assert_uint_eq(fs_kcopy_to_map(m + 100, src, LEN - 100), LEN - 100);
  ck_assert_int_eq(errno, 4242);
  ck_assert_int_eq(memcmp(m + 100, src, LEN - 100), 0); /* what a reader of the mapping sees */
  memset(dst, 0, LEN);
  ck_assert_uint_eq(fs_kcopy_from_map(dst, m + 100, LEN - 100), LEN - 100);
  ck_assert_int_eq(errno, 4242);
  ck_assert_int_eq(memcmp(dst, src, LEN - 100), 0);
  ck_assert_uint_eq(fs_kcopy_to_map(m, src, 0), 0);
  free(src);
  free(dst);
}
END_TEST

/* A bad address (the application's buffer, say): nothing copied, errno
 * kept, and the next copy still goes through the kernel. */
START_TEST(t_bad_address)
{
  if (!unfiltered())
    return; /* t_copies_both_ways says why */
  uint8_t *m = fresh_map(), buf[8192] = { 1 };
  void *hole = mmap(NULL, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(hole, MAP_FAILED);
  errno = 77;
  ck_assert_uint_eq(fs_kcopy_to_map(m, hole, sizeof buf), 0);
  ck_assert_uint_eq(fs_kcopy_from_map(hole, m, sizeof buf), 0);
  ck_assert_int_eq(errno, 77);
  ck_assert(fs_kcopy_usable());
  ck_assert_uint_eq(fs_kcopy_to_map(m, buf, sizeof buf), sizeof buf);
  ck_assert_int_eq(m[0], 1);
}
END_TEST

/* A filter present at the first use: refused, without a single call it
 * might kill the process for (this one would: SIGSYS at process_vm_*). */
START_TEST(t_filter_first)
{
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 2, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
  };
  struct sock_fprog prog = { sizeof f / sizeof f[0], f };
  uint8_t *m = fresh_map(), buf[4096] = { 0 };
  ck_assert_int_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
  ck_assert_int_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
  ck_assert(!fs_kcopy_usable());
  ck_assert_uint_eq(fs_kcopy_to_map(m, buf, sizeof buf), 0);
  ck_assert_uint_eq(fs_kcopy_from_map(buf, m, sizeof buf), 0);
}
END_TEST

/* Decided before the process confined itself: fs_kcopy_forbid (what
 * preload/proc.c calls at prctl(PR_SET_SECCOMP) and seccomp()) stops it. */
START_TEST(t_forbid)
{
  uint8_t *m = fresh_map(), buf[4096] = { 0 };
  (void)fs_kcopy_usable();
  fs_kcopy_forbid();
  ck_assert(!fs_kcopy_usable());
  ck_assert_uint_eq(fs_kcopy_to_map(m, buf, sizeof buf), 0);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("kcopy");
  TCase *tc = tcase_create("kcopy");
  tcase_add_test(tc, t_copies_both_ways);
  tcase_add_test(tc, t_bad_address);
  tcase_add_test(tc, t_filter_first);
  tcase_add_test(tc, t_forbid);
  suite_add_tcase(s, tc);
  return run_suite(s, true);
}
