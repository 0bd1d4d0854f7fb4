/* check_reach: what `fabsock run` says of programs LD_PRELOAD cannot reach
 * (tools/reach.h), on fixtures built beside this test (tests/progs/
 * reach_probe dynamic, reach_static, reach_gonote with Go's section) and on
 * files made here: scripts, other machines' headers, set-ID and capability
 * copies, and mangled headers that must neither crash nor read outside the
 * file.  t_reach checks the same answers against what the loader does. */
#include <check.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "check_run.h"
#include "tools/reach.h"

static enum fs_reach reach_path(const char *path, uid_t uid, gid_t gid, char *why, size_t n)
{
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
  enum fs_reach r = fs_tool_reach_fd(fd, uid, gid, why, n);
  close(fd);
  return r;
}

/* A copy of src at dst with mode, in the build tree (a /tmp may be nosuid). */
static void copy_file(const char *src, const char *dst, mode_t mode)
{
  int in = open(src, O_RDONLY | O_CLOEXEC), out;
  ck_assert_int_ge(in, 0);
  unlink(dst);
  out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
  ck_assert_int_ge(out, 0);
  char buf[65536];
  ssize_t k;
  while ((k = read(in, buf, sizeof buf)) > 0)
    ck_assert_int_eq(write(out, buf, (size_t)k), k);
  ck_assert_int_eq(fchmod(out, mode), 0);
  close(in);
  close(out);
}

static void write_file(const char *path, const void *buf, size_t len)
{
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
  close(fd);
}

START_TEST(t_fixtures)
{
  char why[512];
  uid_t u = getuid();
  gid_t g = getgid();
  ck_assert_int_eq(reach_path("tests/progs/reach_probe", u, g, why, sizeof why), FS_REACH_OK);
  ck_assert_str_eq(why, "");
  ck_assert_int_eq(reach_path("tests/progs/reach_static", u, g, why, sizeof why), FS_REACH_STATIC);
  ck_assert_msg(strstr(why, "statically linked"), "%s", why);
  ck_assert_int_eq(reach_path("tests/progs/reach_gonote", u, g, why, sizeof why), FS_REACH_GO);
  ck_assert_msg(strstr(why, "Go program"), "%s", why);
  /* A script is its interpreter's business: nothing to say. */
  write_file("tests/unit/reach-script", "#!/bin/sh\necho hi\n", 19);
  ck_assert_int_eq(reach_path("tests/unit/reach-script", u, g, why, sizeof why), FS_REACH_OK);
  unlink("tests/unit/reach-script");
}
END_TEST

/* Headers of other machines: a 32-bit x86 program, a big-endian one. */
START_TEST(t_foreign)
{
  char why[512];
  unsigned char h[64] = { 0x7f, 'E', 'L', 'F', ELFCLASS32, ELFDATA2LSB, EV_CURRENT };
  h[16] = ET_EXEC;
  h[18] = EM_386;
  write_file("tests/unit/reach-elf32", h, 52);
  ck_assert_int_eq(reach_path("tests/unit/reach-elf32", 0, 0, why, sizeof why), FS_REACH_FOREIGN);
  ck_assert_msg(strstr(why, "class 1, machine 3"), "%s", why);
  memset(h, 0, sizeof h);
  memcpy(h, "\177ELF", 4);
  h[EI_CLASS] = ELFCLASS64;
  h[EI_DATA] = ELFDATA2MSB;
  h[17] = ET_EXEC;
  h[19] = EM_PPC64;
  write_file("tests/unit/reach-elf32", h, 64);
  ck_assert_int_eq(reach_path("tests/unit/reach-elf32", 0, 0, why, sizeof why), FS_REACH_FOREIGN);
  ck_assert_msg(strstr(why, "machine 21"), "%s", why);
  unlink("tests/unit/reach-elf32");
}
END_TEST

/* Set-user-ID and set-group-ID copies: secure execution for anyone but
 * the owner (group), unless the mount is nosuid, where the kernel ignores
 * the bits. */
START_TEST(t_setid)
{
  const char *p = "tests/unit/reach-setid";
  char why[512];
  struct stat st;
  struct statvfs vfs;
  copy_file("tests/progs/reach_probe", p, 04755);
  ck_assert_int_eq(stat(p, &st), 0);
  ck_assert_int_eq(statvfs(p, &vfs), 0);
  enum fs_reach other = (vfs.f_flag & ST_NOSUID) ? FS_REACH_OK : FS_REACH_SECURE;
  if (other == FS_REACH_OK)
    fprintf(stderr, "# the build tree is on a nosuid mount: set-ID bits do nothing there\n");
  ck_assert_int_eq(reach_path(p, st.st_uid + 1, st.st_gid, why, sizeof why), other);
  if (other == FS_REACH_SECURE)
    ck_assert_msg(strstr(why, "set-user-ID") && strstr(why, "secure-execution"), "%s", why);
  ck_assert_int_eq(reach_path(p, st.st_uid, st.st_gid, why, sizeof why), FS_REACH_OK);
  ck_assert_int_eq(chmod(p, 02755), 0);
  ck_assert_int_eq(reach_path(p, st.st_uid + 1, st.st_gid + 1, why, sizeof why), other);
  ck_assert_int_eq(reach_path(p, st.st_uid + 1, st.st_gid, why, sizeof why), FS_REACH_OK);
  ck_assert_int_eq(chmod(p, 02745), 0); /* set-gid without group exec: mandatory locking, not an ID */
  ck_assert_int_eq(reach_path(p, st.st_uid + 1, st.st_gid + 1, why, sizeof why), FS_REACH_OK);
  unlink(p);
}
END_TEST

