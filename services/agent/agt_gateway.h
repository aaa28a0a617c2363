/*
 * agt_gateway: the agent's only connection to the outside, the gateway's
 * HTTP API (docs/agent-api.md), over TCP or a unix socket, with the
 * attempt token as a Bearer credential.
 *
 * One object owns one kept-alive connection (reused from call to call),
 * so a thread that needs its own calls (the heartbeat) makes its own
 * object. An https:// gateway goes through libcurl, loaded at run time.
 * Every answer is bounded (max_reply_bytes) and every call has a timeout.
 * HTTP outcomes map onto return codes the caller can act on: transient
 * (LISA_UNAVAILABLE, LISA_TIMEOUT: retry with backoff), credentials
 * (LISA_UNAUTHORIZED), attempt closed (LISA_CONFLICT), bad request
 * (LISA_INVALID), oversized (LISA_TOOLARGE), unknown route (LISA_NOTFOUND).
 */
#ifndef AGT_GATEWAY_H
#define AGT_GATEWAY_H

#include "lisa/lisa_rc.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>

typedef struct agt_gateway agt_gateway_t;

typedef struct {
    const char *base_url;    /* http://host:port; may be "" with a socket */
    const char *unix_socket; /* NULL or "" for TCP */
    const char *token;       /* Bearer token */
    size_t max_reply_bytes;  /* bound of one answer body */
} agt_gateway_cfg_t;

/* One call's answer. */
typedef struct {
    long status;       /* HTTP status, 0 when none arrived */
    json_t *body;      /* parsed JSON body (object) or NULL; caller's */
    char error[256];   /* what went wrong, for logs and the result */
    char err_code[64]; /* error.code of an error body, or "" */
} agt_reply_t;

/* New client (strings copied); NULL when cfg is unusable. */
agt_gateway_t *agt_gateway_new(const agt_gateway_cfg_t *cfg);
/* Frees *gw and sets it to NULL; safe on NULL. */
void agt_gateway_destroy(agt_gateway_t **gw);

/* One request: `method` GET or POST, `path` like "/lisa/v1/task", `body`
 * (borrowed, may be NULL) sent as JSON, `turn` > 0 adds the X-Lisa-Turn
 * header. Fills *rep (release with agt_reply_clear). */
lisa_rc_t agt_gateway_call(agt_gateway_t *gw, const char *method,
                           const char *path, json_t *body, unsigned turn,
                           long timeout_ms, agt_reply_t *rep) LISA_NODISCARD;

/* agt_gateway_call, retried on LISA_UNAVAILABLE and LISA_TIMEOUT up to
 * `attempts` times with exponential backoff (250 ms doubling, at most
 * 8 s), never past `deadline_ms` on the monotonic clock (0: none) and
 * stopping when `cancel` (may be NULL) is set. */
lisa_rc_t agt_gateway_call_retry(agt_gateway_t *gw, const char *method,
                                 const char *path, json_t *body, unsigned turn,
                                 long timeout_ms, unsigned attempts,
                                 long deadline_ms, const atomic_bool *cancel,
                                 agt_reply_t *rep) LISA_NODISCARD;

/* Frees the body of *rep. */
void agt_reply_clear(agt_reply_t *rep);

#endif
