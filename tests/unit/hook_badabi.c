/* A hook module built for a future ABI: the loader must refuse it. */
#include <fabsock/hook.h>

static const struct fabsock_hook_ops ops = {
  .abi_version = FABSOCK_HOOK_ABI_VERSION + 1,
  .name = "future",
};

__attribute__((visibility("default")))
const struct fabsock_hook_ops *fabsock_hook_entry(void)
{
  return &ops;
}
