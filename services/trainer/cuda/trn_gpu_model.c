/*
 * trn_gpu_model: forward and backward of Qwen3 (Llama, Qwen2) on one GPU,
 * composed from the kernels of trn_cuda.h.
 *
 * Per layer, forward:
 *   h1   = rmsnorm(x, w_in)                      bf16 [T, C]
 *   qkv  = h1 @ [Wq;Wk;Wv]^T (+ [bq;bk;bv]: Qwen2) bf16 [T, S], S=(H+2Hk)D
 *   qkvn = qkv with q,k head-normed (Qwen3) and roped  bf16 [T, S]
 *   o    = attention(qkvn)                       bf16 [T, H*D]
 *   xm   = x + o @ Wo^T                          fp32 [T, C]
 *   h2   = rmsnorm(xm, w_post); gu = h2 @ [Wg;Wu]^T; a = silu(g)*u
 *   x'   = xm + a @ Wd^T
 * The layer inputs x are kept (fp32); the backward pass recomputes the rest
 * of a layer just before differentiating it.
 */
#include "trn_gpu_model.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "trn_cuda.h"
#include "trn_gpu_model_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const s_ph_names[TRN_GPU_PHASES] = {"rmsnorm",
                                                       "qk_norm_rope",
                                                       "attention_fwd",
                                                       "attention_bwd",
                                                       "products_fwd",
                                                       "products_bwd_data",
                                                       "products_bwd_weight",
                                                       "swiglu",
                                                       "logprob",
                                                       "other"};

/* S_TRY, then the device time since the last mark charged to kind k (when
 * the model is timed). */
#define S_TRYP(k, x) S_TRY_MARK(g->timer != NULL, k, x)

/* Tensor offsets from the config, in the CPU model's order: embed; per
 * layer input_layernorm, q, k, v, [q, k, v biases: Qwen2], o, [q_norm,
 * k_norm: Qwen3], post_attention_layernorm, gate, up, down; norm; lm_head
 * when untied. */
static void
s_layout(trn_gpu_model_t *g)
{
    size_t C = (size_t) g->C, I = (size_t) g->I, D = (size_t) g->D;
    size_t Q = (size_t) g->H * D, KV = (size_t) g->Hk * D;
    size_t off = 0;
    g->embed = off;
    off += (size_t) g->V * C;
    for (int l = 0; l < g->L; l++) {
        s_layer_t *ly = &g->layers[l];
        ly->w_in = off;
        off += C;
        ly->qkv = off;
        off += (Q + 2 * KV) * C;
        ly->qkv_b = off;
        if (g->qkv_bias)
            off += Q + 2 * KV;
        ly->o = off;
        off += C * Q;
        ly->q_norm = off;
        ly->k_norm = off;
        if (g->qk_norm) {
            ly->k_norm = off + D;
            off += 2 * D;
        }
        ly->w_post = off;
        off += C;
        ly->gu = off;
        off += 2 * I * C;
        ly->down = off;
        off += C * I;
    }
    g->final_norm = off;
    off += C;
    if (g->cfg.tie_word_embeddings) {
        g->lm_head = g->embed;
    } else {
        g->lm_head = off;
        off += (size_t) g->V * C;
    }
    g->n_params = off;
}

/* Offset of tensor `name` of src in its parameter array, or -1. */
static long
s_src_offset(const trn_model_t *src, const char *name)
{
    trn_model_t *m = (trn_model_t *) (uintptr_t) src;
    long t = trn_model_tensor_find(src, name);
    if (t < 0)
        return -1;
    return (long) (trn_model_tensor_data(m, (size_t) t) - trn_model_params(m));
}

/* Checks that `src` lays its tensors out as s_layout says. */
static int
s_layout_matches(const trn_gpu_model_t *g, const trn_model_t *src)
{
    char nm[160];
    if (trn_model_num_params(src) != g->n_params ||
        s_src_offset(src, "model.embed_tokens.weight") != (long) g->embed ||
        s_src_offset(src, "model.norm.weight") != (long) g->final_norm)
        return 0;
    for (int l = 0; l < g->L; l++) {
        const s_layer_t *ly = &g->layers[l];
        struct {
            const char *suffix;
            size_t off;
            int has;
        } t[] = {{"input_layernorm.weight", ly->w_in, 1},
                 {"self_attn.q_proj.weight", ly->qkv, 1},
                 {"self_attn.q_proj.bias", ly->qkv_b, g->qkv_bias},
                 {"self_attn.o_proj.weight", ly->o, 1},
                 {"self_attn.q_norm.weight", ly->q_norm, g->qk_norm},
                 {"self_attn.k_norm.weight", ly->k_norm, g->qk_norm},
                 {"post_attention_layernorm.weight", ly->w_post, 1},
                 {"mlp.gate_proj.weight", ly->gu, 1},
                 {"mlp.down_proj.weight", ly->down, 1}};
        for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
            if (!t[i].has)
                continue;
            snprintf(nm, sizeof nm, "model.layers.%d.%s", l, t[i].suffix);
            if (s_src_offset(src, nm) != (long) t[i].off)
                return 0;
        }
    }
    return 1;
}

/* A model with its config, layout and device buffers, weights unset. */
static trn_gpu_model_t *
s_alloc(const trn_config_t *c, trn_err_t *err)
{
    trn_gpu_model_t *g = lisa_calloc(1, sizeof *g);
    g->cfg = *c;
    g->C = (int) c->hidden_size;
    g->I = (int) c->intermediate_size;
    g->H = (int) c->num_attention_heads;
    g->Hk = (int) c->num_key_value_heads;
    g->D = (int) c->head_dim;
    g->L = (int) c->num_hidden_layers;
    g->V = (int) c->vocab_size;
    g->S = (g->H + 2 * g->Hk) * g->D;
    g->overlap = 1;
    if (g->D != 16 && g->D != 32 && g->D != 64 && g->D != 128) {
        s_err(err, "head_dim must be 16, 32, 64 or 128 on the GPU");
        goto fail;
    }
    g->qk_norm = trn_config_qk_norm(c);
    g->qkv_bias = trn_config_qkv_bias(c);
    g->layers = lisa_calloc((size_t) g->L, sizeof *g->layers);
    s_layout(g);
    g->blas = trn_blas_new();
    size_t P = g->n_params;
    g->w32 = trn_cuda_malloc(P * 4);
    g->grad = trn_cuda_malloc(P * 4);
    g->m = trn_cuda_malloc(P * 4);
    g->v = trn_cuda_malloc(P * 4);
    g->wb = trn_cuda_malloc(P * 2);
    g->scalar = trn_cuda_malloc(64);
    if (!g->blas || !g->w32 || !g->grad || !g->m || !g->v || !g->wb ||
        !g->scalar) {
        s_err(err, "out of device memory for the weights");
        goto fail;
    }
    if (trn_cuda_memset(g->grad, 0, P * 4, NULL) != LISA_OK ||
        trn_cuda_memset(g->m, 0, P * 4, NULL) != LISA_OK ||
        trn_cuda_memset(g->v, 0, P * 4, NULL) != LISA_OK) {
        s_err(err, "device memset failed");
        goto fail;
    }
    g->grad_zero = 1;
    const char *ph = getenv("LISA_CUDA_PHASES");
    if (ph && strcmp(ph, "1") == 0)
        g->timer = trn_cuda_timer_new(TRN_GPU_PHASES, 8192);
    return g;
fail:
    trn_gpu_model_destroy(&g);
    return NULL;
}

