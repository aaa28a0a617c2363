/*
 * trn_gpu_cp: context parallelism on the GPU model (trn_cp_t in
 * trn_model.h): this rank trains its rows of a batch whose other rows are
 * on the other ranks of the group.
 *
 * Everything but the attention runs on the rank's own rows, as on the
 * CPU reference. The attention runs over the whole batch on every rank:
 * per layer the ranks' q|k|v rows are gathered into the whole batch's
 * order and the training attention kernel runs over all of it; the rank
 * keeps its rows of the output. The backward gathers q|k|v, the outputs
 * and their gradients the same way, runs the attention backward over the
 * whole batch and keeps its rows of dq|dk|dv: every rank computes the
 * whole attention gradient alike, so nothing needs summing back. The
 * attention's work is therefore not divided between the ranks (every
 * other product, the activations and the vocabulary projection are); its
 * log-sum-exp is kept per layer for the whole batch ([L][H][n_global]
 * fp32), and each layer's output rows of this rank ([L][T][H*D] bf16), so
 * that a backward pass that recomputes the layers never runs the
 * attention again: every rank issues the same collectives in the same
 * order whatever it keeps or recomputes.
 *
 * The gathers go through NCCL when the model has a device communicator
 * (data parallel across GPUs: each rank's rows padded to the longest
 * rank's count, one all-gather, then a row permutation into the batch's
 * order), else through the batch's trn_cp_t sum on the host (exact: each
 * value is summed with zeros only), which lets several models share one
 * device in a test.
 */
#include "lisa/lisa_mem.h"
#include "trn_gpu_model_int.h"

#include <string.h>

/* The communicator of the gathers, or NULL (the host sum). */
static trn_dist_t *
s_dist(const trn_gpu_model_t *g)
{
    return g->dist ? g->dist : g->cp_dist;
}

void
trn_gpu_model_set_cp_dist(trn_gpu_model_t *g, trn_dist_t *d)
{
    g->cp_dist = d;
}

struct trn_gpu_cp {
    const trn_cp_t *cp;
    size_t T, n;                    /* this rank's rows, the whole batch's */
    size_t cap_n, cap_T, cap_stage; /* what the buffers hold */
    int world, rank;                /* of the device communicator (NCCL path) */
    size_t tmax;                    /* most rows of a rank (NCCL path) */
    int32_t *seg, *idx;     /* device: [n] sequence of each row; [T] rows */
    int32_t *perm;          /* device [n]: staging row of each (NCCL) */
    trn_bf16_t *qkv, *dqkv; /* [n, S] */
    trn_bf16_t *o, *dout;   /* [n, H*D] */
    trn_bf16_t *okeep;      /* [L][T, H*D]: this rank's outputs */
    trn_bf16_t *stage;      /* NCCL: [world * tmax, S] */
    float *lse;             /* [L][H][n] */
    float *scratch;         /* the attention backward's, n * H * (D + 1) */
    trn_bf16_t *hrows;      /* host path: [T, S] */
    float *hsum;            /* host path: [n, S] */
};

void
trn_gpu_cp_free(trn_gpu_model_t *g)
{
    struct trn_gpu_cp *c = g->cpx;
    if (!c)
        return;
    void **d[] = {
        (void **) &c->seg,     (void **) &c->idx,   (void **) &c->perm,
        (void **) &c->qkv,     (void **) &c->dqkv,  (void **) &c->o,
        (void **) &c->dout,    (void **) &c->stage, (void **) &c->lse,
        (void **) &c->scratch, (void **) &c->okeep};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        trn_cuda_free(d[i]);
    lisa_free(&c->hrows);
    lisa_free(&c->hsum);
    lisa_free(&g->cpx);
    g->cp_on = 0;
}

/* dst [n, C] = every rank's rows of src [T, C] (C <= S), in the batch's
 * order. */
