/*
 * trn_gpu_gen: generation on the GPU model: a KV cache of slots and one
 * step that appends tokens to any number of slots (prefill and decode
 * alike), computes the last token's logits of each and samples from them
 * on the device. The same bf16 weights serve training and generation, so
 * after an optimizer step the next request already uses the new policy.
 *
 * Everything runs on the cache's own stream. A step's inputs (tokens,
 * slots, positions, sampling parameters) go up in one copy from
 * page-locked memory and its outputs (tokens, logprobs) come back in one.
 * Pure decode steps (one new token per sequence, the common case) run from
 * buffers the cache owns, whose addresses never change, so the whole step
 * (embedding, every layer, final norm, LM head, sampling) is recorded once
 * per batch size as a CUDA graph and replayed as one launch afterwards.
 * Batch sizes are rounded up to a few buckets; the extra rows are padding
 * (slot -1: no cache write, attention gives zeros, results dropped).
 * Steps with more tokens (prefill, mixed) run the same kernels directly,
 * except that prompts which all start a sequence use the training
 * attention kernel over the packed prompts (the new keys are all there is
 * to attend to), which is far faster than attending through the cache.
 */
#include "lisa/lisa_mem.h"
#include "trn_gpu_model_int.h"

#include <string.h>

#define S_GRAPHS 16 /* recorded steps kept per cache */

/* Buffers of one step's forward pass. */
typedef struct {
    float *x;
    trn_bf16_t *h, *qkv, *o, *gu, *a, *hf;
    float *logits;
    int32_t *tok, *slot, *pos, *last;
    /* fresh prompts only (every sequence from position 0): the training
     * attention kernel over the packed prompts, seg[t] = sequence */
    int32_t *seg;
    float *lse;
    int one; /* one token per sequence: q/k preparation fused into attention */
} s_bufs_t;

typedef struct {
    int nb, sample, seen;
    trn_cuda_graph_t *exec;
} s_graph_t;

struct trn_gpu_kv {
    trn_gpu_model_t *g;
    size_t slots, max_len;
    size_t *len;         /* host: positions held per slot */
    trn_bf16_t **k, **v; /* per layer: [slots, max_len, Hk*D] */
    trn_cuda_stream_t *stream;
    float *attn_part; /* split attention scratch */
    size_t attn_part_n;
    float *samp_part; /* sampling scratch */
    size_t samp_part_n;
    /* A step of up to `slots` tokens: activations, logits and the
     * parameter block (int32 tok, slot, pos, last, top_k; float temp,
     * top_p: sp values each; uint64 seed: sp), fixed for the cache's life
     * so recorded graphs stay valid. */
    size_t sp; /* slots rounded up to even */
    float *dx, *dlogits;
    trn_bf16_t *dh, *dhf, *dqkv, *dout_attn, *dgu, *da;
    uint8_t *dparam, *hparam; /* device and page-locked host */
    uint8_t *dres, *hres;     /* int32 tok [sp], float lp [sp] */
    int use_graphs;
    s_graph_t graphs[S_GRAPHS];
    int next_graph;
    /* steps of more tokens than slots: per-token arrays */
    size_t cap;
    int32_t *d_slot, *d_pos, *d_last;
};

/* Offsets into the parameter block. */
enum { S_TOK, S_SLOT, S_POS, S_LAST, S_TOPK, S_TEMP, S_TOPP, S_NARR };

static void *
s_par(const trn_gpu_kv_t *kv, uint8_t *base, int which)
{
    return base + (size_t) which * 4 * kv->sp;
}

static uint64_t *
s_seed(const trn_gpu_kv_t *kv, uint8_t *base)
{
    return (uint64_t *) (void *) (base + (size_t) S_NARR * 4 * kv->sp);
}

static size_t
s_param_bytes(const trn_gpu_kv_t *kv)
{
    return (size_t) S_NARR * 4 * kv->sp + 8 * kv->sp;
}

