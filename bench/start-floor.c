/* start-floor: an empty library, preloaded by bench/start-cost.sh beside
 * libfabsock: what LD_PRELOAD costs a process start by itself (the loader
 * opens, maps and relocates one more object, and every symbol lookup of
 * the process looks in it first), the floor under what libfabsock adds. */
int fs_start_floor_marker;
