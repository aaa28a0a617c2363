/*
 * brk_lifecycle: rollouts and their attempts, from enqueue to the end.
 *
 * Every state change of a rollout goes through brk_lifecycle_apply, which
 * looks the (state, event) pair up in brk_fsm's table and performs the
 * row's actions: a new attempt with its deadline, lease renewal, the
 * result, requeue with backoff, the reward, the end. Nothing else writes a
 * rollout's state. The writes go into the loop's open transaction; what
 * the change owes others (an event, a score job, waits to wake) goes to
 * the outbox.
 *
 * The module answers the lifecycle RPCs (enqueue, claim, attempt start,
 * heartbeat, complete, fail, get task, cancel, policy), fails attempts
 * whose lease or deadline passed (tick), and owns the policy version.
 */
#ifndef BRK_LIFECYCLE_H
#define BRK_LIFECYCLE_H

#include "brk_call.h"
#include "brk_fsm.h"
#include "brk_token.h"

typedef struct brk_lifecycle_t brk_lifecycle_t;

/* The context an event is applied with. */
typedef struct {
    uint32_t attempt;
    Lisa__FailureKind kind;
    const char *reason;
    const char *sandbox_id;
    const char *controller_id;
    Lisa__AttemptResult *result;
    uint32_t expected_spans;
    Lisa__Reward *reward;
    Lisa__Attempt *attempt_out; /* set by apply: the attempt it touched */
} brk_lifecycle_ctx_t;

/* Called when an attempt reaches a terminal state (in the transaction). */
typedef void(brk_lifecycle_end_fn)(void *arg, const char *rollout_id,
                                   uint32_t attempt);

/* `env` is copied (its pointers borrowed); `token` issues attempt tokens
 * (borrowed). Reads the policy version from the store. */
brk_lifecycle_t *brk_lifecycle_new(const brk_env_t *env, brk_token_t *token);
void brk_lifecycle_destroy(brk_lifecycle_t **self);

/* Sets who hears of attempts that end. */
void brk_lifecycle_on_end(brk_lifecycle_t *self, brk_lifecycle_end_fn *fn,
                          void *arg);

/* Applies `ev` to rollout r (in the current transaction). LISA_CONFLICT
 * when the table does not allow it (nothing written), LISA_ERR when the
 * store failed; err says why. */
lisa_rc_t brk_lifecycle_apply(brk_lifecycle_t *self, Lisa__Rollout *r,
                              brk_event_t ev, brk_lifecycle_ctx_t *c,
                              char *err) LISA_NODISCARD;

/* Whether this module answers requests with this body. */
bool brk_lifecycle_serves(Lisa__Request__BodyCase body);

/* Answers one lifecycle RPC (see brk_lifecycle_serves). */
lisa_rc_t brk_lifecycle_handle(brk_lifecycle_t *self,
                               brk_call_t *call) LISA_NODISCARD;

/* Fails the attempts whose lease or deadline passed by `now_ms` (inside
 * the loop's transaction). */
void brk_lifecycle_tick(brk_lifecycle_t *self, uint64_t now_ms);

/* The policy version; reload re-reads it after a failed commit. */
uint64_t brk_lifecycle_policy(const brk_lifecycle_t *self);
void brk_lifecycle_reload(brk_lifecycle_t *self);

#endif
