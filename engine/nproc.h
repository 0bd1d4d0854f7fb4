/* A process that forbids itself new threads. */
#ifndef FS_ENGINE_NPROC_H
#define FS_ENGINE_NPROC_H

/* The application is about to lower its RLIMIT_NPROC (setrlimit, prlimit
 * on itself): past it, the agent thread cannot be made.  A process that
 * listens needs its agent at its next accept, so it is started now (and,
 * for a listener shared since fork, this process's own name served, as
 * that accept would).  Nothing for a process that does not listen: it may
 * be about to confine itself (sshd's pre-authentication child sets the
 * limit, then a seccomp filter), and a thread of ours outside the filter
 * would weaken it.  errno kept. */
void fs_nproc_limiting(void);

#endif