trn_gpu_kv_t *
trn_gpu_kv_new(trn_gpu_model_t *g, size_t slots, size_t max_len, trn_err_t *err)
{
    if (slots == 0 || max_len == 0 || slots > TRN_GEN_MAX_ROWS ||
        max_len > (size_t) g->cfg.max_position_embeddings) {
        s_err(err, "KV cache: bad slots or max_len");
        return NULL;
    }
    trn_gpu_kv_t *kv = lisa_calloc(1, sizeof *kv);
    kv->g = g;
    kv->slots = slots;
    kv->max_len = max_len;
    kv->use_graphs = 1;
    kv->len = lisa_calloc(slots, sizeof *kv->len);
    kv->k = lisa_calloc((size_t) g->L, sizeof *kv->k);
    kv->v = lisa_calloc((size_t) g->L, sizeof *kv->v);
    size_t per = slots * max_len * (size_t) (g->Hk * g->D) * 2;
    for (int l = 0; l < g->L; l++) {
        kv->k[l] = trn_cuda_malloc(per);
        kv->v[l] = trn_cuda_malloc(per);
        if (!kv->k[l] || !kv->v[l])
            goto oom;
    }
    size_t S = slots, C = (size_t) g->C, I = (size_t) g->I;
    kv->sp = (slots + 1) & ~(size_t) 1;
    kv->stream = trn_cuda_stream_new();
    kv->attn_part_n = trn_k_attn_decode_scratch(g->H, g->Hk, g->D);
    kv->attn_part = trn_cuda_malloc(kv->attn_part_n * 4);
    kv->samp_part_n = trn_k_sample_scratch((int) slots, g->V);
    kv->samp_part = trn_cuda_malloc(kv->samp_part_n * 4);
    kv->dx = trn_cuda_malloc(S * C * 4);
    kv->dlogits = trn_cuda_malloc(S * (size_t) g->V * 4);
    kv->dh = trn_cuda_malloc(S * C * 2);
    kv->dhf = trn_cuda_malloc(S * C * 2);
    kv->dqkv = trn_cuda_malloc(S * (size_t) g->S * 2);
    kv->dout_attn = trn_cuda_malloc(S * (size_t) (g->H * g->D) * 2);
    kv->dgu = trn_cuda_malloc(S * 2 * I * 2);
    kv->da = trn_cuda_malloc(S * I * 2);
    kv->dparam = trn_cuda_malloc(s_param_bytes(kv));
    kv->hparam = trn_cuda_host_alloc(s_param_bytes(kv));
    kv->dres = trn_cuda_malloc(8 * kv->sp);
    kv->hres = trn_cuda_host_alloc(8 * kv->sp);
    if (!kv->stream || !kv->attn_part || !kv->samp_part || !kv->dx ||
        !kv->dlogits || !kv->dh || !kv->dhf || !kv->dqkv || !kv->dout_attn ||
        !kv->dgu || !kv->da || !kv->dparam || !kv->hparam || !kv->dres ||
        !kv->hres)
        goto oom;
    return kv;
oom:
    s_err(err, "out of device memory for the KV cache");
    trn_gpu_kv_destroy(&kv);
    return NULL;
}

static void
s_free_scratch(trn_gpu_kv_t *kv)
{
    trn_cuda_free(&kv->d_slot);
    trn_cuda_free(&kv->d_pos);
    trn_cuda_free(&kv->d_last);
    kv->cap = 0;
}

static void
s_drop_graphs(trn_gpu_kv_t *kv)
{
    for (int i = 0; i < S_GRAPHS; i++) {
        trn_cuda_graph_destroy(&kv->graphs[i].exec);
        memset(&kv->graphs[i], 0, sizeof kv->graphs[i]);
    }
    kv->next_graph = 0;
}

void
trn_gpu_kv_destroy(trn_gpu_kv_t **kvp)
{
    if (!kvp || !*kvp)
        return;
    trn_gpu_kv_t *kv = *kvp;
    if (kv->stream)
        (void) trn_cuda_stream_sync(kv->stream);
    s_drop_graphs(kv);
    for (int l = 0; l < kv->g->L; l++) {
        if (kv->k)
            trn_cuda_free(&kv->k[l]);
        if (kv->v)
            trn_cuda_free(&kv->v[l]);
    }
    s_free_scratch(kv);
    trn_cuda_free(&kv->attn_part);
    trn_cuda_free(&kv->samp_part);
    trn_cuda_free(&kv->dx);
    trn_cuda_free(&kv->dlogits);
    trn_cuda_free(&kv->dh);
    trn_cuda_free(&kv->dhf);
    trn_cuda_free(&kv->dqkv);
    trn_cuda_free(&kv->dout_attn);
    trn_cuda_free(&kv->dgu);
    trn_cuda_free(&kv->da);
    trn_cuda_free(&kv->dparam);
    trn_cuda_free(&kv->dres);
    trn_cuda_host_free(&kv->hparam);
    trn_cuda_host_free(&kv->hres);
    trn_cuda_stream_destroy(&kv->stream);
    lisa_free(&kv->k);
    lisa_free(&kv->v);
    lisa_free(&kv->len);
    lisa_free(kvp);
}