static lisa_rc_t
s_gather(trn_gpu_model_t *g, trn_bf16_t *dst, const trn_bf16_t *src, int C,
         trn_err_t *err)
{
    struct trn_gpu_cp *c = g->cpx;
    lisa_rc_t rc;
    size_t Cz = (size_t) C;
    if (s_dist(g)) {
        rc = trn_cuda_copy(c->stage + (size_t) c->rank * c->tmax * Cz, src,
                           c->T * Cz * 2, NULL);
        if (rc == LISA_OK)
            rc = trn_dist_allgather_bf16(s_dist(g), c->stage, c->tmax * Cz);
        if (rc == LISA_OK)
            rc = trn_k_gather_rows(dst, c->stage, c->perm, (int) c->n, C, NULL);
        if (rc != LISA_OK)
            s_err(err, "context parallelism: the all-gather failed");
        return rc;
    }
    /* through the group's sum on the host: a bf16 value is the top half
     * of its float, and a sum of one value and zeros is exact */
    rc = trn_cuda_download(c->hrows, src, c->T * Cz * 2);
    if (rc != LISA_OK)
        return rc;
    memset(c->hsum, 0, c->n * Cz * sizeof(float));
    for (size_t t = 0; t < c->T; t++) {
        float *row = c->hsum + c->cp->rows[t] * Cz;
        for (size_t j = 0; j < Cz; j++) {
            uint32_t u = (uint32_t) c->hrows[t * Cz + j] << 16;
            memcpy(&row[j], &u, 4);
        }
    }
    rc = c->cp->sum(c->cp->self, c->hsum, c->n * Cz, err);
    if (rc != LISA_OK)
        return rc;
    trn_bf16_t *h = (trn_bf16_t *) (void *) c->hsum; /* in place, ahead */
    for (size_t i = 0; i < c->n * Cz; i++) {
        uint32_t u;
        memcpy(&u, &c->hsum[i], 4);
        h[i] = (trn_bf16_t) (u >> 16);
    }
    return trn_cuda_upload(dst, h, c->n * Cz * 2);
}

/* The staging row of every row of the batch (NCCL path) into *out (n
 * values, the caller frees), and c->tmax: the ranks' counts and row lists
 * are gathered. */
static lisa_rc_t
s_perm(trn_gpu_model_t *g, int32_t **out, trn_err_t *err)
{
    struct trn_gpu_cp *c = g->cpx;
    int W = c->world;
    lisa_rc_t rc = LISA_OK;
    float *cnt = trn_cuda_malloc((size_t) W * 4);
    float *hc = lisa_calloc((size_t) W, 4), *hr = NULL, *rows = NULL;
    int32_t *perm = NULL;
    *out = NULL;
    if (!cnt) {
        rc = LISA_TOOLARGE;
        goto out;
    }
    hc[c->rank] = (float) c->T; /* exact: batches stay under 2^24 */
    S_TRY(trn_cuda_upload(cnt, hc, (size_t) W * 4));
    S_TRY(trn_dist_allgather_f32(s_dist(g), cnt, 1));
    S_TRY(trn_cuda_download(hc, cnt, (size_t) W * 4));
    c->tmax = 1;
    for (int r = 0; r < W; r++)
        if ((size_t) hc[r] > c->tmax)
            c->tmax = (size_t) hc[r];
    size_t all = (size_t) W * c->tmax;
    hr = lisa_malloc(all * 4);
    for (size_t i = 0; i < all; i++)
        hr[i] = -1.0f;
    for (size_t t = 0; t < c->T; t++)
        hr[(size_t) c->rank * c->tmax + t] = (float) c->cp->rows[t];
    rows = trn_cuda_malloc(all * 4);
    if (!rows) {
        rc = LISA_TOOLARGE;
        goto out;
    }
    S_TRY(trn_cuda_upload(rows, hr, all * 4));
    S_TRY(trn_dist_allgather_f32(s_dist(g), rows, c->tmax));
    S_TRY(trn_cuda_download(hr, rows, all * 4));
    perm = lisa_malloc(c->n * 4);
    for (size_t i = 0; i < c->n; i++)
        perm[i] = -1;
    for (size_t i = 0; i < all; i++) {
        long v = (long) hr[i];
        if (v >= 0 && (size_t) v < c->n)
            perm[v] = (int32_t) i;
    }
    for (size_t i = 0; i < c->n; i++)
        if (perm[i] < 0) {
            s_err(err, "context parallelism: a row of the batch is on no rank");
            rc = LISA_INVALID;
            goto out;
        }
    *out = perm;
    perm = NULL;
out:
    trn_cuda_free(&cnt);
    trn_cuda_free(&rows);
    lisa_free(&hc);
    lisa_free(&hr);
    lisa_free(&perm);
    return rc;
}

