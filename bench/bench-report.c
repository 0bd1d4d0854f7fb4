/* fabsock-bench: summaries, the human tables and the JSON output. */
#include "bench/bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

extern char **environ;

const char *bench_test_name(int test) {
  switch (test) {
  case T_PINGPONG: return "pingpong";
  case T_STREAM: return "stream";
  case T_CONNRATE: return "connrate";
  case T_SHM_SPIN: return "shm-spin";
  case T_SHM_FUTEX: return "shm-futex";
  case T_SHM_STREAM: return "shm-stream";
  default: return "?";
  }
}

const char *bench_fill_name(int fill) {
  return fill == FILL_RANDOM ? "random" : fill == FILL_TEXT ? "text" : "const";
}

/* Column and progress names of the two sides of a compare. */
const char *bench_side_name(const struct bench_opts *o, int side) {
  if (!o->lib) return side ? "again" : "plain";
  if (side == 0) return o->base_path ? "base lib" : o->base_lib ? "fabsock" : "plain";
  return o->hooks ? "fabsock+hooks" : "fabsock";
}

const char *bench_fmt_size(uint64_t size, char *buf, size_t len) {
  if (size >= (1u << 20) && size % (1u << 20) == 0)
    snprintf(buf, len, "%llu MiB", (unsigned long long)(size >> 20));
  else if (size >= 1024 && size % 1024 == 0)
    snprintf(buf, len, "%llu KiB", (unsigned long long)(size >> 10));
  else snprintf(buf, len, "%llu B", (unsigned long long)size);
  return buf;
}

static int is_lat(int test) {
  return test == T_PINGPONG || test == T_SHM_SPIN || test == T_SHM_FUTEX;
}

void bench_summarize(struct bench_item *it, int side) {
  struct bench_summary *s = &it->sum[side];
  double p50[BENCH_MAX_ROUNDS], p99[BENCH_MAX_ROUNDS], mean[BENCH_MAX_ROUNDS],
      mn[BENCH_MAX_ROUNDS], mx[BENCH_MAX_ROUNDS], cnt[BENCH_MAX_ROUNDS], rate[BENCH_MAX_ROUNDS],
      core[BENCH_MAX_ROUNDS];
  int k = 0;
  s->nok = 0;
  s->err[0] = 0;
  for (int i = 0; i < s->rounds; i++) {
    const struct bench_result *r = &it->r[side][i];
    if (!r->ok) {
      if (!s->err[0]) memcpy(s->err, r->err, sizeof s->err); /* same size, NUL-terminated */
      continue;
    }
    p50[k] = r->lat.p50_us;
    p99[k] = r->lat.p99_us;
    mean[k] = r->lat.mean_us;
    mn[k] = r->lat.min_us;
    mx[k] = r->lat.max_us;
    cnt[k] = (double)r->lat.n;
    rate[k] = r->rate;
    core[k] = r->rx_cpu > 0 ? r->bytes / r->rx_cpu / 1e9 : 0;
    k++;
  }
  s->nok = k;
  s->lat.p50_us = bench_median(p50, (size_t)k);
  s->lat.p99_us = bench_median(p99, (size_t)k);
  s->lat.mean_us = bench_median(mean, (size_t)k);
  s->lat.min_us = bench_median(mn, (size_t)k);
  s->lat.max_us = bench_median(mx, (size_t)k);
  s->lat.n = (uint64_t)bench_median(cnt, (size_t)k);
  s->rate = bench_median(rate, (size_t)k);
  s->rx_core = bench_median(core, (size_t)k);
}

static const char *fmt_us(double v, char *buf, size_t len) {
  snprintf(buf, len, v < 10 ? "%.2f" : v < 1000 ? "%.1f" : "%.0f", v);
  return buf;
}

static const char *fmt_value(const struct bench_item *it, int side, char *buf, size_t len) {
  const struct bench_summary *s = &it->sum[side];
  char a[24], b[24];
  if (s->nok < s->rounds || s->nok == 0) snprintf(buf, len, "FAILED");
  else if (T_IS_RATE(it->test)) snprintf(buf, len, "%.3f", s->rate);
  else if (it->test == T_CONNRATE) snprintf(buf, len, "%.0f", s->rate);
  else snprintf(buf, len, "%s / %s", fmt_us(s->lat.p50_us, a, sizeof a),
                fmt_us(s->lat.p99_us, b, sizeof b));
  return buf;
}