trn_gpu_model_t *
trn_gpu_model_new(const trn_model_t *src, trn_err_t *err)
{
    trn_gpu_model_t *g = s_alloc(trn_model_config(src), err);
    if (!g)
        return NULL;
    if (!s_layout_matches(g, src)) {
        s_err(err, "the model's tensors are not in the documented order");
        goto fail;
    }
    if (trn_cuda_upload(g->w32,
                        trn_model_params((trn_model_t *) (uintptr_t) src),
                        g->n_params * 4) != LISA_OK ||
        trn_k_f32_to_bf16(g->wb, g->w32, g->n_params, NULL) != LISA_OK ||
        trn_cuda_sync() != LISA_OK) {
        s_err(err, "uploading weights failed");
        goto fail;
    }
    return g;
fail:
    trn_gpu_model_destroy(&g);
    return NULL;
}

trn_gpu_model_t *
trn_gpu_model_new_random(const trn_config_t *cfg, uint64_t seed, float std,
                         trn_err_t *err)
{
    if (trn_config_validate(cfg, err) != LISA_OK)
        return NULL;
    trn_gpu_model_t *g = s_alloc(cfg, err);
    if (!g)
        return NULL;
    lisa_rc_t rc = trn_k_fill_normal(g->w32, g->n_params, seed, std, NULL);
    /* norm weights start at one, as transformers initialises them */
    size_t C = (size_t) g->C, D = (size_t) g->D;
    for (int l = 0; l < g->L && rc == LISA_OK; l++) {
        const s_layer_t *ly = &g->layers[l];
        rc = trn_k_fill_const(g->w32 + ly->w_in, C, 1.0f, NULL);
        if (rc == LISA_OK)
            rc = trn_k_fill_const(g->w32 + ly->w_post, C, 1.0f, NULL);
        if (rc == LISA_OK && g->qk_norm)
            rc = trn_k_fill_const(g->w32 + ly->q_norm, 2 * D, 1.0f, NULL);
    }
    if (rc == LISA_OK)
        rc = trn_k_fill_const(g->w32 + g->final_norm, C, 1.0f, NULL);
    if (rc == LISA_OK)
        rc = trn_k_f32_to_bf16(g->wb, g->w32, g->n_params, NULL);
    if (rc == LISA_OK)
        rc = trn_cuda_sync();
    if (rc != LISA_OK) {
        s_err(err, "random initialisation failed");
        trn_gpu_model_destroy(&g);
    }
    return g;
}

const trn_config_t *
trn_gpu_model_config(const trn_gpu_model_t *g)
{
    return &g->cfg;
}

size_t
trn_gpu_model_num_params(const trn_gpu_model_t *g)
{
    return g->n_params;
}

/* The per-layer activation pointers, in the order s_bind lays them out,
 * with the bytes of one layer's copy of each for T tokens. */
typedef struct {
    void **p;
    size_t bytes;
} s_act_t;

/* Sizes rounded up to 256 bytes, so every buffer stays aligned. */
static size_t
s_pad(size_t bytes)
{
    return (bytes + 255) & ~(size_t) 255;
}

/* The device memory left over for the engine, cuBLAS and fragmentation:
 * a tenth of the device, at least 4 GiB. */
static size_t
s_spare(size_t total_b)
{
    size_t spare = total_b / 10;
    return spare < ((size_t) 4 << 30) ? (size_t) 4 << 30 : spare;
}

/* Whether `need` more bytes fit in free device memory with s_spare left. */
static int
s_fits(size_t need)
{
    size_t free_b = 0, total_b = 0;
    if (trn_cuda_mem_info(&free_b, &total_b) != LISA_OK)
        return 0;
    return free_b > need && free_b - need > s_spare(total_b);
}

static size_t
s_layer_acts(trn_gpu_model_t *g, size_t T, s_act_t a[13])
{
    size_t C = (size_t) g->C, I = (size_t) g->I, S = (size_t) g->S;
    size_t HD = (size_t) (g->H * g->D);
    s_act_t t[13] = {
        {(void **) &g->xm, T * C * 4},
        {(void **) &g->h1, T * C * 2},
        {(void **) &g->qkv, T * S * 2},
        {(void **) &g->qkvn, T * S * 2},
        {(void **) &g->o, T * HD * 2},
        {(void **) &g->h2, T * C * 2},
        {(void **) &g->gu, T * 2 * I * 2},
        {(void **) &g->a, T * I * 2},
        {(void **) &g->rstd1, T * 4},
        {(void **) &g->rstd2, T * 4},
        {(void **) &g->rstdq, T * (size_t) g->H * 4},
        {(void **) &g->rstdk, T * (size_t) g->Hk * 4},
        {(void **) &g->lse, T * (size_t) g->H * 4},
    };
    size_t total = 0;
    for (int i = 0; i < 13; i++) {
        t[i].bytes = s_pad(t[i].bytes);
        total += t[i].bytes;
        a[i] = t[i];
    }
    return total;
}

/* Whether s_layer_acts' entry i (h1, qkvn, h2, a) is one shared copy
 * when activations are kept leanly: each is an element-wise function of
 * what the layer keeps (its input, q|k|v, the attention's residual sum,
 * gate|up) and the backward pass remakes it. */
static int
s_lean_shared(int i)
{
    return i == 1 || i == 3 || i == 5 || i == 7;
}

/* Whether `auto` may keep activations leanly: yes unless LISA_CUDA_LEAN
 * is 0 (read once); TRN_RECOMPUTE_LEAN asks for it either way. */
static int
s_auto_lean(void)
{
    static int on = -1;
    if (on < 0)
        on = trn_env_on("LISA_CUDA_LEAN");
    return on;
}

/* Bytes of a layer's activations at T tokens kept leanly, and (*shared)
 * of the shared copies. */
static size_t
s_lean_bytes(trn_gpu_model_t *g, size_t T, size_t *shared)
{
    s_act_t a[13];
    size_t all = s_layer_acts(g, T, a);
    *shared = 0;
    for (int i = 0; i < 13; i++)
        if (s_lean_shared(i))
            *shared += a[i].bytes;
    return all - *shared;
}

/* Points the layer-activation pointers at layer l's copy. */
static void
s_bind(trn_gpu_model_t *g, int l)
{
    s_act_t a[13];
    s_layer_acts(g, g->cap_T, a);
    char *p =
        (char *) g->act_base + (g->keep ? (size_t) l * g->act_layer_bytes : 0);
    char *sh = g->act_shared;
    for (int i = 0; i < 13; i++) {
        if (g->lean && s_lean_shared(i)) {
            *a[i].p = sh;
            sh += a[i].bytes;
        } else {
            *a[i].p = p;
            p += a[i].bytes;
        }
    }
    if (g->keep_attn) { /* this layer's kept attention output and lse */
        char *k = (char *) g->attn_keep + (size_t) l * g->attn_keep_bytes;
        size_t ob = s_pad(g->cap_T * (size_t) (g->H * g->D) * 2);
        g->o = (trn_bf16_t *) (void *) k;
        g->lse = (float *) (void *) (k + ob);
    }
}

