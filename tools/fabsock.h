/* The `fabsock` command: shared declarations of its subcommands.
 *
 * The tool never links libfscore (it must run where the library's
 * dependencies are absent); it compiles base/reason.c and reads
 * base/stat.h's file format on its own. */
#ifndef FS_TOOLS_FABSOCK_H
#define FS_TOOLS_FABSOCK_H

#include <limits.h>
#include <stdio.h>

/* Exit statuses (fabsock(1), EXIT STATUS). */
#define FS_TOOL_EXIT_OK 0
#define FS_TOOL_EXIT_FAIL 1
#define FS_TOOL_EXIT_USAGE 2
#define FS_TOOL_EXIT_NOEXEC 127

/* argv[0] is the subcommand name; each returns an exit status (run returns
 * only on failure). */
int fs_tool_run_main(int argc, char **argv);
int fs_tool_stat_main(int argc, char **argv);
int fs_tool_unit_main(int argc, char **argv);

void fs_tool_run_usage(FILE *out);
void fs_tool_stat_usage(FILE *out);
void fs_tool_unit_usage(FILE *out);

/* The environment options `run` and `unit` share (--transport, --config,
 * --log) and the library they preload. */
struct fs_tool_env {
  const char *transport, *config, *log; /* NULL: not given */
  char config_abs[PATH_MAX];            /* config's absolute path */
  char lib[PATH_MAX];                   /* the library's absolute path */
  int optind;                           /* first argument after the options */
};

#define FS_TOOL_PARSED (-1) /* options good: go on */
#define FS_TOOL_HELP (-2)   /* --help asked for */

/* Parse argv (argv[0] = cmd, the subcommand) into *e, check the values and
 * find the library.  FS_TOOL_PARSED, FS_TOOL_HELP, or an exit status after
 * a message on stderr. */
int fs_tool_env_parse(int argc, char **argv, const char *cmd, struct fs_tool_env *e);

/* Connected rows whose own address their process has not learned yet
 * (lport 0), filled from /proc/PID (tools/procnet.c); how many are now
 * known. */
struct fs_stat_conn;
size_t fs_tool_fill_local(int pid, struct fs_stat_conn *const *rows, size_t n);

#endif
