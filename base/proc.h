/* The process's name as ps and pgrep show it, for policy rules and stat. */
#ifndef FS_BASE_PROC_H
#define FS_BASE_PROC_H

/* The base name of the path the process was executed by (the auxiliary
 * vector's AT_EXECFN: "redis-server" for the /usr/bin/redis-server symlink
 * to redis-check-rdb, "nginx" whatever nginx later writes over its argv).
 * Found once, on first use; never NULL, at most 63 bytes. */
const char *fs_proc_name(void);

#endif