/* Buffers for a batch of n rows, this rank's T of them (after s_perm on
 * the NCCL path: the staging buffer's size needs tmax); kept while they
 * are large enough. */
static lisa_rc_t
s_reserve(trn_gpu_model_t *g, size_t T, size_t n)
{
    struct trn_gpu_cp *c = g->cpx;
    size_t S = (size_t) g->S, HD = (size_t) (g->H * g->D);
    size_t H = (size_t) g->H, L = (size_t) g->L;
    size_t stage = s_dist(g) ? (size_t) c->world * c->tmax * S : 0;
    void **d[] = {
        (void **) &c->seg,     (void **) &c->idx,   (void **) &c->perm,
        (void **) &c->qkv,     (void **) &c->dqkv,  (void **) &c->o,
        (void **) &c->dout,    (void **) &c->stage, (void **) &c->lse,
        (void **) &c->scratch, (void **) &c->okeep};
    if (n <= c->cap_n && T <= c->cap_T && stage <= c->cap_stage &&
        (s_dist(g) || c->hsum))
        return LISA_OK;
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        trn_cuda_free(d[i]);
    lisa_free(&c->hrows);
    lisa_free(&c->hsum);
    c->cap_n = c->cap_T = c->cap_stage = 0;
    size_t bytes[] = {n * 4,         T * 4,
                      n * 4,         n * S * 2,
                      n * S * 2,     n * HD * 2,
                      n * HD * 2,    stage * 2,
                      L * H * n * 4, n * H * ((size_t) g->D + 1) * 4,
                      L * T * HD * 2};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        if (bytes[i] == 0)
            continue;
        *d[i] = trn_cuda_malloc(bytes[i]);
        if (!*d[i])
            return LISA_TOOLARGE;
    }
    if (!s_dist(g)) {
        c->hrows = lisa_malloc(T * S * 2);
        c->hsum = lisa_malloc(n * S * 4);
    }
    c->cap_n = n;
    c->cap_T = T;
    c->cap_stage = stage;
    return LISA_OK;
}