void
trn_gpu_kv_reset(trn_gpu_kv_t *kv, size_t slot)
{
    if (slot < kv->slots)
        kv->len[slot] = 0;
}

size_t
trn_gpu_kv_len(const trn_gpu_kv_t *kv, size_t slot)
{
    return slot < kv->slots ? kv->len[slot] : 0;
}

void
trn_gpu_kv_set_graphs(trn_gpu_kv_t *kv, int on)
{
    if (kv && kv->stream)
        (void) trn_cuda_stream_sync(kv->stream);
    if (kv && !on)
        s_drop_graphs(kv);
    if (kv)
        kv->use_graphs = on != 0;
}

static lisa_rc_t
s_scratch(trn_gpu_kv_t *kv, size_t T)
{
    if (T <= kv->cap)
        return LISA_OK;
    s_free_scratch(kv);
    kv->d_slot = trn_cuda_malloc(T * 4);
    kv->d_pos = trn_cuda_malloc(T * 4);
    kv->d_last = trn_cuda_malloc(T * 4);
    if (!kv->d_slot || !kv->d_pos || !kv->d_last) {
        s_free_scratch(kv);
        return LISA_TOOLARGE;
    }
    kv->cap = T;
    return LISA_OK;
}

/* One layer over the T new tokens, b->x in place (fp32 [T, C]). */
static lisa_rc_t
s_layer(trn_gpu_model_t *g, trn_gpu_kv_t *kv, const s_bufs_t *b, int l, int T)
{
    lisa_rc_t rc = LISA_OK;
    const s_layer_t *ly = &g->layers[l];
    const trn_bf16_t *W = g->wb;
    trn_cuda_stream_t *st = kv->stream;
    float eps = (float) g->cfg.rms_norm_eps;
    float theta = (float) g->cfg.rope_theta;

    S_TRY(trn_k_rmsnorm_fwd(b->h, g->C, NULL, b->x, NULL, g->C, W + ly->w_in, T,
                            g->C, 1, eps, st));
    S_TRY(trn_linear_fwd(g->blas, NULL, b->qkv, b->h, W + ly->qkv, T, g->C,
                         g->S, 0, st));
    if (b->one) { /* q/k preparation inside the attention kernel */
        S_TRY(trn_k_attn_decode_prep(
            b->o, b->qkv, g->S, W + ly->q_norm, W + ly->k_norm, kv->k[l],
            kv->v[l], b->slot, b->pos, T, g->H, g->Hk, g->D, (int) kv->max_len,
            eps, theta, kv->attn_part, kv->attn_part_n, st));
    } else {
        S_TRY(trn_k_qk_prep(b->qkv, g->S, W + ly->q_norm, W + ly->k_norm,
                            kv->k[l], kv->v[l], b->slot, b->pos, T, g->H, g->Hk,
                            g->D, (int) kv->max_len, eps, theta, st));
        if (b->seg)
            S_TRY(trn_k_attn_fwd(b->o, b->lse, b->qkv, b->qkv + g->H * g->D,
                                 b->qkv + (g->H + g->Hk) * g->D, g->S, b->seg,
                                 T, g->H, g->Hk, g->D, st));
        else
            S_TRY(trn_k_attn_decode(b->o, b->qkv, g->S, kv->k[l], kv->v[l],
                                    b->slot, b->pos, T, g->H, g->Hk, g->D,
                                    (int) kv->max_len, kv->attn_part,
                                    kv->attn_part_n, st));
    }
    S_TRY(trn_linear_fwd(g->blas, b->x, NULL, b->o, W + ly->o, T, g->H * g->D,
                         g->C, 1, st));
    S_TRY(trn_k_rmsnorm_fwd(b->h, g->C, NULL, b->x, NULL, g->C, W + ly->w_post,
                            T, g->C, 1, eps, st));
    if (trn_linear_glu_fits(T, g->C, g->I)) { /* SwiGLU in the product */
        S_TRY(trn_linear_fwd_glu(b->a, b->h, W + ly->gu, T, g->C, g->I, st));
    } else {
        S_TRY(trn_linear_fwd(g->blas, NULL, b->gu, b->h, W + ly->gu, T, g->C,
                             2 * g->I, 0, st));
        S_TRY(trn_k_swiglu_fwd(b->a, b->gu, T, g->I, st));
    }
    S_TRY(trn_linear_fwd(g->blas, b->x, NULL, b->a, W + ly->down, T, g->I, g->C,
                         1, st));
out:
    return rc;
}

