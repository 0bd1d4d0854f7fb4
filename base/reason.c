#include "base/reason.h"

const char *fs_reason_name(int reason)
{
  static const char *const names[] = {
#define FS_REASON_X_STR(id, str) str,
    FS_REASONS(FS_REASON_X_STR)
#undef FS_REASON_X_STR
  };
  if (reason < 0 || reason >= FS_REASON_COUNT)
    return "unknown";
  return names[reason];
}
