/*
 * trn_step: one GRPO-family optimizer step over a batch of finished
 * rollouts, on any trn_model backend.
 *
 * Input is what the broker hands the trainer: per trajectory its token ids
 * (prompt, sampled tokens and tool observations back to back), a mask that
 * marks the tokens the model sampled, the engine's log-probs of those
 * tokens, a group id (one per prompt) and a scalar score. A step:
 *
 *   1. advantages from the scores (trn_advantage), broadcast over each
 *      trajectory's sampled tokens;
 *   2. micro-batches of whole trajectories, each at most micro_tokens
 *      long, normalised by counts of the whole batch so that the summed
 *      gradient equals the gradient of the whole batch's loss;
 *   3. per micro-batch: forward (log-probs and, when needed, entropy),
 *      old log-probs (the engine's in bypass mode; else the caller's
 *      old_logp, computed by trn_step_logprobs before the first update of
 *      the batch, as verl does for several mini-batches or epochs; else
 *      the current ones, which makes the ratio 1 for a single on-policy
 *      step),
 *      optional truncated IS weights (trainer vs engine), the loss and its
 *      gradient (trn_loss), backward;
 *   4. gradient clipping, then AdamW; a non-finite gradient norm skips the
 *      update (as verl does) and is reported, and so does a batch with no
 *      learning signal (no trained token with a non-zero advantage and no
 *      KL or entropy term), whose gradient is exactly zero.
 *
 * The token at position t is predicted from position t - 1, so a mask on
 * token t puts the loss on position t - 1; the first token of a trajectory
 * cannot be masked.
 */
#ifndef TRN_STEP_H
#define TRN_STEP_H

#include "trn_advantage.h"
#include "trn_loss.h"
#include "trn_model.h"
#include "trn_optim.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Rejection sampling levels (verl rollout_rs). */
typedef enum {
    TRN_RS_OFF = 0,
    TRN_RS_TOKEN = 1,
    TRN_RS_SEQUENCE = 2, /* exp(sum of log ratios) */
    TRN_RS_GEOMETRIC = 3 /* exp(mean of log ratios) */
} trn_rs_level_t;

/* Layer recomputation (values match trn_gpu_model.h's TRN_RECOMPUTE_*). */
enum {
    TRN_STEP_RECOMPUTE_AUTO = 0,
    TRN_STEP_RECOMPUTE_ON = 1,
    TRN_STEP_RECOMPUTE_OFF = 2
};

/* Data parallel as a step sees it. Every rank gets the whole batch and
 * fixes the loss normalisers from all of it, then runs only the
 * micro-batches assigned to it (whole micro-batches, each to the rank with
 * the fewest tokens so far, in order: the same split on every rank), so
 * the gradients summed over ranks equal one rank's gradient of the whole
 * batch. The step's reported sums (losses, entropy, clip fractions,
 * tokens) cross ranks through `sum`, as does the gradient of backends
 * without their own reduction (the CPU model). */
typedef struct {
    int rank, world;
    void *self;
    /* In-place sum of n values over every rank; each rank gets the total.
     * Every rank calls it in the same order. */
    lisa_rc_t (*sum)(void *self, double *v, size_t n, trn_err_t *err);
} trn_comm_t;