/* File capabilities (a v2 security.capability: cap_net_bind_service in
 * permitted and effective): secure for a user other than root. */
START_TEST(t_filecaps)
{
  const char *p = "tests/unit/reach-caps";
  char why[512];
  copy_file("tests/progs/reach_probe", p, 0755);
  struct { uint32_t magic_etc; struct { uint32_t permitted, inheritable; } data[2]; } cap = {
    0x02000000u | 1u, /* VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE */
    { { 1u << 10, 0 }, { 0, 0 } },
  };
  if (setxattr(p, "security.capability", &cap, sizeof cap, 0) < 0) {
    fprintf(stderr, "# SKIP file capabilities: setxattr: %s (not root, or a file system without them)\n",
            strerror(errno));
    unlink(p);
    return;
  }
  struct statvfs vfs;
  ck_assert_int_eq(statvfs(p, &vfs), 0);
  enum fs_reach want = (vfs.f_flag & ST_NOSUID) ? FS_REACH_OK : FS_REACH_SECURE;
  ck_assert_int_eq(reach_path(p, 1000, 1000, why, sizeof why), want);
  if (want == FS_REACH_SECURE)
    ck_assert_msg(strstr(why, "file capabilities"), "%s", why);
  ck_assert_int_eq(reach_path(p, 0, 0, why, sizeof why), FS_REACH_OK);
  unlink(p);
}
END_TEST

/* Mangled headers: every byte of the first 64 and of the program and
 * section header tables set to random values, 20,000 times (seeded).  Each
 * answer must be one of the five, with a terminated sentence; ASan and
 * UBSan builds (--enable-sanitizers) catch any read outside a buffer. */
START_TEST(t_mangled)
{
  int fd = open("tests/progs/reach_gonote", O_RDONLY | O_CLOEXEC);
  ck_assert_int_ge(fd, 0);
  struct stat st;
  ck_assert_int_eq(fstat(fd, &st), 0);
  size_t len = (size_t)st.st_size;
  unsigned char *orig = malloc(len), *buf = malloc(len);
  ck_assert_ptr_nonnull(orig);
  ck_assert_ptr_nonnull(buf);
  ck_assert_int_eq(read(fd, orig, len), (ssize_t)len);
  close(fd);
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)orig;
  size_t zones[3][2] = { { 0, 64 }, { eh->e_phoff, (size_t)eh->e_phnum * sizeof(Elf64_Phdr) },
                         { eh->e_shoff, (size_t)eh->e_shnum * sizeof(Elf64_Shdr) } };
  unsigned seed = 12345;
  const char *p = "tests/unit/reach-mangled";
  for (int round = 0; round < 20000; round++) {
    memcpy(buf, orig, len);
    int z = round % 3, flips = 1 + round % 8;
    for (int i = 0; i < flips && zones[z][1]; i++) {
      size_t at = zones[z][0] + (size_t)rand_r(&seed) % zones[z][1];
      if (at < len)
        buf[at] = (unsigned char)rand_r(&seed);
    }
    size_t cut = round % 50 == 49 ? (size_t)rand_r(&seed) % len : len; /* now and then a truncated file */
    if (round % 500 == 0 || cut != len)
      write_file(p, buf, cut);
    else
      write_file(p, buf, len);
    char why[512];
    memset(why, 'x', sizeof why);
    enum fs_reach r = reach_path(p, 1000, 1000, why, sizeof why);
    ck_assert_int_ge(r, FS_REACH_OK);
    ck_assert_int_le(r, FS_REACH_SECURE);
    ck_assert_ptr_nonnull(memchr(why, '\0', sizeof why));
  }
  unlink(p);
  free(orig);
  free(buf);
}
END_TEST

START_TEST(t_find)
{
  char path[PATH_MAX];
  const char *old = getenv("PATH");
  char *save = old ? strdup(old) : NULL;
  setenv("PATH", "/nonexistent-dir::/bin", 1);
  ck_assert_int_eq(fs_tool_reach_find("sh", path, sizeof path), 0);
  ck_assert_str_eq(path, "/bin/sh");
  ck_assert_int_eq(fs_tool_reach_find("no-such-program-fabsock", path, sizeof path), -ENOENT);
  ck_assert_int_eq(fs_tool_reach_find("./tests/progs/reach_probe", path, sizeof path), 0);
  ck_assert_str_eq(path, "./tests/progs/reach_probe");
  ck_assert_int_eq(fs_tool_reach_find("", path, sizeof path), -ENOENT);
  ck_assert_int_eq(fs_tool_reach_find("/bin/sh", path, 4), -ENAMETOOLONG);
  if (save) {
    setenv("PATH", save, 1);
    free(save);
  }
}
END_TEST

int main(void)
{
  Suite *s = suite_create("reach");
  TCase *tc = tcase_create("reach");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, t_fixtures);
  tcase_add_test(tc, t_foreign);
  tcase_add_test(tc, t_setid);
  tcase_add_test(tc, t_filecaps);
  tcase_add_test(tc, t_mangled);
  tcase_add_test(tc, t_find);
  suite_add_tcase(s, tc);
  return run_suite(s, false);
}