static void
s_free_acts(trn_gpu_model_t *g)
{
    void **p[] = {(void **) &g->tokens,    (void **) &g->targets,
                  (void **) &g->pos,       (void **) &g->seg,
                  (void **) &g->xs,        (void **) &g->hf,
                  (void **) &g->rstdf,     (void **) &g->dx,
                  (void **) &g->dxb,       (void **) &g->dqkv,
                  (void **) &g->dgu,       (void **) &g->da,
                  (void **) &g->dhf,       (void **) &g->attn_scratch,
                  (void **) &g->logits,    (void **) &g->dlogits,
                  (void **) &g->logp,      (void **) &g->dlogp,
                  (void **) &g->ent,       (void **) &g->dent,
                  (void **) &g->head_lse,  (void **) &g->act_base,
                  (void **) &g->attn_keep, (void **) &g->act_shared};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        trn_cuda_free(p[i]);
    s_act_t a[13];
    s_layer_acts(g, 0, a);
    for (int i = 0; i < 13; i++)
        *a[i].p = NULL;
    g->cap_T = 0;
    g->keep = 0;
    g->lean = 0;
    g->keep_attn = 0;
}

void
trn_gpu_model_set_recompute(trn_gpu_model_t *g, int mode)
{
    if (mode != g->recompute) {
        g->recompute = mode;
        s_free_acts(g); /* the next forward lays them out anew */
    }
}

void
trn_gpu_model_set_head_chunk(trn_gpu_model_t *g, size_t rows)
{
    if (rows != g->chunk_max) {
        g->chunk_max = rows;
        s_free_acts(g); /* the next forward sizes the buffers anew */
    }
}

int
trn_gpu_model_keeps_activations(const trn_gpu_model_t *g)
{
    return g->keep;
}

int
trn_gpu_model_keeps_lean(const trn_gpu_model_t *g)
{
    return g->lean;
}

int
trn_gpu_model_keeps_attention(const trn_gpu_model_t *g)
{
    return g->keep_attn;
}

int
trn_gpu_model_phases(trn_gpu_model_t *g, double *ms)
{
    if (!g || !g->timer || !ms)
        return 0;
    int dropped = trn_cuda_timer_read(g->timer, ms);
    if (dropped > 0)
        lisa_log_warn("gpu model: %d phase marks dropped (read the phases "
                      "after fewer passes)",
                      dropped);
    return 1;
}

const char *
trn_gpu_model_phase_name(int i)
{
    return i >= 0 && i < TRN_GPU_PHASES ? s_ph_names[i] : NULL;
}

void
trn_gpu_model_destroy(trn_gpu_model_t **gp)
{
    if (!gp || !*gp)
        return;
    trn_gpu_model_t *g = *gp;
    s_free_acts(g);
    trn_gpu_cp_free(g);
    trn_cuda_free(&g->w32);
    trn_cuda_free(&g->grad);
    trn_cuda_free(&g->m);
    trn_cuda_free(&g->v);
    trn_cuda_free(&g->wb);
    trn_cuda_free(&g->scalar);
    trn_cuda_free(&g->gshard);
    trn_cuda_host_free(&g->hstate);
    trn_gpu_model_offload_free(g);
    trn_blas_destroy(&g->blas);
    trn_cuda_timer_destroy(&g->timer);
    lisa_free(&g->layers);
    lisa_free(gp);
}

/* The buffers of a batch of T tokens besides the layers' activations
 * (s_layer_acts), with LM-head chunks of ch rows, into a (S_NBUF). */
#define S_NBUF 21
static void
s_batch_bufs(trn_gpu_model_t *g, size_t T, size_t ch, s_act_t a[S_NBUF])
{
    size_t C = (size_t) g->C, I = (size_t) g->I, S = (size_t) g->S;
    size_t HD = (size_t) (g->H * g->D), V = (size_t) g->V;
    s_act_t t[S_NBUF] = {
        {(void **) &g->tokens, T * 4},
        {(void **) &g->targets, T * 4},
        {(void **) &g->pos, T * 4},
        {(void **) &g->seg, T * 4},
        {(void **) &g->xs, ((size_t) g->L + 1) * T * C * 4},
        {(void **) &g->hf, T * C * 2},
        {(void **) &g->rstdf, T * 4},
        {(void **) &g->dx, T * C * 4},
        {(void **) &g->dxb, T * (C > HD ? C : HD) * 2},
        {(void **) &g->dqkv, T * S * 2},
        {(void **) &g->dgu, T * 2 * I * 2},
        {(void **) &g->da, T * (I > HD ? I : HD) * 2},
        {(void **) &g->dhf, T * C * 2},
        {(void **) &g->attn_scratch,
         T * (size_t) g->H * ((size_t) g->D + 1) * 4},
        {(void **) &g->logits, ch * V * 4},
        {(void **) &g->dlogits, ch * V * 2},
        {(void **) &g->logp, T * 4},
        {(void **) &g->dlogp, T * 4},
        {(void **) &g->ent, T * 4},
        {(void **) &g->dent, T * 4},
        {(void **) &g->head_lse, T * 4},
    };
    memcpy(a, t, sizeof t);
}

/* Bytes a batch of T tokens takes at the least: its buffers and one
 * layer's activations (every layer recomputed in the backward). */
static size_t
s_least_bytes(trn_gpu_model_t *g, size_t T, size_t ch)
{
    s_act_t a[S_NBUF], la[13];
    s_batch_bufs(g, T, ch, a);
    size_t sum = s_layer_acts(g, T, la);
    for (int i = 0; i < S_NBUF; i++)
        sum += s_pad(a[i].bytes);
    return sum;
}

size_t
trn_gpu_model_max_tokens(trn_gpu_model_t *g)
{
    size_t free_b = 0, total_b = 0;
    if (trn_cuda_mem_info(&free_b, &total_b) != LISA_OK)
        return 0;
    /* s_spare left, and the buffers held now come back */
    size_t spare = s_spare(total_b);
    size_t ch = g->chunk_max ? g->chunk_max : 4096;
    size_t avail =
        free_b + (g->cap_T ? s_least_bytes(g, g->cap_T, g->chunk) : 0);
    avail = avail > spare ? avail - spare : 0;
    size_t lo = 1, hi = TRN_MAX_BATCH_TOKENS; /* the largest T that fits */
    if (s_least_bytes(g, hi, ch) <= avail)
        return hi;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s_least_bytes(g, mid, ch) <= avail)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