/* The whole step on the device: T tokens in, n rows of logits out (row i
 * from token last[i], or token i when `direct`), then, with `sample`,
 * tokens and logprobs of n rows into kv->dres. */
static lisa_rc_t
s_forward(trn_gpu_model_t *g, trn_gpu_kv_t *kv, const s_bufs_t *b, int T, int n,
          int direct, int sample)
{
    lisa_rc_t rc = LISA_OK;
    trn_cuda_stream_t *st = kv->stream;
    S_TRY(trn_k_embed_fwd(b->x, g->wb + g->embed, b->tok, T, g->C, g->V, st));
    for (int l = 0; l < g->L; l++)
        S_TRY(s_layer(g, kv, b, l, T));
    S_TRY(trn_k_rmsnorm_fwd(b->h, g->C, NULL, b->x, NULL, g->C,
                            g->wb + g->final_norm, T, g->C, 1,
                            (float) g->cfg.rms_norm_eps, st));
    const trn_bf16_t *hl = b->h;
    if (!direct) {
        S_TRY(trn_k_gather_rows(b->hf, b->h, b->last, n, g->C, st));
        hl = b->hf;
    }
    S_TRY(trn_linear_fwd(g->blas, b->logits, NULL, hl, g->wb + g->lm_head, n,
                         g->C, g->V, 0, st));
    if (sample) {
        uint8_t *P = kv->dparam;
        S_TRY(trn_k_sample(
            (int32_t *) (void *) kv->dres,
            (float *) (void *) (kv->dres + 4 * kv->sp), b->logits,
            s_par(kv, P, S_TEMP), s_par(kv, P, S_TOPP), s_par(kv, P, S_TOPK),
            s_seed(kv, P), n, g->V, kv->samp_part, kv->samp_part_n, st));
    }
out:
    return rc;
}

/* The cache's own buffers (steps of up to `slots` tokens). */
static s_bufs_t
s_small_bufs(trn_gpu_kv_t *kv)
{
    s_bufs_t b = {.x = kv->dx,
                  .h = kv->dh,
                  .qkv = kv->dqkv,
                  .o = kv->dout_attn,
                  .gu = kv->dgu,
                  .a = kv->da,
                  .hf = kv->dhf,
                  .logits = kv->dlogits,
                  .tok = s_par(kv, kv->dparam, S_TOK),
                  .slot = s_par(kv, kv->dparam, S_SLOT),
                  .pos = s_par(kv, kv->dparam, S_POS),
                  .last = s_par(kv, kv->dparam, S_LAST)};
    return b;
}

/* Rows a pure decode step of n sequences runs as (graph buckets). */
static size_t
s_bucket(const trn_gpu_kv_t *kv, size_t n)
{
    size_t nb = n <= 4 ? n : n <= 8 ? 8 : (n + 15) & ~(size_t) 15;
    return nb < kv->slots ? nb : kv->slots;
}

/* Runs a pure decode step of nb rows from the cache's buffers, through a
 * recorded graph when one exists or can be made (from the second step of
 * a bucket on, so the first runs every kernel once before recording). */