typedef struct {
    trn_adv_cfg_t adv;
    trn_loss_cfg_t loss; /* normalisers 0: filled from the whole batch */
    trn_adamw_cfg_t optim;
    double grad_clip;        /* verl default 1.0 */
    float temperature;       /* rollout temperature (logits / T) */
    size_t micro_tokens;     /* most tokens in one micro-batch */
    int recompute;           /* TRN_STEP_RECOMPUTE_*: backends that can keep
                                activations (CUDA); the CPU model recomputes */
    bool optim_offload;      /* CUDA on one device: fp32 master weights and
                                AdamW moments in host memory, streamed
                                through the device for the update (verl's
                                fsdp_config optimizer/param_offload) */
    bool bypass;             /* old log-probs = the engine's */
    double is_threshold;     /* > 0: truncated IS weights at is_level */
    trn_is_level_t is_level; /* token (default) or sequence */
    /* rejection sampling (verl rollout_rs): masks tokens or whole
     * sequences whose ratio trainer / engine (old_logp - rollout_logp)
     * leaves [rs_lower, rs_upper]; rs_veto > 0 masks a sequence with any
     * token ratio below it. Applied by trn_step_ppo before the update. */
    trn_rs_level_t rs_level;
    double rs_upper, rs_lower, rs_veto;
    /* KL in the reward (verl use_kl_in_reward): each trajectory's score
     * loses kl_reward_coef * sum of the per-token KL (kl_reward_type)
     * between the old policy and the reference model; 0: off */
    double kl_reward_coef;
    trn_kl_t kl_reward_type;
    /* the PPO update (trn_step_ppo): groups per mini-batch (verl's
     * ppo_mini_batch_size in prompts; 0: the whole batch) and passes */
    size_t mini_groups;
    size_t ppo_epochs;
    const trn_comm_t *comm; /* NULL: one rank */
    /* context parallelism (trn_cp_t): with several ranks, a trajectory
     * longer than this is a micro-batch of its own that every rank runs,
     * each computing its share of the positions (0: never). The loss is
     * computed from the gathered log-probs on every rank alike, so every
     * aggregation mode and sequence-level weight sees whole trajectories. */
    size_t cp_tokens;
    /* and with cp_auto, a trajectory longer than the longest micro-batch
     * that every rank's model trains alone (trn_step_model_t max_tokens,
     * the least over the ranks) */
    bool cp_auto;
} trn_step_cfg_t;

/* verl-like defaults: grpo, token-mean, clip 0.2/0.2/3, lr 1e-6, clip 1.0,
 * temperature 1, 4096 tokens per micro-batch, no bypass, no IS. */
trn_step_cfg_t trn_step_defaults(void);

typedef struct {
    size_t n_seqs;
    const size_t *seq_offsets; /* n_seqs + 1 */
    const int32_t *tokens;     /* seq_offsets[n_seqs] */
    const uint8_t *mask;       /* 1: sampled by the model */
    const float *rollout_logp; /* engine log-prob of each sampled token */
    const float *old_logp;     /* trainer log-probs before this batch's
                                  updates (trn_step_logprobs), or NULL */
    const int64_t *group;      /* per trajectory */
    const double *score;       /* per trajectory */
} trn_rollouts_t;

typedef struct {
    double loss; /* sum over micro-batches */
    double pg_loss, kl_loss, entropy;
    double pg_clipfrac, pg_clipfrac_lower, ppo_kl; /* token-weighted */
    double grad_norm;                              /* before clipping */
    double tokens; /* sampled tokens trained on */
    size_t micro_batches;
    size_t cp_micro_batches; /* of them, run context-parallel */
    bool skipped;            /* non-finite gradient: no update */
    /* KL in the reward: sum over trajectories of each one's masked mean
     * KL, and how many (verl's current_kl = the mean) */
    double reward_kl, reward_kl_n;
    /* trn_step_ppo: optimizer updates made, mini-batches per epoch,
     * tokens rejection sampling masked */
    size_t updates, mini_batches;
    double rs_masked;
} trn_step_out_t;

/* A trainable model as a step sees it, so the same step runs on the CPU
 * model (trn_step_run) and on any other backend (the CUDA model). */
typedef struct {
    void *self;
    /* trn_model_forward: log-probs (and entropy when ent is not NULL) */
    lisa_rc_t (*forward)(void *self, const trn_batch_t *b, float *logp,
                         float *ent, trn_err_t *err);
    /* trn_model_backward: adds gradients (dent may be NULL) */
    lisa_rc_t (*backward)(void *self, const float *dlogp, const float *dent,
                          trn_err_t *err);
    void (*zero_grad)(void *self);
    /* Optional: says the next backward is this rank's last of the step, so
     * a backend may start summing gradients across ranks while it runs. */
    void (*last_backward)(void *self);
    /* Clips the gradient to cfg->grad_clip (global norm) and applies
     * cfg->optim; *grad_norm is the norm before clipping. A non-finite
     * norm skips the update, zeroes the gradients and sets *skipped. */
    lisa_rc_t (*update)(void *self, const trn_step_cfg_t *cfg,
                        double *grad_norm, bool *skipped, trn_err_t *err);
    /* Optional: the most tokens a micro-batch of this rank alone can have
     * now (its activations fit the memory left); 0 or NULL: no limit. */
    size_t (*max_tokens)(void *self);
} trn_step_model_t;

/* trn_step_logprobs and trn_step_run on any model with these operations
 * (update is only used by trn_step_run_with; ref may be NULL). */
