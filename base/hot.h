/* FS_HOT: small state that a process's first socket call (and any call a
 * process without sockets makes) reads or writes.
 *
 * Why: here the first touch of an anonymous page costs 10-14 us (read or
 * write), and the library's .bss is 40 pages in which such state was
 * spread over eight, each first touched by a one-shot client's first
 * socket() (redis-cli: 8 faults, about 100 us).  FS_HOT puts a variable in
 * .data instead, which lies in the page that the loader writes anyway (it
 * zeroes the start of .bss there; lazy binding writes .got.plt beside it):
 * touching it costs nothing more.  tests/t_libshape.sh checks that .data
 * still ends in the page where .bss starts.  Keep it to scalars and small
 * tables (all of .data has under 3 KiB to spare); large arrays stay in
 * .bss, where a page is paid only when used. */
#ifndef FS_BASE_HOT_H
#define FS_BASE_HOT_H

#define FS_HOT __attribute__((section(".data.fs_hot")))

/* FS_HOT_BSS: a large array whose first entries a first socket call
 * touches (the fd table's static part, indexed by fd): placed first in
 * .bss (preload/layout.ld), so that it starts in the page where .data
 * ends, which the loader writes anyway.  The low fds, a one-shot
 * client's, cost no fault of their own.  One such array. */
#define FS_HOT_BSS __attribute__((section(".bss.fs_hot")))

/* FS_FORK_TEXT: code a forked child runs before it execs or exits (the
 * fork wrapper's child side, the after-fork handlers, the exec and _exit
 * wrappers).  A child starts with none of the library's code pages mapped
 * (fork copies no page tables of file mappings), and each first fetch is
 * a fault that maps the 64 KiB around it: spread over .text this path was
 * four such faults in every child of a preloaded shell.  preload/layout.ld
 * puts every such function in one output section (with the code of a
 * one-shot client's path, which it lists by name).  Only for short
 * functions that such a child calls whatever it holds. */
#define FS_FORK_TEXT __attribute__((section(".fs_fork_text")))

#endif
