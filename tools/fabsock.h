/* The `fabsock` command: shared declarations of its subcommands.
 *
 * The tool never links libfscore (it must run where the library's
 * dependencies are absent); it compiles base/reason.c and reads
 * base/stat.h's file format on its own. */
#ifndef FS_TOOLS_FABSOCK_H
#define FS_TOOLS_FABSOCK_H

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

void fs_tool_run_usage(FILE *out);
void fs_tool_stat_usage(FILE *out);

#endif
