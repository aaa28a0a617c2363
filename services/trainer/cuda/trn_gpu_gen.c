/*
 * trn_gpu_gen: generation on the GPU model over a paged KV cache: per
 * layer, keys and values of n_blocks blocks of block_size positions
 * ([n_blocks * block_size, Hk*D] bf16 each); a block table of max_seqs
 * rows on the device, with a host mirror, so a step uploads only the
 * entries that changed (a decode step: a sequence that just entered a new
 * block); and one step that appends tokens to any number of sequences
 * (decodes, prompts and prompt chunks after a cached prefix alike),
 * computes the last token's logits of each and samples from them on the
 * device. The same bf16 weights serve training and generation, so after
 * an optimizer step the next request already uses the new policy.
 *
 * Every buffer of a step (activations for max_tokens tokens, logits and
 * sampling state for max_seqs sequences, the parameter block) is made
 * with the cache, so a step never allocates: one that would not fit is
 * refused by trn_gen_check (LISA_TOOLARGE). Everything runs on the
 * cache's own stream. A step's inputs go up in one copy from page-locked
 * memory and its outputs (tokens, logprobs) come back in one.
 *
 * Rows: decodes (one new token) first, then the prompt tokens of the
 * other sequences, packed. Decodes attend with the decode kernels, prompt
 * rows with the paged prefill kernel (trn_k_attn_prefill) over query
 * tiles of up to 128 rows of one sequence, listed by the host longest
 * first. Pure decode steps (the common case) run from the parameter
 * block's fixed part, whose addresses never change (nor the table's), so
 * the whole step (embedding, every layer, final norm, LM head, sampling)
 * is recorded once per batch size as a CUDA graph and replayed as one
 * launch afterwards; batch sizes are rounded up to a few buckets, the
 * extra rows padding (slot -1: no cache write, attention gives zeros,
 * results dropped).
 */
#include "lisa/lisa_mem.h"
#include "trn_gpu_model_int.h"

#include <stdlib.h>
#include <string.h>

#define S_GRAPHS 16 /* recorded steps kept per cache */

/* Buffers of one step's forward pass. */
typedef struct {
    float *x;
    trn_bf16_t *h, *qkv, *o, *gu, *a, *hf;
    float *ss; /* folded norms' partial sums of squares (s_fold_t) */
    float *logits;
    int32_t *tok, *slot, *pos, *last;
    int one; /* one token per sequence: q/k preparation fused into attention */
    int nd;  /* rows of decodes (the first); the rest are prompt rows */
    const trn_prefill_tile_t *tiles; /* the prompt rows' tiles (device) */
    int ntiles;
    int timed; /* marks for trn_gpu_model_phases (steps with prompt rows) */
} s_bufs_t;

/* S_TRY, then, in a timed step, the device time since the last mark
 * charged to kind k. */
#define S_TRYG(k, x) S_TRY_MARK(b->timed, k, x)

typedef struct {
    int nb, sample, seen;
    trn_cuda_graph_t *exec;
} s_graph_t;

struct trn_gpu_kv {
    trn_gpu_model_t *g;
    trn_kv_geom_t geom;
    trn_kv_pages_t pg;
    void *cache;         /* every layer's keys and values */
    trn_bf16_t **k, **v; /* per layer: [n_blocks * block_size, Hk*D] */
    int32_t *dtable;     /* [max_seqs, max_blocks] */
    int32_t *htable;     /* its mirror (page-locked) */
    trn_cuda_stream_t *stream;
    float *attn_part; /* split attention scratch */
    size_t attn_part_n;
    float *samp_part; /* sampling scratch */
    size_t samp_part_n;
    /* Activations for `rows` tokens, logits for max_seqs sequences. */
    size_t rows;
    float *dx, *dlogits;
    trn_bf16_t *dh, *dhf, *dqkv, *dout_attn, *dgu, *da;
    float *dss; /* s_ss_floats: [T, C / 16] partials, T up to the fold's */
    /* The parameter block: a fixed part of sp entries (int32 tok, slot,
     * pos, last, top_k; float temp, top_p; uint64 seed), which pure decode
     * steps use alone (their graphs keep its addresses), then the token
     * arrays and tiles of other steps, laid out per step. */
    size_t sp; /* max_seqs rounded up to a multiple of 4 */
    size_t max_tiles;
    uint8_t *dparam, *hparam; /* device and page-locked host */
    size_t param_bytes;
    uint8_t *dres, *hres;       /* int32 tok [sp], float lp [sp] */
    trn_prefill_tile_t *htiles; /* host scratch: max_tiles */
    size_t *hranges;            /* host scratch: 2 max_seqs */
    int use_graphs;
    s_graph_t graphs[S_GRAPHS];
    int next_graph;
    trn_bf16_t *packed; /* LISA_CUDA_PACKED=1: the products' packed copy */
    const trn_bf16_t *packed_from; /* the weights it holds, */
    int packed_step;               /* as of this optimizer step */
};

/* Offsets into the fixed part of the parameter block. */
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

/* Bytes of the fixed part (36 sp: a multiple of 16). */
static size_t
s_fixed_bytes(const trn_gpu_kv_t *kv)
{
    return (size_t) S_NARR * 4 * kv->sp + 8 * kv->sp;
}

/* Offset of the tiles after T tokens' arrays in the variable part. */
static size_t
s_tiles_at(size_t T)
{
    return (12 * T + 15) & ~(size_t) 15;
}