static lisa_rc_t
s_run_small(trn_gpu_model_t *g, trn_gpu_kv_t *kv, int nb, int sample)
{
    s_bufs_t b = s_small_bufs(kv);
    b.one = 1;
    if (!kv->use_graphs)
        return s_forward(g, kv, &b, nb, nb, 1, sample);
    s_graph_t *gr = NULL;
    for (int i = 0; i < S_GRAPHS; i++)
        if (kv->graphs[i].seen && kv->graphs[i].nb == nb &&
            kv->graphs[i].sample == sample)
            gr = &kv->graphs[i];
    if (!gr) {
        gr = &kv->graphs[kv->next_graph];
        kv->next_graph = (kv->next_graph + 1) % S_GRAPHS;
        trn_cuda_graph_destroy(&gr->exec);
        gr->nb = nb;
        gr->sample = sample;
        gr->seen = 1;
        return s_forward(g, kv, &b, nb, nb, 1, sample);
    }
    if (!gr->exec) {
        lisa_rc_t rc = trn_cuda_capture_begin(kv->stream);
        if (rc == LISA_OK) {
            rc = s_forward(g, kv, &b, nb, nb, 1, sample);
            lisa_rc_t rc2 =
                trn_cuda_capture_end(kv->stream, rc == LISA_OK, &gr->exec);
            if (rc == LISA_OK)
                rc = rc2;
        }
        if (rc != LISA_OK || !gr->exec) {
            lisa_log_warn("gpu model: decode graphs unavailable (rc %d); "
                          "running steps directly",
                          (int) rc);
            s_drop_graphs(kv);
            kv->use_graphs = 0;
            return s_forward(g, kv, &b, nb, nb, 1, sample);
        }
    }
    return trn_cuda_graph_launch(gr->exec, kv->stream);
}

