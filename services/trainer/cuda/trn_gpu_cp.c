/*
 * trn_gpu_cp: context parallelism on the GPU model (trn_cp_t in
 * trn_model.h): this rank trains its rows of a batch whose other rows are
 * on the other ranks of the group.
 *
 * Everything but the attention runs on the rank's own rows, as on the
 * CPU reference. The attention is divided by heads: rank r of W takes the
 * KV heads [Hk r / W, Hk (r + 1) / W) and their query heads, over the
 * whole batch. Per layer the ranks' q|k|v rows are gathered into the
 * whole batch's order, each rank runs the training attention kernel for
 * its heads over all rows, and the heads' outputs go back to the ranks
 * that own the rows. The backward gathers q|k|v, the outputs and their
 * gradients the same way, runs the attention backward for the rank's
 * heads, and sends dq|dk|dv back to the rows' owners. A head's attention
 * is computed on one rank by the same kernel over the same rows as one
 * model computes it, so nothing is summed, and every rank
 * has 1/W of the attention's work whatever the causal mask (when W
 * divides Hk; else the runs differ by one KV head, and a rank with none
 * only takes part in the exchanges). The log-sum-exp of the rank's heads
 * is kept per layer ([L][H][n_global] fp32, its heads' rows), and each
 * layer's output rows of this rank ([L][T][H*D] bf16), so that a backward
 * pass that recomputes the layers never runs the attention again: every
 * rank issues the same collectives in the same order whatever it keeps or
 * recomputes.
 *
 * Rows are gathered by padding each rank's rows to the longest rank's
 * count, one all-gather, then a row permutation into the batch's order;
 * heads go back by one all-gather of every rank's columns (padded to the
 * widest rank's), of which each rank copies its rows into place. The
 * all-gathers go through NCCL when the model has a device communicator
 * (data parallel across GPUs); without one, through the batch's trn_cp_t
 * sum on the host (exact: each value is summed with zeros only), which
 * lets several models share one device in a test, with the rank and the
 * group's size from trn_cp_t. Only the all-gather itself differs: the
 * staging, the permutation and the placing of columns are the same code.
 */
#include "lisa/lisa_mem.h"
#include "trn_gpu_model_int.h"
#include "trn_safetensors.h"

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
    size_t T, n; /* this rank's rows, the whole batch's */
    size_t cap_n, cap_T, cap_stage, cap_bw; /* what the buffers hold */
    int world, rank;                        /* of the group */
    int k0, k1, kmax;       /* this rank's KV heads; most KV heads of a rank */
    size_t bw;              /* columns of the widest rank's q|k|v heads */
    size_t tmax;            /* most rows of a rank */
    int32_t *seg, *idx;     /* device: [n] sequence of each row; [T] rows */
    int32_t *perm;          /* device [n]: staging row of each */
    trn_bf16_t *qkv;        /* [n, S] */
    trn_bf16_t *o, *dout;   /* [n, H*D] */
    trn_bf16_t *blk;        /* [n, bw]: this rank's heads' o or dq|dk|dv */
    trn_bf16_t *ohd, *dohd; /* [n, its query heads x D]: o and dout */
    trn_bf16_t *tmp;        /* [T, bw] */
    trn_bf16_t *okeep;      /* [L][T, H*D]: this rank's outputs */
    trn_bf16_t *stage;      /* [world * tmax, S] or [world * n, bw] */
    float *lse;             /* [L][H][n] */
    float *scratch;         /* the attention backward's */
};

/* The device buffers, in one list for freeing and sizing. */
#define S_CP_BUFS(c)                                                           \
    {                                                                          \
        (void **) &(c)->seg, (void **) &(c)->idx, (void **) &(c)->perm,        \
            (void **) &(c)->qkv, (void **) &(c)->o, (void **) &(c)->dout,      \
            (void **) &(c)->blk, (void **) &(c)->ohd, (void **) &(c)->dohd,    \
            (void **) &(c)->tmp, (void **) &(c)->stage, (void **) &(c)->lse,   \
            (void **) &(c)->scratch, (void **) &(c)->okeep                     \
    }

static void
s_free_bufs(struct trn_gpu_cp *c)
{
    void **d[] = S_CP_BUFS(c);
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        trn_cuda_free(d[i]);
}

