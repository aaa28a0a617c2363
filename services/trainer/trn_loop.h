/*
 * trn_loop: the synchronous RL loop of `lisa-trainer train`.
 *
 * Per step: take the next batch of prompts; enqueue batch x n rollouts in
 * one EnqueueReq (one group per prompt; run id, step, policy version, mode
 * train; an idempotency key run:step); wait for them with WaitReq calls
 * under the step deadline (each call bounded; a broker that stops answering
 * is an error, never a hang; at the deadline the rest is cancelled and
 * counted failed); fetch each rollout's spans (QueryReq with_spans) and
 * rebuild its sequences (trn_traj), refusing a rollout any of whose spans
 * was sampled with other settings than the run's (Span.sampling against
 * rollout.temperature / top_p / top_k: counted in
 * rollouts/sampling_refused); apply the failed-rollout and
 * equal-reward policies; pause the engine (in-flight generations finish),
 * run one optimizer step (backend train_step), bump the policy version at
 * the broker (PolicyReq set) and resume the engine with it. Every
 * test_freq steps validation runs (mode val, per data source means); every
 * save_freq steps and at the end a checkpoint is written (trn_ckpt). One
 * JSON line per step (and per validation) goes to <out>/metrics.jsonl.
 */
#ifndef TRN_LOOP_H
#define TRN_LOOP_H

#include "trn_backend.h"
#include "trn_data.h"
#include "trn_engine.h"
#include "trn_prompts.h"
#include "trn_run_cfg.h"

#include <signal.h>

typedef struct {
    const trn_run_cfg_t *cfg;
    trn_backend_t *backend;
    trn_engine_t *engine;
    const trn_data_t *train;
    const trn_data_t *val;        /* may be NULL */
    const trn_prompts_t *prompts; /* agent.prompts; NULL: the agent's own */
    const char *run_id;
    uint64_t start_step;         /* steps already done (resume) */
    uint64_t policy_version;     /* at start */
    volatile sig_atomic_t *stop; /* set by a signal handler; may be NULL */
} trn_loop_args_t;

/* Runs the loop to the end. LISA_OK; LISA_UNAVAILABLE (broker gone or
 * refusing), LISA_TIMEOUT, LISA_INVALID (config), LISA_ERR (model / I/O),
 * LISA_AGAIN (stopped by signal). err says why. */
lisa_rc_t trn_loop_run(const trn_loop_args_t *a, char *err,
                       size_t errlen) LISA_NODISCARD;

#endif
