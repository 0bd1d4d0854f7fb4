/* Shell globs for program names, matched without allocation or locale.
 *
 * Same language as fnmatch(3) with no flags, byte by byte: `*` any run of
 * bytes, `?` any byte, `[...]` a set (`!` or `^` negates; ranges a-z; classes
 * [:alpha:] and the like, ASCII), `\x` a literal x.  An unterminated `[` is a
 * literal `[`.  Matching time is O(len(pattern) * len(string)). */
#ifndef FS_POLICY_GLOB_H
#define FS_POLICY_GLOB_H

#include <stdbool.h>

bool fs_glob_match(const char *pattern, const char *string);

#endif
