/*
 * gw_answer: how the gateway answers an inbound request, shared by the
 * modules that own routes (gw_chat, gw_agent, gw_server).
 *
 * A request is carried as a gw_req_t (the kept HTTP request, its route
 * label for metrics, when it arrived, and the attempt its token names).
 * Every answer goes through here so each one is counted once in
 * lisa_gateway_requests_total and timed in lisa_gateway_request_seconds,
 * 429 and 503 answers carry Retry-After, and broker refusals map to
 * OpenAI-shaped errors the same way on every route.
 */
#ifndef GW_ANSWER_H
#define GW_ANSWER_H

#include "gw_metrics.h"
#include "gw_openai.h"
#include "lisa.pb-c.h"
#include "lisa/lisa_http_server.h"
#include "lisa/lisa_rc.h"
#include "lisa/lisa_token.h"

#include <stdint.h>

/* One inbound request in flight (a plain value; `req` is kept by the HTTP
 * layer until answered, `route` is static). */
typedef struct {
    lisa_http_req_t *req;
    const char *route;
    int64_t t0_us; /* zclock_usecs() when it arrived */
    lisa_token_claims_t who;
} gw_req_t;

/* Counts an answer with `status` on `route` and observes its duration. */
void gw_answer_count(gw_metrics_t *m, const char *route, unsigned status,
                     int64_t t0_us);

/* Answers `len` bytes of JSON with `status` and counts it. */
void gw_answer_json(gw_metrics_t *m, const gw_req_t *r, unsigned status,
                    const char *body, size_t len);

/* Answers *err as an OpenAI error body (Retry-After: retry_after_s on 429
 * and 503) and counts it. */
void gw_answer_err(gw_metrics_t *m, uint64_t retry_after_s, const gw_req_t *r,
                   const gw_err_t *err);

/* Fills *err for a broker call `what` that failed (rc, or the reply's
 * code) and counts it in lisa_gateway_broker_errors_total. */
void gw_answer_broker_err(gw_metrics_t *m, const char *what, lisa_rc_t rc,
                          const Lisa__Reply *rep, gw_err_t *err);

#endif
