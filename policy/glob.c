/* fnmatch(3)-compatible globs (no flags), without locale or allocation, so a
 * policy match is safe anywhere (signal-free paths, any thread). */
#include <stddef.h>
#include <string.h>

#include "policy/glob.h"

/* [:name:] classes, ASCII.  Returns 1/0, or -1 for an unknown name. */
static int fs_glob_class(const char *name, size_t n, unsigned char c)
{
  static const char *const names[] = { "alnum", "alpha", "blank", "cntrl", "digit", "graph",
                                       "lower", "print", "punct", "space", "upper", "xdigit" };
  bool digit = c >= '0' && c <= '9', lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
  bool graph = c > 0x20 && c < 0x7f;
  for (int i = 0; i < 12; i++) {
    if (strlen(names[i]) != n || memcmp(names[i], name, n) != 0)
      continue;
    switch (i) {
    case 0: return digit || lower || upper;
    case 1: return lower || upper;
    case 2: return c == ' ' || c == '\t';
    case 3: return c < 0x20 || c == 0x7f;
    case 4: return digit;
    case 5: return graph;
    case 6: return lower;
    case 7: return graph || c == ' ';
    case 8: return graph && !digit && !lower && !upper;
    case 9: return c == ' ' || (c >= '\t' && c <= '\r');
    case 10: return upper;
    default: return digit || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    }
  }
  return -1;
}

/* The bracket set starting at p ('['): its length in the pattern and, in
 * *hit, whether c is in it.  0 if the set is unterminated ('[' is literal). */
static size_t fs_glob_set(const char *p, unsigned char c, bool *hit)
{
  const char *q = p + 1;
  bool neg = false, match = false, first = true;
  if (*q == '!' || *q == '^') {
    neg = true;
    q++;
  }
  for (;;) {
    unsigned char lo, hi;
    if (*q == '\0')
      return 0;
    if (*q == ']' && !first) {
      q++;
      break;
    }
    first = false;
    if (q[0] == '[' && q[1] == ':') {
      const char *e = q + 2;
      while (*e != '\0' && !(e[0] == ':' && e[1] == ']'))
        e++;
      if (*e != '\0') {
        int k = fs_glob_class(q + 2, (size_t)(e - q - 2), c);
        if (k >= 0) {
          match = match || k;
          q = e + 2;
          continue;
        }
      }
    }
    if (q[0] == '\\' && q[1] != '\0')
      q++;
    lo = hi = (unsigned char)*q++;
    if (q[0] == '-' && q[1] != ']' && q[1] != '\0') {
      q++;
      if (q[0] == '\\' && q[1] != '\0')
        q++;
      hi = (unsigned char)*q++;
    }
    if (c >= lo && c <= hi)
      match = true;
  }
  *hit = match != neg;
  return (size_t)(q - p);
}

/* One pattern element against byte c: its length in the pattern, *hit. */
static size_t fs_glob_one(const char *p, unsigned char c, bool *hit)
{
  if (*p == '?') {
    *hit = true;
    return 1;
  }
  if (*p == '[') {
    size_t n = fs_glob_set(p, c, hit);
    if (n > 0)
      return n;
  } else if (p[0] == '\\' && p[1] != '\0') {
    *hit = (unsigned char)p[1] == c;
    return 2;
  }
  *hit = (unsigned char)*p == c;
  return 1;
}

bool fs_glob_match(const char *pattern, const char *string)
{
  const char *p = pattern, *s = string, *star_p = NULL, *star_s = NULL;
  /* Every element but '*' eats one byte, so backtracking to the last '*'
   * only is enough (a later '*' subsumes what an earlier one could do). */
  while (*s != '\0') {
    bool hit = false;
    size_t n;
    if (*p == '*') {
      while (*p == '*')
        p++;
      if (*p == '\0')
        return true;
      star_p = p;
      star_s = s;
      continue;
    }
    n = *p != '\0' ? fs_glob_one(p, (unsigned char)*s, &hit) : 0;
    if (hit) {
      p += n;
      s++;
    } else if (star_p != NULL) {
      p = star_p;
      s = ++star_s;
    } else {
      return false;
    }
  }
  while (*p == '*')
    p++;
  return *p == '\0';
}
