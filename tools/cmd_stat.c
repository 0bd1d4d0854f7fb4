/* `fabsock stat`: read every process's table (base/stat.h) and print its
 * connections as a table or as JSON.  Tables of dead processes (or of a
 * reused pid) are removed when they belong to us. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/reason.h"
#include "base/stat.h"
#include "tools/fabsock.h"

/* Local copies of the enum names (engine/conn.h, policy/policy.h): the tool
 * does not link the library.  Values are part of the stat file format. */
static const char *fs_tool_state_name(int s)
{
  static const char *const names[] = {
    "passthrough", "tcp", "upgrading", "fabric", "downgrading", "listen", "unconnected", "closed",
  };
  return s >= 0 && s < (int)(sizeof names / sizeof names[0]) ? names[s] : "unknown";
}

static const char *fs_tool_fabric_name(int f)
{
  static const char *const names[] = { "auto", "rdma", "shm", "tcp" };
  return f >= 0 && f < (int)(sizeof names / sizeof names[0]) ? names[f] : "unknown";
}

static const char *fs_tool_dir_name(int d)
{
  return d == 1 ? "connect" : d == 2 ? "accept" : NULL;
}

void fs_tool_stat_usage(FILE *out)
{
  fputs("fabsock stat [--json] [PID]\n"
        "  List the connections of every process running libfabsock (only PID's if\n"
        "  given): PID PROGRAM FD STATE FABRIC LOCAL PEER TX RX TXMSG RXMSG REASON,\n"
        "  then how many connections each process has closed, by the fabric that\n"
        "  carried some of their data (SHM, RDMA; TCP: none did).  An accepted\n"
        "  connection still pending (or rejected: the peer gave its channel up)\n"
        "  whose connecting end (in another table) went no further than TCP\n"
        "  shows that end's reason as peer:REASON.\n"
        "  Tables are read from $FABSOCK_STATDIR, default /dev/shm; those of\n"
        "  exited processes are removed when they belong to the caller.  A\n"
        "  process is listed once it listens or accepts, or one of its\n"
        "  connections tries to upgrade or is kept on TCP for a reason.\n"
        "  --json          print one JSON object instead of a table\n"
        "  -h, --help      show this help\n",
        out);
}

/* One connection, formatted. */
struct fs_tool_row {
  int pid;
  char program[64];      /* sanitized, for the table */
  struct fs_stat_conn c;
  uint8_t peer_reason;   /* a pending or rejected accepted end: its peer's settled reason, else 0 */
  char laddr[INET6_ADDRSTRLEN], paddr[INET6_ADDRSTRLEN]; /* "" when unset */
  char local[INET6_ADDRSTRLEN + 10], peer[INET6_ADDRSTRLEN + 10];
};

/* A process's table: its header's fields and where its rows are. */
struct fs_tool_proc {
  int pid;
  bool shown;          /* listed (every process, or the PID asked for) */
  char program[64];    /* as the table has it (JSON escapes it) */
  uint64_t start_ns;
  uint64_t closed[4];  /* by enum fs_fabric: [1] rdma, [2] shm, [3] tcp */
  size_t first, nrows; /* its connections in rows[] */
};

/* Every table is read before anything is printed: an accepted end's peer
 * may be in any of them (fs_tool_peer_reasons). */
struct fs_tool_stat {
  bool json;
  struct fs_tool_row *rows;
  size_t nrows, cap;
  struct fs_tool_proc *procs;
  size_t nprocs, pcap;
};

/* The program name is untrusted bytes: keep it printable for the table. */
static void fs_tool_sanitize(char *s)
{
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f || *s == ' ')
      *s = '?';
}

