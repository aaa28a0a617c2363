/*
 * trn_gpu_gen: generation on the GPU model: a KV cache of slots and one
 * step that appends tokens to any number of slots (prefill and decode
 * alike), computes the last token's logits of each and samples from them
 * on the device. The same bf16 weights serve training and generation, so
 * after an optimizer step the next request already uses the new policy.
 */
#include "lisa/lisa_mem.h"
#include "trn_gpu_model_int.h"

#include <string.h>

struct trn_gpu_kv {
    trn_gpu_model_t *g;
    size_t slots, max_len;
    size_t *len;         /* host: positions held per slot */
    trn_bf16_t **k, **v; /* per layer: [slots, max_len, Hk*D] */
    /* per-step device scratch for up to `cap` new tokens */
    size_t cap;
    int32_t *d_slot, *d_pos, *d_last, *d_tok_out;
    float *d_lp_out, *d_temp, *d_topp;
    int32_t *d_topk;
    uint64_t *d_seed;
};

trn_gpu_kv_t *
trn_gpu_kv_new(trn_gpu_model_t *g, size_t slots, size_t max_len, trn_err_t *err)
{
    if (slots == 0 || max_len == 0 || slots > g->chunk ||
        max_len > (size_t) g->cfg.max_position_embeddings) {
        s_err(err, "KV cache: bad slots or max_len");
        return NULL;
    }
    trn_gpu_kv_t *kv = lisa_calloc(1, sizeof *kv);
    kv->g = g;
    kv->slots = slots;
    kv->max_len = max_len;
    kv->len = lisa_calloc(slots, sizeof *kv->len);
    kv->k = lisa_calloc((size_t) g->L, sizeof *kv->k);
    kv->v = lisa_calloc((size_t) g->L, sizeof *kv->v);
    size_t per = slots * max_len * (size_t) (g->Hk * g->D) * 2;
    for (int l = 0; l < g->L; l++) {
        kv->k[l] = trn_cuda_malloc(per);
        kv->v[l] = trn_cuda_malloc(per);
        if (!kv->k[l] || !kv->v[l]) {
            s_err(err, "out of device memory for the KV cache");
            trn_gpu_kv_destroy(&kv);
            return NULL;
        }
    }
    return kv;
}

static void
s_free_scratch(trn_gpu_kv_t *kv)
{
    trn_cuda_free(&kv->d_slot);
    trn_cuda_free(&kv->d_pos);
    trn_cuda_free(&kv->d_last);
    trn_cuda_free(&kv->d_tok_out);
    trn_cuda_free(&kv->d_lp_out);
    trn_cuda_free(&kv->d_temp);
    trn_cuda_free(&kv->d_topp);
    trn_cuda_free(&kv->d_topk);
    trn_cuda_free(&kv->d_seed);
    kv->cap = 0;
}