/* How much better side 1 is than side 0: > 1 is a speed-up. 0 = unknown. */
static double speedup(const struct bench_item *it, int p99) {
  const struct bench_summary *a = &it->sum[0], *b = &it->sum[1];
  if (!a->nok || !b->nok || a->nok < a->rounds || b->nok < b->rounds) return 0;
  if (is_lat(it->test)) {
    double x = p99 ? a->lat.p99_us : a->lat.p50_us, y = p99 ? b->lat.p99_us : b->lat.p50_us;
    return y > 0 ? x / y : 0;
  }
  return a->rate > 0 ? b->rate / a->rate : 0;
}

static const char *fmt_speedup(double r, char *buf, size_t len) {
  if (r <= 0) snprintf(buf, len, "-");
  else if (r >= 1) snprintf(buf, len, r >= 10 ? "x%.1f faster" : "x%.2f faster", r);
  else snprintf(buf, len, 1 / r >= 10 ? "x%.1f slower" : "x%.2f slower", 1 / r);
  return buf;
}

static const struct bench_item *find(const struct bench_item *it, int n, int test, uint64_t size) {
  for (int i = 0; i < n; i++)
    if (it[i].test == test && it[i].size == size) return &it[i];
  return NULL;
}

static const char *row_label(int test) {
  switch (test) {
  case T_PINGPONG: return "latency p50/p99 us";
  case T_STREAM: return "bandwidth GB/s";
  case T_CONNRATE: return "connect+req+close /s";
  case T_SHM_SPIN: return "raw shm floor, spin";
  case T_SHM_FUTEX: return "raw shm floor, futex";
  case T_SHM_STREAM: return "raw shm stream GB/s";
  default: return "?";
  }
}

