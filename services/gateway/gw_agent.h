/*
 * gw_agent: the sandbox's own calls, carried to the broker.
 *
 *   GET  /lisa/v1/task       GetTaskReq: the attempt's task, ground truth
 *                            left out, files as text or base64
 *   POST /lisa/v1/heartbeat  HeartbeatReq: lease renewal, "note" optional
 *   POST /lisa/v1/result     AttemptCompleteReq, held until every span of
 *                            the attempt is acknowledged by the broker
 *                            (up to --result-wait, then 503
 *                            spans_pending and the agent posts again)
 *
 * The token alone names the rollout and attempt; a body naming another is
 * refused (403 wrong_rollout). The module owns the held results and the
 * set of attempts whose result was accepted (a repeated post is answered
 * {"accepted": true, "repeat": true} without the broker; bounded). Held
 * results are re-checked when spans are acknowledged and on the
 * gateway's tick (gw_agent_check).
 */
#ifndef GW_AGENT_H
#define GW_AGENT_H

#include "gw_answer.h"
#include "gw_config.h"
#include "gw_metrics.h"
#include "gw_spanq.h"
#include "gw_trace.h"
#include "lisa/lisa_rpc.h"

#include <stddef.h>

typedef struct gw_agent_t gw_agent_t;

/* What the agent API uses (borrowed; all outlive it). */
typedef struct {
    const gw_config_t *cfg;
    gw_trace_t *trace;
    gw_spanq_t *spanq;
    gw_metrics_t *m;
    lisa_rpc_t *rpc; /* NULL: the routes answer 503 no_broker */
    /* a result waits for spans: send the spans that are due now */
    void (*spans_due)(void *arg);
    void *arg;
} gw_agent_deps_t;

/* New agent API over `deps` (copied). */
gw_agent_t *gw_agent_new(const gw_agent_deps_t *deps);

/* Destroys it: held results are answered 503. Safe on NULL; sets NULL. */
void gw_agent_destroy(gw_agent_t **self);

/* The three routes, for an authenticated request. */
void gw_agent_task(gw_agent_t *self, const gw_req_t *r);
void gw_agent_heartbeat(gw_agent_t *self, const gw_req_t *r);
void gw_agent_result(gw_agent_t *self, const gw_req_t *r);

/* Held results: those whose spans are all acknowledged go to the broker,
 * those past their wait are answered 503 spans_pending. */
void gw_agent_check(gw_agent_t *self);

/* Results held now. */
size_t gw_agent_held(const gw_agent_t *self);

#endif
