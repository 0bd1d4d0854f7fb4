/* The agent's state, shared by the module's two files: engine/agent.c
 * (its watches, its jobs, the thread) and engine/agent_proc.c (listeners
 * and process events: fork, exit, a change of user).  Nothing else
 * includes it; engine/agent.h is the module's interface. */
#ifndef FS_ENGINE_AGENT_STATE_H
#define FS_ENGINE_AGENT_STATE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/agent.h"
#include "fabric/fabric.h"

/* An fd the agent watches for a fabric (or its own wake eventfd): a
 * rendezvous listener, rdma's event channel, each rendezvous in flight.
 * The agent sleeps in poll() on its eventfd and these while they are a
 * handful (a process at rest: its listener), and in an epoll set of its
 * own only while more are in flight (a burst of upgrades: wrk -c400), so
 * that a process holds the set's descriptor only then; it held one for
 * good.  Back to poll() at half the count: a burst's last handshakes do
 * not make and close a set each. */
#define FS_AGENT_POLL_MAX 8
struct fs_agent_watch {
  int fd;
  bool in_ep; /* registered in A.epfd */
  bool (*fn)(void *arg);
  void *arg;
  struct fs_agent_watch *next;
};

struct fs_agent_job {
  struct fs_conn *c;
  void (*fn)(struct fs_conn *c); /* NULL: an upgrade (fs_agent_connect) */
  uint64_t due;                  /* not before (CLOCK_MONOTONIC ns); 0 now;
                                    only a delayed upgrade has one */
  struct fs_agent_job *next;
};

struct fs_agent_state {
  pthread_mutex_t lock;       /* agent state and the fabrics'; held across each batch */
  pthread_mutex_t qlock;      /* job queue */
  bool running;
  int evfd, epfd;             /* epfd: -1 while the agent polls */
  struct fs_agent_watch evwatch;
  struct fs_agent_watch *watches;
  struct fs_agent_job *jobs;
  uint64_t wake_at;           /* qlock: the agent runs its jobs by then at the
                                 latest (UINT64_MAX: it sleeps until kicked) */
  uint64_t trim_at;           /* agent: the next idle-ring pass (0: none due) */
  bool polling;               /* lock: the agent is (about to be) in poll() */
  uint32_t poll_gen;          /* atomic: poll() calls the agent has returned from */
};

/* FS_HOT (base/hot.h): a fork takes and lets go its locks in a process
 * that never made a socket, on the page the loader writes anyway. */
extern struct fs_agent_state fs_agent_state;

#define FS_FOREACH_FABRIC(f) for (const struct fs_fabric_ops *const *f = fs_fabrics; *f; f++)

/* Start the thread (A.lock held): 0, or -EAGAIN (logged). */
int fs_agent_start(void);

#endif
