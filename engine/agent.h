/* The agent: one background thread per process, started on first need.
 *
 * It runs every rendezvous (the fabrics' connect, listen and events, which
 * it reaches through fabric/fabric.h), their timers, and the re-sends a
 * peer's downgrade asks for.  The application never waits for it: a
 * connection keeps using TCP until the agent attaches a channel.
 *
 * One lock (the agent lock) is held across each batch of events and jobs,
 * and across every fabric op; fork takes it so that no rendezvous is half
 * done in the child. */
#ifndef FS_ENGINE_AGENT_H
#define FS_ENGINE_AGENT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/conn.h"

/* Queue an upgrade attempt for a connected (connecting-end) socket: the
 * agent offers it to each fabric the policy allows, in registration order. */
void fs_agent_upgrade(struct fs_conn *c);

/* c's upgrade is queued with its delay (c->upgrade_lazy) and c just moved
 * bytes: once the delay has passed, have the agent run it now rather than
 * at its lazy deadline.  A clock read until then. */
void fs_agent_nudge(struct fs_conn *c);

/* When the agent runs its jobs next at the latest (CLOCK_MONOTONIC ns;
 * UINT64_MAX: not before it is kicked).  For tests. */
uint64_t fs_agent_wake_at(void);

/* Run fn(c) on the agent thread, without the agent lock (it may block),
 * holding a reference on c meanwhile.  If the agent cannot start, fn runs
 * here and now. */
void fs_agent_run(struct fs_conn *c, void (*fn)(struct fs_conn *c));

/* accept() returned a connection on listener lc (fd), shared since fork
 * and not served here.  If nobody serves its rendezvous names (the process
 * that called listen() exited: a daemon, as Debian starts nginx and
 * Apache), serve them from here: a client in a chroot (HAProxy's worker)
 * finds the holder of its connection only by asking them.  Tried at most
 * once a second per listener while another process serves them (its
 * bind fails), never by a process that forked from the one serving them
 * and never accepts. */
void fs_agent_take_names(struct fs_conn *lc, int fd);

/* Listening socket c (fd, its address in c->local): every fabric the
 * policy allows for it serves rendezvous beside it.  At once, not queued:
 * a client that connects right after listen() returns must find them
 * there.  1 if any fabric serves it, 0 if none does (its names taken), -1
 * if the policy keeps it on TCP (tcp, or disabled). */
int fs_agent_listen(struct fs_conn *c, int fd);

/* A listening socket is closed. */
void fs_agent_unlisten(struct fs_conn *c);

/* Held requests may now be answered: a connection was accepted, used for
 * the first time, or handed to another process (fabric host->hold).  A
 * load when none is held. */
void fs_agent_retry_held(void);

/* This process holds connections that a peer cannot reach through a
 * listener this process serves (a listener shared since fork: prefork
 * workers, and their master; a child forked after accept): every fabric
 * serves this process's own name too.  Cheap after the first call in an
 * image. */
void fs_agent_serve_proc(void);

/* Accepting end c, its threshold crossed: could a peer with libfabsock
 * reach it on a fabric the policy allows, as far as one look tells
 * (fabric/fabric.h, reachable)?  No system call, no agent lock. */
bool fs_agent_reachable(struct fs_conn *c);

/* The agent's thread waits for a delayed upgrade to come due
 * (fs_agent_deferred, engine/agent.c).  Before a call that may wait
 * (may_block: a timeout other than zero), it starts: the upgrade must not
 * wait for the application's next call.  A receive that may block looks
 * without blocking first (engine/sockio_tcp.c): a one-shot client's last
 * read, the EOF, is there already.  errno kept. */
extern bool fs_agent_deferred;
void fs_agent_start_deferred(void);
/* The same from a sleep under a connection's lock (engine/wait.c): only
 * if the agent lock is free (else at the sleep's next slice). */
void fs_agent_start_deferred_try(void);
static inline void fs_agent_wait_point(bool may_block)
{
  if (__builtin_expect(__atomic_load_n(&fs_agent_deferred, __ATOMIC_RELAXED), 0) && may_block)
    fs_agent_start_deferred();
}

/* Start the agent now if it is not running (it cannot be started later:
 * engine/nproc.h).  0 or -errno. */
int fs_agent_ensure(void);

/* The process's effective uid changed (setuid and kin, after the call
 * succeeded): the fabrics serve their names again under it.  errno kept;
 * nothing to do before the agent started. */
void fs_agent_creds_changed(void);

/* Hold the agent between its batches (the application closes every fd:
 * the agent must not open one meanwhile, e.g. for a rendezvous of a
 * connection being closed).  Not from the agent thread. */
void fs_agent_pause(void);
void fs_agent_resume(void);

/* Process exit (not the agent thread): with the agent lock, let the
 * fabrics land closed channels' last writes until deadline_ns
 * (fs_clock_ns).  True if none is left waiting. */
bool fs_agent_exit_drain(uint64_t deadline_ns);

/* Fork: the agent lock is held across fork so no rendezvous is half done. */
void fs_agent_before_fork(void);
void fs_agent_after_fork(bool child);

/* The agent's part of struct fs_fabric_host (fabric/fabric.h). */
int fs_agent_watch(int fd, bool (*fn)(void *arg), void *arg);
void fs_agent_unwatch(int fd);
void fs_agent_kick(void);

#endif
