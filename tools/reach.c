/* Whether LD_PRELOAD can reach a program (tools/reach.h). */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "tools/reach.h"

#define FS_REACH_MAX_SECTIONS 65536
#define FS_REACH_MAX_STRTAB (1u << 20) /* section names: a few KiB in practice */

static bool fs_reach_read(int fd, uint64_t off, void *buf, size_t len)
{
  if (off > (uint64_t)LLONG_MAX - len)
    return false;
  return pread(fd, buf, len, (off_t)off) == (ssize_t)len;
}

/* What this tool (and the library beside it) was built as: its ELF class,
 * byte order and machine from the compiler, its loader from its own
 * PT_INTERP, in memory (no system call: `fabsock run` is a process start). */
#if defined(__x86_64__)
#define FS_REACH_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define FS_REACH_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define FS_REACH_MACHINE EM_PPC64
#elif defined(__s390x__)
#define FS_REACH_MACHINE EM_S390
#elif defined(__riscv)
#define FS_REACH_MACHINE EM_RISCV
#elif defined(__i386__)
#define FS_REACH_MACHINE EM_386
#elif defined(__arm__)
#define FS_REACH_MACHINE EM_ARM
#else
#define FS_REACH_MACHINE EM_NONE /* not known here: the machine is not compared */
#endif
#define FS_REACH_CLASS (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32)
#define FS_REACH_DATA (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB)

static int fs_reach_self_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
  (void)size;
  for (unsigned i = 0; i < info->dlpi_phnum; i++)
    if (info->dlpi_phdr[i].p_type == PT_INTERP)
      *(const char **)arg = (const char *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  return 1; /* the first object is the program itself */
}

static const char *fs_reach_self_interp(void)
{
  const char *interp = "";
  dl_iterate_phdr(fs_reach_self_cb, &interp);
  return interp;
}

/* One table of the file (count entries of size each, at off) into a new
 * buffer, or NULL: counts and offsets come from the file, so each is
 * bounded and the read must be whole. */
static void *fs_reach_table(int fd, uint64_t off, uint64_t count, size_t size, uint64_t max_bytes)
{
  if (count == 0 || count > max_bytes / size)
    return NULL;
  void *t = malloc(count * size);
  if (t && !fs_reach_read(fd, off, t, count * size)) {
    free(t);
    t = NULL;
  }
  return t;
}

/* Go's linker marks every ELF it writes with these sections (the build id
 * note since Go 1.x, build info since 1.13, the pc table always). */
static bool fs_reach_go_name(const char *s, size_t room)
{
  static const char *const names[] = { ".note.go.buildid", ".go.buildinfo", ".gopclntab", ".gosymtab" };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strnlen(s, room) == strlen(names[i]) && memcmp(s, names[i], strlen(names[i])) == 0)
      return true;
  return false;
}

/* Whether a section of the file bears one of Go's names.  A file whose
 * section table does not hold together is simply not Go. */
static bool fs_reach_is_go(int fd, const ElfW(Ehdr) *eh)
{
  if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(ElfW(Shdr)))
    return false;
  ElfW(Shdr) sh0;
  if (!fs_reach_read(fd, eh->e_shoff, &sh0, sizeof sh0))
    return false;
  uint64_t nsec = eh->e_shnum ? eh->e_shnum : sh0.sh_size; /* 0: the count is in section 0 */
  uint64_t stri = eh->e_shstrndx == SHN_XINDEX ? sh0.sh_link : eh->e_shstrndx;
  if (stri == SHN_UNDEF || stri >= nsec)
    return false;
  ElfW(Shdr) *sh = fs_reach_table(fd, eh->e_shoff, nsec, sizeof *sh, FS_REACH_MAX_SECTIONS * sizeof *sh);
  char *names = sh ? fs_reach_table(fd, sh[stri].sh_offset, sh[stri].sh_size, 1, FS_REACH_MAX_STRTAB) : NULL;
  bool go = false;
  for (uint64_t i = 1; names && i < nsec && !go; i++)
    if (sh[i].sh_name < sh[stri].sh_size)
      go = fs_reach_go_name(names + sh[i].sh_name, sh[stri].sh_size - sh[i].sh_name);
  free(names);
  free(sh);
  return go;
}

/* The program's interpreter (PT_INTERP) into interp (n bytes): true if it
 * has one.  A program that names none is started by the kernel directly. */
static bool fs_reach_interp(int fd, const ElfW(Ehdr) *eh, char *interp, size_t n)
{
  if (eh->e_phentsize != sizeof(ElfW(Phdr)))
    return false;
  ElfW(Phdr) *ph = fs_reach_table(fd, eh->e_phoff, eh->e_phnum, sizeof *ph, 0xffff * sizeof *ph);
  bool found = false;
  for (unsigned i = 0; ph && i < eh->e_phnum && !found; i++) {
    if (ph[i].p_type != PT_INTERP)
      continue;
    size_t len = ph[i].p_filesz < n ? ph[i].p_filesz : n - 1;
    if (!fs_reach_read(fd, ph[i].p_offset, interp, len))
      len = 0;
    interp[len] = '\0';
    found = true;
  }
  free(ph);
  return found;
}

