/*
 * trn_model_cpu: the fp32 CPU reference of trn_model.h.
 *
 * It follows transformers' modeling_qwen3 op for op: embedding; per layer
 * RMSNorm -> q/k/v projections (no bias; Qwen2: + bias) -> per-head RMSNorm
 * of q and k (Qwen3 only; Llama and Qwen2 copy) -> half-split RoPE -> causal
 * GQA softmax attention scaled by head_dim^-0.5
 * -> o projection + residual -> RMSNorm -> down(silu(gate) * up) +
 * residual; a final RMSNorm and the (tied or separate) LM head.
 *
 * Training keeps, per layer, the inputs each backward step needs (the
 * residual stream, norm outputs and inverse RMS, q/k before and after RoPE,
 * v, the attention output and its per-head log-sum-exp, gate and up), so
 * the backward pass recomputes only attention probabilities (from the
 * saved log-sum-exp, as flash attention does) and vocabulary logits (one
 * chunk of positions at a time). Packed sequences become per-row key
 * ranges: row t attends to rows kstart[t]..kstart[t] + nk[t] - 1 of the
 * keys. Under context parallelism (trn_cp_t) the rows are this rank's
 * share and the keys those of the whole batch, gathered per layer; the
 * backward gathers them again and sums their gradients over the group.
 *
 * Generation runs the same layer code over the new tokens of every
 * sequence at once; their keys and values go into the cache first, then
 * each row attends to its slot's cache up to its own position.
 */
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "trn_err.h"
#include "trn_gguf.h"
#include "trn_model.h"
#include "trn_ops.h"
#include "trn_pool.h"
#include "trn_safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_NAME_MAX 96

typedef struct {
    char name[S_NAME_MAX];
    int ndim;
    int64_t shape[2];
    size_t off, numel;
} s_tensor_t;

/* A layer's tensors; q_norm / k_norm (Qwen3) and bq / bk / bv (Qwen2)
 * are NULL in families without them. */
typedef struct {
    float *in_norm, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *q_norm, *k_norm,
        *post_norm, *wg, *wu, *wd;
} s_layer_t;

typedef struct {
    float *embed, *norm, *lm_head;
    s_layer_t *L;
} s_weights_t;

/* Saved activations of one layer (training) or scratch (generation). */
typedef struct {
    float *x_in, *xn1, *rstd1, *qraw, *rq, *kraw, *rk, *q, *k, *v, *o, *lse,
        *x_mid, *xn2, *rstd2, *gate, *up;
} s_lacts_t;

typedef struct {
    size_t cap;     /* rows allocated */
    size_t nlayers; /* layer slots allocated (1 when not saving) */
    float *arena;
    s_lacts_t *L;
    float *x, *xf, *xnf, *rstdf, *lse_out, *ent_out, *hbuf, *attn;
    int32_t *pos;
    size_t *kstart, *nk;
} s_acts_t;

struct trn_model {
    trn_config_t cfg;
    json_t *cfg_json; /* config.json as loaded (NULL: generated) */
    char *src_dir;    /* directory loaded from (NULL: generated) */
    size_t H, I, NH, NKV, HD, Q, KV, V, NL;
    s_tensor_t *tensors;
    size_t ntensors, nparams;
    float *params, *grads;
    s_weights_t w, g;
    float *inv_freq;
    trn_pool_t *pool;
    size_t chunk;
    s_acts_t train, gen;
    /* the last training forward */
    bool have_fwd;
    trn_batch_t batch;
    /* backward scratch */
    float *bw_arena;
    size_t bw_cap;
    float *logit_buf, *xc_buf, *dxc_buf;
    size_t *row_idx;
    size_t lbuf_rows, row_cap;
    /* context parallelism: the whole batch's keys, values and (backward)
     * their gradients, [4][n_global][KV] */
    float *cp_buf;
    size_t cp_cap;
};

struct trn_kv {
    trn_kv_geom_t geom;
    size_t KV, NL;
    size_t rows;  /* n_blocks * block_size */
    float *k, *v; /* [NL][rows][KV] */
};

/* ---- parameter table ------------------------------------------------- */

