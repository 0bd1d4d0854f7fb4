/* Process events: fork, vfork, the exec family, posix_spawn, system, popen,
 * setuid and kin, prctl(PR_SET_SECCOMP), setrlimit(RLIMIT_NPROC) and _exit.
 *
 * Before an exec (including the ones glibc does behind posix_spawn, system
 * and popen) every accelerated connection is brought back to plain TCP, so a
 * new image never inherits a socket whose bytes flow elsewhere.  vfork is
 * treated as fork: a wrapper cannot safely return into a frame the child
 * shares with its parent. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <linux/seccomp.h>
#include <pty.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/aside.h"
#include "base/fdreg.h"
#include "base/hot.h"
#include "base/kcopy.h"
#include "base/reason.h"
#include "engine/agent.h"
#include "engine/cancel.h"
#include "engine/batch.h"
#include "engine/exit.h"
#include "engine/fdtab.h"
#include "engine/nproc.h"
#include "engine/sock.h"
#include "preload/export.h"
#include "preload/proc.h"
#include "base/proc.h"
#include "base/real.h"
#include "base/stat.h"

static void fs_fork_before(bool pid_known)
{
  fs_batch_flush(); /* the child must not hold the parent's wakes */
  fs_real_resolve_all(); /* once per process: docs/design.md 1.6, what a fork costs */
  fs_sock_before_fork(pid_known);
}

FS_FORK_TEXT static void fs_fork_after(pid_t pid)
{
  if (pid == 0)
    fs_aside_atfork_child(); /* the parent's aside thread is not here */
  fs_sock_after_fork(pid);
}

/* The thread whose fork() is in the real one, while it is: the atfork
 * handlers below then stand aside.  Written only under the agent's lock
 * (fs_fork_before takes it, fs_fork_after lets it go), and read by a
 * handler only against its own thread (fs_fork_mine).  Not a
 * thread-local: that was a store after the fork to a page of the thread's
 * own, a fault in each process; this one's page (FS_HOT, beside the
 * agent's lock) is written after a fork anyway. */
static void *fs_fork_wrapper FS_HOT;

/* The thread's own pointer (x86-64's %fs base: its descriptor, as
 * pthread_self's value, the same in the child), read without a call:
 * pthread_self was a page of libc's code faulted in by every child. */
FS_FORK_TEXT static bool fs_fork_mine(void)
{
  return __atomic_load_n(&fs_fork_wrapper, __ATOMIC_RELAXED) == __builtin_thread_pointer();
}

FS_FORK_TEXT FS_EXPORT pid_t fork(void)
{
  fs_fork_before(true);
  /* errno's address asked here: the same thread's after the fork, and a
   * child that called __errno_location faulted in its page of libc code. */
  int *err = &errno;
  __atomic_store_n(&fs_fork_wrapper, __builtin_thread_pointer(), __ATOMIC_RELAXED);
  pid_t pid = FS_REAL(fork)();
  __atomic_store_n(&fs_fork_wrapper, NULL, __ATOMIC_RELAXED);
  int saved = *err;
  fs_fork_after(pid);
  if (*err != saved) /* a store to an unchanged errno is a page copy, in each process */
    *err = saved;
  return pid;
}

/* A fork the C library makes itself (daemon(3), forkpty(3)) never reaches
 * the fork() above: libc calls its own (the wrappers of those two, below,
 * register these handlers first).  Such a daemon's child went on
 * with the parent's state as if it were its own (an agent thread it does
 * not have, the parent's stat table), and a client's upgrade stayed
 * pending for good.  The same work runs from atfork handlers then, which
 * libc runs for those forks (not for _Fork(2) or clone(2)).  The parent's
 * handler cannot know the child's pid (the stat tables alone then say
 * who holds an accepted connection) nor tell a failed fork: it takes it
 * as done: after a failed one each upgraded end counts a holder it does
 * not have, as if a child still held it (taken as failed, a fork that was
 * done would leave two processes that each end the ring at their close).
 * (base/proc.h, fs_proc_atfork_arm). */
