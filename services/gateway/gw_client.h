/*
 * gw_client: the gateway's own HTTP/1.1 client for engine calls.
 *
 * Every chat completion costs one POST to an engine, and libcurl's
 * per-call work (handle setup, URL parsing, a copy of the body, header
 * callbacks, two epoll_ctl and a timer per transfer, the transfer started
 * only on the next loop turn) was a tenth of the gateway's CPU per call.
 * This client does only what an engine call needs: plain http:// to an
 * address given as a literal (IPv4, [IPv6], or localhost), keep-alive
 * connections kept per address, the request written at once from the
 * caller's buffers (one sendmsg, no copy of the body), and the answer read
 * into a per-connection buffer and handed over in place. Anything else (a
 * host name to resolve, https) stays with lisa_http_client
 * (gw_client_url_ok says which).
 *
 * It runs on the service's zloop: its sockets sit in one epoll set that
 * the loop polls, each socket registered once for reading (writing only
 * while a request is not fully written), and a coarse timer enforces
 * deadlines. Callbacks run on the loop's thread.
 *
 * Answers: a status line, headers, and a body delimited by Content-Length,
 * chunked transfer coding, or (HTTP/1.0, Connection: close) the end of the
 * connection; 1xx interim answers are skipped. The parser
 * (gw_client_parse) is a pure function of the bytes, fuzzed by
 * fuzz_gw_client. A request sent on a kept connection that the engine had
 * already closed (no answer byte came back) is sent once more on a new
 * connection, as curl does.
 *
 * Outcome codes (gw_client_resp_t.rc):
 *   LISA_OK           an answer arrived (any status: check it)
 *   LISA_TIMEOUT      the call or its connect passed its deadline
 *   LISA_UNAVAILABLE  could not connect
 *   LISA_TOOLARGE     the answer's body exceeded the bound
 *   LISA_ERR          the connection broke, or the answer was malformed
 */
#ifndef GW_CLIENT_H
#define GW_CLIENT_H

#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

typedef struct gw_client_t gw_client_t;

/* Most bytes of an answer's status line and headers. */
#define GW_CLIENT_MAX_HEAD (64u * 1024u)

/* Most bytes of a URL the client takes (longer ones are not ok). */
#define GW_CLIENT_MAX_URL 1024u

/* What a call ended with; everything is borrowed for the callback. */
typedef struct {
    lisa_rc_t rc;
    int status;       /* HTTP status, 0 when no answer arrived */
    const char *body; /* NUL-terminated; "" when empty */
    size_t body_len;
    const char *error; /* "" on success, else a short reason */
} gw_client_resp_t;

/* Called once when a call ends (never after cancel or destroy). It may
 * start and cancel calls; it must not destroy the client. */
typedef void(gw_client_done_fn)(const gw_client_resp_t *resp, void *arg);

/* A client on `loop`; answers' bodies are bounded by `max_body` bytes.
 * NULL on failure. */
gw_client_t *gw_client_new(zloop_t *loop, size_t max_body);

/* Closes every connection and drops every call without its callback;
 * safe on NULL, sets *self to NULL. Not from inside a callback. */
void gw_client_destroy(gw_client_t **self);

/* True when `url` is one this client serves: http://HOST[:PORT][/PATH]
 * with HOST an IPv4 literal, a bracketed IPv6 literal or "localhost". */
bool gw_client_url_ok(const char *url);

/* Starts POST `url` with `len` bytes of `body` (Content-Type
 * application/json). The body is borrowed, not copied: it must stay
 * unchanged until the done callback runs or the call is cancelled.
 * `timeout_ms` bounds the whole call, `connect_ms` a new connection's
 * connect (0: 10 s each). The request may be written before this
 * returns, and `done` may run before it returns too (a connection refused
 * at once). *id (may be NULL) gets a handle for gw_client_cancel, set
 * before any callback. LISA_INVALID for a URL gw_client_url_ok refuses
 * (no callback then). */
lisa_rc_t gw_client_post(gw_client_t *self, const char *url, const void *body,
                         size_t len, long timeout_ms, long connect_ms,
                         gw_client_done_fn *done, void *arg,
                         uint64_t *id) LISA_NODISCARD;

/* Most body parts gw_client_postv takes. */
#define GW_CLIENT_MAX_PARTS 4u

/* The same with the body in `n` parts (at most GW_CLIENT_MAX_PARTS, each
 * borrowed like the body above), written one after the other. */
lisa_rc_t gw_client_postv(gw_client_t *self, const char *url,
                          const struct iovec *parts, size_t n, long timeout_ms,
                          long connect_ms, gw_client_done_fn *done, void *arg,
                          uint64_t *id) LISA_NODISCARD;

/* Cancels call `id` (its connection is closed; its callback never runs).
 * LISA_NOTFOUND when it already ended or never existed. */
lisa_rc_t gw_client_cancel(gw_client_t *self, uint64_t id);

/* Calls in flight, and idle connections kept for reuse. */
size_t gw_client_pending(const gw_client_t *self);
size_t gw_client_idle(const gw_client_t *self);

/* ---- the answer parser (pure; exposed for tests and fuzzing) ---------- */

typedef struct {
    size_t start;   /* where the current answer starts (after 1xx ones) */
    size_t head;    /* end of its head (after the blank line), 0: unknown */
    int status;     /* status code once the head is in */
    long long clen; /* Content-Length, -1 when none */
    bool chunked;   /* Transfer-Encoding: chunked */
    bool close;     /* the connection is not reusable after this answer */
    /* chunked decoding: raw bytes from `in` on are not decoded yet; the
     * decoded body ends at `out`; `left` data bytes remain in the chunk */
    size_t in, out;
    unsigned long long left;
    int cstate; /* 0 size line, 1 data, 2 CRLF after data, 3 trailers */
} gw_client_parse_t;

/* Parses the answer held in buf[0, len) (`eof`: the peer closed after
 * those bytes), decoding chunked bodies in place. Call it again with the
 * same state after more bytes arrived. Returns 1 when the answer is
 * complete (its body is buf[*off, *off + *blen), and buf[*off + *blen]
 * may be overwritten with a NUL), 0 when more bytes are needed, -1 when
 * it is malformed (or cut short by eof), -2 when its body or head exceeds
 * `max_body` / GW_CLIENT_MAX_HEAD. Needs len < the buffer's size. */
int gw_client_parse(gw_client_parse_t *p, char *buf, size_t len, bool eof,
                    size_t max_body, size_t *off, size_t *blen);

#endif
