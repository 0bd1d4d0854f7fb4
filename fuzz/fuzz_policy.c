/* libFuzzer harness for the policy parser, matcher and environment overrides.
 *
 *   make fuzz-policy && mkdir -p fuzz/work &&
 *   ./fuzz/fuzz_policy -max_total_time=60 fuzz/work $(top_srcdir)/fuzz/corpus/policy
 *
 * The input is a config file.  When it parses, it is matched against queries
 * built from the input's last bytes, and its first line is tried as the value
 * of each FABSOCK_* variable. */
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_env_value[600];
static const char *fuzz_env_name;

static const char *fuzz_get(const char *name)
{
  return strcmp(name, fuzz_env_name) == 0 ? fuzz_env_value : NULL;
}

static void fuzz_queries(const struct fs_policy *p, const uint8_t *data, size_t size)
{
  static const char *const programs[] = { "", "nginx", "redis-server", "a.out", "[x]" };
  struct sockaddr_in in;
  struct sockaddr_in6 in6;
  struct fs_policy_action a;
  uint8_t raw[24] = { 0 };
  memcpy(raw, data + (size > sizeof raw ? size - sizeof raw : 0), size < sizeof raw ? size : sizeof raw);

  memset(&in, 0, sizeof in);
  in.sin_family = AF_INET;
  memcpy(&in.sin_addr, raw, 4);
  memcpy(&in.sin_port, raw + 4, 2);
  memset(&in6, 0, sizeof in6);
  in6.sin6_family = AF_INET6;
  memcpy(&in6.sin6_addr, raw + 6, 16);
  memcpy(&in6.sin6_port, raw + 22, 2);

  for (int i = 0; i < 5; i++) {
    struct fs_policy_query q = { programs[i], (enum fs_dir)(1 + (i & 1)), NULL, NULL };
    if (i & 1)
      q.local = (const struct sockaddr *)&in;
    q.remote = i & 2 ? (const struct sockaddr *)&in6 : (const struct sockaddr *)&in;
    fs_policy_match(p, &q, &a);
    if (strlen(a.hooks) >= FS_POLICY_HOOKS_MAX || fs_fabric_name(a.fabric)[0] == 'u')
      abort();
  }
  fs_policy_match(p, NULL, &a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static const char *const vars[] = { "FABSOCK_TRANSPORT", "FABSOCK_UPGRADE_BYTES",
                                      "FABSOCK_SPIN_US", "FABSOCK_BUSY_POLL", "FABSOCK_TIMEOUT_MS",
                                      "FABSOCK_ANY_UID", "FABSOCK_HOOKS" };
  struct fs_policy *p = NULL;
  char err[256];
  int rc = fs_policy_parse((const char *)data, size, "fuzz.conf", &p, err, sizeof err);
  if (rc < 0) {
    if (p != NULL || strncmp(err, "fuzz.conf:", 10) != 0)
      abort();
    return 0;
  }
  fuzz_queries(p, data, size);

  {
    const uint8_t *nl = memchr(data, '\n', size);
    size_t n = nl != NULL ? (size_t)(nl - data) : size;
    if (n >= sizeof fuzz_env_value)
      n = sizeof fuzz_env_value - 1;
    memcpy(fuzz_env_value, data, n);
    fuzz_env_value[n] = '\0';
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
      fuzz_env_name = vars[i];
      if (fs_policy_apply_env(p, fuzz_get, err, sizeof err) < 0 &&
          strncmp(err, vars[i], strlen(vars[i])) != 0)
        abort();
    }
    fuzz_queries(p, data, size);
  }
  fs_policy_free(p);
  return 0;
}
