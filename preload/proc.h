/* Process events (preload/proc.c). */
#ifndef FS_PRELOAD_PROC_H
#define FS_PRELOAD_PROC_H

/* The process is about to install a seccomp filter (prctl, or
 * syscall(SYS_seccomp)): from now on it keeps plain TCP and the library
 * makes no system call of its own on its sockets.  errno is left alone. */
void fs_preload_confined(void);

/* The library's DT_FINI (-Wl,-fini): nothing, on _init's page. */
void fs_preload_fini(void);

#endif