static void
s_add_tensor(trn_model_t *m, size_t *cap, const char *name, int ndim,
             int64_t d0, int64_t d1)
{
    if (m->ntensors == *cap) {
        *cap = *cap ? 2 * *cap : 32;
        m->tensors = lisa_realloc(m->tensors, *cap * sizeof *m->tensors);
    }
    s_tensor_t *t = &m->tensors[m->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 0;
    t->numel = (size_t) d0 * (ndim == 2 ? (size_t) d1 : 1);
    t->off = m->nparams;
    m->nparams += t->numel;
}

/* The tensors of a layer, in parameter order: name, shape (in units of
 * the model's sizes), the pointer it binds, which families have it. The
 * q, k and v weights (and their biases) are adjacent, so a backend may
 * treat each triple as one fused tensor. */
typedef enum { S_ALL, S_QK_NORM, S_QKV_BIAS } s_when_t;
typedef enum { S_DH, S_DI, S_DQ, S_DKV, S_DHD } s_dim_t;

static const struct {
    const char *suffix;
    int nd;
    s_dim_t d0, d1;
    size_t slot; /* offsetof(s_layer_t, ...) */
    s_when_t when;
} s_layer_spec[] = {
    {"input_layernorm.weight", 1, S_DH, S_DH, offsetof(s_layer_t, in_norm),
     S_ALL},
    {"self_attn.q_proj.weight", 2, S_DQ, S_DH, offsetof(s_layer_t, wq), S_ALL},
    {"self_attn.k_proj.weight", 2, S_DKV, S_DH, offsetof(s_layer_t, wk), S_ALL},
    {"self_attn.v_proj.weight", 2, S_DKV, S_DH, offsetof(s_layer_t, wv), S_ALL},
    {"self_attn.q_proj.bias", 1, S_DQ, S_DH, offsetof(s_layer_t, bq),
     S_QKV_BIAS},
    {"self_attn.k_proj.bias", 1, S_DKV, S_DH, offsetof(s_layer_t, bk),
     S_QKV_BIAS},
    {"self_attn.v_proj.bias", 1, S_DKV, S_DH, offsetof(s_layer_t, bv),
     S_QKV_BIAS},
    {"self_attn.o_proj.weight", 2, S_DH, S_DQ, offsetof(s_layer_t, wo), S_ALL},
    {"self_attn.q_norm.weight", 1, S_DHD, S_DH, offsetof(s_layer_t, q_norm),
     S_QK_NORM},
    {"self_attn.k_norm.weight", 1, S_DHD, S_DH, offsetof(s_layer_t, k_norm),
     S_QK_NORM},
    {"post_attention_layernorm.weight", 1, S_DH, S_DH,
     offsetof(s_layer_t, post_norm), S_ALL},
    {"mlp.gate_proj.weight", 2, S_DI, S_DH, offsetof(s_layer_t, wg), S_ALL},
    {"mlp.up_proj.weight", 2, S_DI, S_DH, offsetof(s_layer_t, wu), S_ALL},
    {"mlp.down_proj.weight", 2, S_DH, S_DI, offsetof(s_layer_t, wd), S_ALL},
};
#define S_LAYER_SPEC (sizeof s_layer_spec / sizeof s_layer_spec[0])

/* Whether the model's family has layer tensor s. */
static bool
s_has(const trn_model_t *m, size_t s)
{
    switch (s_layer_spec[s].when) {
    case S_QK_NORM:
        return trn_config_qk_norm(&m->cfg);
    case S_QKV_BIAS:
        return trn_config_qkv_bias(&m->cfg);
    case S_ALL:
    default:
        return true;
    }
}

static int64_t
s_dim(const trn_model_t *m, s_dim_t d)
{
    switch (d) {
    case S_DI:
        return (int64_t) m->I;
    case S_DQ:
        return (int64_t) m->Q;
    case S_DKV:
        return (int64_t) m->KV;
    case S_DHD:
        return (int64_t) m->HD;
    case S_DH:
    default:
        return (int64_t) m->H;
    }
}

static void
s_bind(s_weights_t *w, const trn_model_t *m, float *base)
{
    size_t i = 0;
    w->embed = base + m->tensors[i++].off;
    for (size_t l = 0; l < m->NL; l++) {
        s_layer_t *L = &w->L[l];
        for (size_t s = 0; s < S_LAYER_SPEC; s++) {
            float **slot =
                (float **) (void *) ((char *) L + s_layer_spec[s].slot);
            *slot = s_has(m, s) ? base + m->tensors[i++].off : NULL;
        }
    }
    w->norm = base + m->tensors[i++].off;
    w->lm_head =
        m->cfg.tie_word_embeddings ? w->embed : base + m->tensors[i++].off;
}

/* Builds an empty model (zeros) for a valid config. */
static trn_model_t *
s_model_alloc(const trn_config_t *cfg, int threads)
{
    trn_model_t *m = lisa_calloc(1, sizeof *m);
    m->cfg = *cfg;
    m->H = (size_t) cfg->hidden_size;
    m->I = (size_t) cfg->intermediate_size;
    m->NH = (size_t) cfg->num_attention_heads;
    m->NKV = (size_t) cfg->num_key_value_heads;
    m->HD = (size_t) cfg->head_dim;
    m->Q = m->NH * m->HD;
    m->KV = m->NKV * m->HD;
    m->V = (size_t) cfg->vocab_size;
    m->NL = (size_t) cfg->num_hidden_layers;
    int64_t H = cfg->hidden_size;
    size_t cap = 0;
    char nm[S_NAME_MAX];
    s_add_tensor(m, &cap, "model.embed_tokens.weight", 2, cfg->vocab_size, H);
    for (size_t l = 0; l < m->NL; l++)
        for (size_t s = 0; s < S_LAYER_SPEC; s++) {
            if (!s_has(m, s))
                continue;
            snprintf(nm, sizeof nm, "model.layers.%zu.%s", l,
                     s_layer_spec[s].suffix);
            s_add_tensor(m, &cap, nm, s_layer_spec[s].nd,
                         s_dim(m, s_layer_spec[s].d0),
                         s_dim(m, s_layer_spec[s].d1));
        }
    s_add_tensor(m, &cap, "model.norm.weight", 1, H, 0);
    if (!cfg->tie_word_embeddings)
        s_add_tensor(m, &cap, "lm_head.weight", 2, cfg->vocab_size, H);
    m->params = lisa_calloc(m->nparams, sizeof(float));
    m->grads = lisa_calloc(m->nparams, sizeof(float));
    m->w.L = lisa_calloc(m->NL, sizeof(s_layer_t));
    m->g.L = lisa_calloc(m->NL, sizeof(s_layer_t));
    s_bind(&m->w, m, m->params);
    s_bind(&m->g, m, m->grads);
    m->inv_freq = lisa_calloc(m->HD / 2, sizeof(float));
    trn_rope_inv_freq(m->inv_freq, m->HD, cfg->rope_theta);
    m->pool = trn_pool_new(threads < 1 ? 1 : threads);
    m->chunk = 32;
    return m;
}

static void
s_acts_free(s_acts_t *a)
{
    lisa_free(&a->arena);
    lisa_free(&a->L);
    lisa_free(&a->pos);
    lisa_free(&a->kstart);
    lisa_free(&a->nk);
    memset(a, 0, sizeof *a);
}

void
trn_model_destroy(trn_model_t **pm)
{
    if (!pm || !*pm)
        return;
    trn_model_t *m = *pm;
    trn_pool_destroy(&m->pool);
    s_acts_free(&m->train);
    s_acts_free(&m->gen);
    json_decref(m->cfg_json);
    lisa_free(&m->src_dir);
    lisa_free(&m->tensors);
    lisa_free(&m->params);
    lisa_free(&m->grads);
    lisa_free(&m->w.L);
    lisa_free(&m->g.L);
    lisa_free(&m->inv_freq);
    lisa_free(&m->cp_buf);
    lisa_free(&m->bw_arena);
    lisa_free(&m->logit_buf);
    lisa_free(&m->xc_buf);
    lisa_free(&m->dxc_buf);
    lisa_free(&m->row_idx);
    lisa_free(pm);
}

/* splitmix64 + Box-Muller: reproducible normals without libc state. */
static uint64_t
s_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float
s_normal(uint64_t *s)
{
    double u1 = ((double) (s_next(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double) (s_next(s) >> 11) / 9007199254740992.0;
    return (float) (sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

trn_model_t *
trn_model_new_random(const trn_config_t *cfg, uint64_t seed, float std,
                     int threads)
{
    if (trn_config_validate(cfg, NULL) != LISA_OK)
        return NULL;
    trn_model_t *m = s_model_alloc(cfg, threads);
    uint64_t s = seed;
    for (size_t i = 0; i < m->ntensors; i++) {
        float *p = m->params + m->tensors[i].off;
        bool norm =
            m->tensors[i].ndim == 1 && !strstr(m->tensors[i].name, ".bias");
        for (size_t k = 0; k < m->tensors[i].numel; k++)
            p[k] = norm ? 1.0f + 0.1f * s_normal(&s) : std * s_normal(&s);
    }
    return m;
}

const trn_config_t *
trn_model_config(const trn_model_t *m)
{
    return &m->cfg;
}

size_t
trn_model_num_tensors(const trn_model_t *m)
{
    return m->ntensors;
}

const char *
trn_model_tensor_name(const trn_model_t *m, size_t i)
{
    return i < m->ntensors ? m->tensors[i].name : NULL;
}

int
trn_model_tensor_shape(const trn_model_t *m, size_t i, int64_t shape[2])
{
    shape[0] = m->tensors[i].shape[0];
    shape[1] = m->tensors[i].shape[1];
    return m->tensors[i].ndim;
}

size_t
trn_model_tensor_numel(const trn_model_t *m, size_t i)
{
    return m->tensors[i].numel;
}

float *
trn_model_tensor_data(trn_model_t *m, size_t i)
{
    return m->params + m->tensors[i].off;
}

float *
trn_model_tensor_grad(trn_model_t *m, size_t i)
{
    return m->grads + m->tensors[i].off;
}

long
trn_model_tensor_find(const trn_model_t *m, const char *name)
{
    for (size_t i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return (long) i;
    return -1;
}

float *
trn_model_params(trn_model_t *m)
{
    return m->params;
}

float *
trn_model_grads(trn_model_t *m)
{
    return m->grads;
}

size_t
trn_model_num_params(const trn_model_t *m)
{
    return m->nparams;
}

void
trn_model_zero_grad(trn_model_t *m)
{
    memset(m->grads, 0, m->nparams * sizeof(float));
}

void
trn_model_set_logits_chunk(trn_model_t *m, size_t rows)
{
    m->chunk = rows ? rows : 1;
}

/* ---- load / save ------------------------------------------------------ */

static char *
s_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = lisa_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static bool
s_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

#define S_MAX_SHARDS 4096
#define S_MAX_INDEX  (64u * 1024u * 1024u) /* bytes of an index file */

static char *s_read_text(const char *path, size_t max, size_t *len);

/* Opens the weight files of `dir`: the index's shards or model.safetensors.
 */
static lisa_rc_t
s_open_weights(const char *dir, trn_st_t ***files, size_t *nfiles,
               trn_err_t *err)
{
    lisa_rc_t rc = LISA_OK;
    char *idx = s_join(dir, "model.safetensors.index.json");
    char *one = s_join(dir, "model.safetensors");
    json_t *root = NULL;
    *files = NULL;
    *nfiles = 0;
    /* the single file first, then the index: transformers' order */
    if (s_exists(one) || !s_exists(idx)) {
        trn_st_t *st = NULL;
        rc = trn_st_open(one, &st, err);
        if (rc == LISA_OK) {
            *files = lisa_calloc(1, sizeof **files);
            (*files)[0] = st;
            *nfiles = 1;
        }
        goto out;
    }
    json_error_t jerr;
    size_t ilen = 0;
    char *itext = s_read_text(idx, S_MAX_INDEX, &ilen);
    if (!itext || ilen > S_MAX_INDEX) {
        rc = trn_fail(err, itext ? LISA_TOOLARGE : LISA_NOTFOUND,
                      "%s: unreadable or larger than %u bytes", idx,
                      S_MAX_INDEX);
        lisa_free(&itext);
        goto out;
    }
    root = json_loadb(itext, ilen, JSON_REJECT_DUPLICATES, &jerr);
    lisa_free(&itext);
    json_t *wm = root ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        rc = trn_fail(err, LISA_INVALID, "%s: no weight_map object (%s)", idx,
                      root ? "missing" : jerr.text);
        goto out;
    }
    /* unique shard names, in order of first appearance */
    const char **names = lisa_calloc(json_object_size(wm) + 1, sizeof *names);
    size_t nn = 0;
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val)
    {
        const char *f = json_string_value(val);
        if (!f || strchr(f, '/') || strcmp(f, "..") == 0 || !*f) {
            rc = trn_fail(err, LISA_INVALID,
                          "%s: tensor '%s' maps to a bad file name", idx, key);
            break;
        }
        size_t k = 0;
        while (k < nn && strcmp(names[k], f) != 0)
            k++;
        if (k == nn) {
            if (nn == S_MAX_SHARDS) {
                rc = trn_fail(err, LISA_TOOLARGE, "%s: too many shards", idx);
                break;
            }
            names[nn++] = f;
        }
    }
    if (rc == LISA_OK) {
        *files = lisa_calloc(nn ? nn : 1, sizeof **files);
        for (size_t k = 0; k < nn && rc == LISA_OK; k++) {
            char *p = s_join(dir, names[k]);
            rc = trn_st_open(p, &(*files)[k], err);
            lisa_free(&p);
            if (rc == LISA_OK)
                (*nfiles)++;
        }
    }
    lisa_free(&names);
out:
    json_decref(root);
    lisa_free(&idx);
    lisa_free(&one);
    return rc;
}

static char *
s_read_text(const char *path, size_t max, size_t *len)
{
    /* reads at most max + 1 bytes (so "too large" is detectable), into a
     * buffer sized by the file rather than by the bound */
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct stat sb;
    size_t want = max + 1;
    if (fstat(fileno(f), &sb) == 0 && sb.st_size >= 0 &&
        (size_t) sb.st_size < max)
        want = (size_t) sb.st_size + 1;
    char *buf = lisa_malloc(want + 1);
    *len = fread(buf, 1, want, f);
    fclose(f);
    buf[*len] = 0;
    return buf;
}

/* Loads a GGUF file: the config from its metadata, each tensor by its
 * llama.cpp name, dequantized. */
static lisa_rc_t
s_load_gguf(const char *path, int threads, trn_model_t **out, trn_err_t *err)
{
    trn_gguf_t *g = NULL;
    trn_model_t *m = NULL;
    trn_config_t cfg;
    lisa_rc_t rc = trn_gguf_open(path, &g, err);
    if (rc == LISA_OK)
        rc = trn_gguf_config(g, &cfg, err);
    if (rc != LISA_OK)
        goto out;
    m = s_model_alloc(&cfg, threads);
    for (size_t i = 0; i < m->ntensors && rc == LISA_OK; i++)
        rc = trn_gguf_read_hf(g, &cfg, m->tensors[i].name,
                              m->params + m->tensors[i].off,
                              m->tensors[i].numel, err);
    if (rc == LISA_OK) {
        *out = m;
        m = NULL;
    }
out:
    trn_model_destroy(&m);
    trn_gguf_destroy(&g);
    return rc;
}

lisa_rc_t
trn_model_load(const char *dir, int threads, trn_model_t **out, trn_err_t *err)
{
    lisa_rc_t rc;
    struct stat sb;
    if (stat(dir, &sb) == 0 && S_ISREG(sb.st_mode)) {
        *out = NULL;
        return s_load_gguf(dir, threads, out, err);
    }
    trn_model_t *m = NULL;
    trn_st_t **files = NULL;
    size_t nfiles = 0, len = 0;
    *out = NULL;
    char *cpath = s_join(dir, "config.json");
    char *text = s_read_text(cpath, TRN_MAX_CONFIG_LEN, &len);
    trn_config_t cfg;
    if (!text) {
        rc = trn_fail(err, LISA_NOTFOUND, "%s: cannot open: %s", cpath,
                      strerror(errno));
        goto out;
    }
    if (len > TRN_MAX_CONFIG_LEN) {
        rc = trn_fail(err, LISA_TOOLARGE, "%s: too large", cpath);
        goto out;
    }
    rc = trn_config_parse(text, len, &cfg, err);
    if (rc != LISA_OK)
        goto out;
    rc = s_open_weights(dir, &files, &nfiles, err);
    if (rc != LISA_OK)
        goto out;
    m = s_model_alloc(&cfg, threads);
    m->cfg_json = json_loadb(text, len, 0, NULL);
    m->src_dir = lisa_strdup(dir);
    for (size_t i = 0; i < m->ntensors; i++) {
        const s_tensor_t *t = &m->tensors[i];
        const trn_st_tensor_t *src = NULL;
        for (size_t f = 0; f < nfiles && !src; f++)
            src = trn_st_find(files[f], t->name);
        if (!src) {
            rc = trn_fail(err, LISA_INVALID,
                          "%s: tensor '%s' is missing from the weights", dir,
                          t->name);
            goto out;
        }
        bool ok = src->ndim == t->ndim && src->shape[0] == t->shape[0] &&
                  (t->ndim == 1 || src->shape[1] == t->shape[1]);
        if (!ok) {
            rc = trn_fail(err, LISA_INVALID,
                          "%s: tensor '%s' has shape [%lld%s%lld] (%d dims), "
                          "the config needs [%lld%s%lld]",
                          dir, t->name, (long long) src->shape[0],
                          src->ndim > 1 ? ", " : "",
                          src->ndim > 1 ? (long long) src->shape[1] : 0LL,
                          src->ndim, (long long) t->shape[0],
                          t->ndim > 1 ? ", " : "",
                          t->ndim > 1 ? (long long) t->shape[1] : 0LL);
            goto out;
        }
        if (trn_st_to_f32(src, m->params + t->off) != LISA_OK) {
            rc = trn_fail(err, LISA_UNSUPPORTED,
                          "%s: tensor '%s' has dtype %s, not a float", dir,
                          t->name, trn_dtype_name(src->dtype));
            goto out;
        }
    }
    *out = m;
    m = NULL;
out:
    for (size_t f = 0; f < nfiles; f++)
        trn_st_destroy(&files[f]);
    lisa_free(&files);
    lisa_free(&text);
    lisa_free(&cpath);
    trn_model_destroy(&m);
    return rc;
}

static json_t *
s_config_json(const trn_model_t *m, trn_save_dtype_t dtype)
{
    const trn_config_t *c = &m->cfg;
    json_t *j = m->cfg_json ? json_deep_copy(m->cfg_json) : json_object();
    const char *dt = dtype == TRN_SAVE_BF16 ? "bfloat16" : "float32";
    if (!m->cfg_json) {
        json_t *arch = json_array();
        json_array_append_new(arch,
                              json_string(trn_family_architecture(c->family)));
        json_object_set_new(j, "architectures", arch);
        json_object_set_new(j, "model_type",
                            json_string(trn_family_model_type(c->family)));
        json_object_set_new(j, "hidden_act", json_string("silu"));
        json_object_set_new(j, "attention_bias", json_false());
        json_object_set_new(j, "attention_dropout", json_real(0.0));
        if (c->family == TRN_FAMILY_LLAMA) {
            json_object_set_new(j, "mlp_bias", json_false());
        } else {
            json_object_set_new(j, "use_sliding_window", json_false());
            json_object_set_new(j, "sliding_window", json_null());
            json_object_set_new(j, "max_window_layers",
                                json_integer(c->num_hidden_layers));
        }
        json_object_set_new(j, "rope_scaling", json_null());
        json_object_set_new(j, "initializer_range", json_real(0.02));
        json_object_set_new(j, "use_cache", json_true());
    }
    json_object_set_new(j, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(j, "intermediate_size",
                        json_integer(c->intermediate_size));
    json_object_set_new(j, "num_hidden_layers",
                        json_integer(c->num_hidden_layers));
    json_object_set_new(j, "num_attention_heads",
                        json_integer(c->num_attention_heads));
    json_object_set_new(j, "num_key_value_heads",
                        json_integer(c->num_key_value_heads));
    json_object_set_new(j, "head_dim", json_integer(c->head_dim));
    json_object_set_new(j, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(j, "max_position_embeddings",
                        json_integer(c->max_position_embeddings));
    json_object_set_new(j, "rms_norm_eps", json_real(c->rms_norm_eps));
    if (!json_object_get(j, "rope_parameters"))
        json_object_set_new(j, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(j, "tie_word_embeddings",
                        json_boolean(c->tie_word_embeddings));
    json_object_set_new(j, "torch_dtype", json_string(dt));
    if (json_object_get(j, "dtype"))
        json_object_set_new(j, "dtype", json_string(dt));
    return j;
}

/* Files of a model directory that are not weights or config.json and that
 * a checkpoint carries along (tokenizer, chat template, generation). */
static const char *const s_side_files[] = {
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "generation_config.json",
    "chat_template.jinja",
};

#define S_MAX_SIDE_FILE (256u * 1024u * 1024u)

/* Copies `name` from src to dst when it exists in src (through a temporary
 * name). */
static lisa_rc_t
s_copy_side_file(const char *src, const char *dst, const char *name,
                 trn_err_t *err)
{
    lisa_rc_t rc = LISA_OK;
    char *from = s_join(src, name), *to = s_join(dst, name);
    size_t tl = strlen(to) + 5;
    char *tmp = lisa_malloc(tl);
    snprintf(tmp, tl, "%s.tmp", to);
    FILE *in = fopen(from, "rb"), *out = NULL;
    if (!in)
        goto done; /* not part of this model */
    out = fopen(tmp, "wb");
    if (!out) {
        rc = trn_fail(err, LISA_ERR, "%s: cannot create: %s", tmp,
                      strerror(errno));
        goto done;
    }
    char buf[65536];
    size_t n, total = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
        total += n;
        if (total > S_MAX_SIDE_FILE || fwrite(buf, 1, n, out) != n) {
            rc = trn_fail(err, LISA_ERR, "%s: copy failed", from);
            break;
        }
    }
    if (fclose(out) != 0 && rc == LISA_OK)
        rc = trn_fail(err, LISA_ERR, "%s: write failed", tmp);
    out = NULL;
    if (rc == LISA_OK && rename(tmp, to) != 0)
        rc = trn_fail(err, LISA_ERR, "%s: rename failed: %s", to,
                      strerror(errno));
    if (rc != LISA_OK)
        unlink(tmp);
done:
    if (in)
        fclose(in);
    lisa_free(&from);
    lisa_free(&to);
    lisa_free(&tmp);
    return rc;
}

/* True when a and b name the same directory. */
static bool
s_same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

lisa_rc_t
trn_model_save(const trn_model_t *m, const char *dir, trn_save_dtype_t dtype,
               trn_err_t *err)
{
    lisa_rc_t rc = LISA_OK;
    char *cpath = s_join(dir, "config.json");
    char *tpath = s_join(dir, "config.json.tmp");
    char *wpath = s_join(dir, "model.safetensors");
    trn_st_writer_t *w = trn_st_writer_new();
    json_t *j = s_config_json(m, dtype);
    trn_dtype_t dt = dtype == TRN_SAVE_BF16 ? TRN_DT_BF16 : TRN_DT_F32;
    for (size_t i = 0; i < m->ntensors; i++) {
        const s_tensor_t *t = &m->tensors[i];
        trn_st_writer_add_f32(w, t->name, dt, t->ndim, t->shape,
                              m->params + t->off);
    }
    rc = trn_st_writer_write(w, wpath, err);
    if (rc != LISA_OK)
        goto out;
    if (json_dump_file(j, tpath, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 ||
        rename(tpath, cpath) != 0) {
        rc = trn_fail(err, LISA_ERR, "%s: cannot write: %s", cpath,
                      strerror(errno));
        goto out;
    }
    /* a stale index would describe other weights than the file we wrote */
    char *idx = s_join(dir, "model.safetensors.index.json");
    if (s_exists(idx) && unlink(idx) == 0)
        lisa_log_info("trainer: removed stale %s", idx);
    lisa_free(&idx);
    if (m->src_dir && !s_same_dir(m->src_dir, dir))
        for (size_t i = 0; i < sizeof s_side_files / sizeof *s_side_files;
             i++) {
            rc = s_copy_side_file(m->src_dir, dir, s_side_files[i], err);
            if (rc != LISA_OK)
                goto out;
        }
out:
    json_decref(j);
    trn_st_writer_destroy(&w);
    lisa_free(&cpath);
    lisa_free(&tpath);
    lisa_free(&wpath);
    return rc;
}

/* ---- activations ------------------------------------------------------ */

/* Makes room for `rows` rows; `save` keeps every layer's activations. */
static void
s_acts_reserve(const trn_model_t *m, s_acts_t *a, size_t rows, bool save)
{
    size_t nl = save ? m->NL : 1;
    if (a->cap >= rows && a->nlayers == nl)
        return;
    s_acts_free(a);
    size_t cap = rows < 16 ? 16 : rows;
    size_t H = m->H, Q = m->Q, KV = m->KV, NH = m->NH, NKV = m->NKV, I = m->I;
    size_t per_layer =
        cap * (4 * H + 2 + 3 * Q + 2 * NH + 3 * KV + NKV + 2 * I);
    size_t total = nl * per_layer + cap * (4 * H + 3 + I);
    a->arena = lisa_calloc(total, sizeof(float));
    a->L = lisa_calloc(nl, sizeof(s_lacts_t));
    float *p = a->arena;
#define S_TAKE(dst, n)                                                         \
    do {                                                                       \
        (dst) = p;                                                             \
        p += (n);                                                              \
    } while (0)
    for (size_t l = 0; l < nl; l++) {
        s_lacts_t *L = &a->L[l];
        S_TAKE(L->x_in, cap * H);
        S_TAKE(L->xn1, cap * H);
        S_TAKE(L->rstd1, cap);
        S_TAKE(L->qraw, cap * Q);
        S_TAKE(L->rq, cap * NH);
        S_TAKE(L->kraw, cap * KV);
        S_TAKE(L->rk, cap * NKV);
        S_TAKE(L->q, cap * Q);
        S_TAKE(L->k, cap * KV);
        S_TAKE(L->v, cap * KV);
        S_TAKE(L->o, cap * Q);
        S_TAKE(L->lse, cap * NH);
        S_TAKE(L->x_mid, cap * H);
        S_TAKE(L->xn2, cap * H);
        S_TAKE(L->rstd2, cap);
        S_TAKE(L->gate, cap * I);
        S_TAKE(L->up, cap * I);
    }
    S_TAKE(a->x, cap * H);
    S_TAKE(a->xf, cap * H);
    S_TAKE(a->xnf, cap * H);
    S_TAKE(a->rstdf, cap);
    S_TAKE(a->lse_out, cap);
    S_TAKE(a->ent_out, cap);
    S_TAKE(a->hbuf, cap * I);
    S_TAKE(a->attn, cap * H);
#undef S_TAKE
    a->pos = lisa_calloc(cap, sizeof(int32_t));
    a->kstart = lisa_calloc(cap, sizeof(size_t));
    a->nk = lisa_calloc(cap, sizeof(size_t));
    a->cap = cap;
    a->nlayers = nl;
}

/* ---- attention -------------------------------------------------------- */

typedef struct {
    const trn_model_t *m;
    const float *q; /* [rows][Q] after RoPE */
    const float *k; /* key rows: k + (kstart[r] + j) * kstride */
    const float *v; /* value rows, same layout as k */
    size_t kstride; /* floats between key rows */
    const size_t *kstart, *nk;
    /* paged (generation): row r's keys are positions 0..nk[r]-1 of the
     * blocks btab[r][0..], bs positions each (kstart unused) */
    const int32_t *const *btab;
    size_t bs;
    float *o, *lse;    /* [rows][Q], [rows][NH] */
    const float *dout; /* backward: d(o) */
    float *dq, *dk, *dv;
    size_t rows;
} s_attn_t;

/* Keys per block of the attention loops: scores for a block are formed
 * first, then exponentiated together (trn_exp_shifted vectorises), then
 * applied; the running maximum is rescaled once per block. */
#define S_KBLOCK 128

/* One row, all heads: softmax over the row's keys, block by block. */
static void
s_attn_fwd_task(void *ctx, size_t r)
{
    const s_attn_t *c = ctx;
    const trn_model_t *m = c->m;
    size_t HD = m->HD, grp = m->NH / m->NKV;
    float scale = 1.0f / sqrtf((float) HD);
    float acc[TRN_MAX_HEAD_DIM], sc[S_KBLOCK];
    for (size_t h = 0; h < m->NH; h++) {
        const float *q = c->q + r * m->Q + h * HD;
        size_t kvh = h / grp;
        float mx = -INFINITY, l = 0;
        memset(acc, 0, HD * sizeof(float));
        for (size_t j0 = 0, nb; j0 < c->nk[r]; j0 += nb) {
            nb = c->nk[r] - j0 < S_KBLOCK ? c->nk[r] - j0 : S_KBLOCK;
            size_t row0 = c->kstart[r] + j0;
            if (c->btab) { /* never past the end of a block */
                size_t in = j0 % c->bs;
                if (nb > c->bs - in)
                    nb = c->bs - in;
                row0 = (size_t) c->btab[r][j0 / c->bs] * c->bs + in;
            }
            const float *kb = c->k + row0 * c->kstride + kvh * HD;
            const float *vb = c->v + row0 * c->kstride + kvh * HD;
            float bm = -INFINITY;
            for (size_t j = 0; j < nb; j++) {
                sc[j] = trn_dot(q, kb + j * c->kstride, HD) * scale;
                bm = sc[j] > bm ? sc[j] : bm;
            }
            if (bm > mx) {
                float f = mx == -INFINITY ? 0.0f : expf(mx - bm);
                l *= f;
                for (size_t d = 0; d < HD; d++)
                    acc[d] *= f;
                mx = bm;
            }
            trn_exp_shifted(sc, nb, mx);
            for (size_t j = 0; j < nb; j++) {
                const float *v = vb + j * c->kstride;
                float p = sc[j];
                l += p;
                for (size_t d = 0; d < HD; d++)
                    acc[d] += p * v[d];
            }
        }
        float *o = c->o + r * m->Q + h * HD;
        for (size_t d = 0; d < HD; d++)
            o[d] = acc[d] / l;
        c->lse[r * m->NH + h] = mx + logf(l);
    }
}

/* One KV head's query heads over rows [r0, r1): dq of those rows, and the
 * keys' and values' gradients added at dk/dv + key row * gstride (the
 * shared arrays at this head's columns, or a task's private copy). */
static void
s_attn_bwd_rows(const s_attn_t *c, size_t kvh, size_t r0, size_t r1, float *dk,
                float *dv, size_t gstride)
{
    const trn_model_t *m = c->m;
    size_t HD = m->HD, grp = m->NH / m->NKV;
    float scale = 1.0f / sqrtf((float) HD);
    float p[S_KBLOCK], dp[S_KBLOCK];
    for (size_t r = r0; r < r1; r++) {
        for (size_t h = kvh * grp; h < (kvh + 1) * grp; h++) {
            const float *q = c->q + r * m->Q + h * HD;
            const float *o = c->o + r * m->Q + h * HD;
            const float *dO = c->dout + r * m->Q + h * HD;
            float *dq = c->dq + r * m->Q + h * HD;
            float lse = c->lse[r * m->NH + h];
            float D = trn_dot(dO, o, HD);
            for (size_t j0 = 0; j0 < c->nk[r]; j0 += S_KBLOCK) {
                size_t nb = c->nk[r] - j0 < S_KBLOCK ? c->nk[r] - j0 : S_KBLOCK;
                size_t row0 = c->kstart[r] + j0;
                for (size_t j = 0; j < nb; j++) {
                    size_t off = (row0 + j) * c->kstride + kvh * HD;
                    p[j] = trn_dot(q, c->k + off, HD) * scale;
                    dp[j] = trn_dot(dO, c->v + off, HD);
                }
                trn_exp_shifted(p, nb, lse);
                for (size_t j = 0; j < nb; j++) {
                    const float *k = c->k + (row0 + j) * c->kstride + kvh * HD;
                    float *dkj = dk + (row0 + j) * gstride;
                    float *dvj = dv + (row0 + j) * gstride;
                    float ds = p[j] * (dp[j] - D) * scale, pj = p[j];
                    for (size_t d = 0; d < HD; d++) {
                        dq[d] += ds * k[d];
                        dkj[d] += ds * q[d];
                        dvj[d] += pj * dO[d];
                    }
                }
            }
        }
    }
}

/* One KV head: every query head of its group over every row; it alone
 * writes this head's dk/dv and its query heads' dq. */
static void
s_attn_bwd_task(void *ctx, size_t kvh)
{
    const s_attn_t *c = ctx;
    size_t col = kvh * c->m->HD;
    s_attn_bwd_rows(c, kvh, 0, c->rows, c->dk + col, c->dv + col, c->kstride);
}

/* The backward with each KV head's rows cut into `nch` chunks of about
 * equal work, so that a model with fewer KV heads than threads (a long
 * sequence of a small model) keeps every thread busy: task (head, chunk)
 * writes its rows' dq and its own copy of the head's key and value
 * gradients (priv), and the copies are then added in chunk order. */
typedef struct {
    const s_attn_t *c;
    size_t nch, nkeys;
    size_t cut[65]; /* chunk ch: rows cut[ch] .. cut[ch + 1] */
    float *priv;    /* per task: dk then dv, nkeys x HD each */
} s_attn_split_t;

static void
s_attn_split_task(void *ctx, size_t t)
{
    const s_attn_split_t *s = ctx;
    size_t ch = t % s->nch, HD = s->c->m->HD;
    float *dk = s->priv + t * 2 * s->nkeys * HD;
    s_attn_bwd_rows(s->c, t / s->nch, s->cut[ch], s->cut[ch + 1], dk,
                    dk + s->nkeys * HD, HD);
}

/* Key rows per task of the sum of the private copies. */
#define S_SUM_ROWS 256

static void
s_attn_split_sum(void *ctx, size_t t)
{
    const s_attn_split_t *s = ctx;
    const s_attn_t *c = s->c;
    size_t HD = c->m->HD, NKV = c->m->NKV;
    size_t i0 = t * S_SUM_ROWS, i1 = i0 + S_SUM_ROWS;
    i1 = i1 < s->nkeys ? i1 : s->nkeys;
    for (size_t kvh = 0; kvh < NKV; kvh++)
        for (size_t ch = 0; ch < s->nch; ch++) {
            const float *pk = s->priv + (kvh * s->nch + ch) * 2 * s->nkeys * HD;
            const float *pv = pk + s->nkeys * HD;
            for (size_t i = i0; i < i1; i++) {
                float *dk = c->dk + i * c->kstride + kvh * HD;
                float *dv = c->dv + i * c->kstride + kvh * HD;
                for (size_t d = 0; d < HD; d++) {
                    dk[d] += pk[i * HD + d];
                    dv[d] += pv[i * HD + d];
                }
            }
        }
}

/* The attention backward over the pool: one task per KV head, or, when
 * there are fewer KV heads than threads and enough rows, each head's rows
 * split as above (nkeys: key rows the rows can reach). */
static void
s_attn_bwd_run(trn_pool_t *pool, s_attn_t *c, size_t nkeys)
{
    const trn_model_t *m = c->m;
    size_t threads = (size_t) trn_pool_threads(pool), NKV = m->NKV;
    size_t nch = threads / NKV, most = c->rows / 1024;
    nch = nch < most ? nch : most;
    nch = nch < 64 ? nch : 64;
    s_attn_split_t s = {.c = c, .nch = nch, .nkeys = nkeys};
    if (nch > 1)
        s.priv = calloc(NKV * nch * 2 * nkeys, m->HD * sizeof(float));
    if (!s.priv) {
        trn_pool_run(pool, NKV, s_attn_bwd_task, c);
        return;
    }
    double total = 0, done = 0;
    for (size_t r = 0; r < c->rows; r++)
        total += (double) c->nk[r];
    for (size_t ch = 1; ch <= nch; ch++)
        s.cut[ch] = c->rows;
    for (size_t r = 0, ch = 1; r < c->rows && ch < nch; r++) {
        done += (double) c->nk[r];
        while (ch < nch && done >= total * (double) ch / (double) nch)
            s.cut[ch++] = r + 1;
    }
    trn_pool_run(pool, NKV * nch, s_attn_split_task, &s);
    trn_pool_run(pool, (nkeys + S_SUM_ROWS - 1) / S_SUM_ROWS, s_attn_split_sum,
                 &s);
    free(s.priv);
}

/* ---- layers ----------------------------------------------------------- */

/* Where a layer's attention finds keys and values. */
typedef struct {
    trn_kv_t *kv;               /* NULL: the rows themselves (training) */
    const int32_t *const *btab; /* per row, with kv: its block table */
    /* context parallelism (training): the whole batch's keys and values,
     * gathered into cp_kv ([2][n_global][KV]) per layer */
    const trn_cp_t *cp;
    float *cp_kv;
    lisa_rc_t rc; /* the first failed gather (the layers stop there) */
    trn_err_t *err;
} s_kvsrc_t;

/* Gathers the whole batch's keys and values (this rank's rows k and v,
 * rows x KV each) into g ([2][n_global][KV]) over the context group. */
static lisa_rc_t
s_cp_gather(const trn_cp_t *cp, float *g, const float *k, const float *v,
            size_t rows, size_t KV, trn_err_t *err)
{
    size_t n = cp->n_global * KV;
    memset(g, 0, 2 * n * sizeof(float));
    for (size_t r = 0; r < rows; r++) {
        memcpy(g + cp->rows[r] * KV, k + r * KV, KV * sizeof(float));
        memcpy(g + n + cp->rows[r] * KV, v + r * KV, KV * sizeof(float));
    }
    return cp->sum(cp->self, g, 2 * n, err);
}

/* x[r][j] += b[j] for every row. */
static void
s_add_bias(float *x, const float *b, size_t rows, size_t n)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < n; j++)
            x[r * n + j] += b[j];
}

/* gb[j] += sum over rows of dx[r][j]: a bias's gradient. */
static void
s_bias_grad(float *gb, const float *dx, size_t rows, size_t n)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < n; j++)
            gb[j] += dx[r * n + j];
}

/* Runs layer l on rows of a->x (in place), saving into a->L[li]. */
static void
s_layer_fwd(trn_model_t *m, s_acts_t *a, size_t l, size_t li, size_t rows,
            s_kvsrc_t *src)
{
    const s_layer_t *W = &m->w.L[l];
    s_lacts_t *A = &a->L[li];
    float eps = (float) m->cfg.rms_norm_eps;
    size_t H = m->H, Q = m->Q, KV = m->KV, I = m->I;
    memcpy(A->x_in, a->x, rows * H * sizeof(float));
    trn_rmsnorm(A->xn1, A->rstd1, a->x, W->in_norm, rows, H, eps);
    trn_mm_nt(m->pool, A->qraw, A->xn1, W->wq, rows, H, Q);
    trn_mm_nt(m->pool, A->kraw, A->xn1, W->wk, rows, H, KV);
    trn_mm_nt(m->pool, A->v, A->xn1, W->wv, rows, H, KV);
    if (W->bq) {
        s_add_bias(A->qraw, W->bq, rows, Q);
        s_add_bias(A->kraw, W->bk, rows, KV);
        s_add_bias(A->v, W->bv, rows, KV);
    }
    if (W->q_norm) {
        trn_rmsnorm(A->q, A->rq, A->qraw, W->q_norm, rows * m->NH, m->HD, eps);
        trn_rmsnorm(A->k, A->rk, A->kraw, W->k_norm, rows * m->NKV, m->HD, eps);
    } else {
        memcpy(A->q, A->qraw, rows * Q * sizeof(float));
        memcpy(A->k, A->kraw, rows * KV * sizeof(float));
    }
    trn_rope(A->q, rows, m->NH, m->HD, a->pos, m->inv_freq, false);
    trn_rope(A->k, rows, m->NKV, m->HD, a->pos, m->inv_freq, false);
    s_attn_t at = {.m = m,
                   .q = A->q,
                   .o = A->o,
                   .lse = A->lse,
                   .kstart = a->kstart,
                   .nk = a->nk,
                   .rows = rows};
    if (src->cp) {
        src->rc =
            s_cp_gather(src->cp, src->cp_kv, A->k, A->v, rows, KV, src->err);
        if (src->rc != LISA_OK)
            return;
        at.k = src->cp_kv;
        at.v = src->cp_kv + src->cp->n_global * KV;
    } else if (src->kv) {
        trn_kv_t *kv = src->kv;
        size_t bs = kv->geom.block_size, p;
        float *kc = kv->k + l * kv->rows * KV;
        float *vc = kv->v + l * kv->rows * KV;
        for (size_t r = 0; r < rows; r++) {
            p = (size_t) a->pos[r];
            size_t at_row = (size_t) src->btab[r][p / bs] * bs + p % bs;
            memcpy(kc + at_row * KV, A->k + r * KV, KV * sizeof(float));
            memcpy(vc + at_row * KV, A->v + r * KV, KV * sizeof(float));
        }
        at.k = kc;
        at.v = vc;
        at.btab = src->btab;
        at.bs = bs;
    } else {
        at.k = A->k;
        at.v = A->v;
    }
    at.kstride = KV;
    trn_pool_run(m->pool, rows, s_attn_fwd_task, &at);
    trn_mm_nt(m->pool, a->attn, A->o, W->wo, rows, Q, H);
    for (size_t i = 0; i < rows * H; i++)
        a->x[i] += a->attn[i];
    memcpy(A->x_mid, a->x, rows * H * sizeof(float));
    trn_rmsnorm(A->xn2, A->rstd2, a->x, W->post_norm, rows, H, eps);
    trn_mm_nt(m->pool, A->gate, A->xn2, W->wg, rows, H, I);
    trn_mm_nt(m->pool, A->up, A->xn2, W->wu, rows, H, I);
    for (size_t i = 0; i < rows * I; i++)
        a->hbuf[i] = trn_silu(A->gate[i]) * A->up[i];
    trn_mm_nt(m->pool, a->attn, a->hbuf, W->wd, rows, I, H);
    for (size_t i = 0; i < rows * H; i++)
        a->x[i] += a->attn[i];
}

/* Embeds tokens into a->x and runs every layer, then the final norm. */
static void
s_forward_rows(trn_model_t *m, s_acts_t *a, const int32_t *tokens, size_t rows,
               bool save, s_kvsrc_t *src)
{
    for (size_t r = 0; r < rows; r++)
        memcpy(a->x + r * m->H, m->w.embed + (size_t) tokens[r] * m->H,
               m->H * sizeof(float));
    for (size_t l = 0; l < m->NL && src->rc == LISA_OK; l++)
        s_layer_fwd(m, a, l, save ? l : 0, rows, src);
    memcpy(a->xf, a->x, rows * m->H * sizeof(float));
    trn_rmsnorm(a->xnf, a->rstdf, a->xf, m->w.norm, rows, m->H,
                (float) m->cfg.rms_norm_eps);
}

/* ---- vocabulary projection in chunks --------------------------------- */

static void
s_logit_bufs(trn_model_t *m, size_t rows)
{
    if (m->lbuf_rows >= rows)
        return;
    lisa_free(&m->logit_buf);
    lisa_free(&m->xc_buf);
    lisa_free(&m->dxc_buf);
    m->logit_buf = lisa_malloc(rows * m->V * sizeof(float));
    m->xc_buf = lisa_malloc(rows * m->H * sizeof(float));
    m->dxc_buf = lisa_malloc(rows * m->H * sizeof(float));
    m->lbuf_rows = rows;
}

/* Gathers the rows with a target; returns their count. */
static size_t
s_target_rows(trn_model_t *m, const trn_batch_t *b)
{
    if (m->row_cap < b->n_tokens) {
        lisa_free(&m->row_idx);
        m->row_idx = lisa_malloc(b->n_tokens * sizeof(size_t));
        m->row_cap = b->n_tokens;
    }
    size_t n = 0;
    for (size_t t = 0; t < b->n_tokens; t++)
        if (b->targets[t] >= 0)
            m->row_idx[n++] = t;
    return n;
}

static void
s_logits_fwd(trn_model_t *m, const trn_batch_t *b, float *logp, float *ent)
{
    s_acts_t *a = &m->train;
    size_t n = s_target_rows(m, b), C = m->chunk, H = m->H, V = m->V;
    float invT = 1.0f / b->temperature;
    for (size_t t = 0; t < b->n_tokens; t++) {
        logp[t] = 0;
        a->ent_out[t] = 0;
    }
    s_logit_bufs(m, C);
    for (size_t c0 = 0; c0 < n; c0 += C) {
        size_t cn = n - c0 < C ? n - c0 : C;
        for (size_t i = 0; i < cn; i++)
            memcpy(m->xc_buf + i * H, a->xnf + m->row_idx[c0 + i] * H,
                   H * sizeof(float));
        trn_mm_nt(m->pool, m->logit_buf, m->xc_buf, m->w.lm_head, cn, H, V);
        for (size_t i = 0; i < cn; i++) {
            size_t t = m->row_idx[c0 + i];
            float *z = m->logit_buf + i * V;
            float mx = -INFINITY;
            for (size_t j = 0; j < V; j++) {
                z[j] *= invT;
                mx = z[j] > mx ? z[j] : mx;
            }
            double s = 0;
            for (size_t j = 0; j < V; j++)
                s += (double) expf(z[j] - mx);
            float lse = mx + (float) log(s);
            a->lse_out[t] = lse;
            logp[t] = z[b->targets[t]] - lse;
            /* entropy = lse - sum_j p_j z_j */
            double pz = 0;
            for (size_t j = 0; j < V; j++)
                pz += (double) expf(z[j] - lse) * (double) z[j];
            a->ent_out[t] = lse - (float) pz;
        }
    }
    if (ent)
        memcpy(ent, a->ent_out, b->n_tokens * sizeof(float));
}

/* dxnf (zeroed first) and LM-head gradient from dlogp (and dent). */
static void
s_logits_bwd(trn_model_t *m, const float *dlogp, const float *dent, float *dxnf)
{
    const trn_batch_t *b = &m->batch;
    s_acts_t *a = &m->train;
    size_t n = s_target_rows(m, b), C = m->chunk, H = m->H, V = m->V;
    float invT = 1.0f / b->temperature;
    memset(dxnf, 0, b->n_tokens * H * sizeof(float));
    s_logit_bufs(m, C);
    for (size_t c0 = 0; c0 < n; c0 += C) {
        size_t cn = n - c0 < C ? n - c0 : C;
        for (size_t i = 0; i < cn; i++)
            memcpy(m->xc_buf + i * H, a->xnf + m->row_idx[c0 + i] * H,
                   H * sizeof(float));
        trn_mm_nt(m->pool, m->logit_buf, m->xc_buf, m->w.lm_head, cn, H, V);
        for (size_t i = 0; i < cn; i++) {
            size_t t = m->row_idx[c0 + i];
            float *z = m->logit_buf + i * V;
            float g = dlogp[t] * invT, lse = a->lse_out[t];
            float ge = dent ? dent[t] * invT : 0.0f, h = a->ent_out[t];
            /* d logp / du_j = 1[j = target] - p_j;
             * d H / du_j = -p_j (log p_j + H), with u = z / T */
            for (size_t j = 0; j < V; j++) {
                float lp = z[j] * invT - lse;
                float p = expf(lp);
                z[j] = -g * p - ge * p * (lp + h);
            }
            z[b->targets[t]] += g;
        }
        trn_mm_nn(m->pool, m->dxc_buf, m->logit_buf, m->w.lm_head, cn, V, H,
                  false);
        trn_mm_tn(m->pool, m->g.lm_head, m->logit_buf, m->xc_buf, cn, V, H);
        for (size_t i = 0; i < cn; i++)
            memcpy(dxnf + m->row_idx[c0 + i] * H, m->dxc_buf + i * H,
                   H * sizeof(float));
    }
}

/* ---- training --------------------------------------------------------- */

/* A context-parallel batch's own rows: inside the whole batch, in
 * increasing order. */
static lisa_rc_t
s_check_cp(const trn_batch_t *b, trn_err_t *err)
{
    const trn_cp_t *cp = b->cp;
    if (!cp->sum || (b->n_tokens > 0 && !cp->rows) ||
        b->n_tokens > cp->n_global)
        return trn_fail(err, LISA_INVALID,
                        "batch: context parallelism needs a sum and at most "
                        "n_global rows");
    for (size_t t = 0; t < b->n_tokens; t++)
        if (cp->rows[t] >= cp->n_global ||
            (t > 0 && cp->rows[t] <= cp->rows[t - 1]))
            return trn_fail(err, LISA_INVALID,
                            "batch: context-parallel row %zu is outside the "
                            "batch or out of order",
                            t);
    return LISA_OK;
}

static lisa_rc_t
s_check_batch(const trn_model_t *m, const trn_batch_t *b, trn_err_t *err)
{
    size_t total = b->cp ? b->cp->n_global : b->n_tokens;
    if ((b->n_tokens > 0 && (!b->tokens || !b->targets)) || !b->seq_offsets ||
        total == 0 || b->n_seqs == 0 || (b->n_tokens == 0 && !b->cp))
        return trn_fail(err, LISA_INVALID, "batch: empty or missing arrays");
    if (!(b->temperature > 0) || !isfinite(b->temperature))
        return trn_fail(err, LISA_INVALID, "batch: temperature must be > 0");
    if (total > TRN_MAX_BATCH_TOKENS)
        return trn_fail(err, LISA_TOOLARGE,
                        "batch: %zu tokens exceed the bound of %u", total,
                        TRN_MAX_BATCH_TOKENS);
    if (b->cp) {
        lisa_rc_t rc = s_check_cp(b, err);
        if (rc != LISA_OK)
            return rc;
    }
    if (b->seq_offsets[0] != 0 || b->seq_offsets[b->n_seqs] != total)
        return trn_fail(err, LISA_INVALID,
                        "batch: seq_offsets must run from 0 to n_tokens");
    for (size_t s = 0; s < b->n_seqs; s++) {
        size_t len = b->seq_offsets[s + 1] - b->seq_offsets[s];
        if (b->seq_offsets[s + 1] <= b->seq_offsets[s] ||
            len > (size_t) m->cfg.max_position_embeddings)
            return trn_fail(err, LISA_INVALID,
                            "batch: sequence %zu is empty, unordered or "
                            "longer than max_position_embeddings",
                            s);
    }
    for (size_t t = 0; t < b->n_tokens; t++) {
        if (b->tokens[t] < 0 || (size_t) b->tokens[t] >= m->V ||
            b->targets[t] >= (int32_t) m->V || b->targets[t] < -1)
            return trn_fail(err, LISA_INVALID,
                            "batch: token or target at %zu out of the "
                            "vocabulary",
                            t);
    }
    return LISA_OK;
}

lisa_rc_t
trn_model_forward(trn_model_t *m, const trn_batch_t *b, float *logp,
                  float *entropy, trn_err_t *err)
{
    m->have_fwd = false;
    lisa_rc_t rc = s_check_batch(m, b, err);
    if (rc != LISA_OK)
        return rc;
    size_t T = b->n_tokens;
    s_acts_t *a = &m->train;
    s_acts_reserve(m, a, T, true);
    /* row t is global row g of the sequence starting at seq_offsets[s] */
    for (size_t t = 0, s = 0; t < T; t++) {
        size_t g = b->cp ? b->cp->rows[t] : t;
        while (g >= b->seq_offsets[s + 1])
            s++;
        a->pos[t] = (int32_t) (g - b->seq_offsets[s]);
        a->kstart[t] = b->seq_offsets[s];
        a->nk[t] = g - b->seq_offsets[s] + 1;
    }
    s_kvsrc_t src = {.cp = b->cp, .err = err};
    if (b->cp) {
        size_t need = 4 * b->cp->n_global * m->KV;
        if (m->cp_cap < need) {
            lisa_free(&m->cp_buf);
            m->cp_buf = lisa_malloc(need * sizeof(float));
            m->cp_cap = need;
        }
        src.cp_kv = m->cp_buf;
    }
    s_forward_rows(m, a, b->tokens, T, true, &src);
    if (src.rc != LISA_OK)
        return src.rc;
    m->batch = *b;
    s_logits_fwd(m, b, logp, entropy);
    m->have_fwd = true;
    return LISA_OK;
}

/* The attention's backward of one layer: dq, dk, dv of this rank's rows
 * from dO. Under context parallelism the whole batch's keys and values are
 * gathered again and their gradients summed over the group. */
static lisa_rc_t
s_attn_bwd(trn_model_t *m, const s_lacts_t *A, const float *dO, float *dq,
           float *dk, float *dv, trn_err_t *err)
{
    const trn_cp_t *cp = m->batch.cp;
    s_acts_t *a = &m->train;
    size_t T = m->batch.n_tokens, KV = m->KV;
    memset(dq, 0, T * m->Q * sizeof(float));
    memset(dk, 0, T * KV * sizeof(float));
    memset(dv, 0, T * KV * sizeof(float));
    s_attn_t at = {.m = m,
                   .q = A->q,
                   .k = A->k,
                   .v = A->v,
                   .kstride = KV,
                   .kstart = a->kstart,
                   .nk = a->nk,
                   .o = A->o,
                   .lse = A->lse,
                   .dout = dO,
                   .dq = dq,
                   .dk = dk,
                   .dv = dv,
                   .rows = T};
    size_t n = cp ? cp->n_global * KV : 0;
    if (cp) {
        float *g = m->cp_buf; /* keys, values, their gradients */
        lisa_rc_t rc = s_cp_gather(cp, g, A->k, A->v, T, KV, err);
        if (rc != LISA_OK)
            return rc;
        memset(g + 2 * n, 0, 2 * n * sizeof(float));
        at.k = g;
        at.v = g + n;
        at.dk = g + 2 * n;
        at.dv = g + 3 * n;
    }
    s_attn_bwd_run(m->pool, &at, cp ? cp->n_global : T);
    if (!cp)
        return LISA_OK;
    lisa_rc_t rc = cp->sum(cp->self, m->cp_buf + 2 * n, 2 * n, err);
    if (rc != LISA_OK)
        return rc;
    for (size_t t = 0; t < T; t++) {
        memcpy(dk + t * KV, at.dk + cp->rows[t] * KV, KV * sizeof(float));
        memcpy(dv + t * KV, at.dv + cp->rows[t] * KV, KV * sizeof(float));
    }
    return LISA_OK;
}

static void
s_reserve_bwd(trn_model_t *m, size_t T)
{
    size_t need = T * (2 * m->H + 3 * m->I + 3 * m->Q + 3 * m->KV);
    if (m->bw_cap >= need)
        return;
    lisa_free(&m->bw_arena);
    m->bw_arena = lisa_malloc(need * sizeof(float));
    m->bw_cap = need;
}

lisa_rc_t
trn_model_backward(trn_model_t *m, const float *dlogp, const float *dentropy,
                   trn_err_t *err)
{
    if (!m->have_fwd)
        return trn_fail(err, LISA_CONFLICT,
                        "backward: no training forward to differentiate");
    const trn_batch_t *b = &m->batch;
    s_acts_t *a = &m->train;
    size_t T = b->n_tokens, H = m->H, I = m->I, Q = m->Q, KV = m->KV;
    s_reserve_bwd(m, T > 0 ? T : 1);
    float *p = m->bw_arena;
    float *dx = p;
    p += T * H;
    float *dxn = p;
    p += T * H;
    float *dh = p;
    p += T * I;
    float *dg = p;
    p += T * I;
    float *du = p;
    p += T * I;
    float *dq = p;
    p += T * Q;
    float *dO = p;
    p += T * Q;
    float *dk = p;
    p += T * KV;
    float *dv = p;
    p += T * KV;
    float *dqr = p;
    p += T * Q;
    float *dkr = p;
    p += T * KV;
    float *hb = a->hbuf;

    s_logits_bwd(m, dlogp, dentropy, dxn);
    memset(dx, 0, T * H * sizeof(float));
    trn_rmsnorm_bwd(dx, m->g.norm, dxn, a->xf, a->rstdf, m->w.norm, T, H);
    for (size_t l = m->NL; l-- > 0;) {
        const s_layer_t *W = &m->w.L[l];
        s_layer_t *G = &m->g.L[l];
        const s_lacts_t *A = &a->L[l];
        /* MLP: x_out = x_mid + down(silu(gate) * up) */
        for (size_t i = 0; i < T * I; i++)
            hb[i] = trn_silu(A->gate[i]) * A->up[i];
        trn_mm_nn(m->pool, dh, dx, W->wd, T, H, I, false);
        trn_mm_tn(m->pool, G->wd, dx, hb, T, H, I);
        for (size_t i = 0; i < T * I; i++) {
            float gt = A->gate[i];
            float sg = 1.0f / (1.0f + expf(-gt));
            float si = gt * sg;
            du[i] = dh[i] * si;
            dg[i] = dh[i] * A->up[i] * (sg * (1.0f + gt * (1.0f - sg)));
        }
        trn_mm_nn(m->pool, dxn, dg, W->wg, T, I, H, false);
        trn_mm_nn(m->pool, dxn, du, W->wu, T, I, H, true);
        trn_mm_tn(m->pool, G->wg, dg, A->xn2, T, I, H);
        trn_mm_tn(m->pool, G->wu, du, A->xn2, T, I, H);
        trn_rmsnorm_bwd(dx, G->post_norm, dxn, A->x_mid, A->rstd2, W->post_norm,
                        T, H);
        /* attention: x_mid = x_in + o_proj(attn) */
        trn_mm_nn(m->pool, dO, dx, W->wo, T, H, Q, false);
        trn_mm_tn(m->pool, G->wo, dx, A->o, T, H, Q);
        lisa_rc_t rc = s_attn_bwd(m, A, dO, dq, dk, dv, err);
        if (rc != LISA_OK)
            return rc;
        trn_rope(dq, T, m->NH, m->HD, a->pos, m->inv_freq, true);
        trn_rope(dk, T, m->NKV, m->HD, a->pos, m->inv_freq, true);
        if (W->q_norm) {
            /* per-head norms: dq/dk now hold d(normed); turn into d(raw) */
            memset(dqr, 0, T * Q * sizeof(float));
            memset(dkr, 0, T * KV * sizeof(float));
            trn_rmsnorm_bwd(dqr, G->q_norm, dq, A->qraw, A->rq, W->q_norm,
                            T * m->NH, m->HD);
            trn_rmsnorm_bwd(dkr, G->k_norm, dk, A->kraw, A->rk, W->k_norm,
                            T * m->NKV, m->HD);
        } else {
            memcpy(dqr, dq, T * Q * sizeof(float));
            memcpy(dkr, dk, T * KV * sizeof(float));
        }
        if (W->bq) {
            s_bias_grad(G->bq, dqr, T, Q);
            s_bias_grad(G->bk, dkr, T, KV);
            s_bias_grad(G->bv, dv, T, KV);
        }
        trn_mm_nn(m->pool, dxn, dqr, W->wq, T, Q, H, false);
        trn_mm_nn(m->pool, dxn, dkr, W->wk, T, KV, H, true);
        trn_mm_nn(m->pool, dxn, dv, W->wv, T, KV, H, true);
        trn_mm_tn(m->pool, G->wq, dqr, A->xn1, T, Q, H);
        trn_mm_tn(m->pool, G->wk, dkr, A->xn1, T, KV, H);
        trn_mm_tn(m->pool, G->wv, dv, A->xn1, T, KV, H);
        trn_rmsnorm_bwd(dx, G->in_norm, dxn, A->x_in, A->rstd1, W->in_norm, T,
                        H);
    }
    for (size_t t = 0; t < T; t++) {
        float *ge = m->g.embed + (size_t) b->tokens[t] * H;
        for (size_t i = 0; i < H; i++)
            ge[i] += dx[t * H + i];
    }
    return LISA_OK;
}

lisa_rc_t
trn_model_logits(trn_model_t *m, const int32_t *tokens, size_t n, float *logits,
                 trn_err_t *err)
{
    if (n == 0 || n > (size_t) m->cfg.max_position_embeddings)
        return trn_fail(err, LISA_INVALID, "logits: bad length %zu", n);
    for (size_t t = 0; t < n; t++)
        if (tokens[t] < 0 || (size_t) tokens[t] >= m->V)
            return trn_fail(err, LISA_INVALID,
                            "logits: token %d at %zu out of the vocabulary",
                            tokens[t], t);
    m->have_fwd = false;
    s_acts_t *a = &m->gen;
    s_acts_reserve(m, a, n, false);
    for (size_t t = 0; t < n; t++) {
        a->pos[t] = (int32_t) t;
        a->kstart[t] = 0;
        a->nk[t] = t + 1;
    }
    s_kvsrc_t src = {0};
    s_forward_rows(m, a, tokens, n, false, &src);
    trn_mm_nt(m->pool, logits, a->xnf, m->w.lm_head, n, m->H, m->V);
    return LISA_OK;
}

/* ---- generation ------------------------------------------------------- */

lisa_rc_t
trn_gen_check(const trn_kv_geom_t *g, size_t vocab, size_t n,
              const trn_gen_seq_t *seqs, trn_err_t *err)
{
    if (n == 0 || !seqs)
        return trn_fail(err, LISA_INVALID, "step: no sequences");
    if (n > g->max_seqs)
        return trn_fail(err, LISA_TOOLARGE,
                        "step: %zu sequences, the cache takes %zu", n,
                        g->max_seqs);
    size_t tokens = 0;
    for (size_t i = 0; i < n; i++) {
        const trn_gen_seq_t *s = &seqs[i];
        if (s->slot >= g->max_seqs || s->n_new == 0 || !s->tokens || !s->blocks)
            return trn_fail(err, LISA_INVALID,
                            "step: sequence %zu has slot %zu (of %zu) and "
                            "%zu new tokens",
                            i, s->slot, g->max_seqs, s->n_new);
        for (size_t j = 0; j < i; j++)
            if (seqs[j].slot == s->slot)
                return trn_fail(err, LISA_INVALID,
                                "step: slot %zu appears twice", s->slot);
        size_t need = (s->start + s->n_new + g->block_size - 1) / g->block_size;
        if (s->n_blocks > g->max_blocks || need > s->n_blocks)
            return trn_fail(err, LISA_TOOLARGE,
                            "step: sequence %zu needs %zu blocks, has %zu "
                            "(at most %zu)",
                            i, need, s->n_blocks, g->max_blocks);
        for (size_t b = 0; b < need; b++)
            if (s->blocks[b] < 0 || (size_t) s->blocks[b] >= g->n_blocks)
                return trn_fail(err, LISA_INVALID,
                                "step: sequence %zu names block %d (of %zu)", i,
                                s->blocks[b], g->n_blocks);
        for (size_t t = 0; t < s->n_new; t++)
            if (s->tokens[t] < 0 || (size_t) s->tokens[t] >= vocab)
                return trn_fail(err, LISA_INVALID,
                                "step: token %d out of the vocabulary",
                                s->tokens[t]);
        tokens += s->n_new;
    }
    if (tokens > g->max_tokens)
        return trn_fail(err, LISA_TOOLARGE,
                        "step: %zu new tokens, a step takes %zu", tokens,
                        g->max_tokens);
    return LISA_OK;
}

void
trn_gen_seq_contiguous(trn_gen_seq_t *s, int32_t *blocks,
                       const trn_kv_geom_t *g, size_t slot, size_t start,
                       const int32_t *tokens, size_t n_new)
{
    for (size_t b = 0; b < g->max_blocks; b++)
        blocks[b] = (int32_t) (slot * g->max_blocks + b);
    s->slot = slot;
    s->blocks = blocks;
    s->n_blocks = g->max_blocks;
    s->start = start;
    s->tokens = tokens;
    s->n_new = n_new;
}

size_t
trn_kv_block_bytes(const trn_model_t *m, size_t block_size)
{
    return 2 * m->NL * block_size * m->KV * sizeof(float);
}

trn_kv_t *
trn_kv_new(const trn_model_t *m, trn_kv_geom_t *geom)
{
    trn_kv_geom_t g = *geom;
    size_t bs = g.block_size;
    if (bs == 0 || bs > 1024 || (bs & (bs - 1)) != 0 || g.max_seqs == 0 ||
        g.max_seqs > TRN_MAX_KV_SLOTS || g.max_blocks == 0 ||
        g.max_tokens == 0 ||
        g.max_blocks > (size_t) m->cfg.max_position_embeddings / bs + 1)
        return NULL;
    if (g.n_blocks == 0)
        g.n_blocks = (g.kv_bytes ? g.kv_bytes : (size_t) 256 << 20) /
                     trn_kv_block_bytes(m, bs);
    if (g.n_blocks == 0 || g.n_blocks > INT32_MAX ||
        g.n_blocks > SIZE_MAX / 2 / trn_kv_block_bytes(m, bs))
        return NULL;
    trn_kv_t *kv = lisa_calloc(1, sizeof *kv);
    kv->geom = g;
    kv->KV = m->KV;
    kv->NL = m->NL;
    kv->rows = g.n_blocks * bs;
    size_t n = m->NL * kv->rows * m->KV;
    kv->k = lisa_calloc(n, sizeof(float));
    kv->v = lisa_calloc(n, sizeof(float));
    *geom = g;
    return kv;
}

void
trn_kv_destroy(trn_kv_t **pkv)
{
    if (!pkv || !*pkv)
        return;
    lisa_free(&(*pkv)->k);
    lisa_free(&(*pkv)->v);
    lisa_free(pkv);
}

const trn_kv_geom_t *
trn_kv_geom(const trn_kv_t *kv)
{
    return &kv->geom;
}

lisa_rc_t
trn_model_step(trn_model_t *m, trn_kv_t *kv, size_t n,
               const trn_gen_seq_t *seqs, float *logits, trn_err_t *err)
{
    if (kv->NL != m->NL || kv->KV != m->KV)
        return trn_fail(err, LISA_INVALID, "step: cache of another model");
    lisa_rc_t rc = trn_gen_check(&kv->geom, m->V, n, seqs, err);
    if (rc != LISA_OK)
        return rc;
    size_t rows = 0;
    for (size_t i = 0; i < n; i++)
        rows += seqs[i].n_new;
    m->have_fwd = false;
    s_acts_t *a = &m->gen;
    s_acts_reserve(m, a, rows, false);
    int32_t *tok = lisa_malloc(rows * sizeof(int32_t));
    const int32_t **rtab = lisa_malloc(rows * sizeof *rtab);
    size_t r = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t t = 0; t < seqs[i].n_new; t++, r++) {
            size_t p = seqs[i].start + t;
            tok[r] = seqs[i].tokens[t];
            rtab[r] = seqs[i].blocks;
            a->pos[r] = (int32_t) p;
            a->kstart[r] = 0;
            a->nk[r] = p + 1;
        }
    s_kvsrc_t src = {.kv = kv, .btab = rtab};
    s_forward_rows(m, a, tok, rows, false, &src);
    /* the last row of each sequence through the LM head */
    float *last = lisa_malloc(n * m->H * sizeof(float));
    r = 0;
    for (size_t i = 0; i < n; i++) {
        r += seqs[i].n_new;
        memcpy(last + i * m->H, a->xnf + (r - 1) * m->H, m->H * sizeof(float));
    }
    trn_mm_nt(m->pool, logits, last, m->w.lm_head, n, m->H, m->V);
    lisa_free(&last);
    lisa_free(&tok);
    lisa_free(&rtab);
    return LISA_OK;
}