lisa_rc_t
trn_gpu_model_step(trn_gpu_model_t *g, trn_gpu_kv_t *kv, size_t n,
                   const size_t *slots, const int32_t *const *tokens,
                   const size_t *n_new, const trn_sample_t *sp,
                   int32_t *out_tok, float *out_lp, float *logits,
                   trn_err_t *err)
{
    lisa_rc_t rc = LISA_OK;
    if (n == 0 || n > kv->slots || !slots || !tokens || !n_new ||
        (sp && (!out_tok || !out_lp))) {
        s_err(err, "step: bad arguments");
        return LISA_INVALID;
    }
    size_t T = 0;
    int pure = 1;
    for (size_t i = 0; i < n; i++) {
        if (slots[i] >= kv->slots || n_new[i] == 0 || !tokens[i]) {
            s_err(err, "step: bad slot or empty sequence");
            return LISA_INVALID;
        }
        for (size_t j = 0; j < i; j++)
            if (slots[j] == slots[i]) {
                s_err(err, "step: a slot appears twice");
                return LISA_INVALID;
            }
        if (kv->len[slots[i]] + n_new[i] > kv->max_len) {
            s_err(err, "step: the sequence would exceed the cache length");
            return LISA_TOOLARGE;
        }
        for (size_t j = 0; j < n_new[i]; j++)
            if (tokens[i][j] < 0 || tokens[i][j] >= g->V) {
                s_err(err, "step: token id out of range");
                return LISA_INVALID;
            }
        T += n_new[i];
        pure &= n_new[i] == 1;
    }
    int small = T <= kv->slots;
    size_t rows = pure ? s_bucket(kv, n) : T; /* token rows on the device */
    uint8_t *H = kv->hparam;
    int32_t *h_tok = s_par(kv, H, S_TOK), *h_slot = s_par(kv, H, S_SLOT);
    int32_t *h_pos = s_par(kv, H, S_POS), *h_last = s_par(kv, H, S_LAST);
    int32_t *h_topk = s_par(kv, H, S_TOPK);
    float *h_temp = s_par(kv, H, S_TEMP), *h_topp = s_par(kv, H, S_TOPP);
    uint64_t *h_seed = s_seed(kv, H);
    int32_t *big = NULL, *h_seg = NULL; /* a step over `slots` tokens */
    /* head sizes the training attention kernel has */
    int fresh = !small &&
                (g->D == 16 || g->D == 32 || g->D == 64 || g->D == 128) &&
                g->S % 8 == 0;
    if (!small) {
        big = lisa_malloc(5 * T * 4);
        h_tok = big;
        h_slot = big + T;
        h_pos = big + 2 * T;
        h_last = big + 3 * T;
        h_seg = big + 4 * T;
    }
    size_t t = 0;
    for (size_t i = 0; i < n; i++) {
        fresh &= kv->len[slots[i]] == 0;
        for (size_t j = 0; j < n_new[i]; j++, t++) {
            h_tok[t] = tokens[i][j];
            h_slot[t] = (int32_t) slots[i];
            h_pos[t] = (int32_t) (kv->len[slots[i]] + j);
            if (h_seg)
                h_seg[t] = (int32_t) i;
        }
        h_last[i] = (int32_t) (t - 1);
    }
    for (; t < rows; t++) { /* padding rows of a bucket */
        h_tok[t] = 0;
        h_slot[t] = -1;
        h_pos[t] = 0;
        h_last[t] = (int32_t) t;
    }
    size_t nrows = pure ? rows : n; /* rows of logits and samples */
    for (size_t i = 0; i < nrows; i++) {
        if (i < n && sp) {
            h_temp[i] = sp[i].temperature;
            h_topp[i] = sp[i].top_p > 0.0f ? sp[i].top_p : 1.0f;
            h_topk[i] = sp[i].top_k;
            /* a fresh draw per position of the sequence */
            h_seed[i] = sp[i].seed * 0x9e3779b97f4a7c15ull +
                        (uint64_t) (kv->len[slots[i]] + n_new[i]);
        } else { /* padding: greedy, the cheapest */
            h_temp[i] = 0.0f;
            h_topp[i] = 1.0f;
            h_topk[i] = 1;
            h_seed[i] = 0;
        }
    }
    trn_cuda_stream_t *st = kv->stream;
    S_TRY(trn_cuda_upload_async(kv->dparam, kv->hparam, s_param_bytes(kv), st));
    float *dlogits = NULL;
    if (small) {
        dlogits = kv->dlogits;
        if (pure) {
            S_TRY(s_run_small(g, kv, (int) rows, sp != NULL));
        } else {
            s_bufs_t b = s_small_bufs(kv);
            S_TRY(s_forward(g, kv, &b, (int) T, (int) n, 0, sp != NULL));
        }
    } else {
        if (trn_gpu_model_reserve(g, T) != LISA_OK ||
            s_scratch(kv, T) != LISA_OK) {
            s_err(err, "step: out of device memory");
            rc = LISA_TOOLARGE;
            goto out;
        }
        s_bufs_t b = {.x = g->xs,
                      .h = g->h1,
                      .qkv = g->qkv,
                      .o = g->o,
                      .gu = g->gu,
                      .a = g->a,
                      .hf = g->dhf,
                      .logits = g->logits,
                      .tok = g->tokens,
                      .slot = kv->d_slot,
                      .pos = kv->d_pos,
                      .last = kv->d_last,
                      .seg = fresh ? g->seg : NULL,
                      .lse = g->lse};
        if (fresh)
            S_TRY(trn_cuda_upload_async(b.seg, h_seg, T * 4, st));
        S_TRY(trn_cuda_upload_async(b.tok, h_tok, T * 4, st));
        S_TRY(trn_cuda_upload_async(b.slot, h_slot, T * 4, st));
        S_TRY(trn_cuda_upload_async(b.pos, h_pos, T * 4, st));
        S_TRY(trn_cuda_upload_async(b.last, h_last, n * 4, st));
        S_TRY(s_forward(g, kv, &b, (int) T, (int) n, 0, sp != NULL));
        dlogits = g->logits;
    }
    if (sp)
        S_TRY(trn_cuda_download_async(kv->hres, kv->dres, 8 * kv->sp, st));
    if (logits)
        S_TRY(trn_cuda_download_async(logits, dlogits, n * (size_t) g->V * 4,
                                      st));
    S_TRY(trn_cuda_stream_sync(st));
    if (sp) {
        memcpy(out_tok, kv->hres, n * 4);
        memcpy(out_lp, kv->hres + 4 * kv->sp, n * 4);
    }
    for (size_t i = 0; i < n; i++)
        kv->len[slots[i]] += n_new[i];
    g->have_forward = 0; /* activations now belong to this step */
out:
    if (rc != LISA_OK && err && !err->msg[0])
        s_err(err, "step failed on the device");
    lisa_free(&big);
    return rc;
}
