/*
 * trn_loss: the GRPO-family policy loss and its gradient with respect to
 * each token's log-probability (and entropy).
 *
 * Definitions follow verl (trainer/ppo/core_algos.py) term for term:
 *
 *   ratio  r = exp(clamp(logp - old_logp, -20, 20))
 *   pg1 = -A r,  pg2 = -A clamp(r, 1 - clip_low, 1 + clip_high)
 *   pgc = max(pg1, pg2)
 *   dual clip: for A < 0, pg = min(pgc, -A clip_c); else pg = pgc
 *   optional truncated importance weights w: pg *= w (constants)
 *   loss = agg(pg) - entropy_coef * agg(entropy) + kl_coef * agg(kl)
 *
 * with kl one of k1 (logp - ref), abs, k2 (0.5 (logp - ref)^2) or
 * low_var_kl / k3 (d = clamp(ref - logp, -20, 20); clamp(e^d - d - 1,
 * -10, 10)), and agg one of
 *
 *   token-mean               sum(mask * x) / T * dp
 *   seq-mean-token-sum       sum_s sum_t(mask * x) / S * dp
 *   seq-mean-token-mean      sum_s [sum_t(mask * x) / (n_s + 1e-8)] / S * dp
 *   seq-mean-token-sum-norm  sum(mask * x) / loss_scale_factor
 *
 * where T is the global token count (batch_num_tokens, or the local mask
 * count), S the global sequence count (global_batch_size, or the local
 * count of sequences with at least one masked token), dp the data-parallel
 * size, and loss_scale_factor a constant (verl: the padded response
 * length; here the caller's, or the longest sequence when 0). The whole
 * loss is multiplied by `scale` (1 / gradient-accumulation steps).
 *
 * Gradients are the exact derivatives of those expressions, with
 * PyTorch's conventions at clamps (zero slope outside) and at ties of max
 * (half to each side, whose slopes agree inside the clip range).
 *
 * Sequences are packed the same way as in trn_batch_t: token arrays of
 * n_tokens entries split by seq_offsets.
 */
#ifndef TRN_LOSS_H
#define TRN_LOSS_H

#include "trn_model.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    TRN_AGG_TOKEN_MEAN = 0,
    TRN_AGG_SEQ_MEAN_TOKEN_SUM = 1,
    TRN_AGG_SEQ_MEAN_TOKEN_MEAN = 2,
    TRN_AGG_SEQ_MEAN_TOKEN_SUM_NORM = 3
} trn_agg_t;

typedef enum {
    TRN_KL_K1 = 0,  /* "kl", "k1" */
    TRN_KL_ABS = 1, /* "abs" */
    TRN_KL_K2 = 2,  /* "mse", "k2" */
    TRN_KL_K3 = 3   /* "low_var_kl", "k3" */
} trn_kl_t;

typedef struct {
    double clip_low, clip_high; /* verl: 0.2 / 0.2 (DAPO high 0.28) */
    double clip_c;              /* dual clip, > 1 (verl 3.0) */
    trn_agg_t agg;
    double kl_coef; /* 0: no KL term (ref_logp may be NULL) */
    trn_kl_t kl_type;
    double entropy_coef; /* 0: no entropy term (entropy may be NULL) */
    /* global normalisers; 0 means "local" (see the file comment) */
    double dp_size;
    double batch_num_tokens;
    double global_batch_size;
    double loss_scale_factor;
    double scale; /* multiplies the loss and every gradient */
} trn_loss_cfg_t;

/* verl's defaults: clip 0.2/0.2, clip_c 3, token-mean, no KL (low_var_kl
 * when on), no entropy, local normalisers, dp 1, scale 1. */
trn_loss_cfg_t trn_loss_defaults(void);

/* Parses verl's loss_agg_mode names ("token-mean", ...). */
lisa_rc_t trn_agg_parse(const char *name, trn_agg_t *out) LISA_NODISCARD;
/* Parses verl's kl_loss_type names ("low_var_kl", "k3", "kl", ...). */
lisa_rc_t trn_kl_parse(const char *name, trn_kl_t *out) LISA_NODISCARD;

typedef struct {
    size_t n_tokens;
    const size_t *seq_offsets; /* n_seqs + 1 */
    size_t n_seqs;
    const uint8_t *mask;     /* 1: the model sampled this token */
    const float *logp;       /* current policy */
    const float *old_logp;   /* behaviour policy (ratio denominator) */
    const float *adv;        /* advantage per token */
    const float *ref_logp;   /* reference policy, for KL (or NULL) */
    const float *is_weights; /* truncated IS weights (or NULL) */
    const float *entropy;    /* per token (or NULL) */
} trn_loss_in_t;

typedef struct {
    double loss;              /* the scalar that gradients belong to */
    double pg_loss;           /* agg(pg), unscaled */
    double kl_loss;           /* agg(kl), unscaled (0 when off) */
    double entropy_loss;      /* agg(entropy), unscaled (0 when off) */
    double pg_clipfrac;       /* masked mean of pg2 > pg1 */
    double pg_clipfrac_lower; /* masked mean of pgc > -A c for A < 0 */
    double ppo_kl;            /* masked mean of old_logp - logp (clamped) */
    double tokens;            /* local mask count */
} trn_loss_out_t;

/* Computes the loss and writes dlogp[t] (and dentropy[t] when not NULL)
 * for every token (0 where mask is 0). LISA_INVALID for a bad config
 * (clip_c <= 1, negative clips or coefficients, scale <= 0) or inputs
 * missing for the terms asked for. */
lisa_rc_t trn_loss_compute(const trn_loss_cfg_t *cfg, const trn_loss_in_t *in,
                           float *dlogp, float *dentropy, trn_loss_out_t *out,
                           trn_err_t *err) LISA_NODISCARD;

/* verl's truncated importance weights (rollout_is), from the trainer's
 * recomputed log-probs in->old_logp and the engine's rollout_logp: token
 * level w = min(exp(clamp(old_logp - rollout_logp, -20, 20)), threshold);
 * sequence level uses the masked sum of the sequence's log ratios for
 * every token of it. Masked-out tokens get 0. */
typedef enum { TRN_IS_TOKEN = 0, TRN_IS_SEQUENCE = 1 } trn_is_level_t;

lisa_rc_t trn_is_weights(trn_is_level_t level, double threshold,
                         const trn_loss_in_t *in, const float *rollout_logp,
                         float *w, trn_err_t *err) LISA_NODISCARD;

#endif