FS_FORK_TEXT static void fs_fork_prepare(void)
{
  if (fs_fork_mine())
    return;
  int saved = errno;
  fs_fork_before(false);
  errno = saved;
}

FS_FORK_TEXT static void fs_fork_parent(void)
{
  if (fs_fork_mine())
    return;
  int saved = errno;
  fs_fork_after(FS_SOCK_FORK_PID_UNKNOWN);
  errno = saved;
}

FS_FORK_TEXT static void fs_fork_child(void)
{
  if (fs_fork_mine())
    return;
  int saved = errno;
  fs_fork_after(0);
  errno = saved;
}

__attribute__((constructor)) static void fs_preload_atfork(void)
{
  fs_proc_atfork_set(fs_fork_prepare, fs_fork_parent, fs_fork_child);
}

/* The two calls of libc's that fork inside it: the handlers above are
 * registered before the first of them (once), not at the process's first
 * socket, where a one-shot client paid for them (base/proc.h). */
FS_EXPORT int daemon(int nochdir, int noclose)
{
  fs_proc_atfork_arm(); /* errno kept */
  return FS_REAL(daemon)(nochdir, noclose);
}

FS_EXPORT pid_t forkpty(int *amaster, char *name, const struct termios *termp, const struct winsize *winp)
{
  fs_proc_atfork_arm();
  return FS_REAL(forkpty)(amaster, name, termp, winp);
}

/* DT_FINI (-Wl,-fini, preload/Makefile.include): the loader calls it at
 * every exit.  crti's _fini does nothing, and sits at the end of .text, a
 * page of its own that every preloaded process faulted in at exit; this
 * does nothing on _init's page (.text.startup, tests/t_libshape.sh). */
__attribute__((section(".text.startup"), used)) void fs_preload_fini(void)
{
}

/* A target asleep in the library, where cancellation is held off, is told
 * (engine/cancel.h). */
FS_EXPORT int pthread_cancel(pthread_t t)
{
  __atomic_store_n(&fs_cancel_seen, true, __ATOMIC_SEQ_CST);
  int rc = FS_REAL(pthread_cancel)(t);
  if (rc == 0)
    fs_cancel_note(t);
  return rc;
}

/* A change of user: the fabrics serve their rendezvous names again under
 * the new one (engine/agent.h), after a successful call that changed the
 * real and effective uids (a server that binds as root, then drops its
 * privileges for good).  A passing seteuid() (a root daemon opening a
 * file as a user, then back) changes the effective uid alone: names stay
 * as they are, or every such switch would close and bind them again. */
static int fs_setuid_done(int rc, uid_t ruid, uid_t euid)
{
  if (rc == 0 && geteuid() != euid && getuid() != ruid)
    fs_agent_creds_changed(); /* errno kept */
  return rc;
}

FS_EXPORT int setuid(uid_t uid)
{
  uid_t r = getuid(), e = geteuid();
  return fs_setuid_done(FS_REAL(setuid)(uid), r, e);
}

FS_EXPORT int setreuid(uid_t ruid, uid_t euid)
{
  uid_t r = getuid(), e = geteuid();
  return fs_setuid_done(FS_REAL(setreuid)(ruid, euid), r, e);
}

FS_EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid)
{
  uid_t r = getuid(), e = geteuid();
  return fs_setuid_done(FS_REAL(setresuid)(ruid, euid, suid), r, e);
}

/* An end without exit handlers: what exit would do for the library, it
 * does now (engine/exit.h: a fabric's last writes land, the stat table
 * goes).  The process then ends as libc's own _exit ends it, with
 * exit_group, made directly: _exit may run in a signal handler, where a
 * first dlsym of libc's could wait for the loader's lock forever. */
