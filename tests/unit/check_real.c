/* Unit tests for base/real: the real libc entry points, resolved one by one
 * on first use, or all at once before a process's first fork. */
#include <check.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/real.h"
#include "tests/unit/check_run.h"

/* One lazy call resolves its own entry and no other. */
START_TEST(t_one_on_first_use)
{
  ck_assert_ptr_null(__atomic_load_n(&fs_real_tab.dup3, __ATOMIC_ACQUIRE));
  ck_assert_int_eq(FS_REAL(shutdown)(-1, SHUT_RDWR), -1);
  ck_assert_ptr_nonnull(fs_real_tab.shutdown);
  ck_assert_ptr_null(__atomic_load_n(&fs_real_tab.dup3, __ATOMIC_ACQUIRE));
}
END_TEST

/* Every libc entry at once, to the same address a lazy call finds, and no
 * liburing one, __io_uring_get_cqe included (this program does not link
 * it: resolving them logged their absence in every forking process and
 * bound stubs). */
START_TEST(t_all_before_fork)
{
  void *close_first = (void *)FS_REAL(close);
  fs_real_resolve_all();
  ck_assert_ptr_eq((void *)fs_real_tab.close, close_first);
  int n = 0, lazy = 0;
#define X(ret, name, err, params, args) \
  if (strstr(#name, "io_uring")) { \
    ck_assert_msg(fs_real_tab.name == NULL, #name " resolved: a stub bound, its absence logged"); \
    lazy++; \
  } else { \
    ck_assert_msg(fs_real_tab.name != NULL, #name " not resolved"); \
    n++; \
  }
  FS_REAL_SYMBOLS(X)
#undef X
  ck_assert_int_gt(n, 50);
  ck_assert_int_gt(lazy, 0);
  ck_assert_ptr_eq((void *)fs_real_tab.execve, (void *)execve); /* libc's, not a stub */
}
END_TEST

int main(void)
{
  Suite *s = suite_create("real");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, t_one_on_first_use);
  tcase_add_test(tc, t_all_before_fork);
  suite_add_tcase(s, tc);
  return run_suite(s, true); /* each test starts with an empty table */
}