lisa_rc_t
trn_gpu_model_reserve(trn_gpu_model_t *g, size_t T)
{
    if (T <= g->cap_T)
        return LISA_OK;
    s_free_acts(g);
    size_t HD = (size_t) (g->H * g->D), V = (size_t) g->V;
    /* LM-head rows per chunk: up to 4096 when they fit (a whole 4k
     * sequence's logits stay for the backward pass, and the head's weight
     * gradient runs as fewer, larger products), else 1024 */
    size_t ch = T < 1024 ? 1024 : T > 4096 ? 4096 : T;
    if (ch > 1024 && !s_fits(ch * V * 6))
        ch = 1024;
    if (g->chunk_max)
        ch = g->chunk_max;
    g->chunk = ch;
    s_act_t a[S_NBUF];
    s_batch_bufs(g, T, ch, a);
    for (size_t i = 0; i < S_NBUF; i++) {
        *a[i].p = trn_cuda_malloc(a[i].bytes);
        if (!*a[i].p) {
            s_free_acts(g);
            return LISA_TOOLARGE;
        }
    }
    s_act_t la[13];
    g->act_layer_bytes = s_layer_acts(g, T, la);
    size_t all = g->act_layer_bytes * (size_t) g->L;
    int keep = g->recompute == TRN_RECOMPUTE_OFF ||
               (g->recompute == TRN_RECOMPUTE_AUTO && s_fits(all));
    size_t shared = 0, lean_layer = s_lean_bytes(g, T, &shared);
    int lean = !keep && (g->recompute == TRN_RECOMPUTE_LEAN ||
                         (g->recompute == TRN_RECOMPUTE_AUTO && s_auto_lean() &&
                          s_fits(lean_layer * (size_t) g->L + shared)));
    if (lean) { /* every layer's copy without the four remade ones */
        g->act_layer_bytes = lean_layer;
        all = lean_layer * (size_t) g->L;
        g->act_shared = trn_cuda_malloc(shared);
        keep = g->act_shared != NULL;
    }
    g->act_base = keep ? trn_cuda_malloc(all) : NULL;
    if (!keep && !lean)
        g->act_base = trn_cuda_malloc(g->act_layer_bytes);
    if (!g->act_base) {
        s_free_acts(g);
        return LISA_TOOLARGE;
    }
    g->keep = keep;
    g->lean = lean;
    g->cap_T = T;
    if (!keep && (g->recompute == TRN_RECOMPUTE_AUTO ||
                  g->recompute == TRN_RECOMPUTE_KEEP_ATTN)) {
        /* recomputing: keep each layer's attention output and lse when
         * they fit with the same spare, so the recomputed forward skips
         * the attention */
        size_t ob = s_pad(T * HD * 2), lb = s_pad(T * (size_t) g->H * 4);
        size_t need = (ob + lb) * (size_t) g->L;
        if (s_fits(need)) {
            g->attn_keep = trn_cuda_malloc(need);
            g->attn_keep_bytes = ob + lb;
            g->keep_attn = g->attn_keep != NULL;
        }
    }
    s_bind(g, 0);
    return LISA_OK;
}

/* Layer l's element-wise tensors, those of `which` (S_EW_*): the normed
 * input h1 (from the layer input), the rotated and normed q|k|v (from
 * q|k|v), the normed residual sum h2 (from xm), the SwiGLU output a (from
 * gate|up). The forward makes each as it goes; a backward over activations
 * kept leanly makes all four again from what was kept, the same bits. */
enum { S_EW_H1 = 1, S_EW_QKVN = 2, S_EW_H2 = 4, S_EW_A = 8, S_EW_ALL = 15 };

static lisa_rc_t
s_elementwise(trn_gpu_model_t *g, int l, int T, int which)
{
    lisa_rc_t rc = LISA_OK;
    const s_layer_t *ly = &g->layers[l];
    const trn_bf16_t *W = g->wb;
    float eps = (float) g->cfg.rms_norm_eps;
    float *x = g->xs + (size_t) l * (size_t) T * (size_t) g->C;
    if (which & S_EW_H1)
        S_TRYP(TRN_PH_NORM,
               trn_k_rmsnorm_fwd(g->h1, g->C, g->rstd1, x, NULL, g->C,
                                 W + ly->w_in, T, g->C, 1, eps, NULL));
    if (which & S_EW_QKVN)
        S_TRYP(TRN_PH_QK,
               trn_k_qk_fwd(g->qkvn, g->qkv, g->S, g->rstdq, g->rstdk,
                            s_norm_w(g, W, ly->q_norm),
                            s_norm_w(g, W, ly->k_norm), g->pos, T, g->H, g->Hk,
                            g->D, eps, (float) g->cfg.rope_theta, NULL));
    if (which & S_EW_H2)
        S_TRYP(TRN_PH_NORM,
               trn_k_rmsnorm_fwd(g->h2, g->C, g->rstd2, g->xm, NULL, g->C,
                                 W + ly->w_post, T, g->C, 1, eps, NULL));
    if (which & S_EW_A)
        S_TRYP(TRN_PH_SWIGLU, trn_k_swiglu_fwd(g->a, g->gu, T, g->I, NULL));
out:
    return rc;
}

/* Runs layer l forward from xs[l]; writes xs[l+1] when `write_out`; runs
 * the attention unless its output and lse are kept (`attn` 0). */
static lisa_rc_t
s_layer_fwd(trn_gpu_model_t *g, int l, int T, int write_out, int attn)
{
    lisa_rc_t rc = LISA_OK;
    const s_layer_t *ly = &g->layers[l];
    const trn_bf16_t *W = g->wb;
    size_t C = (size_t) g->C;
    int H = g->H, Hk = g->Hk, D = g->D, I = g->I;
    float *x = g->xs + (size_t) l * (size_t) T * C;

    S_TRY(s_elementwise(g, l, T, S_EW_H1));
    S_TRYP(TRN_PH_PROD_F, trn_linear_fwd(g->blas, NULL, g->qkv, g->h1,
                                         W + ly->qkv, T, g->C, g->S, 0, NULL));
    if (g->qkv_bias)
        S_TRYP(TRN_PH_QK,
               trn_k_bias_add(g->qkv, g->S, W + ly->qkv_b, T, g->S, NULL));
    S_TRY(s_elementwise(g, l, T, S_EW_QKVN));
    if (attn && g->cp_on)
        S_TRYP(TRN_PH_ATTN_F, trn_gpu_cp_attn_fwd(g, l, NULL));
    else if (attn)
        S_TRYP(TRN_PH_ATTN_F,
               trn_k_attn_fwd(g->o, g->lse, g->qkvn, g->qkvn + H * D,
                              g->qkvn + (H + Hk) * D, g->S, g->seg, T, H, Hk, D,
                              NULL));
    S_TRYP(TRN_PH_PROD_F, trn_linear_fwd_res(g->blas, g->xm, x, g->o, W + ly->o,
                                             T, H * D, g->C, NULL));
    S_TRY(s_elementwise(g, l, T, S_EW_H2));
    S_TRYP(TRN_PH_PROD_F, trn_linear_fwd(g->blas, NULL, g->gu, g->h2,
                                         W + ly->gu, T, g->C, 2 * I, 0, NULL));
    S_TRY(s_elementwise(g, l, T, S_EW_A));
    if (write_out) {
        S_TRYP(TRN_PH_PROD_F,
               trn_linear_fwd_res(g->blas, x + (size_t) T * C, g->xm, g->a,
                                  W + ly->down, T, I, g->C, NULL));
    }
out:
    return rc;
}

