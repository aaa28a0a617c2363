/*
 * gw_fence: which attempt may call the gateway right now.
 *
 * An attempt token is valid until its expiry, but the attempt it names can
 * end long before: cancelled, failed, scored. The fence learns that from
 * the broker's rollout events (gw_fence_event) and refuses every token
 * route of an ended attempt with 409 attempt_ended, checked on each call.
 * Attempts of a rollout run one after the other, so one number per rollout
 * is enough: every attempt up to `ended_upto` is over (a terminal rollout
 * ends all of them, a new attempt ends the ones before it). The table is
 * bounded (S_FENCE_ROLLOUTS rollouts, the oldest forgotten first); the
 * broker stays the authority and refuses spans, heartbeats and results of
 * an ended attempt whatever the gateway knows.
 *
 * Events can be missed (a PUB gap, a gateway that started after the
 * attempt ended), so an attempt is also checked against the broker once
 * per "epoch": gw_fence_known is false for an attempt not checked since
 * the last gap (gw_fence_gap starts a new epoch; the first one starts with
 * the fence), the caller queries the broker and hands the rollout's state
 * to gw_fence_rollout, which marks the attempt known.
 *
 * The fence also caps the calls one attempt has open at once (max_inflight;
 * 429 beyond it), so one sandbox cannot hold the gateway's capacity:
 * gw_fence_enter admits a call and arranges, through the HTTP layer's
 * release hook, that it leaves once answered.
 */
#ifndef GW_FENCE_H
#define GW_FENCE_H

#include "gw_openai.h"
#include "lisa.pb-c.h"
#include "lisa/lisa_http_server.h"
#include "lisa/lisa_rc.h"
#include "lisa/lisa_token.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gw_fence_t gw_fence_t;

/* New fence; `max_inflight` open calls per attempt (0: no cap). */
gw_fence_t *gw_fence_new(uint32_t max_inflight);

/* Destroys it; safe on NULL, sets *self to NULL. Calls still open must
 * have been answered (their release hooks point into the fence). */
void gw_fence_destroy(gw_fence_t **self);

/* Learns from one rollout event which attempts have ended. */
void gw_fence_event(gw_fence_t *self, const Lisa__RolloutEvent *ev);

/* True when the events said that `attempt` of `rollout` has ended. */
bool gw_fence_ended(const gw_fence_t *self, const char *rollout,
                    uint32_t attempt);

/* True when `who` was checked against the broker in this epoch, or is
 * known to have ended. */
bool gw_fence_known(const gw_fence_t *self, const lisa_token_claims_t *who);

/* Learns the broker's view of `who`'s rollout (its state and its current
 * attempt number) and marks `who` known for this epoch. */
void gw_fence_rollout(gw_fence_t *self, const lisa_token_claims_t *who,
                      Lisa__RolloutState state, uint32_t attempts);

/* Events were missed: every attempt must be checked again. */
void gw_fence_gap(gw_fence_t *self);

/* Admits one call of `who` on `req`: LISA_OK (the call counts as open
 * until req is answered), LISA_CONFLICT with *err filled (409
 * attempt_ended) for an ended attempt, LISA_AGAIN with *err filled (429
 * too_many_calls) when the attempt has max_inflight calls open. */
lisa_rc_t gw_fence_enter(gw_fence_t *self, lisa_http_req_t *req,
                         const lisa_token_claims_t *who,
                         gw_err_t *err) LISA_NODISCARD;

/* Calls of `who` open now. */
uint32_t gw_fence_inflight(const gw_fence_t *self,
                           const lisa_token_claims_t *who);

/* Rollouts with ended attempts remembered. */
size_t gw_fence_size(const gw_fence_t *self);

#endif
