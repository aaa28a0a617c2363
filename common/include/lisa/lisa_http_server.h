/*
 * lisa_http_server: the HTTP front door of a lisa service, over
 * libmicrohttpd.
 *
 * Services answer HTTP without ever blocking their loop: a handler receives
 * a complete request (method, path, query, headers, the whole body) and
 * either answers at once or keeps the request and answers later, from any
 * thread (typically the service's zloop thread once an upstream answer
 * arrived). A kept request parks its connection (MHD suspend/resume), so
 * thousands of long-running calls cost a socket and a small struct each,
 * not a thread.
 *
 * Which thread runs the handler:
 *   - config.loop == NULL: one of the server's internal threads. The handler
 *     must not block; it answers or keeps the request and returns.
 *   - config.loop set: the thread that runs that zloop. The server pushes
 *     each complete request through a pipe watched by the loop, so a
 *     single-threaded service needs no locks at all. lisa_http_server_new
 *     and _destroy must then be called on the loop's thread too.
 *   - config.loop set and config.loop_driven: the same thread, but
 *     libmicrohttpd is driven by that zloop (no HTTP threads and no hand-off
 *     between threads: the lowest latency).
 * Answering (respond, stream push/close) is thread-safe from any thread.
 *
 * The request lifecycle seen by the application:
 *   handler(req) -> exactly one of
 *     lisa_http_req_respond*()           one complete response, or
 *     lisa_http_req_stream_open() ...    a chunked stream (Server-Sent
 *       lisa_http_req_stream_push()*       Events): push from any thread,
 *       lisa_http_req_stream_close()       then close.
 *   After respond or stream_close the application must not touch req again.
 *   A request the handler returns without answering is kept until answered.
 *   A client that leaves while its request is kept is noticed only when the
 *   answer is sent (a parked socket is not watched); on a stream, a push
 *   returns LISA_UNAVAILABLE once the server has noticed.
 *
 * Limits, each with a refusal counter (lisa_http_server_stats):
 *   - max_connections: when full, a new connection displaces the oldest
 *     open connection that is still waiting for a complete request (fresh,
 *     trickling or idle between keep-alive requests; counted as evicted);
 *     only when every open connection is being answered is it accepted and
 *     closed at once (refused). A client that sends its request right away
 *     is therefore never starved by a flood of idle connections.
 *   - request_timeout_ms: a connection must deliver a complete request
 *     (headers and body) within this time of being accepted (its first
 *     request) or of the request line (later ones), else it is cut
 *     (slow-loris defence). Time spent being answered does not count.
 *     Between keep-alive requests a connection may idle idle_timeout_s
 *     longer.
 *   - idle_timeout_s: libmicrohttpd's inactivity timeout on a socket that
 *     should be moving data (a kept, suspended request never times out).
 *   - max_header_bytes: the per-connection buffer for request line and
 *     headers; larger requests are answered 431/414 by libmicrohttpd.
 *   - max_body: a larger declared Content-Length is answered 413 with a
 *     JSON error body at once (the body is never read) and the connection
 *     is closed; a chunked body that grows past the bound is dropped as it
 *     arrives (within request_timeout_ms) and answered the same way.
 *   - framing: a request whose body end could be read two ways (duplicate
 *     or conflicting Content-Length, Content-Length with Transfer-Encoding,
 *     a Transfer-Encoding other than a single "chunked", a Content-Length
 *     that is not a plain decimal) is answered 400 (code bad_framing) and
 *     the connection is closed.
 *   - stream_queue_max: bytes a stream may hold unsent; a push beyond it is
 *     refused with LISA_AGAIN (the client is too slow).
 *
 * Shutdown: lisa_http_server_destroy stops accepting, answers every kept
 * request 503 (JSON error), ends every open stream, waits (2 s at most)
 * until every answer given (those 503s and the application's) has been
 * sent, and closes all connections. The application still owes each kept
 * request one respond or stream_close call after that (it only frees the
 * request), so handles it holds never dangle. No respond/push call may run
 * concurrently with destroy itself.
 */
#ifndef LISA_HTTP_SERVER_H
#define LISA_HTTP_SERVER_H