void bench_print_compare(FILE *f, const struct bench_opts *o, const struct bench_item *it, int n) {
  const char *pre = o->lib ? bench_side_name(o, 1) : "plain again";
  const char *base = o->base_path ? "base lib" : o->base_lib ? "fabsock" : "plain TCP", *b0 = bench_side_name(o, 0);
  char vs[64];
  snprintf(vs, sizeof vs, "%s vs %s", o->lib ? bench_side_name(o, 1) : "2nd", o->lib ? b0 : "1st");
  char sz[32], v0[80], v1[80], sp[64];
  struct utsname u;
  uname(&u);
  fprintf(f, "\nfabsock-bench compare  (%s %s, %ld CPUs; median of %d round%s; same host, %s)\n",
          u.sysname, u.release, sysconf(_SC_NPROCESSORS_ONLN), o->rounds, o->rounds > 1 ? "s" : "",
          o->host ? o->host : "127.0.0.1");
  fprintf(f, "preloaded: %s", o->lib ? o->lib : "nothing (--no-lib: plain vs plain)");
  if (o->base_path) fprintf(f, " against %s", o->base_path);
  else if (o->base_lib) fprintf(f, " (both sides)");
  if (o->spin) fprintf(f, "  FABSOCK_SPIN_US=%s", o->spin);
  for (char **e = environ; *e; e++)
    if (!strncmp(*e, "FABSOCK_", 8) && strncmp(*e, "FABSOCK_LIB=", 12) &&
        strncmp(*e, "FABSOCK_BIN=", 12) && !(o->spin && !strncmp(*e, "FABSOCK_SPIN_US=", 16)) &&
        !(o->hooks && !strncmp(*e, "FABSOCK_HOOKS=", 14)))
      fprintf(f, "  %s", *e);
  if (o->hooks) fprintf(f, "\n%s: FABSOCK_HOOKS=%s", pre, o->hooks);
  if (o->cpu_server >= 0)
    fprintf(f, "\nservers on CPU %d, clients on CPU %d", o->cpu_server, o->cpu_client);
  if (o->framed || o->fill != FILL_CONST)
    fprintf(f, "\nmessages: %s%s payload", o->framed ? "len32be-framed, " : "", bench_fill_name(o->fill));
  fprintf(f, "\n\n%-22s %-8s %-19s %-19s %s\n", "test", "size", base, pre, vs);
  fprintf(f, "%-22s %-8s %-19s %-19s %s\n", "----------------------", "--------",
          "-------------------", "-------------------", "----------------");
  for (int i = 0; i < n; i++) {
    const struct bench_item *x = &it[i];
    bench_fmt_size(x->size, sz, sizeof sz);
    if (T_IS_SHM(x->test)) continue; /* below */
    fprintf(f, "%-22s %-8s %-19s %-19s %s\n", row_label(x->test), sz,
            fmt_value(x, 0, v0, sizeof v0), fmt_value(x, 1, v1, sizeof v1),
            fmt_speedup(speedup(x, 0), sp, sizeof sp));
  }
  for (int i = 0; i < n; i++) { /* the floor, with how far the preloaded side is from it */
    const struct bench_item *x = &it[i], *pp;
    if (!T_IS_SHM(x->test)) continue;
    bench_fmt_size(x->size, sz, sizeof sz);
    int rate = x->test == T_SHM_STREAM;
    pp = find(it, n, rate ? T_STREAM : T_PINGPONG, x->size);
    sp[0] = 0;
    if (pp && pp->sum[1].nok && pp->sum[1].nok == pp->sum[1].rounds && x->sum[0].nok)
      snprintf(sp, sizeof sp, rate ? "%s/raw x%.2f" : "%s/raw x%.1f", o->lib ? "fabsock" : "plain",
               rate ? pp->sum[1].rate / x->sum[0].rate : pp->sum[1].lat.p50_us / x->sum[0].lat.p50_us);
    fprintf(f, "%-22s %-8s %-19s %-19s %s\n", row_label(x->test), sz,
            fmt_value(x, 0, v0, sizeof v0), "(no sockets)", sp);
  }

  int any = 0;
  for (int i = 0; i < n; i++) {
    const struct bench_item *x = &it[i];
    if (x->test != T_PINGPONG) continue;
    if (!any++)
      fprintf(f, "\nping-pong round trip (us)  %8s %8s %8s %8s %9s   p99 speed-up\n", "p50",
              "p99", "mean", "min", "samples");
    for (int side = 0; side < 2; side++) {
      const struct bench_summary *s = &x->sum[side];
      fprintf(f, "  %-8s %-15s", side ? "" : bench_fmt_size(x->size, sz, sizeof sz),
              side ? pre : base);
      if (s->nok < s->rounds || !s->nok) fprintf(f, " FAILED: %s\n", s->err);
      else fprintf(f, " %8.2f %8.2f %8.2f %8.2f %9llu   %s\n", s->lat.p50_us, s->lat.p99_us,
                   s->lat.mean_us, s->lat.min_us, (unsigned long long)s->lat.n,
                   side ? fmt_speedup(speedup(x, 1), sp, sizeof sp) : "");
    }
  }
  any = 0;
  for (int i = 0; i < n; i++) { /* the receiving thread's CPU time */
    const struct bench_item *x = &it[i];
    if (x->test != T_STREAM) continue;
    if (!any++)
      fprintf(f, "\nstream receiver, GB/s per core  %-19s %-19s\n", base, pre);
    fprintf(f, "  %-30s", bench_fmt_size(x->size, sz, sizeof sz));
    for (int side = 0; side < 2; side++) {
      const struct bench_summary *s = &x->sum[side];
      if (s->nok < s->rounds || !s->nok) snprintf(v0, sizeof v0, "FAILED");
      else snprintf(v0, sizeof v0, "%.3f (%.0f%% busy)", s->rx_core,
                    s->rx_core > 0 ? 100 * s->rate / s->rx_core : 0.0);
      fprintf(f, " %-19s", v0);
    }
    fputc('\n', f);
  }
  for (int i = 0; i < n; i++)
    for (int side = 0; side < 2; side++)
      if (it[i].sum[side].rounds && it[i].sum[side].nok < it[i].sum[side].rounds)
        fprintf(f, "\nFAILED %s %s %s: %d of %d rounds: %s", bench_test_name(it[i].test),
                bench_fmt_size(it[i].size, sz, sizeof sz), side ? pre : b0,
                it[i].sum[side].rounds - it[i].sum[side].nok, it[i].sum[side].rounds,
                it[i].sum[side].err);
  fprintf(f, "\nlatency: round trip of one message each way, speed-up = %s/%s;"
             " bandwidth: one direction,\nGB/s = 1e9 bytes/s, speed-up = %s/%s;"
             " conn/s: connect, 64 B each way, close.\n", b0, pre, pre, b0);
  if (any)
    fprintf(f, "stream receiver: bytes / CPU time of the receiving thread (its read calls, hooks"
               " included);\nbusy = its CPU time / wall time.\n");
}

/* ------------------------------------------------------------------ JSON */

