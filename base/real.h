/* Real libc entry points, resolved lazily and once from one list.
 *
 * Every interposed name has an entry here; every layer below preload/
 * reaches libc only through FS_REAL(name), so it never re-enters our own
 * wrappers.  So have the few calls a forked child makes before anything
 * else and its parent may never have made (pwrite and unlink, the child's
 * stat table): resolved with the rest before a fork (fs_real_resolve_all),
 * where a call through the library's PLT was bound lazily in each child,
 * a symbol lookup through every library of the process (a PostgreSQL
 * backend per connection).  Resolution is per
 * symbol and lock-free (an atomic pointer store; a race resolves twice to the
 * same value), so any call may be the first: from a constructor of another
 * library, from a thread, or on an inherited fd.  A symbol libc does not have
 * resolves to a stub that fails with ENOSYS (logged once). */
#ifndef FS_BASE_REAL_H
#define FS_BASE_REAL_H

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

struct io_uring;        /* liburing's, opaque here */
struct termios;         /* forkpty's, opaque here */
struct winsize;
struct io_uring_params;
struct io_uring_cqe;
struct __kernel_timespec;

/* X(return type, name, error value, parameter list, argument list).  The
 * io_uring_* and __io_uring_* entries are liburing's (they return -errno), present only in a
 * process that links it. */