FS_FORK_TEXT static _Noreturn void fs_exit_now(int status)
{
  fs_exit_quick();
  for (;;) {
#if defined(__x86_64__)
    __asm__ volatile("syscall" : : "a"((long)SYS_exit_group), "D"((long)status) : "rcx", "r11", "memory");
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = SYS_exit_group;
    register long x0 __asm__("x0") = status;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8) : "memory");
#else
    (void)FS_REAL(syscall)(SYS_exit_group, status, 0, 0, 0, 0, 0);
#endif
  }
}

FS_FORK_TEXT FS_EXPORT void _exit(int status)
{
  fs_exit_now(status);
}

FS_FORK_TEXT FS_EXPORT void _Exit(int status)
{
  fs_exit_now(status);
}

FS_FORK_TEXT FS_EXPORT pid_t vfork(void)
{
  return fork();
}

/* A process about to forbid itself new threads (RLIMIT_NPROC: HAProxy's
 * workers set 0 once they run): a listening one gets its agent thread
 * first (engine/nproc.h).  glibc's setrlimit and prlimit make the system
 * call themselves, so the four names cover what libc offers. */
static void fs_rlimit_point(pid_t pid, int resource, const struct rlimit *l)
{
  if (resource == RLIMIT_NPROC && l && l->rlim_cur != RLIM_INFINITY && (pid == 0 || pid == getpid()))
    fs_nproc_limiting(); /* errno kept */
}

/* After the call: a new RLIMIT_NOFILE of ours is asked again (base/fdreg.h). */
static int fs_rlimit_done(pid_t pid, int resource, const struct rlimit *l, int rc)
{
  if (resource == RLIMIT_NOFILE && l && (pid == 0 || pid == getpid()))
    fs_fdreg_limit_changed();
  return rc;
}

FS_EXPORT int setrlimit(__rlimit_resource_t resource, const struct rlimit *l)
{
  fs_rlimit_point(0, resource, l);
  return fs_rlimit_done(0, resource, l, FS_REAL(setrlimit)(resource, l));
}

FS_EXPORT int prlimit(pid_t pid, __rlimit_resource_t resource, const struct rlimit *l, struct rlimit *old)
{
  fs_rlimit_point(pid, resource, l);
  return fs_rlimit_done(pid, resource, l, FS_REAL(prlimit)(pid, resource, l, old));
}

/* struct rlimit64 is struct rlimit where long is 64 bits (what we build for). */
_Static_assert(sizeof(struct rlimit64) == sizeof(struct rlimit), "rlimit64 is rlimit");
FS_EXPORT int setrlimit64(__rlimit_resource_t resource, const struct rlimit64 *l)
{
  return setrlimit(resource, (const struct rlimit *)l);
}

FS_EXPORT int prlimit64(pid_t pid, __rlimit_resource_t resource, const struct rlimit64 *l, struct rlimit64 *old)
{
  return prlimit(pid, resource, (const struct rlimit *)l, (struct rlimit *)old);
}

/* A process about to confine itself with a seccomp filter (sshd's pre-auth
 * child, browsers' renderers) allows the system calls its own code makes,
 * not ours (an eventfd, a wake fd added to its poll: sshd also drops
 * RLIMIT_NOFILE to 1 first, so one more fd in ppoll is EINVAL and the
 * connection dies).  Every connection goes back to plain TCP first, and
 * from then on each call goes through as the one the application made. */
FS_EXPORT int prctl(int option, ...)
{
  va_list ap;
  va_start(ap, option);
  unsigned long a = va_arg(ap, unsigned long), b = va_arg(ap, unsigned long);
  unsigned long c = va_arg(ap, unsigned long), d = va_arg(ap, unsigned long);
  va_end(ap);
  if (option == PR_SET_SECCOMP && a == SECCOMP_MODE_FILTER)
    fs_preload_confined();
  return FS_REAL(prctl)(option, a, b, c, d);
}

