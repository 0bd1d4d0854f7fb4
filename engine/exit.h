/* The process's end: a fabric's writes still in flight land first, and the
 * stat table goes (engine/exit.c).
 *
 * At exit() this runs as the library's destructor.  At _exit and _Exit
 * (interposed in preload/proc.c), where no exit handler runs, the preload
 * calls fs_exit_quick: a process that wrote its last bytes on rdma and
 * ended with _exit lost those the device had not sent yet (the kernel
 * flushes them with the queue pair; TCP would have delivered them). */
#ifndef FS_ENGINE_EXIT_H
#define FS_ENGINE_EXIT_H

/* The end without exit handlers: the same bounded wait for a fabric's
 * writes as at exit, then the stat table is unlinked.  Each only in the
 * process that made that state (fabric/fabric.h exit_pending, base/stat.h):
 * a vfork child shares its parent's memory (and the parent's other threads
 * run on), and must not poll the parent's queues or remove its table.
 * errno kept. */
void fs_exit_quick(void);

#endif
