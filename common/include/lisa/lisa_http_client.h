/*
 * lisa_http_client: outbound HTTP for lisa services, over libcurl.
 *
 * Two faces:
 *   - an asynchronous client driven by a czmq zloop (libcurl's multi
 *     "socket action" interface: curl's sockets sit in one epoll set that
 *     the zloop polls, curl's timeout is a zloop timer). Thousands of
 *     concurrent requests run on the loop's thread without a thread each,
 *     connections are reused, and every callback runs on the loop's
 *     thread, so a single-threaded service needs no locks;
 *   - lisa_http_request_sync, a blocking call on curl easy for command-line
 *     tools and the in-sandbox agent.
 *
 * A request names its method, URL, headers, body and total timeout, and
 * optionally a unix socket (the Docker engine); a CA file, a client
 * certificate and a bearer token (the Kubernetes API); a streaming
 * callback that receives the body as it arrives (watch streams,
 * Server-Sent Events); and a response size bound.
 *
 * The outcome arrives as a lisa_http_response_t whose rc is:
 *   LISA_OK           an HTTP response arrived (any status: check it)
 *   LISA_TIMEOUT      the deadline passed
 *   LISA_UNAVAILABLE  could not connect or resolve
 *   LISA_TOOLARGE     the response exceeded its bound
 *   LISA_INVALID      a malformed URL or a scheme other than http/https
 *   LISA_ERR          any other transport error (curl's text in error)
 *
 * Rules for callbacks (they run inside lisa_http_client's loop handlers):
 *   - done: may send new requests and cancel others; must not destroy the
 *     client.
 *   - on_chunk: runs inside libcurl; must not call any lisa_http_client
 *     function. Return false to abort the transfer (done then reports
 *     LISA_ERR, "aborted by the chunk callback").
 */
#ifndef LISA_HTTP_CLIENT_H
#define LISA_HTTP_CLIENT_H

#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lisa_http_client lisa_http_client_t;
typedef struct lisa_http_response lisa_http_response_t;

/* Defaults used when a field is 0. */
#define LISA_HTTP_CLIENT_DEFAULT_TIMEOUT_MS   30000
#define LISA_HTTP_CLIENT_DEFAULT_CONNECT_MS   10000
#define LISA_HTTP_CLIENT_DEFAULT_MAX_RESPONSE (16u * 1024u * 1024u)
#define LISA_HTTP_CLIENT_MAX_HEADER_BYTES     (64u * 1024u)

/* Called with each piece of a 2xx response body as it arrives (see the
 * rules above); `status` is the response status. Return false to abort. */
typedef bool(lisa_http_chunk_fn)(const char *data, size_t len, long status,
                                 void *arg);

/* Called once when a request ends (not after cancel). `resp` is borrowed
 * for the duration of the call. */
typedef void(lisa_http_done_fn)(lisa_http_response_t *resp, void *arg);

typedef struct {
    const char *method; /* NULL: "GET", or "POST" when a body is given */
    const char *url;    /* required; with unix_socket the host is ignored */
    /* Extra request headers, "Name: value", NULL-terminated (may be NULL). */
    const char *const *headers;
    const void *body; /* copied at send time; may be NULL */
    size_t body_len;
    long timeout_ms;          /* whole transfer; 0: default; <0: none */
    long connect_timeout_ms;  /* 0: default */
    const char *unix_socket;  /* connect through this unix socket path */
    const char *ca_file;      /* PEM bundle to verify the server with */
    const char *cert_file;    /* PEM client certificate (mutual TLS) */
    const char *key_file;     /* PEM key of cert_file */
    const char *bearer_token; /* sends "Authorization: Bearer <token>" */
    /* Proxy URL; NULL: none (proxy variables in the environment are
     * ignored, so a loopback call never wanders through a proxy). */
    const char *proxy;
    size_t max_response; /* body bytes kept; 0: default */
    /* Streaming: 2xx bodies go to on_chunk instead of being kept, with no
     * size bound (the callback decides when to stop); other statuses are
     * kept, bounded by max_response, so done can show the error body. */
    lisa_http_chunk_fn *on_chunk;
    /* on_chunk's argument for lisa_http_request_sync (the asynchronous
     * client passes send's `arg` instead). */
    void *chunk_arg;
} lisa_http_request_t;

typedef struct {
    long max_connections;      /* total open connections; 0: unlimited */
    long max_host_connections; /* per host; 0: unlimited */
} lisa_http_client_config_t;

/* Creates a client driven by `loop` (cfg may be NULL). NULL on failure. */
lisa_http_client_t *lisa_http_client_new(zloop_t *loop,
                                         const lisa_http_client_config_t *cfg);

/* Drops every pending request without calling its callbacks; safe on NULL
 * and twice. Call on the loop's thread, not from inside a callback. */
void lisa_http_client_destroy(lisa_http_client_t **self_p);

/* Starts `req` (everything is copied). `done` is required; `arg` goes to
 * both callbacks. *id (may be NULL) receives a handle for cancel.
 * Returns LISA_OK, or LISA_INVALID for a bad request (no callback then). */
lisa_rc_t lisa_http_client_send(lisa_http_client_t *self,
                                const lisa_http_request_t *req,
                                lisa_http_done_fn *done, void *arg,
                                uint64_t *id) LISA_NODISCARD;

/* Cancels request `id`: its callbacks will not run. LISA_NOTFOUND if it
 * already finished or never existed. */
lisa_rc_t lisa_http_client_cancel(lisa_http_client_t *self, uint64_t id);

/* Requests in flight. */
size_t lisa_http_client_pending(const lisa_http_client_t *self);

/* Blocking request on the calling thread; *out receives the response (also
 * on transport errors; destroy it with lisa_http_response_destroy). Returns
 * the response's rc. */
lisa_rc_t lisa_http_request_sync(const lisa_http_request_t *req,
                                 lisa_http_response_t **out);

/* --- responses ------------------------------------------------------- */

/* Outcome (see the file comment). */
lisa_rc_t lisa_http_response_rc(const lisa_http_response_t *r);
/* HTTP status, 0 when no response arrived. */
long lisa_http_response_status(const lisa_http_response_t *r);
/* Body (NUL-terminated; "" when empty or streamed); *len may be NULL. */
const char *lisa_http_response_body(const lisa_http_response_t *r, size_t *len);
/* Takes the body out of the response (caller frees with free()). */
char *lisa_http_response_take_body(lisa_http_response_t *r, size_t *len);
/* Last value of response header `name` (case-insensitive), or NULL. */
const char *lisa_http_response_header(const lisa_http_response_t *r,
                                      const char *name);
/* Transport error text ("" on success). */
const char *lisa_http_response_error(const lisa_http_response_t *r);
/* Total time in milliseconds. */
double lisa_http_response_elapsed_ms(const lisa_http_response_t *r);
/* Frees a response from lisa_http_request_sync; safe on NULL and twice. */
void lisa_http_response_destroy(lisa_http_response_t **r_p);

#endif
