/* reach_probe: whether libfabsock is loaded into this very process.
 * Prints "mapped=0|1 uid=U euid=E": t_reach runs it under `fabsock run`
 * built three ways (tests/Makefile: dynamic, static, with Go's build-id
 * section) to check that the tool's warning matches what the loader did. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef FS_REACH_GO_NOTE
/* The section Go's linker writes into every ELF: tools/reach.c takes it
 * for a Go program (a fixture; t_reach also tries a real Go program where
 * one is installed). */
__attribute__((section(".note.go.buildid"), used)) static const char fs_go_note[] = "fixture";
#endif

int main(void)
{
  FILE *f = fopen("/proc/self/maps", "r");
  char line[4096];
  int mapped = 0;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, "libfabsock"))
      mapped = 1;
  if (f)
    fclose(f);
  printf("mapped=%d uid=%u euid=%u\n", mapped, (unsigned)getuid(), (unsigned)geteuid());
  return f ? 0 : 1;
}
