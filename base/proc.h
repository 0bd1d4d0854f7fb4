/* The process's name as ps and pgrep show it, for policy rules and stat;
 * and whether another process holds a socket. */
#ifndef FS_BASE_PROC_H
#define FS_BASE_PROC_H

/* The base name of the path the process was executed by (the auxiliary
 * vector's AT_EXECFN: "redis-server" for the /usr/bin/redis-server symlink
 * to redis-check-rdb, "nginx" whatever nginx later writes over its argv).
 * Found once, on first use; never NULL, at most 63 bytes. */
const char *fs_proc_name(void);

/* Read a small file (a /proc entry) into buf, NUL-terminated: its length
 * (> 0), or 0 when it cannot be read or is empty.  errno is kept. */
size_t fs_proc_read(const char *path, char *buf, size_t len);

/* How many threads the process has now (/proc/self/task's link count is
 * two plus that), or -1 if it cannot be told. */
int fs_proc_threads(void);

/* Does process pid hold socket inode among its descriptors
 * (/proc/PID/fd/N -> "socket:[inode]")?  1 yes, 0 no (or no such
 * process), -errno when it cannot be told (another user's process). */
int fs_proc_holds_socket(int pid, unsigned long inode);

#endif
