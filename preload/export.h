/* Marks an interposed libc name for export (everything else is hidden). */
#ifndef FS_PRELOAD_EXPORT_H
#define FS_PRELOAD_EXPORT_H
#define FS_EXPORT __attribute__((visibility("default")))
#endif