lisa_rc_t
trn_gpu_model_forward(trn_gpu_model_t *g, const trn_batch_t *b, float *logp,
                      float *entropy, trn_err_t *err)
{
    lisa_rc_t rc = LISA_OK;
    g->have_forward = 0;
    g->logits_kept = 0;
    size_t total = b && b->cp ? b->cp->n_global : b ? b->n_tokens : 0;
    if (!b || !b->tokens || !b->targets || !b->seq_offsets || b->n_seqs < 1 ||
        b->n_tokens < 1 || b->seq_offsets[0] != 0 ||
        b->seq_offsets[b->n_seqs] != total || !(b->temperature > 0) ||
        total > (size_t) INT32_MAX / 4) {
        s_err(err, "invalid batch");
        return LISA_INVALID;
    }
    size_t T = b->n_tokens;
    int32_t *pos = lisa_malloc(T * 4), *seg = lisa_calloc(T, 4);
    g->cp_on = b->cp != NULL;
    if (g->cp_on) { /* this rank's rows of the batch (trn_gpu_cp.c) */
        S_TRY(trn_gpu_cp_begin(g, b, pos, err));
    } else {
        for (size_t s = 0; s < b->n_seqs; s++) {
            if (b->seq_offsets[s + 1] <= b->seq_offsets[s]) {
                s_err(err, "sequence offsets must increase");
                rc = LISA_INVALID;
                goto out;
            }
            for (size_t t = b->seq_offsets[s]; t < b->seq_offsets[s + 1]; t++) {
                pos[t] = (int32_t) (t - b->seq_offsets[s]);
                seg[t] = (int32_t) s;
            }
        }
    }
    for (size_t t = 0; t < T; t++)
        if (b->tokens[t] < 0 || b->tokens[t] >= g->V || b->targets[t] >= g->V ||
            pos[t] >= g->cfg.max_position_embeddings) {
            s_err(err, "token id or position out of range");
            rc = LISA_INVALID;
            goto out;
        }
    rc = trn_gpu_model_reserve(g, T);
    if (rc != LISA_OK) {
        s_err(err, "out of device memory for activations");
        goto out;
    }
    g->T = T;
    g->inv_temp = 1.0f / b->temperature;
    if (g->timer)
        (void) trn_cuda_timer_start(g->timer);
    S_TRYP(TRN_PH_OTHER, trn_cuda_upload(g->tokens, b->tokens, T * 4));
    S_TRYP(TRN_PH_OTHER, trn_cuda_upload(g->targets, b->targets, T * 4));
    S_TRYP(TRN_PH_OTHER, trn_cuda_upload(g->pos, pos, T * 4));
    S_TRYP(TRN_PH_OTHER, trn_cuda_upload(g->seg, seg, T * 4));
    int Ti = (int) T;
    S_TRYP(TRN_PH_OTHER, trn_k_embed_fwd(g->xs, g->wb + g->embed, g->tokens, Ti,
                                         g->C, g->V, NULL));
    for (int l = 0; l < g->L; l++) {
        s_bind(g, l);
        if (g->cp_on)
            g->o = trn_gpu_cp_o(g, l);
        S_TRY(s_layer_fwd(g, l, Ti, 1, 1));
    }
    float *xl = g->xs + (size_t) g->L * T * (size_t) g->C;
    S_TRYP(TRN_PH_NORM, trn_k_rmsnorm_fwd(g->hf, g->C, g->rstdf, xl, NULL, g->C,
                                          g->wb + g->final_norm, Ti, g->C, 1,
                                          (float) g->cfg.rms_norm_eps, NULL));
    for (size_t r0 = 0; r0 < T; r0 += g->chunk) {
        int cn = (int) (T - r0 < g->chunk ? T - r0 : g->chunk);
        S_TRYP(TRN_PH_PROD_F,
               trn_linear_fwd(g->blas, g->logits, NULL,
                              g->hf + r0 * (size_t) g->C, g->wb + g->lm_head,
                              cn, g->C, g->V, 0, NULL));
        S_TRYP(TRN_PH_LOSS,
               trn_k_logprob(g->logp + r0, g->ent + r0, g->head_lse + r0,
                             g->logits, g->targets + r0, cn, g->V, g->inv_temp,
                             NULL));
    }
    S_TRYP(TRN_PH_OTHER, trn_cuda_download(logp, g->logp, T * 4));
    if (entropy)
        S_TRYP(TRN_PH_OTHER, trn_cuda_download(entropy, g->ent, T * 4));
    g->logits_kept = T <= g->chunk;
    g->have_forward = 1;
out:
    if (rc != LISA_OK && err && !err->msg[0])
        s_err(err, "forward failed on the device");
    lisa_free(&pos);
    lisa_free(&seg);
    return rc;
}

/* Gradient bucket i of the data-parallel sum, in the order every rank
 * starts them: the layers from last to first (each final once the
 * backward pass has passed it), then the final norm, the embedding and an
 * untied LM head (final only at the end: the tied LM head and the
 * embedding share theirs). Returns 0 past the last bucket. */
static int
s_bucket(const trn_gpu_model_t *g, int i, size_t *begin, size_t *end)
{
    size_t VC = (size_t) g->V * (size_t) g->C;
    if (i < g->L) {
        const s_layer_t *ly = &g->layers[g->L - 1 - i];
        *begin = ly->w_in;
        *end = ly->down + (size_t) g->C * (size_t) g->I;
        return 1;
    }
    i -= g->L;
    if (i == 0) {
        *begin = g->final_norm;
        *end = g->final_norm + (size_t) g->C;
    } else if (i == 1) {
        *begin = g->embed;
        *end = g->embed + VC;
    } else if (i == 2 && !g->cfg.tie_word_embeddings) {
        *begin = g->lm_head;
        *end = g->lm_head + VC;
    } else {
        return 0;
    }
    return 1;
}

/* Starts the sum of buckets [from, to) (to < 0: through the last). */
static lisa_rc_t
s_reduce_buckets(trn_gpu_model_t *g, int from, int to)
{
    size_t b = 0, e = 0;
    for (int i = from; (to < 0 || i < to) && s_bucket(g, i, &b, &e); i++) {
        lisa_rc_t rc = trn_dist_reduce_to_owners(g->dist, g->grad, g->gshard,
                                                 g->shard, b, e);
        if (rc != LISA_OK)
            return rc;
    }
    return LISA_OK;
}

void
trn_gpu_model_set_overlap(trn_gpu_model_t *g, int on)
{
    g->overlap = on != 0;
}

void
trn_gpu_model_last_backward(trn_gpu_model_t *g)
{
    g->last_bwd = 1;
}

