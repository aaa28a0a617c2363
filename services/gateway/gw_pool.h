/*
 * gw_pool: the generation engines a gateway may call, and the routing
 * policy.
 *
 * Engines come from the static configuration and from the broker's engine
 * registry (EngineListReq, re-read periodically); a sync replaces the
 * broker-sourced set and keeps static ones. Routing is sticky per attempt
 * (an attempt keeps its engine so the engine's prefix cache holds its
 * prefix) with least-loaded fallback when the sticky engine is down,
 * paused, gone or full. An attempt's first call is placed by its group
 * (the n rollouts of one prompt share the prompt, so on one engine they
 * share its cached prefix): on the engine the group's first attempt went
 * to, while that engine is usable and its calls in flight are below its
 * advertised max_batch (the broker's engine record; unknown: no bound
 * but --engine-max-inflight), else on the least-loaded engine. A group
 * whose engine is gone, down or paused moves with its next attempt. An engine
 * is marked down after `fail_limit` consecutive connection errors or failed
 * health checks, and up again on the first success. Paused engines (draining
 * for a weight update, by the broker's record or the gateway's admin switch)
 * get no new calls; their in-flight calls finish. Engines are referred to by
 * id, so a call that outlives its engine's removal is harmless.
 *
 * Attached to a loop (gw_pool_attach) the pool keeps itself current: the
 * broker's engine list every refresh interval and, at most every 100 ms,
 * at once when a call found no engine it may use (gw_pool_refresh_soon),
 * so an engine that just resumed after a weight update or joined serves
 * the caller's retry; a health check of every engine each health
 * interval (GET {url}/healthz answering 200 means alive).
 */
#ifndef GW_POOL_H
#define GW_POOL_H

#include "gw_engine.h"
#include "gw_metrics.h"
#include "lisa/lisa_rc.h"
#include "lisa/lisa_rpc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GW_POOL_MAX_ENGINES 1024u
#define GW_POOL_MAX_GROUPS  65536u /* groups placed (forgotten when full) */

typedef struct gw_pool_t gw_pool_t;

/* New empty pool; an engine takes at most `max_inflight` calls (0: no
 * limit) and goes down after `fail_limit` consecutive failures (>= 1). */
gw_pool_t *gw_pool_new(uint32_t max_inflight, uint32_t fail_limit);

/* Destroys it; safe on NULL, sets *self to NULL. */
void gw_pool_destroy(gw_pool_t **self);

/* Adds or updates an engine. `from_broker` engines are removed by a sync
 * that no longer lists them. LISA_INVALID for an empty id or url,
 * LISA_TOOLARGE when the pool is full. */
lisa_rc_t gw_pool_upsert(gw_pool_t *self, const char *id, const char *url,
                         uint64_t policy_version, bool paused,
                         bool from_broker) LISA_NODISCARD;

/* Parses a static list "id=url,id=url" (or bare urls, named e0, e1...)
 * and adds each engine. LISA_INVALID on a malformed list. */
lisa_rc_t gw_pool_add_static(gw_pool_t *self, const char *list) LISA_NODISCARD;

/* Starts a broker sync: every broker-sourced engine is unmarked. */
void gw_pool_sync_begin(gw_pool_t *self);

/* Ends a sync: broker-sourced engines not upserted since begin are removed.
 * Returns how many were removed. */
size_t gw_pool_sync_end(gw_pool_t *self);

/* Routing. Picks an engine for a call whose attempt prefers `sticky` (may
 * be NULL). On LISA_OK *id and *url are borrowed until the next change of
 * the pool (copy them). LISA_AGAIN: every usable engine is paused or full
 * (answer 429 with Retry-After); LISA_UNAVAILABLE: none is up (503). */
lisa_rc_t gw_pool_pick(gw_pool_t *self, const char *sticky, const char **id,
                       const char **url) LISA_NODISCARD;

/* The same, for an attempt of `group` (NULL or "": none) whose first call
 * this may be (see the file comment). */
lisa_rc_t gw_pool_pick_group(gw_pool_t *self, const char *sticky,
                             const char *group, const char **id,
                             const char **url) LISA_NODISCARD;

/* Engine `id`'s advertised batch size (0: unknown). */
void gw_pool_set_capacity(gw_pool_t *self, const char *id, uint32_t max_batch);

/* The engine `group` is placed on (borrowed; NULL when none). */
const char *gw_pool_group_engine(const gw_pool_t *self, const char *group);

/* A call to engine `id` starts / ends (`conn_error`: it could not connect
 * or the connection broke; other outcomes count as alive). */
void gw_pool_call_started(gw_pool_t *self, const char *id);
void gw_pool_call_ended(gw_pool_t *self, const char *id, bool conn_error);

/* A health check result for engine `id`. */
void gw_pool_health(gw_pool_t *self, const char *id, bool ok);

/* Pauses / resumes new calls to every engine (admin switch). */
void gw_pool_pause_all(gw_pool_t *self, bool paused);

/* True when the admin switch is on. */
bool gw_pool_paused(const gw_pool_t *self);

/* Calls in flight to engine `id`, or to all engines when `id` is NULL. */
uint32_t gw_pool_inflight(const gw_pool_t *self, const char *id);

/* Number of engines, and the i-th one's fields (for health checks and
 * metrics; pointers borrowed). Returns false when i is out of range. */
size_t gw_pool_size(const gw_pool_t *self);
bool gw_pool_at(const gw_pool_t *self, size_t i, const char **id,
                const char **url, bool *up, bool *paused, uint32_t *inflight);

/* What an attached pool uses (borrowed; they outlive the pool's timers,
 * and the engine facade is destroyed before the pool). */
typedef struct {
    zloop_t *loop;
    lisa_rpc_t *rpc;     /* NULL: no broker, no refresh */
    gw_engine_t *engine; /* health checks */
    gw_metrics_t *m;
    int rpc_timeout_ms;
    size_t refresh_ms; /* 0: no refresh timer */
    size_t health_ms;  /* 0: no health checks */
} gw_pool_io_t;

/* Starts the refresh and health timers (and a first refresh). */
void gw_pool_attach(gw_pool_t *self, const gw_pool_io_t *io);

/* Asks the broker for the engine list now (one request at a time). */
void gw_pool_refresh(gw_pool_t *self);

/* The same, at most every 100 ms: a call found no engine it may use. */
void gw_pool_refresh_soon(gw_pool_t *self);

#endif
