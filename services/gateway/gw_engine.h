/*
 * gw_engine: one way to call a generation engine.
 *
 * Engines whose URL names an address (http://IPv4:port, http://[IPv6]:port,
 * http://localhost:port) are called through gw_client, the gateway's own
 * HTTP/1.1 client (kept connections, the request written from the caller,
 * its body parts never copied); engines named by host name, and https,
 * through libcurl multi (lisa_http_client), with the parts joined. Callers
 * see one request call and one outcome shape either way; rc follows
 * lisa_http_client's meaning (LISA_UNAVAILABLE / LISA_ERR: no connection
 * or it broke, LISA_TIMEOUT: past the deadline). Both run on the caller's
 * zloop. Destroying the facade drops every call in flight without its
 * callback (the callers answer and free their own contexts).
 */
#ifndef GW_ENGINE_H
#define GW_ENGINE_H

#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <stddef.h>
#include <sys/uio.h>

typedef struct gw_engine_t gw_engine_t;

/* Most body parts gw_engine_post takes. */
#define GW_ENGINE_MAX_PARTS 4u

/* The outcome of one call (borrowed for the callback's duration). */
typedef struct {
    lisa_rc_t rc;
    long status;      /* HTTP status, 0 when no answer arrived */
    const char *body; /* NUL-terminated; "" when empty */
    size_t len;
    const char *error; /* "" on success, else a short reason */
} gw_engine_resp_t;

typedef void(gw_engine_done_fn)(const gw_engine_resp_t *resp, void *arg);

/* New facade on `loop`; answers are bounded by `max_body` bytes. */
gw_engine_t *gw_engine_new(zloop_t *loop, size_t max_body);

/* Destroys it, dropping calls in flight; safe on NULL, sets *self NULL. */
void gw_engine_destroy(gw_engine_t **self);

/* POSTs the `n` parts (<= GW_ENGINE_MAX_PARTS) of a JSON body to `url`.
 * The parts are borrowed until `done` runs (which may happen before this
 * returns: a refused connection). `timeout_ms` bounds the call,
 * `connect_ms` a new connection (0: 10 s). LISA_OK, or an error and no
 * callback. */
lisa_rc_t gw_engine_post(gw_engine_t *self, const char *url,
                         const struct iovec *parts, size_t n, long timeout_ms,
                         long connect_ms, gw_engine_done_fn *done,
                         void *arg) LISA_NODISCARD;

/* GETs `url` (health checks) within `timeout_ms`, through libcurl. */
lisa_rc_t gw_engine_get(gw_engine_t *self, const char *url, long timeout_ms,
                        gw_engine_done_fn *done, void *arg) LISA_NODISCARD;

/* Calls in flight. */
size_t gw_engine_pending(const gw_engine_t *self);

#endif