lisa_rc_t
trn_gpu_model_backward(trn_gpu_model_t *g, const float *dlogp,
                       const float *dentropy, trn_err_t *err)
{
    lisa_rc_t rc = LISA_OK;
    if (!g->have_forward) {
        s_err(err, "backward without a forward");
        return LISA_CONFLICT;
    }
    if (g->state_off) {
        s_err(err, "backward with the training state off the device");
        return LISA_CONFLICT;
    }
    /* a gradient known to be zero is written by the weight products, not
     * read and added to */
    const int acc = !g->grad_zero;
    g->grad_zero = 0;
    size_t T = g->T, C = (size_t) g->C;
    int Ti = (int) T, H = g->H, Hk = g->Hk, D = g->D, I = g->I;
    float *G = g->grad;
    const trn_bf16_t *W = g->wb;
    /* the last backward of a data-parallel step sums each layer's
     * gradient across ranks while the layers below it run */
    int ovl = g->dist && g->overlap && g->last_bwd && !g->reduced;
    g->last_bwd = 0;
    if (g->timer)
        (void) trn_cuda_timer_start(g->timer);
    S_TRYP(TRN_PH_OTHER, trn_cuda_upload(g->dlogp, dlogp, T * 4));
    if (dentropy)
        S_TRYP(TRN_PH_OTHER, trn_cuda_upload(g->dent, dentropy, T * 4));
    /* LM head in chunks: recompute logits (unless the forward's are all
     * still there), form dlogits, project back. */
    for (size_t r0 = 0; r0 < T; r0 += g->chunk) {
        int cn = (int) (T - r0 < g->chunk ? T - r0 : g->chunk);
        const trn_bf16_t *hc = g->hf + r0 * C;
        if (!g->logits_kept)
            S_TRYP(TRN_PH_PROD_F,
                   trn_linear_fwd(g->blas, g->logits, NULL, hc, W + g->lm_head,
                                  cn, g->C, g->V, 0, NULL));
        S_TRYP(TRN_PH_LOSS,
               trn_k_logprob_bwd(g->dlogits, g->logits, g->targets + r0,
                                 g->head_lse + r0, g->ent + r0, g->dlogp + r0,
                                 dentropy ? g->dent + r0 : NULL, cn, g->V,
                                 g->inv_temp, NULL));
        S_TRYP(TRN_PH_PROD_BD,
               trn_linear_bwd_data(g->blas, g->dhf + r0 * C, g->dlogits,
                                   W + g->lm_head, cn, g->C, g->V, NULL));
        S_TRYP(TRN_PH_PROD_BW,
               trn_linear_bwd_weight(g->blas, G + g->lm_head, g->dlogits, hc,
                                     cn, g->C, g->V, acc || r0 > 0, NULL));
    }
    S_TRYP(TRN_PH_OTHER, trn_cuda_memset(g->dx, 0, T * C * 4, NULL));
    S_TRYP(TRN_PH_NORM, trn_k_rmsnorm_bwd_resid(
                            g->dx, g->dxb, g->C, G + g->final_norm, g->dhf,
                            g->C, g->xs + (size_t) g->L * T * C, g->C,
                            W + g->final_norm, g->rstdf, Ti, g->C, NULL));
    for (int l = g->L - 1; l >= 0; l--) {
        const s_layer_t *ly = &g->layers[l];
        float *x = g->xs + (size_t) l * T * C;
        s_bind(g, l);
        if (g->cp_on) /* kept: the attention is never recomputed */
            g->o = trn_gpu_cp_o(g, l);
        if (!g->keep)
            S_TRY(s_layer_fwd(g, l, Ti, 0, !g->keep_attn && !g->cp_on));
        else if (g->lean) /* the four tensors it did not keep */
            S_TRY(s_elementwise(g, l, Ti, S_EW_ALL));
        /* MLP (dxb: dx in bf16, from the norm backward before) */
        S_TRYP(TRN_PH_PROD_BD,
               trn_linear_bwd_data(g->blas, g->da, g->dxb, W + ly->down, Ti, I,
                                   g->C, NULL));
        S_TRYP(TRN_PH_PROD_BW,
               trn_linear_bwd_weight(g->blas, G + ly->down, g->dxb, g->a, Ti, I,
                                     g->C, acc, NULL));
        S_TRYP(TRN_PH_SWIGLU,
               trn_k_swiglu_bwd(g->dgu, g->da, g->gu, Ti, I, NULL));
        S_TRYP(TRN_PH_PROD_BD,
               trn_linear_bwd_data(g->blas, g->dhf, g->dgu, W + ly->gu, Ti,
                                   g->C, 2 * I, NULL));
        S_TRYP(TRN_PH_PROD_BW,
               trn_linear_bwd_weight(g->blas, G + ly->gu, g->dgu, g->h2, Ti,
                                     g->C, 2 * I, acc, NULL));
        S_TRYP(TRN_PH_NORM,
               trn_k_rmsnorm_bwd_resid(
                   g->dx, g->dxb, g->C, G + ly->w_post, g->dhf, g->C, g->xm,
                   g->C, W + ly->w_post, g->rstd2, Ti, g->C, NULL));
        /* attention */
        S_TRYP(TRN_PH_PROD_BD,
               trn_linear_bwd_data(g->blas, g->da, g->dxb, W + ly->o, Ti, H * D,
                                   g->C, NULL));
        S_TRYP(TRN_PH_PROD_BW,
               trn_linear_bwd_weight(g->blas, G + ly->o, g->dxb, g->o, Ti,
                                     H * D, g->C, acc, NULL));
        if (g->cp_on)
            S_TRYP(TRN_PH_ATTN_B, trn_gpu_cp_attn_bwd(g, l, err));
        else
            S_TRYP(TRN_PH_ATTN_B,
                   trn_k_attn_bwd(g->dqkv, g->dqkv + H * D,
                                  g->dqkv + (H + Hk) * D, g->S, g->attn_scratch,
                                  g->da, g->o, g->lse, g->qkvn, g->qkvn + H * D,
                                  g->qkvn + (H + Hk) * D, g->S, g->seg, Ti, H,
                                  Hk, D, NULL));
        S_TRYP(TRN_PH_QK,
               trn_k_qk_bwd(g->dqkv, g->S, g->qk_norm ? G + ly->q_norm : NULL,
                            g->qk_norm ? G + ly->k_norm : NULL, g->qkv,
                            s_norm_w(g, W, ly->q_norm),
                            s_norm_w(g, W, ly->k_norm), g->rstdq, g->rstdk,
                            g->pos, Ti, H, Hk, D, (float) g->cfg.rope_theta,
                            NULL));
        if (g->qkv_bias)
            S_TRYP(TRN_PH_QK, trn_k_bias_grad(G + ly->qkv_b, g->dqkv, g->S, Ti,
                                              g->S, NULL));
        S_TRYP(TRN_PH_PROD_BD,
               trn_linear_bwd_data(g->blas, g->dhf, g->dqkv, W + ly->qkv, Ti,
                                   g->C, g->S, NULL));
        S_TRYP(TRN_PH_PROD_BW,
               trn_linear_bwd_weight(g->blas, G + ly->qkv, g->dqkv, g->h1, Ti,
                                     g->C, g->S, acc, NULL));
        S_TRYP(TRN_PH_NORM,
               trn_k_rmsnorm_bwd_resid(g->dx, l > 0 ? g->dxb : NULL, g->C,
                                       G + ly->w_in, g->dhf, g->C, x, g->C,
                                       W + ly->w_in, g->rstd1, Ti, g->C, NULL));
        if (ovl)
            S_TRYP(TRN_PH_OTHER, s_reduce_buckets(g, g->L - 1 - l, g->L - l));
    }
    S_TRYP(TRN_PH_OTHER, trn_k_embed_bwd(G + g->embed, g->dx, g->tokens, Ti,
                                         g->C, g->V, NULL));
    if (ovl) {
        S_TRYP(TRN_PH_OTHER, s_reduce_buckets(g, g->L, -1));
        g->reduced = 1;
    }
    /* this stream only: started sums run on (trn_gpu_model_adamw waits) */
    S_TRY(trn_cuda_stream_sync(NULL));
out:
    if (rc != LISA_OK && err && !err->msg[0])
        s_err(err, "backward failed on the device");
    return rc;
}

