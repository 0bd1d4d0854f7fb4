/* The shm rendezvous's insides, shared by rdv.c (items, the accepting
 * end, the agent's calls) and rdv_cli.c (the connecting end).  Nothing
 * else includes this: the rest of the library sees fabric/shm/rdv.h. */
#ifndef FS_FABRIC_SHM_RDV_INT_H
#define FS_FABRIC_SHM_RDV_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "fabric/fabric.h"

#define FS_RDV_MAX_PEND 256     /* unix conns in flight, server side; beyond,
                                   listeners pause (their backlog waits) */
#define FS_RDV_HOLD_MS 2000     /* how long a request waits for accept() */
#define FS_RDV_SPENT_MS 100     /* a listener out of fds or memory: rests this long */
#define FS_RDV_FDS 5            /* ours that a rendezvous holds: its unix socket and
                                   what the client passes (fs_rdv_srv_new) */
#define FS_RDV_RETRY_MAX_MS 50  /* backoff cap while the holder is not alone yet */
#define FS_RDV_LIST_GRACE_MS 100 /* from a process of ours accepting to its stat row */
#define FS_RDV_HOLDER_GRACE_MS 3000 /* told "not-owner": from our crossing to the
                                       holder's (its row lists the inode from then on);
                                       its own give-up waits as long (engine/sock.c) */

/* K_CLI_RETRY: a connecting end waiting to look for its peer's holder
 * again (the peer's socket is shared, or not accepted yet). */
enum fs_rdv_kind { K_LISTENER = 1, K_SRV, K_CLI, K_CLI_RETRY };
enum fs_rdv_srv_state { S_WAIT_REQ, S_HELD, S_WAIT_ACK };

struct fs_rdv_item {
  enum fs_rdv_kind kind;
  int ufd;
  uint64_t deadline;          /* ns, CLOCK_MONOTONIC; 0 = none */
  struct fs_link *c;          /* listener (K_LISTENER; NULL: orphan) or connection
                                 (K_CLI, S_WAIT_ACK); referenced */
  struct fs_chan *ch;         /* K_CLI: not attached yet */
  int state;                  /* K_SRV */
  int fds[4];                 /* K_SRV held: tcp dup, memfd, client efd or
                                 bell efd, bell memfd (or -1) */
  uint32_t slot;              /* K_SRV: the client's slot in its bell */
  uint32_t uid;
  uint64_t give_up;           /* K_CLI, K_CLI_RETRY: the connecting end's set-up bound */
  uint64_t look_ns;           /* K_SRV held: when to ask again whether another process holds it */
  uint32_t backoff_ms;        /* K_CLI_RETRY: the next wait */
  bool holder_only;           /* K_CLI_RETRY: ask the holder only next */
  uint64_t seen_ns;           /* K_CLI_RETRY: when the peer's socket was first
                                 seen accepted, listed by nobody yet */
  bool via_holder;            /* K_CLI: asked the holder's own name */
  bool rings;                 /* K_CLI: offered the peer our doorbell */
  bool shared_listener;
  bool paused;               /* K_LISTENER: unwatched while too many are in flight,
                                 or closed until `deadline` (out of fds: fs_rdv_rest) */
  struct sockaddr_storage tl, tp; /* K_SRV: the passed socket's local/peer */
  bool proc;                  /* K_LISTENER: this process's own name (c NULL) */
  char name[108];             /* K_LISTENER: its abstract name */
  int namelen;
  struct fs_rdv_item *next;
};

/* Agent lock held for all of it. */
struct fs_rdv_agent {
  struct fs_rdv_item *items;  /* all listeners and in-flight unix conns */
  int npend;                  /* K_SRV items (atomic reads from accept) */
  int npaused;                /* listeners not watched: npend at the cap */
};
extern struct fs_rdv_agent fs_rdv_a; /* rdv.c */


/* rdv.c */
int fs_rdv_watch(struct fs_rdv_item *it);
void fs_rdv_drop(struct fs_rdv_item *it);

/* rdv_cli.c: the connecting end (the fabric's connect op; a reply or the
 * peer's EOF on its unix connection; a retry's time come). */
int fs_rdv_connect(struct fs_link *c);
void fs_rdv_cli_event(struct fs_rdv_item *it);
void fs_rdv_cli_again(struct fs_rdv_item *it, bool holder_only);

#endif