void fs_preload_confined(void)
{
  int saved = errno;
  fs_sock_kernel_only(FS_REASON_SANDBOX);
  fs_stat_shutdown(); /* its unlink at exit would be refused, or kill the process */
  fs_aside_forbid();  /* the filter may refuse clone and close_range */
  fs_kcopy_forbid();  /* and process_vm_readv/writev */
  errno = saved;
}

FS_FORK_TEXT static void fs_exec_point(void)
{
  /* A process that never had a socket (a shell's child on its way to its
   * program) has nothing to flush or bring back, and no errno to keep:
   * asking libc for its address faulted in a page of libc's code. */
  if (!fs_fdtab_any() && !fs_batch_tls.on)
    return;
  int saved = errno;
  fs_batch_flush();
  fs_sock_before_exec();
  errno = saved;
}

/* The calls that replace this process's image: its stat table goes with it. */
#define FS_EXEC_SELF(call)  \
  do {                      \
    fs_exec_point();        \
    fs_stat_exec(false);    \
    int rc_ = (call);       \
    fs_stat_exec(true); /* keeps errno */ \
    return rc_;             \
  } while (0)

FS_FORK_TEXT FS_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
  FS_EXEC_SELF(FS_REAL(execve)(path, argv, envp));
}

FS_FORK_TEXT FS_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
  FS_EXEC_SELF(FS_REAL(execvpe)(file, argv, envp));
}

FS_FORK_TEXT FS_EXPORT int execv(const char *path, char *const argv[])
{
  return execve(path, argv, environ);
}

FS_FORK_TEXT FS_EXPORT int execvp(const char *file, char *const argv[])
{
  return execvpe(file, argv, environ);
}

FS_FORK_TEXT FS_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
  FS_EXEC_SELF(FS_REAL(fexecve)(fd, argv, envp));
}

/* execl*: collect the variadic arguments into an argv on the stack. */
#define FS_EXECL_ARGV(first, ap, argv) \
  do { \
    size_t n__ = 1; \
    va_list c__; \
    va_copy(c__, ap); \
    while (va_arg(c__, char *) != NULL) \
      n__++; \
    va_end(c__); \
    argv = __builtin_alloca((n__ + 1) * sizeof(char *)); \
    argv[0] = (char *)(first); \
    for (size_t i__ = 1; i__ <= n__; i__++) \
      argv[i__] = va_arg(ap, char *); \
  } while (0)

FS_FORK_TEXT FS_EXPORT int execl(const char *path, const char *arg, ...)
{
  char **argv;
  va_list ap;
  va_start(ap, arg);
  FS_EXECL_ARGV(arg, ap, argv);
  va_end(ap);
  return execve(path, argv, environ);
}

FS_FORK_TEXT FS_EXPORT int execlp(const char *file, const char *arg, ...)
{
  char **argv;
  va_list ap;
  va_start(ap, arg);
  FS_EXECL_ARGV(arg, ap, argv);
  va_end(ap);
  return execvpe(file, argv, environ);
}

FS_FORK_TEXT FS_EXPORT int execle(const char *path, const char *arg, ...)
{
  char **argv;
  char **envp = NULL;
  va_list ap;
  va_start(ap, arg);
  FS_EXECL_ARGV(arg, ap, argv);
  envp = va_arg(ap, char **);
  va_end(ap);
  return execve(path, argv, envp);
}

FS_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                          const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
  fs_exec_point();
  return FS_REAL(posix_spawn)(pid, path, fa, at, argv, envp);
}

FS_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                           const posix_spawnattr_t *at, char *const argv[], char *const envp[])
{
  fs_exec_point();
  return FS_REAL(posix_spawnp)(pid, file, fa, at, argv, envp);
}

FS_EXPORT int system(const char *cmd)
{
  if (cmd != NULL)
    fs_exec_point();
  return FS_REAL(system)(cmd);
}

FS_EXPORT FILE *popen(const char *cmd, const char *mode)
{
  fs_exec_point();
  return FS_REAL(popen)(cmd, mode);
}
