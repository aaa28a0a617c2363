/*
 * trn_optim: AdamW and global gradient-norm clipping over flat fp32
 * arrays, as PyTorch computes them (torch.optim.AdamW with decoupled weight
 * decay and bias correction; torch.nn.utils.clip_grad_norm_ with its
 * 1e-6 guard), which is what verl's FSDP actor uses.
 *
 * The trainer keeps all parameters in one array (trn_model_params), so
 * one optimizer covers the whole model; m and v are fp32 and live here.
 */
#ifndef TRN_OPTIM_H
#define TRN_OPTIM_H

#include "trn_model.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double lr;           /* verl default 1e-6 */
    double beta1, beta2; /* 0.9, 0.999 */
    double eps;          /* 1e-8 */
    double weight_decay; /* 0.01 */
} trn_adamw_cfg_t;

/* verl's actor optimizer defaults. */
trn_adamw_cfg_t trn_adamw_defaults(void);

typedef struct trn_adamw trn_adamw_t;

/* State for n parameters (m = v = 0, step 0). */
trn_adamw_t *trn_adamw_new(size_t n);

/* Frees the optimizer; safe on NULL and twice. */
void trn_adamw_destroy(trn_adamw_t **opt);

/* Steps taken so far. */
uint64_t trn_adamw_steps(const trn_adamw_t *opt);

/* The moment arrays (trn_adamw_len elements each), writable, and the
 * step count setter: for checkpoints of the optimizer state. */
float *trn_adamw_m(trn_adamw_t *opt);
float *trn_adamw_v(trn_adamw_t *opt);
size_t trn_adamw_len(const trn_adamw_t *opt);
void trn_adamw_set_steps(trn_adamw_t *opt, uint64_t steps);

/* One update of params[n] with grads[n]:
 *   p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 *   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
 * LISA_INVALID (nothing changed) for a bad config or n mismatch. */
lisa_rc_t trn_adamw_step(trn_adamw_t *opt, const trn_adamw_cfg_t *cfg,
                         float *params, const float *grads, size_t n,
                         trn_err_t *err) LISA_NODISCARD;

/* Global L2 norm of grads[n] (computed in double). */
double trn_grad_norm(const float *grads, size_t n);

/* Clips like clip_grad_norm_: with total norm N, multiplies every gradient
 * by min(1, max_norm / (N + 1e-6)); returns N through *norm. When N is not
 * finite the gradients are left alone and LISA_INVALID is returned (verl
 * skips the optimizer step then). */
lisa_rc_t trn_grad_clip(float *grads, size_t n, double max_norm,
                        double *norm) LISA_NODISCARD;

#endif