#define FS_REAL_SYMBOLS(X) \
  X(int, socket, -1, (int d, int t, int p), (d, t, p)) \
  X(int, socketpair, -1, (int d, int t, int p, int sv[2]), (d, t, p, sv)) \
  X(int, bind, -1, (int fd, const struct sockaddr *a, socklen_t l), (fd, a, l)) \
  X(int, listen, -1, (int fd, int n), (fd, n)) \
  X(int, accept, -1, (int fd, struct sockaddr *a, socklen_t *l), (fd, a, l)) \
  X(int, accept4, -1, (int fd, struct sockaddr *a, socklen_t *l, int f), (fd, a, l, f)) \
  X(int, connect, -1, (int fd, const struct sockaddr *a, socklen_t l), (fd, a, l)) \
  X(int, close, -1, (int fd), (fd)) \
  X(int, close_range, -1, (unsigned lo, unsigned hi, int f), (lo, hi, f)) \
  X(long, syscall, -1, (long n, long a, long b, long c, long d, long e, long f), (n, a, b, c, d, e, f)) \
  X(int, shutdown, -1, (int fd, int how), (fd, how)) \
  X(int, dup, -1, (int fd), (fd)) \
  X(int, dup2, -1, (int fd, int nfd), (fd, nfd)) \
  X(int, dup3, -1, (int fd, int nfd, int f), (fd, nfd, f)) \
  X(int, fcntl, -1, (int fd, int cmd, long arg), (fd, cmd, arg)) \
  X(int, ioctl, -1, (int fd, unsigned long req, void *arg), (fd, req, arg)) \
  X(ssize_t, read, -1, (int fd, void *b, size_t n), (fd, b, n)) \
  X(ssize_t, write, -1, (int fd, const void *b, size_t n), (fd, b, n)) \
  X(ssize_t, readv, -1, (int fd, const struct iovec *v, int n), (fd, v, n)) \
  X(ssize_t, writev, -1, (int fd, const struct iovec *v, int n), (fd, v, n)) \
  X(ssize_t, recv, -1, (int fd, void *b, size_t n, int f), (fd, b, n, f)) \
  X(ssize_t, recvfrom, -1, (int fd, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l), (fd, b, n, f, a, l)) \
  X(ssize_t, recvmsg, -1, (int fd, struct msghdr *m, int f), (fd, m, f)) \
  X(int, recvmmsg, -1, (int fd, struct mmsghdr *m, unsigned n, int f, struct timespec *t), (fd, m, n, f, t)) \
  X(ssize_t, send, -1, (int fd, const void *b, size_t n, int f), (fd, b, n, f)) \
  X(ssize_t, sendto, -1, (int fd, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l), (fd, b, n, f, a, l)) \
  X(ssize_t, sendmsg, -1, (int fd, const struct msghdr *m, int f), (fd, m, f)) \
  X(int, sendmmsg, -1, (int fd, struct mmsghdr *m, unsigned n, int f), (fd, m, n, f)) \
  X(ssize_t, sendfile, -1, (int o, int i, off_t *off, size_t n), (o, i, off, n)) \
  X(ssize_t, splice, -1, (int i, loff_t *oi, int o, loff_t *oo, size_t n, unsigned f), (i, oi, o, oo, n, f)) \
  X(ssize_t, tee, -1, (int i, int o, size_t n, unsigned f), (i, o, n, f)) \
  X(ssize_t, copy_file_range, -1, (int i, loff_t *oi, int o, loff_t *oo, size_t n, unsigned f), (i, oi, o, oo, n, f)) \
  X(int, poll, -1, (struct pollfd *p, nfds_t n, int t), (p, n, t)) \
  X(int, ppoll, -1, (struct pollfd *p, nfds_t n, const struct timespec *t, const sigset_t *s), (p, n, t, s)) \
  X(int, select, -1, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t), (n, r, w, e, t)) \
  X(int, pselect, -1, (int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t, const sigset_t *s), (n, r, w, e, t, s)) \
  X(int, epoll_create, -1, (int n), (n)) \
  X(int, epoll_create1, -1, (int f), (f)) \
  X(int, epoll_ctl, -1, (int ep, int op, int fd, struct epoll_event *ev), (ep, op, fd, ev)) \
  X(int, epoll_wait, -1, (int ep, struct epoll_event *ev, int n, int t), (ep, ev, n, t)) \
  X(int, epoll_pwait, -1, (int ep, struct epoll_event *ev, int n, int t, const sigset_t *s), (ep, ev, n, t, s)) \
  X(int, epoll_pwait2, -1, (int ep, struct epoll_event *ev, int n, const struct timespec *t, const sigset_t *s), (ep, ev, n, t, s)) \
  X(pid_t, fork, -1, (void), ()) \
  X(int, daemon, -1, (int nochdir, int noclose), (nochdir, noclose)) \
  X(pid_t, forkpty, -1, (int *m, char *n, const struct termios *t, const struct winsize *w), (m, n, t, w)) \
  X(int, setuid, -1, (uid_t u), (u)) \
  X(int, setreuid, -1, (uid_t r, uid_t e), (r, e)) \
  X(int, setresuid, -1, (uid_t r, uid_t e, uid_t s), (r, e, s)) \
  X(int, execve, -1, (const char *p, char *const a[], char *const e[]), (p, a, e)) \
  X(int, execvpe, -1, (const char *p, char *const a[], char *const e[]), (p, a, e)) \
  X(int, fexecve, -1, (int fd, char *const a[], char *const e[]), (fd, a, e)) \
  X(int, posix_spawn, -1, (pid_t *pid, const char *p, const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *at, char *const a[], char *const e[]), (pid, p, fa, at, a, e)) \
  X(int, posix_spawnp, -1, (pid_t *pid, const char *p, const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *at, char *const a[], char *const e[]), (pid, p, fa, at, a, e)) \
  X(int, system, -1, (const char *c), (c)) \
  X(FILE *, popen, NULL, (const char *c, const char *m), (c, m)) \
  X(FILE *, fdopen, NULL, (int fd, const char *m), (fd, m)) \
  X(int, fclose, EOF, (FILE *f), (f)) \
  X(int, getsockopt, -1, (int fd, int l, int o, void *v, socklen_t *n), (fd, l, o, v, n)) \
  X(int, setsockopt, -1, (int fd, int l, int o, const void *v, socklen_t n), (fd, l, o, v, n)) \
  X(int, pthread_cancel, ENOSYS, (pthread_t t), (t)) \
  X(int, prctl, -1, (int o, unsigned long a, unsigned long b, unsigned long c, unsigned long d), (o, a, b, c, d)) \
  X(int, setrlimit, -1, (__rlimit_resource_t r, const struct rlimit *l), (r, l)) \
  X(int, prlimit, -1, (pid_t p, __rlimit_resource_t r, const struct rlimit *n, struct rlimit *o), (p, r, n, o)) \
  X(ssize_t, pwrite, -1, (int fd, const void *b, size_t n, off_t o), (fd, b, n, o)) \
  X(int, unlink, -1, (const char *p), (p)) \
  X(int, io_uring_setup, -ENOSYS, (unsigned e, struct io_uring_params *p), (e, p)) \
  X(int, io_uring_queue_init, -ENOSYS, (unsigned e, struct io_uring *r, unsigned f), (e, r, f)) \
  X(int, io_uring_queue_init_params, -ENOSYS, (unsigned e, struct io_uring *r, struct io_uring_params *p), (e, r, p)) \
  X(int, io_uring_queue_init_mem, -ENOSYS, \
    (unsigned e, struct io_uring *r, struct io_uring_params *p, void *b, size_t n), (e, r, p, b, n)) \
  X(void, io_uring_queue_exit, , (struct io_uring *r), (r)) \
  X(int, io_uring_submit, -ENOSYS, (struct io_uring *r), (r)) \
  X(int, io_uring_submit_and_wait, -ENOSYS, (struct io_uring *r, unsigned n), (r, n)) \
  X(int, io_uring_submit_and_wait_timeout, -ENOSYS, \
    (struct io_uring *r, struct io_uring_cqe **c, unsigned n, struct __kernel_timespec *t, sigset_t *s), \
    (r, c, n, t, s)) \
  X(int, io_uring_submit_and_get_events, -ENOSYS, (struct io_uring *r), (r)) \
  X(int, io_uring_wait_cqes, -ENOSYS, \
    (struct io_uring *r, struct io_uring_cqe **c, unsigned n, struct __kernel_timespec *t, sigset_t *s), \
    (r, c, n, t, s)) \
  X(int, io_uring_wait_cqe_timeout, -ENOSYS, (struct io_uring *r, struct io_uring_cqe **c, \
    struct __kernel_timespec *t), (r, c, t)) \
  X(int, __io_uring_get_cqe, -ENOSYS, \
    (struct io_uring *r, struct io_uring_cqe **c, unsigned sub, unsigned n, sigset_t *s), (r, c, sub, n, s)) \
  X(int, io_uring_enter, -ENOSYS, (unsigned fd, unsigned sub, unsigned n, unsigned f, sigset_t *s), \
    (fd, sub, n, f, s)) \
  X(int, io_uring_enter2, -ENOSYS, (unsigned fd, unsigned sub, unsigned n, unsigned f, sigset_t *s, size_t z), \
    (fd, sub, n, f, s, z)) \
  X(int, io_uring_register, -ENOSYS, (unsigned fd, unsigned op, const void *a, unsigned n), (fd, op, a, n)) \
  X(int, io_uring_register_files, -ENOSYS, (struct io_uring *r, const int *f, unsigned n), (r, f, n)) \
  X(int, io_uring_register_files_tags, -ENOSYS, (struct io_uring *r, const int *f, const uint64_t *t, unsigned n), \
    (r, f, t, n)) \
  X(int, io_uring_register_files_update, -ENOSYS, (struct io_uring *r, unsigned o, const int *f, unsigned n), \
    (r, o, f, n)) \
  X(int, io_uring_register_files_update_tag, -ENOSYS, \
    (struct io_uring *r, unsigned o, const int *f, const uint64_t *t, unsigned n), (r, o, f, t, n))

