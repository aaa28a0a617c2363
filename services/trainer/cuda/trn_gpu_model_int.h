/*
 * trn_gpu_model_int: the GPU model's state, shared by its training
 * (trn_gpu_model.c) and generation (trn_gpu_gen.c) halves. Private to
 * services/trainer/cuda/.
 */
#ifndef TRN_GPU_MODEL_INT_H
#define TRN_GPU_MODEL_INT_H

#include "lisa/lisa_log.h"
#include "trn_cuda.h"
#include "trn_gpu_model.h"

#include <stdio.h>

/* Offsets (elements) of one layer's tensors in the parameter array;
 * q_norm / k_norm only in Qwen3, qkv_b (the q|k|v biases) only in Qwen2. */
typedef struct {
    size_t w_in, qkv, qkv_b, o, q_norm, k_norm, w_post, gu, down;
} s_layer_t;

/* The kinds of work trn_gpu_model_phases reports (trn_gpu_model.c names
 * them; generation steps with prompt rows charge the same kinds). */
enum {
    TRN_PH_NORM,
    TRN_PH_QK,
    TRN_PH_ATTN_F,
    TRN_PH_ATTN_B,
    TRN_PH_PROD_F,
    TRN_PH_PROD_BD,
    TRN_PH_PROD_BW,
    TRN_PH_SWIGLU,
    TRN_PH_LOSS,
    TRN_PH_OTHER
};

/* Most sequences of a generation step (a KV cache's max_seqs): the rows
 * of its logits and sampling buffers. */
#define TRN_GEN_MAX_ROWS 1024

struct trn_gpu_model {
    trn_config_t cfg;
    int C, I, H, Hk, D, S, L, V;
    int qk_norm, qkv_bias; /* the family's: Qwen3 norms, Qwen2 biases */
    size_t n_params;
    size_t embed, final_norm, lm_head;
    s_layer_t *layers;
    trn_blas_t *blas;
    float *w32, *grad, *m, *v; /* fp32 [n_params]; data parallel: w32, m
                                  and v [shard], grad [n_pad] */
    trn_bf16_t *wb;            /* bf16 [n_params] */
    float *scalar;             /* device scratch scalar */
    int step;
    /* data parallel (ZeRO-1): buffers of n_pad = world * shard values */
    trn_dist_t *dist;
    size_t n_pad, shard;
    float *gshard; /* this rank's summed gradient shard */
    /* Overlap (on by default): the shards are summed bucket by bucket with
     * trn_dist_reduce_to_owners, during the backward pass marked last of
     * the step (each layer's bucket once its gradient is complete) or else
     * all at once in adamw; `reduced` says the buckets were started. */
    int overlap, last_bwd, reduced;
    /* activations, sized for cap_T tokens */
    size_t cap_T, chunk;
    size_t chunk_max; /* LM-head rows per chunk asked for (0: automatic) */
    int32_t *tokens, *targets, *pos, *seg;
    float *xs; /* (L+1) x [T, C] layer inputs */
    /* A layer's internals (the pointers below, from xm to lse): with
     * `keep`, one copy per layer back to back from act_base (no
     * recomputation in backward); else one copy, recomputed per layer.
     * s_bind points them at layer l's copy. */
    int recompute; /* TRN_RECOMPUTE_* */
    int keep;
    void *act_base;
    size_t act_layer_bytes;
    /* keep, leanly: h1, qkvn, h2 and a are one copy at act_shared, remade
     * in the backward pass from what each layer keeps */
    int lean;
    void *act_shared;
    /* Recomputing (auto mode) with memory to spare: every layer's
     * attention output and log-sum-exp are kept (o, lse point into these
     * per layer), so the backward pass's recomputed forward skips the
     * attention, the largest part of a long sequence's layer. */
    int keep_attn;
    void *attn_keep;        /* L x ([T, H*D] bf16 + [T, H] fp32), padded */
    size_t attn_keep_bytes; /* per layer */
    float *xm;              /* [T, C] */
    trn_bf16_t *h1, *qkv, *qkvn, *o, *h2, *gu, *a;
    float *rstd1, *rstd2, *rstdq, *rstdk, *lse;
    trn_bf16_t *hf;
    float *rstdf;
    float *dx;                               /* fp32 [T, C] */
    trn_bf16_t *dxb, *dqkv, *dgu, *da, *dhf; /* bf16 scratch */
    float *attn_scratch;
    float *logits;       /* fp32 [chunk, V] */
    int logits_kept;     /* the last forward's logits are all in `logits` */
    trn_bf16_t *dlogits; /* bf16 [chunk, V] */
    float *logp, *dlogp, *ent, *dent, *head_lse; /* [T] */
    size_t T; /* tokens of the last forward */
    float inv_temp;
    int have_forward;
    /* The training state (w32, grad, m, v, gshard) off the device
     * (trn_gpu_model_set_train_state): its page-locked host copy, kept
     * allocated for the next time; grad_zero: the gradient is known to be
     * all zeros (not copied, zeroed on the way back). */
    int state_off;
    int grad_zero;
    trn_cuda_timer_t *timer; /* LISA_CUDA_PHASES=1 (trn_gpu_model_phases) */
    float *hstate;
    size_t hstate_n;
    /* Optimizer offload (trn_gpu_offload.c): w32, m and v live in hopt
     * (page-locked, in that order, n_params each) and not on the device;
     * an update streams them through opt_dev (two sets of three chunk
     * buffers) on opt_st. */
    int opt_off;
    size_t opt_chunk; /* floats a chunk */
    float *hopt, *opt_dev;
    trn_cuda_stream_t *opt_st[2];
    /* Context parallelism (trn_gpu_cp.c): the last forward's batch was
     * this rank's rows of a larger one (cp_on); its state and buffers. */
    int cp_on;
    struct trn_gpu_cp *cpx;
    trn_dist_t *cp_dist; /* trn_gpu_model_set_cp_dist */
};

