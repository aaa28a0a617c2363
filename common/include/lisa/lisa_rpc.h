/*
 * lisa_rpc: the RPC client every service uses to talk to the broker.
 *
 * One DEALER socket connected to the broker's ROUTER (default :7100). Each
 * request is a lisa.Request envelope sent as [empty delimiter, Request];
 * each reply is [empty delimiter, Reply] and carries the request's id, so
 * late or duplicate replies are recognised and dropped.
 *
 * Two ways to use it:
 *
 *  * Synchronous (lisa_rpc_call): send and wait with a deadline. On a
 *    timeout the socket is thrown away and recreated (the Lazy Pirate
 *    pattern), and the request is sent again, a bounded number of times,
 *    but only when the request is idempotent (lisa_rpc_idempotent); other
 *    requests give LISA_TIMEOUT after the first try, because the broker
 *    may already have acted on them.
 *
 *  * Asynchronous (lisa_rpc_send + lisa_rpc_attach or lisa_rpc_dispatch /
 *    lisa_rpc_expire): send now, get a callback per request id when the
 *    reply arrives or the request's deadline passes. Usable from a zloop
 *    (lisa_rpc_attach registers the reader and a timer) or from any poller
 *    (poll lisa_rpc_socket, then call lisa_rpc_dispatch; call
 *    lisa_rpc_expire now and then).
 *
 * A client object is used from one thread. Requests are passed in by the
 * caller and never freed here; replies handed out by lisa_rpc_call belong
 * to the caller (lisa_rpc_reply_free); replies passed to callbacks are
 * borrowed for the duration of the callback.
 */
#ifndef LISA_RPC_H
#define LISA_RPC_H

#include "lisa.pb-c.h"
#include "lisa/lisa_codec.h"
#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lisa_rpc_t lisa_rpc_t;

/* Called once per async request: rc is LISA_OK with the reply (borrowed;
 * its code may still be an error code), LISA_TIMEOUT with reply NULL when
 * the deadline passed, or LISA_ERR with reply NULL when the client is
 * destroyed with the request still open. */
typedef void(lisa_rpc_cb_fn)(void *arg, uint64_t request_id, lisa_rc_t rc,
                             const Lisa__Reply *reply);

/* Default number of sends of an idempotent request in lisa_rpc_call. */
#define LISA_RPC_DEFAULT_TRIES 3u
/* Largest reply frame accepted (bigger replies are dropped as malformed). */
#define LISA_RPC_MAX_REPLY LISA_MAX_RPC_FRAME

/* New client connected to `endpoint` (e.g. "tcp://127.0.0.1:7100");
 * `caller` names this service in the broker's logs (copied). NULL when
 * the endpoint is invalid. */
lisa_rpc_t *lisa_rpc_new(const char *endpoint, const char *caller);

/* Destroys the client; open async requests get their callback with
 * LISA_ERR. Accepts NULL; sets *self to NULL. */
void lisa_rpc_destroy(lisa_rpc_t **self);

/* Sets how many times lisa_rpc_call sends an idempotent request (>= 1). */
void lisa_rpc_set_tries(lisa_rpc_t *self, unsigned tries);

/* Makes lisa_rpc_call give up waiting once *flag is non-zero (typically
 * set by a SIGINT/SIGTERM handler), checked at least every 100 ms; NULL
 * turns that off. The request is still sent; the call then returns
 * LISA_AGAIN without a reply. */
void lisa_rpc_set_interrupt(lisa_rpc_t *self,
                            const volatile sig_atomic_t *flag);

/* The endpoint this client talks to (borrowed). */
const char *lisa_rpc_endpoint(const lisa_rpc_t *self);

/* True when a request with this body can be sent twice without a second
 * effect (the broker treats a repeat as a no-op or answers it again). */
bool lisa_rpc_idempotent(const Lisa__Request *req);

/* Synchronous call. Sets req->request_id and req->caller, sends, and waits
 * up to `timeout_ms` per try. On LISA_OK *reply is the broker's reply
 * (check (*reply)->code); free it with lisa_rpc_reply_free. Returns
 * LISA_TIMEOUT when no reply came in any try, LISA_AGAIN when the
 * interrupt flag (lisa_rpc_set_interrupt) was set while waiting,
 * LISA_INVALID for a non-positive timeout, LISA_ERR on socket failure. Must not
 * be mixed with open async requests on the same client. */
lisa_rc_t lisa_rpc_call(lisa_rpc_t *self, Lisa__Request *req, int timeout_ms,
                        Lisa__Reply **reply) LISA_NODISCARD;

/* Frees a reply from lisa_rpc_call; safe on NULL, sets *reply to NULL. */
void lisa_rpc_reply_free(Lisa__Reply **reply);

/* rc for a reply: LISA_OK for CODE_OK, else the matching error rc. */
lisa_rc_t lisa_rpc_reply_rc(const Lisa__Reply *reply);

/* Async send. Sets req->request_id (also stored in *request_id when not
 * NULL) and req->caller, sends, and remembers `cb`/`arg` until the reply
 * arrives or `timeout_ms` passes. Returns LISA_OK, LISA_INVALID (bad
 * timeout or cb NULL), LISA_TIMEOUT (no connected peer took the request
 * within timeout_ms: the broker down or refusing the CURVE handshake) or
 * LISA_ERR (send failed); on any but LISA_OK cb will not be called. */
lisa_rc_t lisa_rpc_send(lisa_rpc_t *self, Lisa__Request *req, int timeout_ms,
                        lisa_rpc_cb_fn *cb, void *arg,
                        uint64_t *request_id) LISA_NODISCARD;

/* The DEALER socket, for polling (readable means replies to dispatch). */
zsock_t *lisa_rpc_socket(lisa_rpc_t *self);

/* Reads every reply available now without blocking and runs callbacks.
 * Returns the number of callbacks run. */
size_t lisa_rpc_dispatch(lisa_rpc_t *self);

/* Runs LISA_TIMEOUT callbacks for requests whose deadline has passed.
 * Returns the number of callbacks run. */
size_t lisa_rpc_expire(lisa_rpc_t *self);

/* Milliseconds until the earliest open deadline (-1 when none). */
int64_t lisa_rpc_next_deadline_ms(const lisa_rpc_t *self);

/* Number of open async requests. */
size_t lisa_rpc_pending(const lisa_rpc_t *self);

/* Registers the socket reader and a `tick_ms` expiry timer with `loop`,
 * so callbacks run from that loop. Returns LISA_OK or LISA_ERR. */
lisa_rc_t lisa_rpc_attach(lisa_rpc_t *self, zloop_t *loop,
                          int tick_ms) LISA_NODISCARD;

/* Removes what lisa_rpc_attach registered. */
void lisa_rpc_detach(lisa_rpc_t *self);

/* Counters: replies dropped as unknown id, late or malformed. */
uint64_t lisa_rpc_dropped(const lisa_rpc_t *self);

#endif