void
trn_gpu_cp_free(trn_gpu_model_t *g)
{
    struct trn_gpu_cp *c = g->cpx;
    if (!c)
        return;
    s_free_bufs(c);
    lisa_free(&g->cpx);
    g->cp_on = 0;
}

/* In place: buf holds world x shard values, this rank's at rank x shard,
 * and gets every rank's (es: 2 for bf16, 4 for fp32). Over the device
 * communicator, or through the batch's sum on the host: this rank's
 * values in its slot of a zeroed vector of floats, summed (exact: each
 * value meets only zeros, and a bf16 value is the top half of its float).
 * Either way the same values land in the same places, so the code around
 * it is the same with one device as with several. */
static lisa_rc_t
s_allgather(trn_gpu_model_t *g, void *buf, size_t shard, size_t es,
            trn_err_t *err)
{
    struct trn_gpu_cp *c = g->cpx;
    lisa_rc_t rc;
    if (s_dist(g)) {
        rc = es == 2 ? trn_dist_allgather_bf16(s_dist(g), buf, shard)
                     : trn_dist_allgather_f32(s_dist(g), buf, shard);
        if (rc != LISA_OK)
            s_err(err, "context parallelism: the all-gather failed");
        return rc;
    }
    size_t all = (size_t) c->world * shard, off = (size_t) c->rank * shard;
    float *h = lisa_calloc(all ? all : 1, sizeof *h);
    unsigned char *b = lisa_malloc(all ? all * es : 1);
    rc = trn_cuda_download(b + off * es, (unsigned char *) buf + off * es,
                           shard * es);
    for (size_t i = 0; rc == LISA_OK && i < shard; i++) {
        if (es == 2) {
            uint16_t v;
            memcpy(&v, b + (off + i) * 2, 2);
            h[off + i] = trn_bf16_to_f32(v);
        } else {
            memcpy(&h[off + i], b + (off + i) * 4, 4);
        }
    }
    if (rc == LISA_OK)
        rc = c->cp->sum(c->cp->self, h, all, err);
    for (size_t i = 0; rc == LISA_OK && i < all; i++) {
        if (es == 2) {
            uint16_t v = trn_f32_to_bf16(h[i]);
            memcpy(b + i * 2, &v, 2);
        } else {
            memcpy(b + i * 4, &h[i], 4);
        }
    }
    if (rc == LISA_OK)
        rc = trn_cuda_upload(buf, b, all * es);
    lisa_free(&h);
    lisa_free(&b);
    return rc;
}

/* dst [n, C] = every rank's rows of src [T, C] (C <= S), in the batch's
 * order: each rank's rows padded to the longest rank's count, gathered,
 * then put in order by the permutation. */
static lisa_rc_t
s_gather(trn_gpu_model_t *g, trn_bf16_t *dst, const trn_bf16_t *src, int C,
         trn_err_t *err)
{
    struct trn_gpu_cp *c = g->cpx;
    lisa_rc_t rc = LISA_OK;
    size_t Cz = (size_t) C;
    S_TRY(trn_cuda_copy(c->stage + (size_t) c->rank * c->tmax * Cz, src,
                        c->T * Cz * 2, NULL));
    S_TRY(s_allgather(g, c->stage, c->tmax * Cz, 2, err));
    S_TRY(trn_k_gather_rows(dst, c->stage, c->perm, (int) c->n, C, NULL));
out:
    return rc;
}

/* The staging row of every row of the batch into *out (n values, the
 * caller frees), and c->tmax: the ranks' counts and row lists are
 * gathered. */
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
    S_TRY(s_allgather(g, cnt, 1, 4, err));
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
    S_TRY(s_allgather(g, rows, c->tmax, 4, err));
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

/* Buffers for a batch of n rows, this rank's T of them (after s_heads
 * and s_perm: the staging buffer's size needs bw and tmax); kept while
 * they are large enough. */