static inline void
s_err(trn_err_t *err, const char *msg)
{
    if (err)
        snprintf(err->msg, sizeof err->msg, "%s", msg);
    lisa_log_error("gpu model: %s", msg);
}

#define S_TRY(x)                                                               \
    do {                                                                       \
        rc = (x);                                                              \
        if (rc != LISA_OK)                                                     \
            goto out;                                                          \
    } while (0)

/* S_TRY, then, when `on`, the device time since g's timer's last mark
 * charged to kind k (trn_gpu_model_phases). */
#define S_TRY_MARK(on, k, x)                                                   \
    do {                                                                       \
        S_TRY(x);                                                              \
        if (on)                                                                \
            (void) trn_cuda_timer_mark(g->timer, (k));                         \
    } while (0)

/* trn_gpu_offload.c: the AdamW update of the offloaded state (the norm
 * in g->scalar and g->step already set), the host copy's weights and
 * moments out (NULL: skipped) and moments in, and its buffers freed. */
lisa_rc_t trn_gpu_model_adamw_offloaded(trn_gpu_model_t *g, float lr,
                                        float beta1, float beta2, float eps,
                                        float weight_decay, float clip);
lisa_rc_t trn_gpu_model_offload_get(trn_gpu_model_t *g, float *w, float *m,
                                    float *v);
lisa_rc_t trn_gpu_model_offload_set(trn_gpu_model_t *g, const float *m,
                                    const float *v);
void trn_gpu_model_offload_free(trn_gpu_model_t *g);

/* trn_gpu_cp.c: context parallelism. begin checks a batch with cp, lays
 * out the whole batch (every rank's rows on the NCCL path) and writes this
 * rank's rows' positions into pos; attn_fwd runs layer l's attention over
 * the whole batch into g->o (this rank's rows) from g->qkvn; attn_bwd
 * writes g->dqkv (this rank's rows) from g->qkvn, g->o and the output's
 * gradient in g->da; free releases it all. */
lisa_rc_t trn_gpu_cp_begin(trn_gpu_model_t *g, const trn_batch_t *b,
                           int32_t *pos, trn_err_t *err);
lisa_rc_t trn_gpu_cp_attn_fwd(trn_gpu_model_t *g, int l, trn_err_t *err);
/* Where layer l's attention output rows of this rank are kept (g->o while
 * the layer runs, forward and backward). */
trn_bf16_t *trn_gpu_cp_o(trn_gpu_model_t *g, int l);
lisa_rc_t trn_gpu_cp_attn_bwd(trn_gpu_model_t *g, int l, trn_err_t *err);
void trn_gpu_cp_free(trn_gpu_model_t *g);

/* Makes the activation buffers hold at least T tokens (trn_gpu_model.c). */
lisa_rc_t trn_gpu_model_reserve(trn_gpu_model_t *g, size_t T);

/* The q (k) norm weights at W + off when the family has them, else NULL
 * (the kernels then rotate without a norm). */
static inline const trn_bf16_t *
s_norm_w(const trn_gpu_model_t *g, const trn_bf16_t *W, size_t off)
{
    return g->qk_norm ? W + off : NULL;
}

#endif