static void fs_tool_json_str(const char *s)
{
  putchar('"');
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    unsigned char ch = *p;
    if (ch == '"' || ch == '\\') {
      printf("\\%c", ch);
      p++;
    } else if (ch < 0x20 || ch == 0x7f) {
      printf("\\u%04x", ch);
      p++;
    } else if (ch < 0x80) {
      putchar(ch);
      p++;
    } else {
      /* Copy a well-formed UTF-8 sequence, replace anything else. */
      int n = ch >= 0xf0 && ch <= 0xf4 ? 4 : ch >= 0xe0 ? 3 : ch >= 0xc2 && ch < 0xe0 ? 2 : 0;
      int ok = n > 0;
      for (int i = 1; ok && i < n; i++)
        ok = (p[i] & 0xc0) == 0x80;
      if (ok && n == 3 && ((ch == 0xe0 && p[1] < 0xa0) || (ch == 0xed && p[1] >= 0xa0)))
        ok = 0;
      if (ok && n == 4 && ((ch == 0xf0 && p[1] < 0x90) || (ch == 0xf4 && p[1] >= 0x90)))
        ok = 0;
      if (ok) {
        fwrite(p, 1, (size_t)n, stdout);
        p += n;
      } else {
        fputs("\\ufffd", stdout);
        p++;
      }
    }
  }
  putchar('"');
}

/* "a.b.c.d" / "v6" into addr and "a.b.c.d:port" / "[v6]:port" into full;
 * both "" for an unset address (no family, or zero address and port). */
static void fs_tool_addr(int family, const uint8_t *a, uint16_t port, char *addr, char *full, size_t flen)
{
  static const uint8_t zero[16];
  addr[0] = full[0] = '\0';
  int af = family == AF_INET ? AF_INET : family == AF_INET6 ? AF_INET6 : 0;
  if (af == 0 || (port == 0 && memcmp(a, zero, af == AF_INET ? 4 : 16) == 0))
    return;
  if (inet_ntop(af, a, addr, INET6_ADDRSTRLEN) == NULL) {
    addr[0] = '\0';
    return;
  }
  snprintf(full, flen, af == AF_INET ? "%s:%u" : "[%s]:%u", addr, (unsigned)port);
}

/* starttime (field 22) of /proc/PID/stat, 0 if unknown; *state gets field 3
 * ('Z' for a zombie), or 0. */