static void jstr(FILE *f, const char *s) {
  if (!s) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

/* A non-negative number, or null for "unknown" (negative or NaN). */
static void jnum(FILE *f, double v) {
  if (v >= 0) fprintf(f, "%.6g", v);
  else fputs("null", f);
}

static void json_result(FILE *f, const struct bench_result *r) {
  fprintf(f, "{\"ok\":%s,\"error\":", r->ok ? "true" : "false");
  jstr(f, r->ok ? NULL : r->err);
  if (!r->ok) {
    fputc('}', f);
    return;
  }
  if (T_IS_RATE(r->test))
    fprintf(f, ",\"gbps\":%.6g,\"bytes\":%llu,\"secs\":%.6g,\"rx_cpu_s\":%.6g}", r->rate,
            (unsigned long long)r->bytes, r->secs, r->rx_cpu);
  else if (r->test == T_CONNRATE)
    fprintf(f, ",\"conn_per_s\":%.6g,\"conns\":%llu,\"secs\":%.6g}", r->rate,
            (unsigned long long)r->count, r->secs);
  else
    fprintf(f, ",\"p50_us\":%.6g,\"p99_us\":%.6g,\"mean_us\":%.6g,\"min_us\":%.6g,"
               "\"max_us\":%.6g,\"samples\":%llu}", r->lat.p50_us, r->lat.p99_us,
            r->lat.mean_us, r->lat.min_us, r->lat.max_us, (unsigned long long)r->lat.n);
}

static void json_side(FILE *f, const struct bench_item *it, int side) {
  const struct bench_summary *s = &it->sum[side];
  fprintf(f, "{\"ok\":%s,\"rounds_ok\":%d,\"error\":", s->nok == s->rounds ? "true" : "false",
          s->nok);
  jstr(f, s->err[0] ? s->err : NULL);
  if (T_IS_RATE(it->test))
    fprintf(f, ",\"gbps\":%.6g,\"rx_gbps_per_core\":%.6g", s->rate, s->rx_core);
  else if (it->test == T_CONNRATE) fprintf(f, ",\"conn_per_s\":%.6g", s->rate);
  else fprintf(f, ",\"p50_us\":%.6g,\"p99_us\":%.6g,\"mean_us\":%.6g,\"min_us\":%.6g,"
                  "\"max_us\":%.6g,\"samples\":%llu", s->lat.p50_us, s->lat.p99_us,
               s->lat.mean_us, s->lat.min_us, s->lat.max_us, (unsigned long long)s->lat.n);
  fputs(",\"rounds\":[", f);
  for (int i = 0; i < s->rounds; i++) {
    if (i) fputc(',', f);
    json_result(f, &it->r[side][i]);
  }
  fputs("]}", f);
}

static FILE *json_open(const char *name) {
  if (!strcmp(name, "-")) return stdout;
  FILE *f = fopen(name, "w");
  if (!f) perror(name);
  return f;
}

static int json_close(FILE *f, const char *name) {
  int bad = ferror(f);
  if (f == stdout) bad |= fflush(f) != 0;
  else bad |= fclose(f) != 0;
  if (bad) fprintf(stderr, "fabsock-bench: writing %s failed\n", name);
  return bad ? -1 : 0;
}

static void json_header(FILE *f, const struct bench_opts *o, const char *mode) {
  struct utsname u;
  uname(&u);
  fprintf(f, "{\"tool\":\"fabsock-bench\",\"format\":1,\"mode\":\"%s\",\"kernel\":", mode);
  jstr(f, u.release);
  fprintf(f, ",\"cpus\":%ld,\"host\":", sysconf(_SC_NPROCESSORS_ONLN));
  jstr(f, o->host ? o->host : "127.0.0.1");
  fprintf(f, ",\"options\":{\"time\":%g,\"pp_time\":%g,\"iters\":%llu,\"warmup_iters\":%llu,"
             "\"warmup_time\":%g,\"threads\":%d,\"rounds\":%d},\"env\":{",
          o->time, o->pp_time, (unsigned long long)o->iters,
          (unsigned long long)o->warmup_iters, o->warmup_time, o->conn_threads, o->rounds);
  int k = 0;
  for (char **e = environ; *e; e++) {
    char *eq = strchr(*e, '=');
    if (strncmp(*e, "FABSOCK_", 8) || !eq) continue;
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
    fputs(k++ ? "," : "", f);
    jstr(f, name);
    fputc(':', f);
    jstr(f, eq + 1);
  }
  fputc('}', f);
}

int bench_json_compare(const struct bench_opts *o, const struct bench_item *it, int n) {
  FILE *f = json_open(o->json);
  if (!f) return -1;
  json_header(f, o, "compare");
  fputs(",\"lib\":", f);
  jstr(f, o->lib);
  fputs(",\"spin\":", f);
  jstr(f, o->spin);
  fputs(",\"hooks\":", f);
  jstr(f, o->hooks);
  fprintf(f, ",\"base\":\"%s\",\"framed\":%s,\"fill\":\"%s\",\"cpus\":", o->base_path ? "path" : o->base_lib ? "lib" : "plain",
          o->framed ? "true" : "false", bench_fill_name(o->fill));
  if (o->cpu_server >= 0) fprintf(f, "[%d,%d]", o->cpu_server, o->cpu_client);
  else fputs("null", f);
  fputs(",\"results\":[", f);
  for (int i = 0; i < n; i++) {
    const struct bench_item *x = &it[i];
    fprintf(f, "%s\n{\"test\":\"%s\",\"size\":%llu,", i ? "," : "", bench_test_name(x->test),
            (unsigned long long)x->size);
    if (T_IS_SHM(x->test)) {
      int rate = x->test == T_SHM_STREAM;
      const struct bench_item *pp = find(it, n, rate ? T_STREAM : T_PINGPONG, x->size);
      fputs("\"raw\":", f);
      json_side(f, x, 0);
      fputs(rate ? ",\"preloaded_over_raw\":" : ",\"preloaded_over_raw_p50\":", f);
      jnum(f, pp && pp->sum[1].nok && x->sum[0].nok
                  ? (rate ? pp->sum[1].rate / x->sum[0].rate : pp->sum[1].lat.p50_us / x->sum[0].lat.p50_us)
                  : -1);
      fputs("}", f);
      continue;
    }
    fputs("\"plain\":", f);
    json_side(f, x, 0);
    fputs(",\"preloaded\":", f);
    json_side(f, x, 1);
    if (is_lat(x->test)) {
      fputs(",\"speedup_p50\":", f);
      jnum(f, speedup(x, 0) > 0 ? speedup(x, 0) : -1);
      fputs(",\"speedup_p99\":", f);
      jnum(f, speedup(x, 1) > 0 ? speedup(x, 1) : -1);
    } else {
      fputs(",\"speedup\":", f);
      jnum(f, speedup(x, 0) > 0 ? speedup(x, 0) : -1);
    }
    fputs("}", f);
  }
  fputs("\n]}\n", f);
  return json_close(f, o->json);
}

/* ------------------------------------------------------------ client mode */

void bench_print_single(const struct bench_opts *o, const struct bench_result *r, int n) {
  FILE *f = o->json && !strcmp(o->json, "-") ? stderr : stdout;
  char sz[32];
  fprintf(f, "fabsock-bench client -> %s port %s\n%-22s %-8s %s\n", o->host ? o->host : "127.0.0.1",
          o->port, "test", "size", "result");
  for (int i = 0; i < n; i++) {
    fprintf(f, "%-22s %-8s ", row_label(r[i].test), bench_fmt_size(r[i].size, sz, sizeof sz));
    if (!r[i].ok) fprintf(f, "FAILED: %s\n", r[i].err);
    else if (r[i].test == T_STREAM) fprintf(f, "%.3f GB/s\n", r[i].rate);
    else if (r[i].test == T_CONNRATE) fprintf(f, "%.0f connections/s\n", r[i].rate);
    else fprintf(f, "p50 %.2f  p99 %.2f  mean %.2f  min %.2f us  (%llu round trips)\n",
                 r[i].lat.p50_us, r[i].lat.p99_us, r[i].lat.mean_us, r[i].lat.min_us,
                 (unsigned long long)r[i].lat.n);
  }
}

int bench_json_single(const struct bench_opts *o, const struct bench_result *r, int n) {
  FILE *f = json_open(o->json);
  if (!f) return -1;
  json_header(f, o, "client");
  fputs(",\"port\":", f);
  jstr(f, o->port);
  fputs(",\"results\":[", f);
  for (int i = 0; i < n; i++) {
    fprintf(f, "%s\n{\"test\":\"%s\",\"size\":%llu,\"result\":", i ? "," : "",
            bench_test_name(r[i].test), (unsigned long long)r[i].size);
    json_result(f, &r[i]);
    fputc('}', f);
  }
  fputs("\n]}\n", f);
  return json_close(f, o->json);
}