/* The loader's secure-execution mode (AT_SECURE; ld.so(8)): the kernel sets
 * it for an exec that changes the effective ids from the real ones, or that
 * gives a user other than root file capabilities; a nosuid mount gives
 * neither. */
static bool fs_reach_secure(int fd, uid_t uid, gid_t gid, char *what, size_t n)
{
  struct stat st;
  struct statvfs vfs;
  if (fstat(fd, &st) < 0 || (fstatvfs(fd, &vfs) == 0 && (vfs.f_flag & ST_NOSUID)))
    return false;
  if ((st.st_mode & S_ISUID) && st.st_uid != uid) {
    snprintf(what, n, "is set-user-ID (to uid %u)", (unsigned)st.st_uid);
    return true;
  }
  if ((st.st_mode & S_ISGID) && (st.st_mode & S_IXGRP) && st.st_gid != gid) {
    snprintf(what, n, "is set-group-ID (to gid %u)", (unsigned)st.st_gid);
    return true;
  }
  if (uid != 0 && fgetxattr(fd, "security.capability", NULL, 0) > 0) {
    snprintf(what, n, "has file capabilities (getcap(8))");
    return true;
  }
  return false;
}

enum fs_reach fs_tool_reach_fd(int fd, uid_t uid, gid_t gid, char *why, size_t n)
{
  ElfW(Ehdr) eh;
  char interp[PATH_MAX], what[64];
  memset(&eh, 0, sizeof eh);
  if (n)
    why[0] = '\0';
  if (pread(fd, &eh, sizeof eh, 0) < EI_NIDENT + 4 || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
    return FS_REACH_OK; /* a script, or whatever execve makes of it */
  /* e_machine sits at the same offset in both classes: read it in the
   * file's byte order. */
  const uint8_t *m = (const uint8_t *)&eh + 18;
  unsigned machine = eh.e_ident[EI_DATA] == ELFDATA2MSB ? (unsigned)m[0] << 8 | m[1] : (unsigned)m[1] << 8 | m[0];
  if (eh.e_ident[EI_CLASS] != FS_REACH_CLASS || eh.e_ident[EI_DATA] != FS_REACH_DATA ||
      (FS_REACH_MACHINE != EM_NONE && machine != FS_REACH_MACHINE)) {
    snprintf(why, n,
             "is built for another machine (ELF class %u, machine %u; libfabsock: class %u, machine %u): "
             "the dynamic loader cannot load the library into it",
             eh.e_ident[EI_CLASS], machine, (unsigned)FS_REACH_CLASS, (unsigned)FS_REACH_MACHINE);
    return FS_REACH_FOREIGN;
  }
  if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN)
    return FS_REACH_OK; /* execve refuses it */
  if (fs_reach_is_go(fd, &eh)) {
    snprintf(why, n,
             "is a Go program: Go's runtime makes its own system calls, never libc's, so libfabsock "
             "sees none of its sockets");
    return FS_REACH_GO;
  }
  if (!fs_reach_interp(fd, &eh, interp, sizeof interp)) {
    snprintf(why, n, "is statically linked: no dynamic loader runs in it, so nothing reads LD_PRELOAD");
    return FS_REACH_STATIC;
  }
  const char *self = fs_reach_self_interp();
  if (self[0] && strcmp(interp, self) != 0 && !strstr(interp, "/ld-linux")) {
    snprintf(why, n, "starts with the loader %.200s, not glibc's (%.200s), which libfabsock is built for", interp,
             self);
    return FS_REACH_FOREIGN;
  }
  if (fs_reach_secure(fd, uid, gid, what, sizeof what)) {
    snprintf(why, n,
             "%s: the dynamic loader runs it in secure-execution mode and ignores an LD_PRELOAD path "
             "(ld.so(8))",
             what);
    return FS_REACH_SECURE;
  }
  return FS_REACH_OK;
}

int fs_tool_reach_find(const char *prog, char *path, size_t n)
{
  if (!*prog)
    return -ENOENT;
  if (strchr(prog, '/'))
    return snprintf(path, n, "%s", prog) < (int)n ? 0 : -ENAMETOOLONG;
  const char *dirs = getenv("PATH");
  if (!dirs)
    dirs = "/bin:/usr/bin"; /* execvp's default */
  for (const char *d = dirs;; d++) {
    size_t len = strcspn(d, ":");
    struct stat st;
    /* An empty entry is the current directory, as for execvp. */
    if (snprintf(path, n, "%.*s%s%s", (int)len, len ? d : ".", "/", prog) < (int)n && access(path, X_OK) == 0 &&
        stat(path, &st) == 0 && S_ISREG(st.st_mode))
      return 0;
    d += len;
    if (!*d)
      return -ENOENT;
  }
}