static uint64_t fs_tool_proc_start(int pid, char *state)
{
  char path[64], buf[1024];
  *state = 0;
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (p != NULL && p[1] == ' ')
    *state = p[2];
  for (int field = 2; p != NULL && field < 22; field++)
    p = strchr(p + 1, ' ');
  return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* Does process pid (starttime ps ticks, 0 unknown) differ from the one
 * that made table h?  By the starttime it recorded, else (a forked child's
 * table) by its boot time at creation: its owner had started by then, so a
 * process that started later is another one (CLOCK_BOOTTIME never steps). */
static bool fs_tool_pid_reused(uint64_t ps, const struct fs_stat_header *h)
{
  if (ps == 0)
    return false;
  if (h->proc_start != 0)
    return ps != h->proc_start;
  long hz = sysconf(_SC_CLK_TCK);
  if (h->boot_ns == 0 || hz <= 0)
    return false;
  /* starttime is truncated to ticks: a later start shows from the next tick. */
  return ps * (1000000000u / (uint64_t)hz) > h->boot_ns;
}

/* A zombie has exited: its table is as stale as a dead process's. */
static bool fs_tool_alive(int pid)
{
  char state;
  if (kill(pid, 0) < 0 && errno != EPERM)
    return false;
  fs_tool_proc_start(pid, &state);
  return state != 'Z' && state != 'X';
}

static void fs_tool_remove_stale(const char *path, const struct stat *st)
{
  if (st->st_uid == geteuid())
    unlink(path);
}

/* arr (n elements of size elem in use, *cap allocated) with room for one
 * more: arr itself, a larger copy (*cap updated), or NULL (arr untouched). */
static void *fs_tool_room(void *arr, size_t *cap, size_t n, size_t elem)
{
  if (n < *cap)
    return arr;
  size_t c = *cap ? *cap * 2 : 16;
  void *p = realloc(arr, c * elem);
  if (p != NULL)
    *cap = c;
  return p;
}

static int fs_tool_add_row(struct fs_tool_stat *S, const struct fs_tool_row *r)
{
  struct fs_tool_row *rows = fs_tool_room(S->rows, &S->cap, S->nrows, sizeof *rows);
  if (rows == NULL)
    return -ENOMEM;
  S->rows = rows;
  S->rows[S->nrows++] = *r;
  return 0;
}

static void fs_tool_json_conn(const struct fs_tool_row *r, bool first)
{
  const struct fs_stat_conn *c = &r->c;
  printf("%s{\"fd\":%d,\"state\":", first ? "" : ",", (int)c->fd);
  fs_tool_json_str(c->listening ? "listen" : fs_tool_state_name(c->state));
  printf(",\"fabric\":");
  fs_tool_json_str(fs_tool_fabric_name(c->fabric));
  printf(",\"reason\":");
  fs_tool_json_str(fs_reason_name(c->reason));
  printf(",\"reason_code\":%u,\"peer_reason\":", (unsigned)c->reason);
  if (r->peer_reason)
    fs_tool_json_str(fs_reason_name(r->peer_reason));
  else
    fputs("null", stdout);
  printf(",\"dir\":");
  const char *dir = fs_tool_dir_name(c->dir);
  if (dir)
    fs_tool_json_str(dir);
  else
    fputs("null", stdout);
  printf(",\"listening\":%s,\"family\":%s", c->listening ? "true" : "false",
         c->family == AF_INET ? "\"inet\"" : c->family == AF_INET6 ? "\"inet6\"" : "null");
  const char *names[2][3] = { { "local", "local_addr", "local_port" }, { "peer", "peer_addr", "peer_port" } };
  const char *vals[2][2] = { { r->local, r->laddr }, { r->peer, r->paddr } };
  unsigned ports[2] = { c->lport, c->pport };
  for (int i = 0; i < 2; i++) {
    for (int j = 0; j < 2; j++) {
      printf(",\"%s\":", names[i][j]);
      if (vals[i][j][0])
        fs_tool_json_str(vals[i][j]);
      else
        fputs("null", stdout);
    }
    printf(",\"%s\":%u", names[i][2], ports[i]);
  }
  printf(",\"tx_bytes\":%" PRIu64 ",\"rx_bytes\":%" PRIu64 ",\"tx_msgs\":%" PRIu64
         ",\"rx_msgs\":%" PRIu64 ",\"fabric_tx_bytes\":%" PRIu64 ",\"fabric_rx_bytes\":%" PRIu64
         ",\"resumes\":%u}",
         c->tx_bytes, c->rx_bytes, c->tx_msgs, c->rx_msgs, c->fabric_tx, c->fabric_rx, (unsigned)c->resumes);
}

static struct fs_tool_proc *fs_tool_add_proc(struct fs_tool_stat *S)
{
  struct fs_tool_proc *all = fs_tool_room(S->procs, &S->pcap, S->nprocs, sizeof *all);
  if (all == NULL)
    return NULL;
  S->procs = all;
  return &S->procs[S->nprocs++];
}

/* p's connected rows that leave out their own address (lport 0: a
 * connection learns it when it upgrades), from /proc; re-rendered. */
static void fs_tool_proc_locals(struct fs_tool_stat *S, const struct fs_tool_proc *p)
{
  struct fs_stat_conn **want = malloc((p->nrows ? p->nrows : 1) * sizeof *want);
  size_t n = 0;
  if (want == NULL)
    return;
  for (size_t i = p->first; i < p->first + p->nrows; i++) {
    struct fs_tool_row *r = &S->rows[i];
    if (r->c.dir != 0 && !r->c.listening && r->c.lport == 0 && r->c.pport != 0)
      want[n++] = &r->c;
  }
  if (n > 0 && fs_tool_fill_local(p->pid, want, n) > 0)
    for (size_t i = p->first; i < p->first + p->nrows; i++) {
      struct fs_tool_row *r = &S->rows[i];
      fs_tool_addr(r->c.family, r->c.laddr, r->c.lport, r->laddr, r->local, sizeof r->local);
    }
  free(want);
}

/* Read one table file into S: a process and its live connections.  0, or
 * -ENOMEM (what was read of this table is left out). */
static int fs_tool_stat_file(struct fs_tool_stat *S, const char *dir, int pid, bool shown)
{
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/fabsock.%d.stat", dir, pid) >= (int)sizeof path)
    return 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return 0;
  struct stat st;
  struct fs_stat_header h;
  int rc = 0;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
    goto out;
  if (!fs_tool_alive(pid)) {
    fs_tool_remove_stale(path, &st);
    goto out;
  }
  /* A header without magic may be half written by a live process: skip. */
  if ((size_t)st.st_size < sizeof h || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
      h.magic != FS_STAT_MAGIC || h.version != FS_STAT_VERSION || h.pid != pid)
    goto out;
  char state;
  uint64_t ps = fs_tool_proc_start(pid, &state);
  if (fs_tool_pid_reused(ps, &h)) {
    fs_tool_remove_stale(path, &st); /* the pid now belongs to another process */
    goto out;
  }
  /* Read, never mapped: a table's owner (any user) may truncate it under
   * us, and a mapped page past the end is SIGBUS, which would end `fabsock
   * stat` for everyone.  A row read while its owner rewrites it may mix
   * two states of it: what a display can live with. */
  size_t nslots = h.nslots < FS_STAT_SLOTS ? h.nslots : FS_STAT_SLOTS;
  size_t n = h.hi_water < nslots ? h.hi_water : nslots;
  struct fs_stat_conn slots[64];

  struct fs_tool_proc *p = fs_tool_add_proc(S);
  if (p == NULL) {
    rc = -ENOMEM;
    goto out;
  }
  p->pid = pid;
  p->shown = shown;
  memcpy(p->program, h.program, sizeof p->program - 1);
  p->program[sizeof p->program - 1] = '\0';
  p->start_ns = h.start_ns;
  for (int k = 0; k < 4; k++)
    p->closed[k] = h.closed[k];
  p->first = S->nrows;
  p->nrows = 0;
  struct fs_tool_row r;
  memset(&r, 0, sizeof r);
  r.pid = pid;
  memcpy(r.program, p->program, sizeof r.program);
  fs_tool_sanitize(r.program);
  for (size_t i = 0, got = 0; i < n; i++) {
    if (i % 64 == 0) { /* the next 64 rows, or as many as the file still has */
      size_t k = n - i < 64 ? n - i : 64;
      ssize_t b = pread(fd, slots, k * sizeof slots[0], (off_t)(sizeof h + i * sizeof slots[0]));
      got = b > 0 ? (size_t)b / sizeof slots[0] : 0;
    }
    if (i % 64 >= got)
      break; /* the file ends here now */
    if (slots[i % 64].used != 1)
      continue;
    memcpy(&r.c, &slots[i % 64], sizeof r.c);
    fs_tool_addr(r.c.family, r.c.laddr, r.c.lport, r.laddr, r.local, sizeof r.local);
    fs_tool_addr(r.c.family, r.c.paddr, r.c.pport, r.paddr, r.peer, sizeof r.peer);
    if ((rc = fs_tool_add_row(S, &r)) < 0) {
      S->nrows = p->first;
      S->nprocs--;
      break;
    }
    p->nrows++;
  }
  if (rc >= 0)
    fs_tool_proc_locals(S, p);
out:
  close(fd);
  return rc;
}

/* ---- an accepted end's peer ------------------------------------------------
 * The connecting end alone asks for the upgrade: when it gives up for good
 * (it forked and shares the socket, a rule or FABSOCK_TRANSPORT=tcp, it
 * exec'd), the accepted end has nothing to learn it from and reads
 * `pending` for good.  When the connecting end runs libfabsock on this host
 * its row is in another table, its addresses reversed: the accepted end is
 * shown with that end's reason.  Nothing is sent for it, and nothing in the
 * data path pays for it.  Both ends' addresses are compared in IPv6 form (a
 * dual-stack listener's ::ffff:a.b.c.d against an AF_INET client). */
struct fs_tool_key {
  uint8_t l[16], p[16];
  uint16_t lport, pport;
  size_t row;
};

static void fs_tool_v6(int family, const uint8_t *in, uint8_t out[16])
{
  static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
  if (family == AF_INET) {
    memcpy(out, mapped, 12);
    memcpy(out + 12, in, 4);
  } else {
    memcpy(out, in, 16);
  }
}

static int fs_tool_key_cmp(const void *a, const void *b)
{
  const struct fs_tool_key *x = a, *y = b;
  int d = memcmp(x->l, y->l, 16);
  if (d == 0)
    d = memcmp(x->p, y->p, 16);
  if (d == 0)
    d = (x->lport > y->lport) - (x->lport < y->lport);
  if (d == 0)
    d = (x->pport > y->pport) - (x->pport < y->pport);
  return d;
}

static bool fs_tool_connected(const struct fs_stat_conn *c)
{
  return !c->listening && (c->family == AF_INET || c->family == AF_INET6) && c->lport != 0 && c->pport != 0;
}

/* A reason that says the end went no further than TCP for good. */
static bool fs_tool_settled(const struct fs_stat_conn *c)
{
  return (c->state == 0 || c->state == 1) && c->reason != FS_REASON_NONE && c->reason != FS_REASON_PENDING &&
         c->reason < FS_REASON_COUNT;
}

static void fs_tool_peer_reasons(struct fs_tool_stat *S)
{
  struct fs_tool_key *keys = malloc((S->nrows ? S->nrows : 1) * sizeof *keys);
  if (keys == NULL)
    return; /* shown as the tables have it */
  size_t n = 0;
  for (size_t i = 0; i < S->nrows; i++) {
    const struct fs_stat_conn *c = &S->rows[i].c;
    if (!fs_tool_connected(c) || !fs_tool_settled(c))
      continue;
    fs_tool_v6(c->family, c->laddr, keys[n].l);
    fs_tool_v6(c->family, c->paddr, keys[n].p);
    keys[n].lport = c->lport;
    keys[n].pport = c->pport;
    keys[n++].row = i;
  }
  if (n > 1)
    qsort(keys, n, sizeof *keys, fs_tool_key_cmp);
  for (size_t i = 0; n && i < S->nrows; i++) {
    struct fs_tool_row *r = &S->rows[i];
    const struct fs_stat_conn *c = &r->c;
    if (c->dir != 2 || c->state != 1 || (c->reason != FS_REASON_PENDING && c->reason != FS_REASON_REJECTED) ||
        !fs_tool_connected(c))
      continue;
    struct fs_tool_key want; /* the peer's view: our addresses reversed */
    fs_tool_v6(c->family, c->paddr, want.l);
    fs_tool_v6(c->family, c->laddr, want.p);
    want.lport = c->pport;
    want.pport = c->lport;
    size_t lo = 0, hi = n;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (fs_tool_key_cmp(&keys[mid], &want) < 0)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (; lo < n && fs_tool_key_cmp(&keys[lo], &want) == 0; lo++)
      if (S->rows[keys[lo].row].pid != r->pid) {
        r->peer_reason = S->rows[keys[lo].row].c.reason;
        break;
      }
  }
  free(keys);
}

static void fs_tool_print_json(const struct fs_tool_stat *S)
{
  bool firstp = true;
  fputs("{\"processes\":[", stdout);
  for (size_t i = 0; i < S->nprocs; i++) {
    const struct fs_tool_proc *p = &S->procs[i];
    if (!p->shown)
      continue;
    printf("%s{\"pid\":%d,\"program\":", firstp ? "" : ",", p->pid);
    fs_tool_json_str(p->program);
    printf(",\"start_ns\":%" PRIu64 ",\"closed\":{", p->start_ns);
    for (int k = 1; k < 4; k++) /* rdma, shm, tcp */
      printf("%s\"%s\":%" PRIu64, k > 1 ? "," : "", fs_tool_fabric_name(k), p->closed[k]);
    fputs("},\"connections\":[", stdout);
    for (size_t j = 0; j < p->nrows; j++)
      fs_tool_json_conn(&S->rows[p->first + j], j == 0);
    fputs("]}", stdout);
    firstp = false;
  }
  fputs("]}\n", stdout);
}

#define FS_TOOL_NCOLS 12
#define FS_TOOL_CELL 72

/* Column k of row r (NULL: the heading) into cell. */
static const char *fs_tool_cell(const struct fs_tool_row *r, int k, char *cell)
{
  static const char *const head[FS_TOOL_NCOLS] = {
    "PID", "PROGRAM", "FD", "STATE", "FABRIC", "LOCAL", "PEER", "TX", "RX", "TXMSG", "RXMSG", "REASON",
  };
  if (r == NULL)
    return head[k];
  const struct fs_stat_conn *c = &r->c;
  const uint64_t counters[4] = { c->tx_bytes, c->rx_bytes, c->tx_msgs, c->rx_msgs };
  switch (k) {
  case 0: snprintf(cell, FS_TOOL_CELL, "%d", r->pid); return cell;
  case 1: return r->program;
  case 2: snprintf(cell, FS_TOOL_CELL, "%d", (int)c->fd); return cell;
  case 3: return c->listening ? "listen" : fs_tool_state_name(c->state);
  case 4:
    if (c->resumes == 0)
      return fs_tool_fabric_name(c->fabric);
    /* A channel that survived a path failure says so where its fabric is. */
    snprintf(cell, FS_TOOL_CELL, "%s(resumed %u)", fs_tool_fabric_name(c->fabric), (unsigned)c->resumes);
    return cell;
  case 5: return r->local[0] ? r->local : "-";
  case 6: return r->peer[0] ? r->peer : "-";
  case 7: case 8: case 9: case 10:
    snprintf(cell, FS_TOOL_CELL, "%" PRIu64, counters[k - 7]);
    return cell;
  default:
    if (r->peer_reason == 0)
      return fs_reason_name(c->reason);
    snprintf(cell, FS_TOOL_CELL, "peer:%s", fs_reason_name(r->peer_reason));
    return cell;
  }
}

/* Two passes over the rows: column widths, then the lines. */
static void fs_tool_print_table(const struct fs_tool_stat *S)
{
  /* Numbers are right-aligned, words left-aligned. */
  static const bool right[FS_TOOL_NCOLS] = { 1, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0 };
  char cell[FS_TOOL_CELL];
  int width[FS_TOOL_NCOLS] = { 0 };
  for (size_t i = 0; i <= S->nrows; i++)
    for (int k = 0; k < FS_TOOL_NCOLS; k++) {
      int w = (int)strlen(fs_tool_cell(i ? &S->rows[i - 1] : NULL, k, cell));
      if (w > width[k])
        width[k] = w;
    }
  for (size_t i = 0; i <= S->nrows; i++)
    for (int k = 0; k < FS_TOOL_NCOLS; k++) {
      const char *v = fs_tool_cell(i ? &S->rows[i - 1] : NULL, k, cell);
      if (k == FS_TOOL_NCOLS - 1)
        printf("%s\n", v);
      else
        printf(right[k] ? "%*s  " : "%-*s  ", width[k], v);
    }
}

/* After a blank line, the connections each process has closed, by the
 * fabric that carried some of their data: a short connection is seldom
 * there when stat looks, but its process's counts are. */
/* A process the footer lists: shown, and it has closed some connection. */
static bool fs_tool_in_footer(const struct fs_tool_proc *p)
{
  return p->shown && (p->closed[1] | p->closed[2] | p->closed[3]) != 0;
}

static void fs_tool_print_closed(const struct fs_tool_stat *S)
{
  int wpid = 3, wprog = 7;
  bool any = false;
  for (size_t i = 0; i < S->nprocs; i++) {
    const struct fs_tool_proc *p = &S->procs[i];
    if (!fs_tool_in_footer(p))
      continue;
    char num[16];
    int w = snprintf(num, sizeof num, "%d", p->pid);
    if (w > wpid)
      wpid = w;
    if ((int)strlen(p->program) > wprog)
      wprog = (int)strlen(p->program);
    any = true;
  }
  if (!any)
    return;
  printf("\nclosed connections, by the fabric that carried their data:\n%*s  %-*s  %10s  %10s  %10s\n", wpid, "PID",
         wprog, "PROGRAM", "SHM", "RDMA", "TCP");
  for (size_t i = 0; i < S->nprocs; i++) {
    const struct fs_tool_proc *p = &S->procs[i];
    if (!fs_tool_in_footer(p))
      continue;
    char program[64];
    memcpy(program, p->program, sizeof program);
    fs_tool_sanitize(program);
    printf("%*d  %-*s  %10" PRIu64 "  %10" PRIu64 "  %10" PRIu64 "\n", wpid, p->pid, wprog, program, p->closed[2],
           p->closed[1], p->closed[3]);
  }
}

/* Only the rows of the processes shown, in order (the others were read
 * for their peers' sake). */
static void fs_tool_keep_shown(struct fs_tool_stat *S)
{
  size_t n = 0;
  for (size_t i = 0; i < S->nprocs; i++) {
    struct fs_tool_proc *p = &S->procs[i];
    if (!p->shown)
      continue;
    memmove(&S->rows[n], &S->rows[p->first], p->nrows * sizeof *S->rows);
    p->first = n;
    n += p->nrows;
  }
  S->nrows = n;
}

static int fs_tool_cmp_int(const void *a, const void *b)
{
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* pid from "fabsock.<pid>.stat", or 0. */
static int fs_tool_parse_name(const char *name)
{
  if (strncmp(name, "fabsock.", 8) != 0 || name[8] < '1' || name[8] > '9')
    return 0;
  char *end;
  errno = 0;
  long pid = strtol(name + 8, &end, 10);
  if (errno != 0 || pid <= 0 || pid > INT_MAX || strcmp(end, ".stat") != 0)
    return 0;
  return (int)pid;
}

int fs_tool_stat_main(int argc, char **argv)
{
  static const struct option opts[] = {
    { "json", no_argument, NULL, 'j' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct fs_tool_stat S = { 0 };
  int c, only = 0;
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
    if (c == 'j') {
      S.json = true;
    } else if (c == 'h') {
      fs_tool_stat_usage(stdout);
      return FS_TOOL_EXIT_OK;
    } else {
      if (optopt != 0)
        fprintf(stderr, "fabsock stat: unknown option '-%c'\n", optopt);
      else
        fprintf(stderr, "fabsock stat: unknown option '%s'\n", argv[optind - 1]);
      fputs("Try 'fabsock stat --help'.\n", stderr);
      return FS_TOOL_EXIT_USAGE;
    }
  }
  if (optind < argc) {
    char *end;
    errno = 0;
    long pid = strtol(argv[optind], &end, 10);
    if (errno != 0 || *end != '\0' || pid <= 0 || pid > INT_MAX || optind + 1 < argc) {
      fprintf(stderr, "fabsock stat: expected at most one PID, got '%s'\n", argv[optind]);
      fputs("Try 'fabsock stat --help'.\n", stderr);
      return FS_TOOL_EXIT_USAGE;
    }
    only = (int)pid;
  }

  const char *dir = getenv("FABSOCK_STATDIR");
  if (dir == NULL || *dir == '\0')
    dir = "/dev/shm";
  int *pids = NULL;
  size_t npids = 0, cap = 0;
  DIR *d = opendir(dir);
  if (d == NULL && errno != ENOENT) {
    fprintf(stderr, "fabsock stat: %s: %s\n", dir, strerror(errno));
    return FS_TOOL_EXIT_FAIL;
  }
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
    int pid = fs_tool_parse_name(e->d_name);
    if (pid == 0)
      continue;
    if (npids == cap) {
      cap = cap ? cap * 2 : 32;
      int *np = realloc(pids, cap * sizeof *np);
      if (np == NULL)
        break;
      pids = np;
    }
    pids[npids++] = pid;
  }
  if (d != NULL)
    closedir(d);
  if (npids > 1)
    qsort(pids, npids, sizeof *pids, fs_tool_cmp_int);

  /* With a PID, the other tables are read too, for its accepted ends' peers. */
  int rc = FS_TOOL_EXIT_OK;
  for (size_t i = 0; i < npids; i++)
    if (fs_tool_stat_file(&S, dir, pids[i], only == 0 || pids[i] == only) < 0) {
      fprintf(stderr, "fabsock stat: out of memory\n");
      rc = FS_TOOL_EXIT_FAIL;
      break;
    }
  fs_tool_peer_reasons(&S);
  if (S.json) {
    fs_tool_print_json(&S);
  } else {
    fs_tool_keep_shown(&S);
    fs_tool_print_table(&S);
    fs_tool_print_closed(&S);
  }
  free(pids);
  free(S.rows);
  free(S.procs);
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "fabsock stat: stdout: %s\n", strerror(errno));
    rc = FS_TOOL_EXIT_FAIL;
  }
  return rc;
}
