/* Whether LD_PRELOAD can reach a program at all (`fabsock run`'s warning).
 *
 * Programs that the dynamic loader never preloads into, or whose sockets
 * never go through libc, run under `fabsock run` exactly as without it:
 * their connections stay on kernel TCP and `fabsock stat` never sees them.
 * Users of every preload accelerator find that out the hard way ("my app is
 * not accelerated"), so the tool says it before the exec:
 *   - a Go program: its runtime makes its own system calls, never libc's;
 *   - a statically linked program: no dynamic loader runs, so nothing reads
 *     LD_PRELOAD;
 *   - a program of another ELF class or machine (a 32-bit one): the loader
 *     refuses the 64-bit library; or one started by another dynamic loader
 *     than glibc's (musl's), which the library is not built for;
 *   - secure execution (AT_SECURE): set-user-ID or set-group-ID to someone
 *     else, or file capabilities for a user other than root, on a mount
 *     without nosuid; the loader then ignores preload paths with a slash.
 * The program file's contents are not trusted: every offset and count is
 * checked against the file, and anything unreadable says nothing. */
#ifndef FS_TOOLS_REACH_H
#define FS_TOOLS_REACH_H

#include <stddef.h>
#include <sys/types.h>

enum fs_reach {
  FS_REACH_OK = 0,   /* preloaded, as far as can be told (scripts too) */
  FS_REACH_GO,       /* a Go program (its ELF sections say so) */
  FS_REACH_STATIC,   /* no program interpreter (PT_INTERP) */
  FS_REACH_FOREIGN,  /* another ELF class, machine or loader than this tool's */
  FS_REACH_SECURE,   /* the loader runs in secure-execution mode */
};

/* What the dynamic loader would do with an LD_PRELOAD path for the program
 * open at fd, executed by a process of real ids uid and gid.  why (n bytes)
 * gets a sentence for the user when the answer is not FS_REACH_OK. */
enum fs_reach fs_tool_reach_fd(int fd, uid_t uid, gid_t gid, char *why, size_t n);

/* PROGRAM as execvp would find it (a name without '/' along $PATH) into
 * path (n bytes): 0, or -errno. */
int fs_tool_reach_find(const char *prog, char *path, size_t n);

#endif
