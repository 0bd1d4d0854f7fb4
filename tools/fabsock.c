/* fabsock: run a program under libfabsock, or list accelerated connections.
 * See man/fabsock.1. */
#include <stdio.h>
#include <string.h>

#include "tools/fabsock.h"

static void fs_tool_usage(FILE *out)
{
  fputs("Usage: fabsock run [OPTIONS] [--] PROGRAM [ARGS...]\n"
        "       fabsock stat [--json] [PID]\n"
        "       fabsock unit [OPTIONS] [UNIT]\n"
        "       fabsock -h | --help\n"
        "       fabsock --version\n"
        "\n"
        "Run PROGRAM with libfabsock preloaded, list the connections of the\n"
        "processes that run libfabsock, or print the systemd drop-in that runs a\n"
        "service with it.\n"
        "\n", out);
  fs_tool_run_usage(out);
  fputc('\n', out);
  fs_tool_stat_usage(out);
  fputc('\n', out);
  fs_tool_unit_usage(out);
  fputs("\n"
        "Exit status: 0 on success; 1 if `stat` cannot read the table directory\n"
        "or write its output; 2 on a usage error; 127 if `run` cannot execute\n"
        "PROGRAM or `run` or `unit` cannot find the library; otherwise `run` exits\n"
        "with PROGRAM's status.\n"
        "See fabsock(1).\n", out);
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fs_tool_usage(stderr);
    return FS_TOOL_EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (strcmp(cmd, "run") == 0)
    return fs_tool_run_main(argc - 1, argv + 1);
  if (strcmp(cmd, "stat") == 0)
    return fs_tool_stat_main(argc - 1, argv + 1);
  if (strcmp(cmd, "unit") == 0)
    return fs_tool_unit_main(argc - 1, argv + 1);
  if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
    fs_tool_usage(stdout);
    return FS_TOOL_EXIT_OK;
  }
  if (strcmp(cmd, "--version") == 0) {
    printf("fabsock (%s) %s\n", PACKAGE_NAME, PACKAGE_VERSION);
    return FS_TOOL_EXIT_OK;
  }
  fprintf(stderr, "fabsock: unknown command '%s'\n", cmd);
  fs_tool_usage(stderr);
  return FS_TOOL_EXIT_USAGE;
}