size_t
trn_gpu_kv_block_bytes(const trn_gpu_model_t *g, size_t block_size)
{
    if (!g)
        return 0;
    return (size_t) g->L * 2 * block_size * (size_t) (g->Hk * g->D) * 2;
}

static int
s_log2(size_t v)
{
    int b = 0;
    while (((size_t) 1 << b) < v)
        b++;
    return ((size_t) 1 << b) == v ? b : -1;
}

lisa_rc_t
trn_gpu_kv_geom_check(const trn_gpu_model_t *g, const trn_kv_geom_t *geom,
                      trn_err_t *err)
{
    const char *why = NULL;
    if (!g || !geom) {
        s_err(err, "KV cache: no model or geometry");
        return LISA_INVALID;
    }
    int bs = s_log2(geom->block_size);
    if (bs < 0 || geom->block_size > 1024)
        why = "KV cache: block_size is not a power of two up to 1024";
    else if (geom->max_seqs == 0 || geom->max_seqs > TRN_GEN_MAX_ROWS)
        why = "KV cache: max_seqs is 0 or over 1024";
    else if (geom->max_blocks == 0 || geom->max_tokens == 0 ||
             geom->max_tokens > ((size_t) 1 << 24) ||
             geom->max_blocks > ((size_t) 1 << 24) / geom->block_size)
        why = "KV cache: max_blocks or max_tokens is 0 or too large";
    else if (geom->max_seqs * geom->max_blocks > ((size_t) 1 << 24))
        why = "KV cache: a block table over 2^24 entries";
    else if (geom->n_blocks > (size_t) INT32_MAX / geom->block_size)
        why = "KV cache: too many blocks";
    else if (geom->kv_fraction < 0.0 || geom->kv_fraction > 1.0)
        why = "KV cache: kv_fraction outside [0, 1]";
    if (why)
        s_err(err, why);
    return why ? LISA_INVALID : LISA_OK;
}

/* Floats of the folded norms' partial sums: C / 16 a token from a
 * product, one from trn_k_rmsnorm_fold, for the most tokens a folded
 * product takes. */
static size_t
s_ss_floats(const trn_gpu_model_t *g)
{
    return ((size_t) g->C / 16 + 1) * TRN_LINEAR_NORM_TMAX;
}

/* The step buffers (everything but the blocks); 0 when out of memory. */
static int
s_alloc_step(trn_gpu_kv_t *kv)
{
    trn_gpu_model_t *g = kv->g;
    const trn_kv_geom_t *ge = &kv->geom;
    size_t R = kv->rows, C = (size_t) g->C, I = (size_t) g->I;
    size_t N = ge->max_seqs, TB = ge->max_seqs * ge->max_blocks * 4;
    kv->stream = trn_cuda_stream_new();
    kv->dtable = trn_cuda_malloc(TB);
    kv->htable = trn_cuda_host_alloc(TB);
    kv->attn_part_n = trn_k_attn_decode_scratch(g->H, g->Hk, g->D);
    kv->attn_part = trn_cuda_malloc(kv->attn_part_n * 4);
    kv->samp_part_n = trn_k_sample_scratch((int) N, g->V);
    kv->samp_part = trn_cuda_malloc(kv->samp_part_n * 4);
    kv->dx = trn_cuda_malloc(R * C * 4);
    kv->dlogits = trn_cuda_malloc(N * (size_t) g->V * 4);
    kv->dh = trn_cuda_malloc(R * C * 2);
    kv->dhf = trn_cuda_malloc(N * C * 2);
    kv->dqkv = trn_cuda_malloc(R * (size_t) g->S * 2);
    kv->dout_attn = trn_cuda_malloc(R * (size_t) (g->H * g->D) * 2);
    kv->dgu = trn_cuda_malloc(R * 2 * I * 2);
    kv->da = trn_cuda_malloc(R * I * 2);
    kv->dss = trn_cuda_malloc(s_ss_floats(g) * 4);
    kv->param_bytes = s_fixed_bytes(kv) + s_tiles_at(R) +
                      kv->max_tiles * sizeof(trn_prefill_tile_t);
    kv->dparam = trn_cuda_malloc(kv->param_bytes);
    kv->hparam = trn_cuda_host_alloc(kv->param_bytes);
    kv->dres = trn_cuda_malloc(8 * kv->sp);
    kv->hres = trn_cuda_host_alloc(8 * kv->sp);
    kv->htiles = lisa_calloc(kv->max_tiles, sizeof *kv->htiles);
    kv->hranges = lisa_calloc(2 * N, sizeof *kv->hranges);
    if (!kv->stream || !kv->dtable || !kv->htable || !kv->attn_part ||
        !kv->samp_part || !kv->dx || !kv->dlogits || !kv->dh || !kv->dhf ||
        !kv->dqkv || !kv->dout_attn || !kv->dgu || !kv->da || !kv->dss ||
        !kv->dparam || !kv->hparam || !kv->dres || !kv->hres)
        return 0;
    /* the table starts all block 0, and so does its mirror */
    memset(kv->htable, 0, TB);
    return trn_cuda_memset(kv->dtable, 0, TB, kv->stream) == LISA_OK &&
           trn_cuda_stream_sync(kv->stream) == LISA_OK;
}

