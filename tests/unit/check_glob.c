/* Unit tests for policy/glob.c: program-name globs, checked against fnmatch(3). */
#include <check.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "policy/glob.h"
#include "tests/unit/check_run.h"

START_TEST(glob_vs_fnmatch)
{
  static const char *const pats[] = {
    "*", "?", "a*", "*a", "a*b*c", "*.*", "[abc]", "[!abc]", "[^abc]", "[a-c]x", "[]]", "[!]]",
    "[a-]", "[-a]", "\\*", "a\\?b", "[[:digit:]]*", "[[:alpha:][:digit:]]", "[[:upper:]]?",
    "[[:space:]]", "[[:punct:]]", "[[:xdigit:]]*", "*[[:lower:]]", "a[", "[ab", "**a**b**",
    "*?*?*", "", "x", "a[\\]]b", "[\\!a]", "[a\\-z]", "[z-a]", "*b*a", "?*?", "[[]",
  };
  static const char *const strs[] = {
    "", "a", "b", "ab", "abc", "aXbYc", "a.b", ".", "]", "-", "*", "a?b", "axb", "5x", "Z9",
    " ", "!", "fF", "a[", "[ab", "xxaxxbxx", "ba", "a]b", "\\", "z", "x", "[",
  };
  for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++)
    for (size_t j = 0; j < sizeof strs / sizeof strs[0]; j++) {
      bool want = fnmatch(pats[i], strs[j], 0) == 0;
      ck_assert_msg(fs_glob_match(pats[i], strs[j]) == want, "glob '%s' on '%s': want %d", pats[i],
                    strs[j], want);
    }
  /* Pathological pattern stays fast (no exponential backtracking). */
  char s[4001], pat[200];
  memset(s, 'a', 4000);
  s[4000] = '\0';
  strcpy(pat, "");
  for (int i = 0; i < 40; i++)
    strcat(pat, "*a");
  strcat(pat, "b");
  ck_assert(!fs_glob_match(pat, s));
}
END_TEST

int main(void)
{
  Suite *s = suite_create("glob");
  TCase *tc = tcase_create("glob");
  tcase_add_test(tc, glob_vs_fnmatch);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
