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

#endif