static lisa_rc_t
s_reserve(trn_gpu_model_t *g, size_t T, size_t n)
{
    struct trn_gpu_cp *c = g->cpx;
    size_t S = (size_t) g->S, HD = (size_t) (g->H * g->D);
    size_t H = (size_t) g->H, L = (size_t) g->L, D = (size_t) g->D;
    size_t qw = (size_t) c->kmax * (size_t) (g->H / g->Hk) * D;
    size_t W = (size_t) c->world, stage = W * c->tmax * S;
    if (W * n * c->bw > stage)
        stage = W * n * c->bw;
    if (n <= c->cap_n && T <= c->cap_T && stage <= c->cap_stage &&
        c->bw <= c->cap_bw)
        return LISA_OK;
    s_free_bufs(c);
    c->cap_n = c->cap_T = c->cap_stage = c->cap_bw = 0;
    void **d[] = S_CP_BUFS(c);
    size_t bytes[] = {n * 4,
                      T * 4,
                      n * 4,
                      n * S * 2,
                      n * HD * 2,
                      n * HD * 2,
                      n * c->bw * 2,
                      n * qw * 2,
                      n * qw * 2,
                      T * c->bw * 2,
                      stage * 2,
                      L * H * n * 4,
                      n * (qw / D) * (D + 1) * 4,
                      L * T * HD * 2};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        if (bytes[i] == 0)
            continue;
        *d[i] = trn_cuda_malloc(bytes[i]);
        if (!*d[i])
            return LISA_TOOLARGE;
    }
    c->cap_n = n;
    c->cap_T = T;
    c->cap_stage = stage;
    c->cap_bw = c->bw;
    return LISA_OK;
}

