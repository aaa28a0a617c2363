/*
 * gw_chat: the chat pipeline, POST /v1/chat/completions.
 *
 * One chat completion, step by step, all on the loop's thread:
 *   parse (lazily: only the messages that changed since the attempt's
 *   last call) -> attempt state (first call: SpanStatusReq so seq never
 *   repeats after a restart) -> plan (extension or new segment) -> render
 *   only the new messages -> begin (prompt = stored ids + new ids) ->
 *   context check -> pick an engine (sticky, least loaded) -> POST token
 *   ids through the engine facade -> parse sampled ids -> decode, tool
 *   calls -> commit (span) -> queue the span for the broker -> answer
 *   (JSON or SSE).
 * A failure after begin aborts the call, leaving the attempt as it was. A
 * connection error is retried on another pick (--upstream-retries). The
 * module owns the calls in flight (answered 503 when it is destroyed) and
 * the counter that names chat completions and tool calls.
 */
#ifndef GW_CHAT_H
#define GW_CHAT_H

#include "gw_answer.h"
#include "gw_config.h"
#include "gw_engine.h"
#include "gw_metrics.h"
#include "gw_pool.h"
#include "gw_render.h"
#include "gw_spanq.h"
#include "gw_trace.h"
#include "lisa/lisa_rpc.h"

#include <stddef.h>

typedef struct gw_chat_t gw_chat_t;

/* What the pipeline uses (borrowed; all outlive it). */
typedef struct {
    const gw_config_t *cfg;
    gw_trace_t *trace;
    gw_pool_t *pool;
    gw_spanq_t *spanq;
    gw_render_t *render;
    gw_metrics_t *m;
    gw_engine_t *engine;
    lisa_rpc_t *rpc; /* NULL: no broker (spans are dropped and counted) */
    /* a span was queued: send what is due */
    void (*spans_added)(void *arg);
    void *arg;
} gw_chat_deps_t;

/* New pipeline over `deps` (copied). */
gw_chat_t *gw_chat_new(const gw_chat_deps_t *deps);

/* Destroys it: calls still waiting for an engine are answered 503 and
 * freed (destroy the engine facade first, so none of them ends later).
 * Safe on NULL; sets *self to NULL. */
void gw_chat_destroy(gw_chat_t **self);

/* Handles one authenticated chat request (answered later, or now). */
void gw_chat_handle(gw_chat_t *self, const gw_req_t *r);

/* Engine calls in flight. */
size_t gw_chat_inflight(const gw_chat_t *self);

/* Adds the prefix-cache counts since the last call to the metrics
 * (answered prompt tokens, cached tokens) and sets the hit rate. */
void gw_chat_publish(gw_chat_t *self);

#endif