lisa_rc_t
trn_gpu_model_zero_grad(trn_gpu_model_t *g)
{
    if (g->state_off)
        return LISA_CONFLICT;
    if (g->dist) { /* sums still reading the gradient (a skipped step) */
        lisa_rc_t rc = trn_dist_wait(g->dist);
        g->reduced = 0;
        if (rc != LISA_OK)
            return rc;
    }
    lisa_rc_t rc = trn_cuda_memset(
        g->grad, 0, (g->dist ? g->n_pad : g->n_params) * 4, NULL);
    g->grad_zero = rc == LISA_OK;
    return rc;
}

lisa_rc_t
trn_gpu_model_download_grads(trn_gpu_model_t *g, trn_model_t *dst)
{
    if (trn_model_num_params(dst) != g->n_params)
        return LISA_INVALID;
    if (g->state_off)
        return LISA_CONFLICT;
    return trn_cuda_download(trn_model_grads(dst), g->grad, g->n_params * 4);
}

lisa_rc_t
trn_gpu_model_download_weights(trn_gpu_model_t *g, trn_model_t *dst)
{
    if (trn_model_num_params(dst) != g->n_params)
        return LISA_INVALID;
    if (g->state_off)
        return LISA_CONFLICT;
    if (g->opt_off)
        return trn_gpu_model_offload_get(g, trn_model_params(dst), NULL, NULL);
    if (g->dist) { /* each rank holds only its shard of the fp32 master:
                      gathered through the gradient buffer, which the next
                      step zeroes first anyway */
        size_t off = (size_t) trn_dist_rank(g->dist) * g->shard;
        lisa_rc_t rc = trn_cuda_copy(g->grad + off, g->w32, g->shard * 4, NULL);
        if (rc == LISA_OK)
            rc = trn_dist_allgather_f32(g->dist, g->grad, g->shard);
        if (rc == LISA_OK)
            rc = trn_cuda_download(trn_model_params(dst), g->grad,
                                   g->n_params * 4);
        if (rc == LISA_OK)
            rc = trn_gpu_model_zero_grad(g);
        return rc;
    }
    return trn_cuda_download(trn_model_params(dst), g->w32, g->n_params * 4);
}

/* Replaces *buf (n_old values) by a zeroed buffer of n_new values holding
 * the old contents; elem is the value size. */
static lisa_rc_t
s_grow(void *bufp, size_t n_old, size_t n_new, size_t elem)
{
    void **buf = bufp;
    void *nb = trn_cuda_malloc(n_new * elem);
    if (!nb)
        return LISA_TOOLARGE;
    lisa_rc_t rc = trn_cuda_memset(nb, 0, n_new * elem, NULL);
    if (rc == LISA_OK && *buf && n_old)
        rc = trn_cuda_copy(nb, *buf, n_old * elem, NULL);
    if (rc != LISA_OK) {
        trn_cuda_free(&nb);
        return rc;
    }
    trn_cuda_free(buf);
    *buf = nb;
    return LISA_OK;
}

lisa_rc_t
trn_gpu_model_set_dist(trn_gpu_model_t *g, trn_dist_t *d)
{
    lisa_rc_t rc = LISA_OK;
    if (!d || g->dist || g->step > 0 || g->state_off || g->opt_off)
        return LISA_CONFLICT;
    size_t W = (size_t) trn_dist_world(d), P = g->n_params;
    g->shard = (P + W - 1) / W;
    g->n_pad = g->shard * W;
    { /* the fp32 master: this rank's shard only (zeros past the end) */
        size_t off = (size_t) trn_dist_rank(d) * g->shard;
        size_t k = off < P ? P - off : 0;
        k = k < g->shard ? k : g->shard;
        float *w = trn_cuda_malloc(g->shard * 4);
        if (!w)
            return LISA_TOOLARGE;
        rc = trn_cuda_memset(w, 0, g->shard * 4, NULL);
        if (rc == LISA_OK && k)
            rc = trn_cuda_copy(w, g->w32 + off, k * 4, NULL);
        if (rc != LISA_OK) {
            trn_cuda_free(&w);
            return rc;
        }
        trn_cuda_free(&g->w32);
        g->w32 = w;
    }
    S_TRY(s_grow(&g->wb, P, g->n_pad, 2));
    S_TRY(s_grow(&g->grad, P, g->n_pad, 4));
    trn_cuda_free(&g->m);
    trn_cuda_free(&g->v);
    trn_cuda_free(&g->gshard);
    S_TRY(s_grow(&g->m, 0, g->shard, 4));
    S_TRY(s_grow(&g->v, 0, g->shard, 4));
    S_TRY(s_grow(&g->gshard, 0, g->shard, 4));
    S_TRY(trn_cuda_sync());
    g->dist = d;
out:
    return rc;
}

lisa_rc_t
trn_gpu_model_adamw(trn_gpu_model_t *g, float lr, float beta1, float beta2,
                    float eps, float weight_decay, float clip, float *grad_norm)
{
    lisa_rc_t rc = LISA_OK;
    if (g->state_off)
        return LISA_CONFLICT;
    float *grad = g->grad, *w32 = g->w32;
    trn_bf16_t *wb = g->wb;
    size_t n = g->n_params;
    if (g->dist) {
        size_t off = (size_t) trn_dist_rank(g->dist) * g->shard;
        if (!g->overlap)
            S_TRY(trn_dist_reduce_scatter_sum(g->dist, g->grad, g->gshard,
                                              g->shard));
        else if (!g->reduced) /* no marked backward here: the same buckets */
            S_TRY(s_reduce_buckets(g, 0, -1));
        g->reduced = 0;
        S_TRY(trn_dist_wait(g->dist));
        grad = g->gshard; /* w32 holds this rank's shard alone */
        wb += off;
        n = g->shard;
    }
    S_TRY(trn_cuda_memset(g->scalar, 0, 4, NULL));
    S_TRY(trn_k_sumsq(g->scalar, grad, n, NULL));
    if (g->dist)
        S_TRY(trn_dist_allreduce_sum(g->dist, g->scalar, 1));
    {
        float ss = 0;
        S_TRY(trn_cuda_download(&ss, g->scalar, 4));
        if (grad_norm)
            *grad_norm = sqrtf(ss);
        if (!isfinite(ss)) {
            S_TRY(trn_gpu_model_zero_grad(g));
            rc = LISA_AGAIN;
            goto out;
        }
    }
    g->step++;
    if (g->opt_off) {
        S_TRY(trn_gpu_model_adamw_offloaded(g, lr, beta1, beta2, eps,
                                            weight_decay, clip));
        goto out;
    }
    S_TRY(trn_k_adamw(w32, wb, g->m, g->v, grad, n, lr, beta1, beta2, eps,
                      weight_decay, g->step, clip, g->scalar, NULL));
    if (g->dist)
        S_TRY(trn_dist_allgather_bf16(g->dist, g->wb, g->shard));
out:
    return rc;
}