lisa_rc_t trn_step_logprobs_with(const trn_step_model_t *m,
                                 const trn_step_cfg_t *cfg,
                                 const trn_rollouts_t *r, float *logp,
                                 trn_err_t *err) LISA_NODISCARD;
lisa_rc_t trn_step_run_with(const trn_step_model_t *m,
                            const trn_step_model_t *ref,
                            const trn_step_cfg_t *cfg, const trn_rollouts_t *r,
                            trn_step_out_t *out, trn_err_t *err) LISA_NODISCARD;

/* Log-probs of every sampled token (logp[t] for mask[t] = 1, else 0) of
 * the rollouts under model `m`, forward only, in micro-batches of
 * cfg->micro_tokens at cfg->temperature: the old log-probs of a batch, or
 * the reference model's. With cfg->comm each rank computes its own
 * micro-batches and every rank gets all of logp. */
lisa_rc_t trn_step_logprobs(trn_model_t *m, const trn_step_cfg_t *cfg,
                            const trn_rollouts_t *r, float *logp,
                            trn_err_t *err) LISA_NODISCARD;

/* A backend's training operations as the PPO update sees them. */
typedef struct {
    void *self;
    /* one optimizer step over r (trn_step_run on the backend) */
    lisa_rc_t (*train_step)(void *self, const trn_step_cfg_t *cfg,
                            const trn_rollouts_t *r, trn_step_out_t *out,
                            trn_err_t *err);
    /* trainer log-probs of r's sampled tokens (trn_step_logprobs) */
    lisa_rc_t (*logprobs)(void *self, const trn_step_cfg_t *cfg,
                          const trn_rollouts_t *r, float *logp, trn_err_t *err);
} trn_step_actor_t;

/* verl's actor update over one batch: cfg->ppo_epochs passes over
 * mini-batches of cfg->mini_groups groups each (groups in order of first
 * appearance; a group is never split), one optimizer step per
 * mini-batch. With more than one update, rejection sampling or KL in the
 * reward, the old log-probs are the trainer's before the first update:
 * `old` when given (same weights, e.g. computed for a metric), else
 * a->logprobs over the batch; so ratios and clipping act from the second
 * update on. One mini-batch and one epoch with neither RS nor KL in the
 * reward is exactly one train_step over the whole batch (old log-probs
 * left out: ratio 1). Advantages are per group, so a mini-batch's equal
 * the whole batch's. out: means over updates (clip fractions and ppo_kl
 * token-weighted), tokens of one pass, micro_batches of all. */
lisa_rc_t trn_step_ppo(const trn_step_actor_t *a, const trn_step_cfg_t *cfg,
                       const trn_rollouts_t *r, const float *old,
                       trn_step_out_t *out, trn_err_t *err) LISA_NODISCARD;

/* Rejection sampling over a whole batch: clears mask[t] of the sampled
 * tokens cfg->rs_level / rs_veto reject, comparing old_logp with
 * rollout_logp (both per token); returns how many were cleared. */
size_t trn_step_reject(const trn_step_cfg_t *cfg, size_t n_seqs,
                       const size_t *seq_offsets, const float *old_logp,
                       const float *rollout_logp, uint8_t *mask);

/* verl's length limits on one trajectory of len tokens (arrays edited in
 * place, *len updated): the prompt is the tokens before the first
 * sampled one, the response the rest. A prompt over drop_over (> 0)
 * drops the trajectory (returns -1); over max_prompt (> 0) it is cut as
 * trunc says ('l' keeps its end, 'r' its start, 'm' both halves'
 * outer ends); a response over max_response (> 0) is cut at that length.
 * Returns 1 when something was cut, else 0. */
int trn_step_cap(int32_t *tokens, uint8_t *mask, float *logp, size_t *len,
                 size_t drop_over, size_t max_prompt, char trunc,
                 size_t max_response);

/* Runs one step on model `m` with optimizer `opt` (sized for the model's
 * parameters); `ref` is the reference model for a KL term (NULL when
 * kl_coef is 0). Gradients are zeroed first. */
lisa_rc_t trn_step_run(trn_model_t *m, trn_model_t *ref, trn_adamw_t *opt,
                       const trn_step_cfg_t *cfg, const trn_rollouts_t *r,
                       trn_step_out_t *out, trn_err_t *err) LISA_NODISCARD;

#endif