lisa_rc_t
trn_gpu_cp_begin(trn_gpu_model_t *g, const trn_batch_t *b, int32_t *pos,
                 trn_err_t *err)
{
    const trn_cp_t *cp = b->cp;
    size_t T = b->n_tokens, n = cp->n_global;
    if ((!cp->sum && !s_dist(g)) || !cp->rows || T == 0 || T > n ||
        n > TRN_MAX_BATCH_TOKENS || b->seq_offsets[b->n_seqs] != n) {
        s_err(err, "context parallelism: the GPU needs a device communicator "
                   "or a sum, at least one row on each rank and offsets over "
                   "the whole batch");
        return LISA_INVALID;
    }
    if (!g->cpx)
        g->cpx = lisa_calloc(1, sizeof *g->cpx);
    struct trn_gpu_cp *c = g->cpx;
    c->cp = cp;
    c->T = T;
    c->n = n;
    c->world = s_dist(g) ? trn_dist_world(s_dist(g)) : 1;
    c->rank = s_dist(g) ? trn_dist_rank(s_dist(g)) : 0;
    lisa_rc_t rc = LISA_OK;
    int32_t *seg = lisa_malloc(n * 4), *idx = lisa_malloc(T * 4), *perm = NULL;
    for (size_t s = 0; s < b->n_seqs; s++) {
        if (b->seq_offsets[s + 1] <= b->seq_offsets[s]) {
            s_err(err, "sequence offsets must increase");
            rc = LISA_INVALID;
            goto out;
        }
        for (size_t t = b->seq_offsets[s]; t < b->seq_offsets[s + 1]; t++)
            seg[t] = (int32_t) s;
    }
    for (size_t t = 0; t < T; t++) {
        size_t r = cp->rows[t];
        if (r >= n || (t > 0 && r <= cp->rows[t - 1])) {
            s_err(err, "context parallelism: rows outside the batch or out of "
                       "order");
            rc = LISA_INVALID;
            goto out;
        }
        idx[t] = (int32_t) r;
        pos[t] = (int32_t) (r - b->seq_offsets[seg[r]]);
    }
    if (s_dist(g)) /* every rank's rows: the staging layout and its size */
        S_TRY(s_perm(g, &perm, err));
    S_TRY(s_reserve(g, T, n));
    if (perm)
        S_TRY(trn_cuda_upload(c->perm, perm, n * 4));
    S_TRY(trn_cuda_upload(c->seg, seg, n * 4));
    S_TRY(trn_cuda_upload(c->idx, idx, T * 4));
out:
    if (rc == LISA_TOOLARGE)
        s_err(err, "context parallelism: out of device memory for the "
                   "whole batch's attention");
    lisa_free(&seg);
    lisa_free(&idx);
    lisa_free(&perm);
    return rc;
}

trn_bf16_t *
trn_gpu_cp_o(trn_gpu_model_t *g, int l)
{
    struct trn_gpu_cp *c = g->cpx;
    return c->okeep + (size_t) l * c->cap_T * (size_t) (g->H * g->D);
}

lisa_rc_t
trn_gpu_cp_attn_fwd(trn_gpu_model_t *g, int l, trn_err_t *err)
{
    struct trn_gpu_cp *c = g->cpx;
    lisa_rc_t rc = LISA_OK;
    int H = g->H, Hk = g->Hk, D = g->D, n = (int) c->n;
    S_TRY(s_gather(g, c->qkv, g->qkvn, g->S, err));
    S_TRY(trn_k_attn_fwd(c->o, c->lse + (size_t) l * (size_t) H * c->n, c->qkv,
                         c->qkv + H * D, c->qkv + (H + Hk) * D, g->S, c->seg, n,
                         H, Hk, D, NULL));
    S_TRY(trn_k_gather_rows(g->o, c->o, c->idx, (int) c->T, H * D, NULL));
out:
    return rc;
}

lisa_rc_t
trn_gpu_cp_attn_bwd(trn_gpu_model_t *g, int l, trn_err_t *err)
{
    struct trn_gpu_cp *c = g->cpx;
    lisa_rc_t rc = LISA_OK;
    int H = g->H, Hk = g->Hk, D = g->D, n = (int) c->n;
    S_TRY(s_gather(g, c->qkv, g->qkvn, g->S, err));
    S_TRY(s_gather(g, c->o, g->o, H * D, err));
    S_TRY(s_gather(g, c->dout, g->da, H * D, err));
    S_TRY(trn_k_attn_bwd(c->dqkv, c->dqkv + H * D, c->dqkv + (H + Hk) * D, g->S,
                         c->scratch, c->dout, c->o,
                         c->lse + (size_t) l * (size_t) H * c->n, c->qkv,
                         c->qkv + H * D, c->qkv + (H + Hk) * D, g->S, c->seg, n,
                         H, Hk, D, NULL));
    S_TRY(trn_k_gather_rows(g->dqkv, c->dqkv, c->idx, (int) c->T, g->S, NULL));
out:
    return rc;
}
