/*
 * ctl_http: the small blocking HTTP client the docker and k8s backends
 * share (libcurl easy, one handle per backend, connections reused), and
 * batches of requests run at once over a few kept-alive connections
 * (ctl_http_many).
 *
 * Every call has a timeout and a bound on the answer's size; the body is
 * returned as text (NUL-terminated) for the caller to parse. Transport
 * failures are LISA_UNAVAILABLE (the backend is down: pause), a timeout is
 * LISA_TIMEOUT; any HTTP status is LISA_OK with the status filled in.
 */
#ifndef CTL_HTTP_H
#define CTL_HTTP_H

#include "lisa/lisa_rc.h"

#include <stddef.h>

typedef struct ctl_http ctl_http_t;

typedef struct {
    long status; /* HTTP status */
    char *body;  /* answer body, NUL-terminated (caller's; lisa_free) */
    size_t len;
} ctl_http_rep_t;

/* New client. `unix_socket` (may be NULL) routes every request over that
 * socket; `ca_file` (may be NULL) verifies TLS peers. */
ctl_http_t *ctl_http_new(const char *unix_socket, const char *ca_file,
                         size_t max_reply);
/* Frees *h; safe on NULL; sets *h to NULL. */
void ctl_http_destroy(ctl_http_t **h);
/* Sets the bearer token sent from now on (NULL: none). */
void ctl_http_set_bearer(ctl_http_t *h, const char *token);

/* One request. `body` (may be NULL) is sent as `content_type`. */
lisa_rc_t ctl_http_call(ctl_http_t *h, const char *method, const char *url,
                        const char *content_type, const char *body,
                        long timeout_ms, ctl_http_rep_t *rep) LISA_NODISCARD;

/* One request of a batch: the caller fills method, url, body (NULL:
 * none; JSON otherwise) and next; ctl_http_many fills rc and rep as
 * ctl_http_call would. */
typedef struct ctl_http_req {
    const char *method;
    const char *url;
    const char *body;
    struct ctl_http_req *next; /* sent as soon as this one gets a 2xx
                                  answer (NULL: none); rc LISA_AGAIN and
                                  an empty rep when it was not sent */
    lisa_rc_t rc;
    ctl_http_rep_t rep;
} ctl_http_req_t;

/* Runs the n requests (and their follow-ups) concurrently over at most
 * `parallel` connections (kept for the next batch) and returns when each
 * has an answer or its timeout passed. Free each rep with
 * ctl_http_rep_clear. */
void ctl_http_many(ctl_http_t *h, ctl_http_req_t *reqs, size_t n,
                   size_t parallel, long timeout_ms);

/* Frees rep->body. */
void ctl_http_rep_clear(ctl_http_rep_t *rep);

/* URL-encodes s (RFC 3986 unreserved kept). Caller frees. */
char *ctl_http_escape(const char *s);

#endif