#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lisa_http_server lisa_http_server_t;
typedef struct lisa_http_req lisa_http_req_t;

/* Called once per complete request; see the file comment for the thread. */
typedef void(lisa_http_handler_fn)(lisa_http_req_t *req, void *arg);

/* Defaults used when a config field is 0 / NULL. */
#define LISA_HTTP_DEFAULT_MAX_BODY         (8u * 1024u * 1024u)
#define LISA_HTTP_DEFAULT_MAX_CONNECTIONS  1024u
#define LISA_HTTP_DEFAULT_REQUEST_TIMEOUT  30000u /* ms */
#define LISA_HTTP_DEFAULT_IDLE_TIMEOUT     120u   /* s */
#define LISA_HTTP_DEFAULT_MAX_HEADER_BYTES (32u * 1024u)
#define LISA_HTTP_DEFAULT_STREAM_QUEUE_MAX (1024u * 1024u)
#define LISA_HTTP_DEFAULT_THREADS          1u

typedef struct {
    /* TCP listener: address ("127.0.0.1", "0.0.0.0", "::1") and port (0:
     * an ephemeral port, read it back with lisa_http_server_port). A NULL
     * address means no TCP listener. */
    const char *address;
    uint16_t port;
    /* Unix-domain listener path (NULL: none). A stale socket file at the
     * path is replaced; the file is removed on destroy. */
    const char *unix_path;
    /* Handler and its argument (required). */
    lisa_http_handler_fn *handler;
    void *handler_arg;
    /* Optional: run handlers on this zloop's thread (see file comment). */
    zloop_t *loop;
    /* With loop set: libmicrohttpd itself runs on the loop's thread (its
     * epoll descriptor is a loop poller; no internal threads, `threads` is
     * ignored). Handlers are called straight from the loop and an answer
     * given on the loop's thread is written there, without waking another
     * thread. Answering from other threads stays possible. */
    bool loop_driven;
    size_t max_body;             /* bytes of request body */
    unsigned max_connections;    /* open connections, all listeners */
    unsigned request_timeout_ms; /* deadline for a complete request */
    unsigned idle_timeout_s;     /* socket inactivity timeout */
    size_t max_header_bytes;     /* request line + headers (min 8 KiB) */
    size_t stream_queue_max;     /* unsent bytes per stream */
    unsigned threads;            /* internal polling threads */
} lisa_http_server_config_t;

/* Counters; a snapshot is returned by lisa_http_server_stats. */
typedef struct {
    uint64_t connections_open;     /* gauge: open connections now */
    uint64_t connections_accepted; /* connections admitted */
    uint64_t refused_connections;  /* over max_connections */
    uint64_t requests;             /* complete requests given to handler */
    uint64_t responses;            /* responses and streams queued */
    uint64_t body_too_large;       /* 413 or closed: body over max_body */
    uint64_t request_timeouts;     /* cut: request not complete in time */
    uint64_t idle_timeouts;        /* closed: idle past idle_timeout_s */
    uint64_t bad_requests;         /* refused by libmicrohttpd (4xx) */
    uint64_t bad_framing;          /* 400: ambiguous body framing */
    uint64_t evicted_connections;  /* cut to make room (see the limits) */
    uint64_t client_aborts;        /* client left before the answer ended */
    uint64_t stream_overflows;     /* pushes refused: stream queue full */
    uint64_t shutdown_answered;    /* kept requests answered 503 on destroy */
    uint64_t kept;                 /* gauge: requests waiting for an answer */
} lisa_http_server_stats_t;

/* Starts a server listening as configured. Returns NULL (and logs why) if
 * a listener cannot be bound or the config is invalid. */
lisa_http_server_t *lisa_http_server_new(const lisa_http_server_config_t *cfg);

/* Stops the server (see the file comment); safe on NULL and twice. */
void lisa_http_server_destroy(lisa_http_server_t **self_p);

/* Bound TCP port (useful with port 0); 0 without a TCP listener. */
uint16_t lisa_http_server_port(const lisa_http_server_t *self);