/* The group, and this rank's KV heads (trn_cp_heads). */
static lisa_rc_t
s_heads(trn_gpu_model_t *g, const trn_cp_t *cp, trn_err_t *err)
{
    struct trn_gpu_cp *c = g->cpx;
    if (s_dist(g)) {
        c->world = trn_dist_world(s_dist(g));
        c->rank = trn_dist_rank(s_dist(g));
    } else {
        c->world = cp->world;
        c->rank = cp->rank;
    }
    if (c->world < 1 || c->rank < 0 || c->rank >= c->world ||
        (s_dist(g) && cp->world != 0 &&
         (cp->world != c->world || cp->rank != c->rank))) {
        s_err(err, "context parallelism: the batch's rank and group size do "
                   "not match the device communicator's");
        return LISA_INVALID;
    }
    int Hk = g->Hk, W = c->world;
    trn_cp_heads(Hk, c->rank, W, &c->k0, &c->k1);
    c->kmax = (Hk + W - 1) / W;
    c->bw = (size_t) c->kmax * (size_t) (g->H / Hk + 2) * (size_t) g->D;
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
    lisa_rc_t rc = s_heads(g, cp, err);
    if (rc != LISA_OK)
        return rc;
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
    S_TRY(s_perm(g, &perm, err)); /* the staging layout and its size */
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

/* A run of columns of a rank's heads: at `col` of a whole row, `w` wide,
 * at `off` in the rank's block. */
typedef struct {
    size_t col, w, off;
} s_cols_t;

/* Rank r's columns of o (nseg 1: its query heads) or of q|k|v (nseg 3:
 * and its KV heads' keys and values) into cols; returns the width of its
 * block, in which they lie side by side. */
static size_t
s_cols(const trn_gpu_model_t *g, int r, int W, int nseg, s_cols_t *cols)
{
    size_t Hk = (size_t) g->Hk, G = (size_t) (g->H / g->Hk), D = (size_t) g->D;
    int a, b;
    trn_cp_heads(g->Hk, r, W, &a, &b);
    size_t k0 = (size_t) a, hk = (size_t) (b - a);
    size_t q = hk * G * D, kv = hk * D;
    cols[0] = (s_cols_t){k0 * G * D, q, 0};
    if (nseg == 1)
        return q;
    cols[1] = (s_cols_t){(size_t) g->H * D + k0 * D, kv, q};
    cols[2] = (s_cols_t){((size_t) g->H + Hk) * D + k0 * D, kv, q + kv};
    return q + 2 * kv;
}

/* dst [T, C] (this rank's rows) = every rank's block's columns (nseg as
 * s_cols) of those rows; this rank's block is c->blk, [n, its width].
 * The blocks, padded to the widest rank's, are gathered; each rank's then
 * gives this rank's rows and its columns go into place. */
static lisa_rc_t
s_to_rows(trn_gpu_model_t *g, trn_bf16_t *dst, int C, int nseg, trn_err_t *err)
{
    struct trn_gpu_cp *c = g->cpx;
    s_cols_t cols[3];
    size_t n = c->n, T = c->T, Cz = (size_t) C, bw = c->bw;
    size_t w = s_cols(g, c->rank, c->world, nseg, cols);
    lisa_rc_t rc = LISA_OK;
    S_TRY(trn_cuda_copy2d(c->stage + (size_t) c->rank * n * bw, bw * 2, c->blk,
                          w * 2, w * 2, n, NULL));
    S_TRY(s_allgather(g, c->stage, n * bw, 2, err));
    for (int r = 0; r < c->world; r++) {
        if (s_cols(g, r, c->world, nseg, cols) == 0)
            continue; /* a rank without heads */
        S_TRY(trn_k_gather_rows(c->tmp, c->stage + (size_t) r * n * bw, c->idx,
                                (int) T, (int) bw, NULL));
        for (int k = 0; k < nseg; k++)
            S_TRY(trn_cuda_copy2d(dst + cols[k].col, Cz * 2,
                                  c->tmp + cols[k].off, bw * 2, cols[k].w * 2,
                                  T, NULL));
    }
out:
    return rc;
}

/* The log-sum-exp of layer l's first head of this rank ([H][n] a layer). */
static float *
s_lse(const trn_gpu_model_t *g, int l)
{
    const struct trn_gpu_cp *c = g->cpx;
    size_t h0 = (size_t) c->k0 * (size_t) (g->H / g->Hk);
    return c->lse + ((size_t) l * (size_t) g->H + h0) * c->n;
}

lisa_rc_t
trn_gpu_cp_attn_fwd(trn_gpu_model_t *g, int l, trn_err_t *err)
{
    struct trn_gpu_cp *c = g->cpx;
    lisa_rc_t rc = LISA_OK;
    int H = g->H, Hk = g->Hk, D = g->D, G = H / Hk, n = (int) c->n;
    int k0 = c->k0, hk = c->k1 - c->k0;
    S_TRY(s_gather(g, c->qkv, g->qkvn, g->S, err));
    if (hk > 0) /* this rank's heads over the whole batch */
        S_TRY(trn_k_attn_fwd(c->blk, s_lse(g, l), c->qkv + k0 * G * D,
                             c->qkv + (H + k0) * D, c->qkv + (H + Hk + k0) * D,
                             g->S, c->seg, n, hk * G, hk, D, NULL));
    S_TRY(s_to_rows(g, g->o, H * D, 1, err));
out:
    return rc;
}

lisa_rc_t
trn_gpu_cp_attn_bwd(trn_gpu_model_t *g, int l, trn_err_t *err)
{
    struct trn_gpu_cp *c = g->cpx;
    lisa_rc_t rc = LISA_OK;
    int H = g->H, Hk = g->Hk, D = g->D, G = H / Hk, n = (int) c->n;
    int k0 = c->k0, hk = c->k1 - c->k0, hq = hk * G;
    size_t HD2 = (size_t) (H * D) * 2, qb = (size_t) (hq * D) * 2;
    S_TRY(s_gather(g, c->qkv, g->qkvn, g->S, err));
    S_TRY(s_gather(g, c->o, g->o, H * D, err));
    S_TRY(s_gather(g, c->dout, g->da, H * D, err));
    if (hk > 0) { /* this rank's heads: their o and dout packed, then dq|dk|dv
                   * of all rows into its block */
        S_TRY(trn_cuda_copy2d(c->ohd, qb, c->o + k0 * G * D, HD2, qb, c->n,
                              NULL));
        S_TRY(trn_cuda_copy2d(c->dohd, qb, c->dout + k0 * G * D, HD2, qb, c->n,
                              NULL));
        int w = (hq + 2 * hk) * D;
        S_TRY(trn_k_attn_bwd(c->blk, c->blk + hq * D, c->blk + (hq + hk) * D, w,
                             c->scratch, c->dohd, c->ohd, s_lse(g, l),
                             c->qkv + k0 * G * D, c->qkv + (H + k0) * D,
                             c->qkv + (H + Hk + k0) * D, g->S, c->seg, n, hq,
                             hk, D, NULL));
    }
    S_TRY(s_to_rows(g, g->dqkv, g->S, 3, err));
out:
    return rc;
}