/* The blocks: geom->n_blocks of them, or as many as the budget holds. */
static lisa_rc_t
s_alloc_blocks(trn_gpu_kv_t *kv, trn_err_t *err)
{
    trn_gpu_model_t *g = kv->g;
    trn_kv_geom_t *ge = &kv->geom;
    size_t bb = trn_gpu_kv_block_bytes(g, ge->block_size);
    if (ge->n_blocks == 0) {
        size_t budget = ge->kv_bytes;
        if (budget == 0) {
            size_t fr = 0, tot = 0;
            if (trn_cuda_mem_info(&fr, &tot) != LISA_OK) {
                s_err(err, "KV cache: cannot read the free device memory");
                return LISA_ERR;
            }
            double f = ge->kv_fraction > 0.0 ? ge->kv_fraction : 0.9;
            budget = (size_t) ((double) fr * f);
        }
        size_t nb = budget / bb;
        size_t cap = (size_t) INT32_MAX / ge->block_size;
        ge->n_blocks = nb > cap ? cap : nb;
        if (ge->n_blocks == 0) {
            s_err(err, "KV cache: no room for a single block");
            return LISA_TOOLARGE;
        }
    }
    /* per layer, keys then values, each padded to 256 bytes */
    size_t per = ge->n_blocks * ge->block_size * (size_t) (g->Hk * g->D) * 2;
    per = (per + 255) & ~(size_t) 255;
    kv->cache = trn_cuda_malloc(per * 2 * (size_t) g->L);
    if (!kv->cache) {
        s_err(err, "KV cache: out of device memory for the blocks");
        return LISA_TOOLARGE;
    }
    for (int l = 0; l < g->L; l++) {
        kv->k[l] = (trn_bf16_t *) (void *) ((uint8_t *) kv->cache +
                                            per * 2 * (size_t) l);
        kv->v[l] = (trn_bf16_t *) (void *) ((uint8_t *) kv->cache +
                                            per * (2 * (size_t) l + 1));
    }
    return LISA_OK;
}

/* Whether the few-token products read a packed copy of the weights
 * (LISA_CUDA_PACKED=1, where the bulk product kernel runs; read once). */
static int
s_packed_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("LISA_CUDA_PACKED");
        on = e && strcmp(e, "1") == 0 && trn_linear_pack_used();
    }
    return on;
}

/* The packed copy made again from the current bf16 weights (on the
 * default stream, which the cache's stream follows); remembers which
 * weights it packed (their address and the optimizer step that last
 * wrote them). */
static lisa_rc_t
s_repack(trn_gpu_kv_t *kv)
{
    trn_gpu_model_t *g = kv->g;
    int C = g->C, I = g->I, Q = g->H * g->D;
    const trn_bf16_t *w = g->wb;
    trn_bf16_t *p = kv->packed;
    lisa_rc_t rc = LISA_OK;
    for (int l = 0; l < g->L && rc == LISA_OK; l++) {
        const s_layer_t *ly = &g->layers[l];
        size_t off[4] = {ly->qkv, ly->o, ly->gu, ly->down};
        int N[4] = {g->S, C, 2 * I, C}, K[4] = {C, Q, C, I};
        for (int m = 0; m < 4 && rc == LISA_OK; m++)
            rc = trn_linear_pack(p + off[m], w + off[m], N[m], K[m], NULL);
    }
    if (rc == LISA_OK)
        rc = trn_linear_pack(p + g->lm_head, w + g->lm_head, g->V, C, NULL);
    if (rc != LISA_OK)
        return rc;
    kv->packed_from = w;
    kv->packed_step = g->step;
    return LISA_OK;
}

/* The packed copy, where it is asked for and the shapes allow it (every
 * product's K a multiple of 64); without it the products read the bf16
 * weights as they are. */
static void
s_pack_weights(trn_gpu_kv_t *kv)
{
    trn_gpu_model_t *g = kv->g;
    if (!s_packed_on() || g->C % 64 || (g->H * g->D) % 64 || g->I % 64)
        return;
    kv->packed = trn_cuda_malloc(g->n_params * 2);
    if (kv->packed && s_repack(kv) == LISA_OK) {
        lisa_log_info("gpu model: packed weights for decode (%zu MiB)",
                      g->n_params * 2 >> 20);
        return;
    }
    lisa_log_warn("gpu model: no packed weights (%zu MiB): out of device "
                  "memory; the products read the weights as they are",
                  g->n_params * 2 >> 20);
    trn_cuda_free(&kv->packed);
}

/* Before a step: the packed copy made again if the weights changed, and
 * given to the model's products for the step (trn_gpu_model_step takes it
 * back after: a training forward of a few tokens between two steps reads
 * the weights it just updated). */
static lisa_rc_t
s_packed_fresh(trn_gpu_kv_t *kv)
{
    trn_gpu_model_t *g = kv->g;
    if (!kv->packed)
        return LISA_OK;
    if (kv->packed_from != g->wb || kv->packed_step != g->step) {
        lisa_rc_t rc = s_repack(kv);
        if (rc != LISA_OK)
            return rc;
    }
    trn_linear_set_packed(g->blas, g->wb, kv->packed, g->n_params * 2);
    return LISA_OK;
}