/* Snapshot of the counters. */
lisa_http_server_stats_t lisa_http_server_stats(lisa_http_server_t *self);

/* --- the request, as seen by a handler ------------------------------- */

/* Request method ("GET", "POST", ...). */
const char *lisa_http_req_method(const lisa_http_req_t *req);
/* Request path, percent-decoded, without the query string. */
const char *lisa_http_req_path(const lisa_http_req_t *req);
/* Value of query argument `name` (exact match), or NULL. */
const char *lisa_http_req_query(const lisa_http_req_t *req, const char *name);
/* Value of request header `name` (case-insensitive), or NULL. */
const char *lisa_http_req_header(const lisa_http_req_t *req, const char *name);
/* Number of request headers, and header `i` (0-based, arrival order) for
 * iteration; returns false when i is out of range. */
size_t lisa_http_req_header_count(const lisa_http_req_t *req);
bool lisa_http_req_header_at(const lisa_http_req_t *req, size_t i,
                             const char **name, const char **value);
/* The whole request body (NUL-terminated for convenience); *len may be
 * NULL. Never NULL: an empty body is "". */
const char *lisa_http_req_body(const lisa_http_req_t *req, size_t *len);
/* Peer as text: "ip:port" for TCP, "unix" for the unix listener. */
const char *lisa_http_req_peer(const lisa_http_req_t *req);
/* True when the request came through the unix-socket listener. */
bool lisa_http_req_is_unix(const lisa_http_req_t *req);
/* Server-unique request number (for logs). */
uint64_t lisa_http_req_id(const lisa_http_req_t *req);

/* Called once when the application's hold on a request ends (its respond
 * or stream_close call, also after a shutdown answer), on the thread that
 * made that call, with the request's lock held: it must not call back into
 * the request. For per-client accounting of open calls. */
typedef void(lisa_http_release_fn)(void *arg);

/* Sets req's release hook (one per request; a later call replaces it).
 * Call from the handler, before answering. */
void lisa_http_req_on_release(lisa_http_req_t *req, lisa_http_release_fn *fn,
                              void *arg);

/* Adds a response header (copied) for the coming respond / stream_open.
 * Call from the thread that holds the request. */
void lisa_http_req_add_header(lisa_http_req_t *req, const char *name,
                              const char *value);

/* Answers with `status`, a Content-Type (NULL: none) and `len` bytes of
 * `body` (copied). Ends the application's hold on req. Returns LISA_OK, or
 * LISA_UNAVAILABLE if the client or the server is already gone (req is
 * released all the same). */
lisa_rc_t lisa_http_req_respond(lisa_http_req_t *req, unsigned status,
                                const char *content_type, const void *body,
                                size_t len);

/* Answers with an OpenAI-shaped JSON error:
 *   {"error":{"message":...,"type":...,"code":...}}
 * `code` may be NULL (JSON null). Same contract as lisa_http_req_respond. */
lisa_rc_t lisa_http_req_respond_error(lisa_http_req_t *req, unsigned status,
                                      const char *type, const char *code,
                                      const char *fmt, ...) LISA_PRINTF(5, 6);

/* Starts a chunked streaming response with `status` and `content_type`
 * (for SSE: "text/event-stream"; Cache-Control: no-cache is added then).
 * The application keeps req until lisa_http_req_stream_close. */
lisa_rc_t lisa_http_req_stream_open(lisa_http_req_t *req, unsigned status,
                                    const char *content_type);

/* Queues `len` bytes (copied) on an open stream; any thread. Returns
 * LISA_OK, LISA_AGAIN if the stream's queue would exceed stream_queue_max
 * (nothing queued), or LISA_UNAVAILABLE if the client or server is gone. */
lisa_rc_t lisa_http_req_stream_push(lisa_http_req_t *req, const void *data,
                                    size_t len);

/* Ends the stream once its queue has drained and releases req; any thread.
 */
void lisa_http_req_stream_close(lisa_http_req_t *req);

/* Builds the OpenAI error JSON (caller frees with free()); `code` may be
 * NULL. */
char *lisa_http_error_json(const char *message, const char *type,
                           const char *code);

#endif
