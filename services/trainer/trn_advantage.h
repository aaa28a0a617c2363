/*
 * trn_advantage: outcome advantages of a batch of grouped responses.
 *
 * Every response of a prompt shares a group id; its score is the sum of
 * its rewards. The estimators follow verl's definitions exactly:
 *
 *   grpo        A = (s - mean_g) / (std_g + eps), std unbiased (n - 1);
 *               a group of one has mean 0 and std 1;
 *   grpo, no std normalisation (Dr.GRPO): A = s - mean_g (mean 0 alone);
 *   rloo        A = s * n/(n-1) - mean_g * n/(n-1) for n > 1, A = s alone.
 *
 * The scalar is broadcast over the response's tokens by the caller (the
 * loss takes one advantage per token).
 *
 * With KL in the reward the scores are first reduced by the KL penalty
 * (trn_step); its coefficient comes from a KL controller, below.
 */
#ifndef TRN_ADVANTAGE_H
#define TRN_ADVANTAGE_H

#include "trn_model.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { TRN_ADV_GRPO = 0, TRN_ADV_RLOO = 1 } trn_adv_kind_t;

typedef struct {
    trn_adv_kind_t kind;
    bool norm_by_std; /* grpo only: divide by std (verl default true) */
    double eps;       /* grpo: added to the std (verl default 1e-6) */
} trn_adv_cfg_t;

/* The defaults verl uses: grpo, std normalisation on, eps 1e-6. */
trn_adv_cfg_t trn_adv_defaults(void);

/* Parses "grpo" or "rloo" (verl's adv_estimator names); LISA_INVALID. */
lisa_rc_t trn_adv_kind_parse(const char *name,
                             trn_adv_kind_t *out) LISA_NODISCARD;

/* adv[i] for n responses with scores[i] in groups group[i]. LISA_INVALID
 * for non-finite scores or a negative eps. */
lisa_rc_t trn_advantage(const trn_adv_cfg_t *cfg, const double *scores,
                        const int64_t *group, size_t n, double *adv,
                        trn_err_t *err) LISA_NODISCARD;

/* verl's KL controllers for the KL in the reward (algorithm.kl_ctrl):
 * fixed keeps `value`; adaptive multiplies it after each step by
 * 1 + clip(current_kl / target - 1, -0.2, 0.2) * n_steps / horizon, where
 * n_steps is the step's number of trajectories. */
typedef struct {
    bool adaptive;
    double value;   /* kl_ctrl.kl_coef, then the current coefficient */
    double target;  /* kl_ctrl.target_kl (> 0) */
    double horizon; /* kl_ctrl.horizon (> 0) */
} trn_kl_ctrl_t;

/* Parses kl_ctrl.type ("fixed" or "adaptive"); LISA_INVALID. */
lisa_rc_t trn_kl_ctrl_parse(const char *type, bool *adaptive) LISA_NODISCARD;

/* One step's update (a no-op for fixed). */
void trn_kl_ctrl_update(trn_kl_ctrl_t *k, double current_kl, double n_steps);

#endif