trn_gpu_kv_t *
trn_gpu_kv_new(trn_gpu_model_t *g, trn_kv_geom_t *geom, trn_err_t *err)
{
    if (trn_gpu_kv_geom_check(g, geom, err) != LISA_OK)
        return NULL;
    trn_gpu_kv_t *kv = lisa_calloc(1, sizeof *kv);
    kv->g = g;
    kv->geom = *geom;
    kv->use_graphs = 1;
    kv->k = lisa_calloc((size_t) g->L, sizeof *kv->k);
    kv->v = lisa_calloc((size_t) g->L, sizeof *kv->v);
    kv->sp = (geom->max_seqs + 3) & ~(size_t) 3; /* 16-byte parts */
    kv->rows = geom->max_tokens > kv->sp ? geom->max_tokens : kv->sp;
    kv->max_tiles =
        geom->max_tokens / TRN_PREFILL_TILE_ROWS + geom->max_seqs + 1;
    if (!s_alloc_step(kv)) {
        s_err(err, "KV cache: out of device memory for the step buffers");
        trn_gpu_kv_destroy(&kv);
        return NULL;
    }
    /* a cache sized as a share of free memory takes its share after the
     * packed copy (counted with the weights); one of a given size first,
     * the copy then where room is left */
    int share = geom->n_blocks == 0 && geom->kv_bytes == 0;
    if (share)
        s_pack_weights(kv);
    if (s_alloc_blocks(kv, err) != LISA_OK) {
        trn_gpu_kv_destroy(&kv);
        return NULL;
    }
    if (!share)
        s_pack_weights(kv);
    kv->pg.table = kv->dtable;
    kv->pg.max_blocks = (int) geom->max_blocks;
    kv->pg.bshift = s_log2(geom->block_size);
    geom->n_blocks = kv->geom.n_blocks;
    return kv;
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
    trn_cuda_free(&kv->packed);
    trn_cuda_free(&kv->cache);
    trn_cuda_free(&kv->dtable);
    trn_cuda_host_free(&kv->htable);
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
    trn_cuda_free(&kv->dss);
    trn_cuda_free(&kv->dparam);
    trn_cuda_free(&kv->dres);
    trn_cuda_host_free(&kv->hparam);
    trn_cuda_host_free(&kv->hres);
    trn_cuda_stream_destroy(&kv->stream);
    lisa_free(&kv->htiles);
    lisa_free(&kv->hranges);
    lisa_free(&kv->k);
    lisa_free(&kv->v);
    lisa_free(kvp);
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

/* Before layer l's product k (q|k|v, o, gate|up, down): the weights of
 * the product after it (the next layer's q|k|v, or the LM head, after
 * down) as trn_linear_next's hint. */
static void
s_next(trn_gpu_model_t *g, int l, int k)
{
    const s_layer_t *ly = &g->layers[l];
    size_t C = (size_t) g->C, I = (size_t) g->I;
    size_t Q = (size_t) g->H * (size_t) g->D;
    const trn_bf16_t *W = g->wb;
    switch (k) {
    case 0:
        trn_linear_next(g->blas, W + ly->o, Q * C * 2);
        break;
    case 1:
        trn_linear_next(g->blas, W + ly->gu, 2 * I * C * 2);
        break;
    case 2:
        trn_linear_next(g->blas, W + ly->down, C * I * 2);
        break;
    default:
        if (l + 1 < g->L)
            trn_linear_next(g->blas, W + g->layers[l + 1].qkv,
                            (size_t) g->S * C * 2);
        else
            trn_linear_next(g->blas, W + g->lm_head, (size_t) g->V * C * 2);
    }
}

/* ---- the hidden norms folded into the products ------------------------
 * In a step of a few tokens on the bulk skinny kernel (trn_linear_norm_fits)
 * a layer's two RMSNorm kernels go: the o and down products, adding into
 * the residual b->x, also write the next norm's input bf16(x * w) into
 * b->h and their 16-output tiles' partial sums of x^2 into b->ss; the
 * q|k|v and gate|up products (and the LM head of a direct step) read them
 * and scale each token's sums by its rstd. The first layer's input comes
 * from trn_k_rmsnorm_fold. Not the separate norm's bits (rstd multiplies
 * W bf16(x * w) instead of entering bf16(w * bf16(x * rstd))): equal to
 * bf16 rounding.
 *
 * One h and one ss serve every product that writes them: each kernel of
 * a step touches what an earlier kernel wrote (and writes anything) only
 * after trn_pdl_enter, which returns once the kernel before it has ended,
 * and that one waited for its own predecessor the same way (a kernel
 * without programmatic dependent launch waits for the whole kernel
 * before), so past that point every earlier kernel of the step has
 * ended. When o overwrites h and ss, the q|k|v product that read them is
 * two or more kernels back (the attention between), and gate|up, which
 * reads o's values, reads them only after o has ended; likewise down
 * after gate|up, and the next layer's q|k|v after down. No kernel both
 * reads and writes them. */
typedef struct {
    int on;   /* the layers' norms folded */
    int head; /* and the final norm into the LM head */
} s_fold_t;

/* Whether decode steps may fold the norms (LISA_CUDA_NORM_FOLD=0: never;
 * read once). On an H200, decode steps over 2,500 positions: batch 8
 * 3.807 ms with the fold against 3.894 without, batch 4 3.316 against
 * 3.447. */
static int
s_fold_env(void)
{
    static int on = -1;
    if (on < 0)
        on = trn_env_on("LISA_CUDA_NORM_FOLD");
    return on;
}

static int
s_al16(const trn_bf16_t *p)
{
    return (uintptr_t) p % 16 == 0;
}

/* Whether every product the fold touches has 16-byte aligned weights. */
static int
s_fold_aligned(const trn_gpu_model_t *g)
{
    const trn_bf16_t *W = g->wb;
    int ok = s_al16(W + g->lm_head);
    for (int l = 0; l < g->L; l++) {
        const s_layer_t *ly = &g->layers[l];
        ok &= s_al16(W + ly->qkv) && s_al16(W + ly->o) && s_al16(W + ly->gu) &&
              s_al16(W + ly->down);
    }
    return ok;
}

/* The step's choice (all its products have T tokens; n rows of logits,
 * `direct`: row i from token i). */
static s_fold_t
s_fold(const trn_gpu_model_t *g, int T, int n, int direct)
{
    s_fold_t f = {0, 0};
    int Q = g->H * g->D;
    f.on = s_fold_env() && g->L > 0 && trn_linear_norm_fits(T, g->C, g->S, 0) &&
           trn_linear_norm_fits(T, g->C, 2 * g->I, 0) &&
           trn_linear_norm_fits(T, Q, g->C, 1) &&
           trn_linear_norm_fits(T, g->I, g->C, 1) && s_fold_aligned(g);
    f.head = f.on && direct && n == T && trn_linear_norm_fits(n, g->C, g->V, 0);
    return f;
}

/* A norm in from the partials in b->ss, nss a token. */
static trn_norm_in_t
s_nin(const trn_gpu_model_t *g, const s_bufs_t *b, int nss)
{
    trn_norm_in_t n = {b->ss, nss, g->C, (float) g->cfg.rms_norm_eps};
    return n;
}

/* A norm out into b->h and b->ss for the norm of weight w. */
static trn_norm_out_t
s_nout(const s_bufs_t *b, const trn_bf16_t *w)
{
    trn_norm_out_t n = {b->h, w, b->ss};
    return n;
}

/* The weight of the norm after layer l's down product. */
static const trn_bf16_t *
s_norm_after(const trn_gpu_model_t *g, int l)
{
    return l + 1 < g->L ? g->wb + g->layers[l + 1].w_in : g->wb + g->final_norm;
}

/* One layer over the T new tokens, b->x in place (fp32 [T, C]); the
 * norms folded into the products as f says. */
static lisa_rc_t
s_layer(trn_gpu_model_t *g, trn_gpu_kv_t *kv, const s_bufs_t *b, int l, int T,
        const s_fold_t *f)
{
    lisa_rc_t rc = LISA_OK;
    const s_layer_t *ly = &g->layers[l];
    const trn_bf16_t *W = g->wb;
    trn_cuda_stream_t *st = kv->stream;
    float eps = (float) g->cfg.rms_norm_eps;
    float theta = (float) g->cfg.rope_theta;
    /* a folded norm's partials: one a token from trn_k_rmsnorm_fold, a
     * tile's from a product */
    trn_norm_in_t nin = s_nin(g, b, l == 0 ? 1 : g->C / 16);
    trn_norm_out_t post = s_nout(b, W + ly->w_post);
    trn_norm_out_t next = s_nout(b, s_norm_after(g, l));
    int fold_down = f->on && (l + 1 < g->L || f->head);

    if (!f->on)
        S_TRYG(TRN_PH_NORM,
               trn_k_rmsnorm_fwd(b->h, g->C, NULL, b->x, NULL, g->C,
                                 W + ly->w_in, T, g->C, 1, eps, st));
    else if (l == 0)
        S_TRYG(TRN_PH_NORM, trn_k_rmsnorm_fold(b->h, b->ss, b->x, W + ly->w_in,
                                               T, g->C, st));
    s_next(g, l, 0);
    S_TRYG(TRN_PH_PROD_F,
           trn_linear_fwd_norm(g->blas, NULL, b->qkv, b->h, W + ly->qkv, T,
                               g->C, g->S, 0, f->on ? &nin : NULL, NULL, st));
    if (g->qkv_bias) /* Qwen2 */
        S_TRYG(TRN_PH_OTHER,
               trn_k_bias_add(b->qkv, g->S, W + ly->qkv_b, T, g->S, st));
    const trn_bf16_t *qn = s_norm_w(g, W, ly->q_norm);
    const trn_bf16_t *kn = s_norm_w(g, W, ly->k_norm);
    if (b->one) { /* q/k preparation inside the attention kernel */
        S_TRYG(TRN_PH_ATTN_F,
               trn_k_attn_decode_prep(b->o, b->qkv, g->S, qn, kn, kv->k[l],
                                      kv->v[l], b->slot, b->pos, T, g->H, g->Hk,
                                      g->D, kv->pg, eps, theta, kv->attn_part,
                                      kv->attn_part_n, st));
    } else { /* every new key into the cache, then decodes, then prompts */
        S_TRYG(TRN_PH_QK, trn_k_qk_prep(b->qkv, g->S, qn, kn, kv->k[l],
                                        kv->v[l], b->slot, b->pos, T, g->H,
                                        g->Hk, g->D, kv->pg, eps, theta, st));
        if (b->nd > 0)
            S_TRYG(TRN_PH_ATTN_F,
                   trn_k_attn_decode(b->o, b->qkv, g->S, kv->k[l], kv->v[l],
                                     b->slot, b->pos, b->nd, g->H, g->Hk, g->D,
                                     kv->pg, kv->attn_part, kv->attn_part_n,
                                     st));
        if (b->ntiles > 0)
            S_TRYG(TRN_PH_ATTN_F,
                   trn_k_attn_prefill(b->o, b->qkv, g->S, kv->k[l], kv->v[l],
                                      kv->pg, b->tiles, b->ntiles, g->H, g->Hk,
                                      g->D, st));
    }
    s_next(g, l, 1);
    S_TRYG(TRN_PH_PROD_F,
           trn_linear_fwd_norm(g->blas, b->x, NULL, b->o, W + ly->o, T,
                               g->H * g->D, g->C, 1, NULL, f->on ? &post : NULL,
                               st));
    if (!f->on)
        S_TRYG(TRN_PH_NORM,
               trn_k_rmsnorm_fwd(b->h, g->C, NULL, b->x, NULL, g->C,
                                 W + ly->w_post, T, g->C, 1, eps, st));
    s_next(g, l, 2);
    nin.nss = g->C / 16; /* from o */
    if (f->on) {
        S_TRYG(TRN_PH_PROD_F,
               trn_linear_fwd_glu_norm(g->blas, b->a, b->h, W + ly->gu, T, g->C,
                                       g->I, &nin, st));
    } else if (trn_linear_glu_fits(T, g->C, g->I)) { /* SwiGLU inside */
        S_TRYG(TRN_PH_PROD_F,
               trn_linear_fwd_glu(g->blas, b->a, b->h, W + ly->gu, T, g->C,
                                  g->I, st));
    } else {
        S_TRYG(TRN_PH_PROD_F,
               trn_linear_fwd(g->blas, NULL, b->gu, b->h, W + ly->gu, T, g->C,
                              2 * g->I, 0, st));
        S_TRYG(TRN_PH_SWIGLU, trn_k_swiglu_fwd(b->a, b->gu, T, g->I, st));
    }
    s_next(g, l, 3);
    S_TRYG(TRN_PH_PROD_F,
           trn_linear_fwd_norm(g->blas, b->x, NULL, b->a, W + ly->down, T, g->I,
                               g->C, 1, NULL, fold_down ? &next : NULL, st));
out:
    return rc;
}

/* The final norm and the LM head: n rows of logits (row i from token
 * last[i], or token i when `direct`); with f->head the last down product
 * made the norm's input and partials. */
static lisa_rc_t
s_head(trn_gpu_model_t *g, trn_gpu_kv_t *kv, const s_bufs_t *b, int T, int n,
       int direct, const s_fold_t *f)
{
    lisa_rc_t rc = LISA_OK;
    trn_cuda_stream_t *st = kv->stream;
    const trn_bf16_t *head = g->wb + g->lm_head;
    if (f->head) {
        trn_norm_in_t nin = s_nin(g, b, g->C / 16);
        S_TRYG(TRN_PH_LOSS,
               trn_linear_fwd_norm(g->blas, b->logits, NULL, b->h, head, n,
                                   g->C, g->V, 0, &nin, NULL, st));
        return LISA_OK;
    }
    S_TRYG(TRN_PH_NORM, trn_k_rmsnorm_fwd(b->h, g->C, NULL, b->x, NULL, g->C,
                                          g->wb + g->final_norm, T, g->C, 1,
                                          (float) g->cfg.rms_norm_eps, st));
    const trn_bf16_t *hl = b->h;
    if (!direct) {
        S_TRYG(TRN_PH_OTHER,
               trn_k_gather_rows(b->hf, b->h, b->last, n, g->C, st));
        hl = b->hf;
    }
    S_TRYG(TRN_PH_LOSS, trn_linear_fwd(g->blas, b->logits, NULL, hl, head, n,
                                       g->C, g->V, 0, st));
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
    s_fold_t f = s_fold(g, T, n, direct);
    S_TRYG(TRN_PH_OTHER,
           trn_k_embed_fwd(b->x, g->wb + g->embed, b->tok, T, g->C, g->V, st));
    for (int l = 0; l < g->L; l++)
        S_TRY(s_layer(g, kv, b, l, T, &f));
    S_TRY(s_head(g, kv, b, T, n, direct, &f));
    if (sample) {
        uint8_t *P = kv->dparam;
        S_TRYG(TRN_PH_LOSS,
               trn_k_sample((int32_t *) (void *) kv->dres,
                            (float *) (void *) (kv->dres + 4 * kv->sp),
                            b->logits, s_par(kv, P, S_TEMP),
                            s_par(kv, P, S_TOPP), s_par(kv, P, S_TOPK),
                            s_seed(kv, P), n, g->V, kv->samp_part,
                            kv->samp_part_n, st));
    }
out:
    return rc;
}

/* The cache's buffers, with the fixed part's token arrays. */
static s_bufs_t
s_bufs(trn_gpu_kv_t *kv)
{
    s_bufs_t b = {.x = kv->dx,
                  .h = kv->dh,
                  .qkv = kv->dqkv,
                  .o = kv->dout_attn,
                  .gu = kv->dgu,
                  .a = kv->da,
                  .hf = kv->dhf,
                  .ss = kv->dss,
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
    return nb < kv->geom.max_seqs ? nb : kv->geom.max_seqs;
}

/* Runs a pure decode step of nb rows from the cache's buffers, through a
 * recorded graph when one exists or can be made (from the second step of
 * a bucket on, so the first runs every kernel once before recording). */
static lisa_rc_t
s_run_small(trn_gpu_model_t *g, trn_gpu_kv_t *kv, int nb, int sample)
{
    s_bufs_t b = s_bufs(kv);
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

static int
s_range_cmp(const void *a, const void *b)
{
    size_t x = ((const size_t *) a)[0], y = ((const size_t *) b)[0];
    return (x > y) - (x < y);
}

/* Brings the device table's rows of the step's sequences up to date:
 * the entries that differ from the mirror (those the sequences'
 * positions reach) go up, runs of them closer than S_TABLE_GAP entries
 * in one copy (a decode step of many sequences crossing into new blocks
 * together is one or a few copies). A failed copy leaves the mirror
 * unknown, so it is marked to differ everywhere. */
#define S_TABLE_GAP 1024

static lisa_rc_t
s_sync_table(trn_gpu_kv_t *kv, size_t n, const trn_gen_seq_t *seqs)
{
    size_t mb = kv->geom.max_blocks, nr = 0;
    size_t *rg = kv->hranges; /* [lo, hi] pairs, table indices */
    int bs = kv->pg.bshift;
    for (size_t i = 0; i < n; i++) {
        const trn_gen_seq_t *q = &seqs[i];
        size_t need = ((q->start + q->n_new - 1) >> bs) + 1;
        int32_t *row = kv->htable + q->slot * mb;
        size_t lo = need, hi = 0;
        for (size_t j = 0; j < need; j++)
            if (row[j] != q->blocks[j]) {
                if (lo == need)
                    lo = j;
                hi = j;
                row[j] = q->blocks[j];
            }
        if (lo == need)
            continue;
        rg[2 * nr] = q->slot * mb + lo;
        rg[2 * nr + 1] = q->slot * mb + hi;
        nr++;
    }
    if (nr > 1)
        qsort(rg, nr, 2 * sizeof *rg, s_range_cmp);
    for (size_t i = 0; i < nr;) {
        size_t lo = rg[2 * i], hi = rg[2 * i + 1];
        for (i++; i < nr && rg[2 * i] <= hi + S_TABLE_GAP; i++)
            hi = rg[2 * i + 1] > hi ? rg[2 * i + 1] : hi;
        if (trn_cuda_upload_async(kv->dtable + lo, kv->htable + lo,
                                  (hi - lo + 1) * 4, kv->stream) != LISA_OK) {
            memset(kv->htable, 0xff, kv->geom.max_seqs * mb * 4);
            return LISA_ERR;
        }
    }
    return LISA_OK;
}

/* Heaviest first: tiles whose last query sees the most keys. */
static int
s_tile_cmp(const void *a, const void *b)
{
    const trn_prefill_tile_t *x = a, *y = b;
    int32_t ex = x->p0 + x->rows, ey = y->p0 + y->rows;
    return ex > ey   ? -1
           : ex < ey ? 1
                     : (x->row0 > y->row0) - (x->row0 < y->row0);
}

/* The sampling parameters of nrows rows (sequences, then padding). */
static void
s_fill_sampling(trn_gpu_kv_t *kv, size_t n, const trn_gen_seq_t *seqs,
                const trn_sample_t *sp, size_t nrows)
{
    uint8_t *H = kv->hparam;
    int32_t *h_topk = s_par(kv, H, S_TOPK);
    float *h_temp = s_par(kv, H, S_TEMP), *h_topp = s_par(kv, H, S_TOPP);
    uint64_t *h_seed = s_seed(kv, H);
    for (size_t i = 0; i < nrows; i++) {
        if (i < n && sp) {
            h_temp[i] = sp[i].temperature;
            h_topp[i] = sp[i].top_p > 0.0f ? sp[i].top_p : 1.0f;
            h_topk[i] = sp[i].top_k;
            /* a fresh draw per position of the sequence; the same one
             * when a preempted sequence is recomputed */
            h_seed[i] = sp[i].seed * 0x9e3779b97f4a7c15ull +
                        (uint64_t) (seqs[i].start + seqs[i].n_new);
        } else { /* padding: greedy, the cheapest */
            h_temp[i] = 0.0f;
            h_topp[i] = 1.0f;
            h_topk[i] = 1;
            h_seed[i] = 0;
        }
    }
}

/* Lays out a step that is not pure decode in the parameter block: decode
 * rows first, then every other sequence's tokens; last[i] is sequence
 * i's last row; the prompt rows' tiles (sorted) after the token arrays.
 * With `tiled` 0 (a shape the prefill kernel lacks) every row goes to the
 * decode kernel. Sets the buffers' arrays and counts. */
static void
s_fill_mixed(trn_gpu_kv_t *kv, size_t n, const trn_gen_seq_t *seqs, size_t T,
             int tiled, s_bufs_t *b)
{
    uint8_t *hv = kv->hparam + s_fixed_bytes(kv);
    uint8_t *dv = kv->dparam + s_fixed_bytes(kv);
    int32_t *h_tok = (int32_t *) (void *) hv, *h_slot = h_tok + T;
    int32_t *h_pos = h_tok + 2 * T;
    int32_t *h_last = s_par(kv, kv->hparam, S_LAST);
    size_t t = 0, nt = 0;
    for (int pass = 0; pass < 2; pass++) /* decodes, then the others */
        for (size_t i = 0; i < n; i++) {
            const trn_gen_seq_t *q = &seqs[i];
            if ((q->n_new == 1) != (pass == 0))
                continue;
            if (pass == 1 && tiled)
                for (size_t r = 0; r < q->n_new; r += TRN_PREFILL_TILE_ROWS) {
                    size_t k = q->n_new - r;
                    trn_prefill_tile_t *tl = &kv->htiles[nt++];
                    tl->row0 = (int32_t) (t + r);
                    tl->rows = (int32_t) (k < TRN_PREFILL_TILE_ROWS
                                              ? k
                                              : TRN_PREFILL_TILE_ROWS);
                    tl->slot = (int32_t) q->slot;
                    tl->p0 = (int32_t) (q->start + r);
                }
            for (size_t j = 0; j < q->n_new; j++, t++) {
                h_tok[t] = q->tokens[j];
                h_slot[t] = (int32_t) q->slot;
                h_pos[t] = (int32_t) (q->start + j);
            }
            h_last[i] = (int32_t) (t - 1);
            if (pass == 0)
                b->nd = (int) t;
        }
    if (!tiled)
        b->nd = (int) T;
    qsort(kv->htiles, nt, sizeof *kv->htiles, s_tile_cmp);
    memcpy(hv + s_tiles_at(T), kv->htiles, nt * sizeof *kv->htiles);
    b->tok = (int32_t *) (void *) dv;
    b->slot = b->tok + T;
    b->pos = b->tok + 2 * T;
    b->tiles = (const trn_prefill_tile_t *) (const void *) (dv + s_tiles_at(T));
    b->ntiles = (int) nt;
}

/* A pure decode step's rows in the fixed part: sequence i is row i,
 * padding up to `rows`. */
static void
s_fill_decode(trn_gpu_kv_t *kv, size_t n, const trn_gen_seq_t *seqs,
              size_t rows)
{
    uint8_t *H = kv->hparam;
    int32_t *h_tok = s_par(kv, H, S_TOK), *h_slot = s_par(kv, H, S_SLOT);
    int32_t *h_pos = s_par(kv, H, S_POS), *h_last = s_par(kv, H, S_LAST);
    for (size_t t = 0; t < rows; t++) {
        int real = t < n;
        h_tok[t] = real ? seqs[t].tokens[0] : 0;
        h_slot[t] = real ? (int32_t) seqs[t].slot : -1;
        h_pos[t] = real ? (int32_t) seqs[t].start : 0;
        h_last[t] = (int32_t) t;
    }
}

lisa_rc_t
trn_gpu_model_step(trn_gpu_model_t *g, trn_gpu_kv_t *kv, size_t n,
                   const trn_gen_seq_t *seqs, const trn_sample_t *sp,
                   int32_t *out_tok, float *out_lp, float *logits,
                   trn_err_t *err)
{
    lisa_rc_t rc = LISA_OK;
    if (!g || !kv || kv->g != g || n == 0 || !seqs ||
        (sp && (!out_tok || !out_lp))) {
        s_err(err, "step: bad arguments");
        return LISA_INVALID;
    }
    rc = trn_gen_check(&kv->geom, (size_t) g->V, n, seqs, err);
    if (rc != LISA_OK)
        return rc;
    size_t T = 0;
    int pure = 1;
    for (size_t i = 0; i < n; i++) {
        T += seqs[i].n_new;
        pure &= seqs[i].n_new == 1;
    }
    trn_cuda_stream_t *st = kv->stream;
    S_TRY(s_packed_fresh(kv));
    S_TRY(s_sync_table(kv, n, seqs));
    size_t rows = pure ? s_bucket(kv, n) : T; /* token rows on the device */
    size_t nrows = pure ? rows : n;           /* rows of logits and samples */
    s_fill_sampling(kv, n, seqs, sp, nrows);
    if (pure) {
        s_fill_decode(kv, n, seqs, rows);
        S_TRY(trn_cuda_upload_async(kv->dparam, kv->hparam, s_fixed_bytes(kv),
                                    st));
        S_TRY(s_run_small(g, kv, (int) rows, sp != NULL));
    } else {
        s_bufs_t b = s_bufs(kv);
        /* head sizes the prefill kernel has, 16-byte rows */
        int tiled = (g->D == 16 || g->D == 32 || g->D == 64 || g->D == 128) &&
                    g->S % 8 == 0;
        s_fill_mixed(kv, n, seqs, T, tiled, &b);
        size_t bytes = s_fixed_bytes(kv) + s_tiles_at(T) +
                       (size_t) b.ntiles * sizeof(trn_prefill_tile_t);
        S_TRY(trn_cuda_upload_async(kv->dparam, kv->hparam, bytes, st));
        if (g->timer) { /* LISA_CUDA_PHASES=1: marks on the cache's stream */
            trn_cuda_timer_stream(g->timer, st);
            b.timed = trn_cuda_timer_start(g->timer) == LISA_OK;
        }
        S_TRY(s_forward(g, kv, &b, (int) T, (int) n, 0, sp != NULL));
    }
    if (sp)
        S_TRY(trn_cuda_download_async(kv->hres, kv->dres, 8 * kv->sp, st));
    if (logits)
        S_TRY(trn_cuda_download_async(logits, kv->dlogits,
                                      n * (size_t) g->V * 4, st));
    S_TRY(trn_cuda_stream_sync(st));
    if (sp) {
        memcpy(out_tok, kv->hres, n * 4);
        memcpy(out_lp, kv->hres + 4 * kv->sp, n * 4);
    }
out:
    trn_linear_set_packed(g->blas, NULL, NULL, 0);
    if (g->timer)
        trn_cuda_timer_stream(g->timer, NULL);
    if (rc != LISA_OK) {
        (void) trn_cuda_stream_sync(st); /* nothing left reading the mirror */
        if (err && !err->msg[0])
            s_err(err, "step failed on the device");
    }
    return rc;
}