void
trn_gpu_kv_destroy(trn_gpu_kv_t **kvp)
{
    if (!kvp || !*kvp)
        return;
    trn_gpu_kv_t *kv = *kvp;
    for (int l = 0; l < kv->g->L; l++) {
        if (kv->k)
            trn_cuda_free(&kv->k[l]);
        if (kv->v)
            trn_cuda_free(&kv->v[l]);
    }
    s_free_scratch(kv);
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

static lisa_rc_t
s_scratch(trn_gpu_kv_t *kv, size_t T)
{
    if (T <= kv->cap)
        return LISA_OK;
    s_free_scratch(kv);
    size_t n = kv->slots;
    kv->d_slot = trn_cuda_malloc(T * 4);
    kv->d_pos = trn_cuda_malloc(T * 4);
    kv->d_last = trn_cuda_malloc(n * 4);
    kv->d_tok_out = trn_cuda_malloc(n * 4);
    kv->d_lp_out = trn_cuda_malloc(n * 4);
    kv->d_temp = trn_cuda_malloc(n * 4);
    kv->d_topp = trn_cuda_malloc(n * 4);
    kv->d_topk = trn_cuda_malloc(n * 4);
    kv->d_seed = trn_cuda_malloc(n * 8);
    if (!kv->d_slot || !kv->d_pos || !kv->d_last || !kv->d_tok_out ||
        !kv->d_lp_out || !kv->d_temp || !kv->d_topp || !kv->d_topk ||
        !kv->d_seed) {
        s_free_scratch(kv);
        return LISA_TOOLARGE;
    }
    kv->cap = T;
    return LISA_OK;
}

/* One layer over the T new tokens, x in place (fp32 [T, C]). */
static lisa_rc_t
s_layer_decode(trn_gpu_model_t *g, trn_gpu_kv_t *kv, int l, int T)
{
    lisa_rc_t rc = LISA_OK;
    const s_layer_t *ly = &g->layers[l];
    const trn_bf16_t *W = g->wb;
    size_t C = (size_t) g->C;
    int H = g->H, Hk = g->Hk, D = g->D, I = g->I;
    float eps = (float) g->cfg.rms_norm_eps;
    float theta = (float) g->cfg.rope_theta;
    float *x = g->xs;

    S_TRY(trn_k_rmsnorm_fwd(g->h1, g->C, g->rstd1, x, NULL, g->C, W + ly->w_in,
                            T, g->C, 1, eps, NULL));
    S_TRY(trn_linear_fwd(g->blas, NULL, g->qkv, g->h1, W + ly->qkv, T, g->C,
                         g->S, 0, NULL));
    S_TRY(trn_cuda_copy(g->qkvn, g->qkv, (size_t) T * (size_t) g->S * 2, NULL));
    S_TRY(trn_k_rmsnorm_fwd(g->qkvn, g->S, g->rstdq, NULL, g->qkv, g->S,
                            W + ly->q_norm, T * H, D, H, eps, NULL));
    S_TRY(trn_k_rmsnorm_fwd(g->qkvn + H * D, g->S, g->rstdk, NULL,
                            g->qkv + H * D, g->S, W + ly->k_norm, T * Hk, D, Hk,
                            eps, NULL));
    S_TRY(trn_k_rope(g->qkvn, g->S, kv->d_pos, T, H, D, theta, 0, NULL));
    S_TRY(
        trn_k_rope(g->qkvn + H * D, g->S, kv->d_pos, T, Hk, D, theta, 0, NULL));
    S_TRY(trn_k_kv_write(kv->k[l], kv->v[l], g->qkvn + H * D,
                         g->qkvn + (H + Hk) * D, g->S, kv->d_slot, kv->d_pos, T,
                         Hk * D, (int) kv->max_len, NULL));
    S_TRY(trn_k_attn_decode(g->o, g->qkvn, g->S, kv->k[l], kv->v[l], kv->d_slot,
                            kv->d_pos, T, H, Hk, D, (int) kv->max_len, NULL));
    S_TRY(trn_linear_fwd(g->blas, x, NULL, g->o, W + ly->o, T, H * D, g->C, 1,
                         NULL));
    S_TRY(trn_k_rmsnorm_fwd(g->h2, g->C, g->rstd2, x, NULL, g->C,
                            W + ly->w_post, T, g->C, 1, eps, NULL));
    S_TRY(trn_linear_fwd(g->blas, NULL, g->gu, g->h2, W + ly->gu, T, g->C,
                         2 * I, 0, NULL));
    S_TRY(trn_k_swiglu_fwd(g->a, g->gu, T, I, NULL));
    S_TRY(trn_linear_fwd(g->blas, x, NULL, g->a, W + ly->down, T, I, g->C, 1,
                         NULL));
    (void) C;
out:
    return rc;
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
        T += n_new[i];
    }
    int32_t *h_tok = lisa_malloc(T * 4), *h_slot = lisa_malloc(T * 4);
    int32_t *h_pos = lisa_malloc(T * 4), *h_last = lisa_malloc(n * 4);
    size_t t = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n_new[i]; j++, t++) {
            int32_t id = tokens[i][j];
            if (id < 0 || id >= g->V) {
                s_err(err, "step: token id out of range");
                rc = LISA_INVALID;
                goto out;
            }
            h_tok[t] = id;
            h_slot[t] = (int32_t) slots[i];
            h_pos[t] = (int32_t) (kv->len[slots[i]] + j);
        }
        h_last[i] = (int32_t) (t - 1);
    }
    if (trn_gpu_model_reserve(g, T) != LISA_OK || s_scratch(kv, T) != LISA_OK) {
        s_err(err, "step: out of device memory");
        rc = LISA_TOOLARGE;
        goto out;
    }
    int Ti = (int) T, ni = (int) n;
    S_TRY(trn_cuda_upload(g->tokens, h_tok, T * 4));
    S_TRY(trn_cuda_upload(kv->d_slot, h_slot, T * 4));
    S_TRY(trn_cuda_upload(kv->d_pos, h_pos, T * 4));
    S_TRY(trn_cuda_upload(kv->d_last, h_last, n * 4));
    S_TRY(trn_k_embed_fwd(g->xs, g->wb + g->embed, g->tokens, Ti, g->C, g->V,
                          NULL));
    for (int l = 0; l < g->L; l++)
        S_TRY(s_layer_decode(g, kv, l, Ti));
    S_TRY(trn_k_rmsnorm_fwd(g->hf, g->C, g->rstdf, g->xs, NULL, g->C,
                            g->wb + g->final_norm, Ti, g->C, 1,
                            (float) g->cfg.rms_norm_eps, NULL));
    S_TRY(trn_k_gather_rows(g->dhf, g->hf, kv->d_last, ni, g->C, NULL));
    S_TRY(trn_linear_fwd(g->blas, g->logits, NULL, g->dhf, g->wb + g->lm_head,
                         ni, g->C, g->V, 0, NULL));
    if (sp) {
        float *temp = lisa_malloc(n * 4), *topp = lisa_malloc(n * 4);
        int32_t *topk = lisa_malloc(n * 4);
        uint64_t *seed = lisa_malloc(n * 8);
        for (size_t i = 0; i < n; i++) {
            temp[i] = sp[i].temperature;
            topp[i] = sp[i].top_p > 0.0f ? sp[i].top_p : 1.0f;
            topk[i] = sp[i].top_k;
            /* a fresh draw per position of the sequence */
            seed[i] = sp[i].seed * 0x9e3779b97f4a7c15ull +
                      (uint64_t) (kv->len[slots[i]] + n_new[i]);
        }
        rc = trn_cuda_upload(kv->d_temp, temp, n * 4);
        if (rc == LISA_OK)
            rc = trn_cuda_upload(kv->d_topp, topp, n * 4);
        if (rc == LISA_OK)
            rc = trn_cuda_upload(kv->d_topk, topk, n * 4);
        if (rc == LISA_OK)
            rc = trn_cuda_upload(kv->d_seed, seed, n * 8);
        lisa_free(&temp);
        lisa_free(&topp);
        lisa_free(&topk);
        lisa_free(&seed);
        if (rc != LISA_OK)
            goto out;
        S_TRY(trn_k_sample(kv->d_tok_out, kv->d_lp_out, g->logits, kv->d_temp,
                           kv->d_topp, kv->d_topk, kv->d_seed, ni, g->V, NULL));
        S_TRY(trn_cuda_download(out_tok, kv->d_tok_out, n * 4));
        S_TRY(trn_cuda_download(out_lp, kv->d_lp_out, n * 4));
    }
    if (logits)
        S_TRY(trn_cuda_download(logits, g->logits, n * (size_t) g->V * 4));
    S_TRY(trn_cuda_sync());
    for (size_t i = 0; i < n; i++)
        kv->len[slots[i]] += n_new[i];
    g->have_forward = 0; /* activations now belong to this step */
out:
    if (rc != LISA_OK && err && !err->msg[0])
        s_err(err, "step failed on the device");
    lisa_free(&h_tok);
    lisa_free(&h_slot);
    lisa_free(&h_pos);
    lisa_free(&h_last);
    return rc;
}
