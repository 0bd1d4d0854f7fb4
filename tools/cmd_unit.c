/* `fabsock unit`: the systemd drop-in that runs a service under libfabsock.
 *
 * A service started by systemd never sees an LD_PRELOAD typed in a shell:
 * its environment comes from its unit.  This prints a drop-in (a [Service]
 * section with Environment= lines) for /etc/systemd/system/UNIT.d/, the
 * same environment `fabsock run` would give the program. */
#include <stdio.h>
#include <string.h>

#include "tools/fabsock.h"

void fs_tool_unit_usage(FILE *out)
{
  fputs("fabsock unit [OPTIONS] [UNIT]\n"
        "  Print a systemd drop-in that runs UNIT (a service) with libfabsock\n"
        "  preloaded: save it as /etc/systemd/system/UNIT.d/fabsock.conf, then\n"
        "  systemctl daemon-reload and restart UNIT.  The options are run's\n"
        "  (--transport, --config, --log); the library is found as for run.\n",
        out);
}

/* One Environment= line, quoted for systemd: the assignment in double
 * quotes, with \ and " escaped, and % doubled (unit specifiers). */
static void fs_tool_unit_env(const char *name, const char *value)
{
  fputs("Environment=\"", stdout);
  for (const char *p = name; *p; p++)
    putchar(*p);
  putchar('=');
  for (const char *p = value; *p; p++) {
    if (*p == '\\' || *p == '"')
      putchar('\\');
    if (*p == '%')
      putchar('%');
    putchar(*p);
  }
  fputs("\"\n", stdout);
}

int fs_tool_unit_main(int argc, char **argv)
{
  struct fs_tool_env e;
  int rc = fs_tool_env_parse(argc, argv, "unit", &e);
  if (rc == FS_TOOL_HELP) {
    fs_tool_unit_usage(stdout);
    return FS_TOOL_EXIT_OK;
  }
  if (rc != FS_TOOL_PARSED)
    return rc;
  if (argc - e.optind > 1) {
    fprintf(stderr, "fabsock unit: one UNIT at most\nTry 'fabsock unit --help'.\n");
    return FS_TOOL_EXIT_USAGE;
  }
  const char *unit = e.optind < argc ? argv[e.optind] : "UNIT.service";
  if (strpbrk(unit, "/\n") != NULL) {
    fprintf(stderr, "fabsock unit: %s: not a unit name\n", unit);
    return FS_TOOL_EXIT_USAGE;
  }
  printf("# libfabsock for %s: save as /etc/systemd/system/%s.d/fabsock.conf, then\n"
         "#   systemctl daemon-reload && systemctl restart %s\n"
         "[Service]\n",
         unit, unit, unit);
  fs_tool_unit_env("LD_PRELOAD", e.lib);
  if (e.transport)
    fs_tool_unit_env("FABSOCK_TRANSPORT", e.transport);
  if (e.config)
    fs_tool_unit_env("FABSOCK_CONFIG", e.config_abs);
  if (e.log)
    fs_tool_unit_env("FABSOCK_LOG", e.log);
  return fflush(stdout) == 0 && !ferror(stdout) ? FS_TOOL_EXIT_OK : FS_TOOL_EXIT_FAIL;
}
