/*
 * brk_waits: WaitReq held until its rollouts end or its deadline passes.
 *
 * A wait whose rollouts are all terminal is answered at once; otherwise it
 * is held as a record (nothing blocks) and answered with the batch whose
 * commit ends its last open rollout, or with CODE_TIMEOUT and the
 * rollouts still open when its timeout passes.
 */
#ifndef BRK_WAITS_H
#define BRK_WAITS_H

#include "brk_call.h"

typedef struct brk_waits_t brk_waits_t;

brk_waits_t *brk_waits_new(const brk_env_t *env);
void brk_waits_destroy(brk_waits_t **self);

/* Answers or holds a WaitReq (sets call->held when it holds it). */
lisa_rc_t brk_waits_handle(brk_waits_t *self, brk_call_t *call) LISA_NODISCARD;

/* Rollouts that became terminal (durable): answers the waits they
 * complete. */
void brk_waits_finished(brk_waits_t *self, char *const *ids, size_t n);

/* Answers the waits whose deadline passed by `mono` (monotonic ms). */
void brk_waits_tick(brk_waits_t *self, int64_t mono);

#endif