lisa_rc_t
trn_gpu_model_get_optim(trn_gpu_model_t *g, uint64_t *step, float *m, float *v)
{
    lisa_rc_t rc = LISA_OK;
    if (g->state_off)
        return LISA_CONFLICT;
    *step = (uint64_t) g->step;
    if (g->dist) { /* gather each rank's shard through the gradient buffer,
                      which the next step zeroes first anyway */
        size_t off = (size_t) trn_dist_rank(g->dist) * g->shard;
        float *src[2] = {g->m, g->v}, *dst[2] = {m, v};
        for (int k = 0; k < 2; k++) {
            S_TRY(trn_cuda_copy(g->grad + off, src[k], g->shard * 4, NULL));
            S_TRY(trn_dist_allgather_f32(g->dist, g->grad, g->shard));
            if (dst[k])
                S_TRY(trn_cuda_download(dst[k], g->grad, g->n_params * 4));
        }
        S_TRY(trn_gpu_model_zero_grad(g));
        goto out;
    }
    if (g->opt_off) {
        S_TRY(trn_gpu_model_offload_get(g, NULL, m, v));
        goto out;
    }
    S_TRY(trn_cuda_download(m, g->m, g->n_params * 4));
    S_TRY(trn_cuda_download(v, g->v, g->n_params * 4));
out:
    return rc;
}

lisa_rc_t
trn_gpu_model_set_optim(trn_gpu_model_t *g, uint64_t step, const float *m,
                        const float *v)
{
    lisa_rc_t rc = LISA_OK;
    if (g->state_off)
        return LISA_CONFLICT;
    if (g->dist) { /* this rank's shard (the padding past the end stays 0) */
        size_t off = (size_t) trn_dist_rank(g->dist) * g->shard;
        size_t k = off < g->n_params ? g->n_params - off : 0;
        k = k < g->shard ? k : g->shard;
        S_TRY(trn_cuda_memset(g->m, 0, g->shard * 4, NULL));
        S_TRY(trn_cuda_memset(g->v, 0, g->shard * 4, NULL));
        if (k) {
            S_TRY(trn_cuda_upload(g->m, m + off, k * 4));
            S_TRY(trn_cuda_upload(g->v, v + off, k * 4));
        }
        g->step = (int) step;
        goto out;
    }
    if (g->opt_off)
        S_TRY(trn_gpu_model_offload_set(g, m, v));
    else {
        S_TRY(trn_cuda_upload(g->m, m, g->n_params * 4));
        S_TRY(trn_cuda_upload(g->v, v, g->n_params * 4));
    }
    g->step = (int) step;
out:
    return rc;
}

float *
trn_gpu_model_grad_buffer(trn_gpu_model_t *g, size_t *n)
{
    if (n)
        *n = g->n_params;
    if (g->state_off)
        return NULL;
    g->grad_zero = 0; /* the caller may write it */
    return g->grad;
}

/* ---- the training state off the device --------------------------------- */

/* The training state's device arrays and their lengths (floats), in
 * their order in the host copy: the master weights, the moments, (data
 * parallel) the summed gradient shard, and last the gradient, left out
 * when it is known to be zero. Returns how many. */
static int
s_state_arrays(trn_gpu_model_t *g, float ***dev, size_t *n)
{
    size_t ng = g->dist ? g->n_pad : g->n_params;
    size_t nm = g->dist ? g->shard : g->n_params;
    int k = 0;
    if (!g->opt_off) { /* else they are on the host already */
        dev[k] = &g->w32, n[k++] = nm;
        dev[k] = &g->m, n[k++] = nm;
        dev[k] = &g->v, n[k++] = nm;
    }
    if (g->dist)
        dev[k] = &g->gshard, n[k++] = nm;
    if (!g->grad_zero)
        dev[k] = &g->grad, n[k++] = ng;
    return k;
}

/* Device -> host, then the device arrays and the activations freed. */
static lisa_rc_t
s_state_out(trn_gpu_model_t *g, trn_err_t *err)
{
    float **dev[5];
    size_t n[5], total = 0;
    if (g->dist && trn_dist_wait(g->dist) != LISA_OK) {
        s_err(err, "training state: collectives still running failed");
        return LISA_ERR;
    }
    int k = s_state_arrays(g, dev, n);
    for (int i = 0; i < k; i++)
        total += n[i];
    if (total && (!g->hstate || g->hstate_n < total)) {
        trn_cuda_host_free(&g->hstate);
        g->hstate = trn_cuda_host_alloc(total * 4);
        g->hstate_n = g->hstate ? total : 0;
        if (!g->hstate) {
            s_err(err, "training state: no page-locked host memory for it");
            return LISA_TOOLARGE;
        }
    }
    /* everything before on the device is done; the copies go back to back
     * on one stream (the link's one direction), one wait at the end */
    lisa_rc_t rc = trn_cuda_sync();
    float *h = g->hstate;
    for (int i = 0; i < k && rc == LISA_OK; i++) {
        rc = trn_cuda_download_async(h, *dev[i], n[i] * 4, NULL);
        h += n[i];
    }
    if (rc == LISA_OK)
        rc = trn_cuda_sync();
    if (rc != LISA_OK) {
        s_err(err, "training state: copy to the host failed");
        return rc;
    }
    for (int i = 0; i < k; i++)
        trn_cuda_free(dev[i]);
    trn_cuda_free(&g->grad); /* a zero gradient: not copied */
    trn_gpu_model_free_activations(g);
    g->state_off = 1;
    return LISA_OK;
}

/* Host -> device: every array allocated first (none kept when one does
 * not fit), then the copies back to back (a zero gradient zeroed), one
 * wait. */
static lisa_rc_t
s_state_in(trn_gpu_model_t *g, trn_err_t *err)
{
    float **dev[6];
    size_t n[6];
    int k = s_state_arrays(g, dev, n), zero = g->grad_zero;
    if (zero) { /* not in the host copy, but made again */
        dev[k] = &g->grad;
        n[k++] = g->dist ? g->n_pad : g->n_params;
    }
    for (int i = 0; i < k; i++) {
        *dev[i] = trn_cuda_malloc(n[i] * 4);
        if (!*dev[i]) {
            for (int j = 0; j <= i; j++)
                trn_cuda_free(dev[j]);
            s_err(err, "training state: out of device memory to bring it "
                       "back (close the KV cache first)");
            return LISA_TOOLARGE;
        }
    }
    lisa_rc_t rc = LISA_OK;
    const float *h = g->hstate;
    for (int i = 0; i < k && rc == LISA_OK; i++) {
        rc = zero && i == k - 1
                 ? trn_cuda_memset(*dev[i], 0, n[i] * 4, NULL)
                 : trn_cuda_upload_async(*dev[i], h, n[i] * 4, NULL);
        h += n[i];
    }
    if (rc == LISA_OK)
        rc = trn_cuda_sync();
    if (rc != LISA_OK) {
        for (int i = 0; i < k; i++)
            trn_cuda_free(dev[i]);
        s_err(err, "training state: copy back to the device failed");
        return rc;
    }
    g->state_off = 0;
    return LISA_OK;
}

lisa_rc_t
trn_gpu_model_set_train_state(trn_gpu_model_t *g, int on_device, trn_err_t *err)
{
    if (!g) {
        s_err(err, "training state: no model");
        return LISA_INVALID;
    }
    if ((on_device != 0) == !g->state_off)
        return LISA_OK;
    return on_device ? s_state_in(g, err) : s_state_out(g, err);
}

int
trn_gpu_model_train_state_on_device(const trn_gpu_model_t *g)
{
    return g && !g->state_off;
}

void
trn_gpu_model_free_activations(trn_gpu_model_t *g)
{
    if (!g)
        return;
    (void) trn_cuda_sync(); /* nothing still reading them */
    s_free_acts(g);
    trn_gpu_cp_free(g);
    g->have_forward = 0;
    g->logits_kept = 0;
}