enum fs_real_id {
#define FS_REAL_X_ID(ret, name, err, params, args) FS_REAL_ID_##name,
  FS_REAL_SYMBOLS(FS_REAL_X_ID)
#undef FS_REAL_X_ID
  FS_REAL_ID_COUNT
};

/* fcntl and ioctl are variadic in libc; we always pass exactly one
 * word-sized argument, which is what every command takes on Linux/x86-64.
 * syscall is variadic too; we pass its six argument words, as glibc's own
 * implementation loads them (it reads registers, not a va_list). */
struct fs_real_table {
#define FS_REAL_X_PTR(ret, name, err, params, args) ret (*name) params;
  FS_REAL_SYMBOLS(FS_REAL_X_PTR)
#undef FS_REAL_X_PTR
};

extern struct fs_real_table fs_real_tab;

/* Resolve one symbol (slow path); never returns NULL. */
void *fs_real_resolve(enum fs_real_id id);

/* Before a process's first fork: resolve every libc entry (liburing's stay
 * lazy: a process without it would log their absence).  What a child
 * calls first was a dlsym in every child otherwise: execve in each child
 * of a shell, send and recv in each PostgreSQL backend.  About 100
 * lookups the first time, a load after it. */
void fs_real_resolve_all(void);

#define FS_REAL(name) \
  (__extension__({ \
    __typeof__(fs_real_tab.name) p__ = __atomic_load_n(&fs_real_tab.name, __ATOMIC_ACQUIRE); \
    if (__builtin_expect(p__ == NULL, 0)) \
      p__ = (__typeof__(p__))fs_real_resolve(FS_REAL_ID_##name); \
    p__; \
  }))

#endif
