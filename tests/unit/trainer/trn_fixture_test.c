/*
 * The CPU backend against Hugging Face transformers.
 *
 * tests/fixtures/qwen3-tiny/{tied,untied}/ hold tiny random Qwen3 models
 * saved by transformers and, in fixture.safetensors, what transformers
 * computed for them in float32: logits of every position, log-probs of
 * chosen tokens and entropies (with a temperature) and the gradient of
 * sum(weights * logprobs + entropy_weights * entropy) for every parameter
 * (tests/fixtures/gen_qwen3_fixtures.py). tests/fixtures/llama-tiny/tied
 * (LlamaForCausalLM, tied as SmolLM2: no q/k norms) and
 * tests/fixtures/qwen2-tiny/untied (Qwen2ForCausalLM: q/k/v biases) are
 * the same for the other families. The model loads the directory unchanged
 * and must reproduce all of it. The first test is the usage example.
 */
#include "trn_model.h"
#include "trn_safetensors.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXROOT LISA_SOURCE_DIR "/tests/fixtures"
#define FIXDIR  FIXROOT "/qwen3-tiny"

typedef struct {
    trn_model_t *m;
    trn_st_t *fx;
    size_t n, nseq;
    int32_t *tokens, *targets;
    size_t *offsets;
    float temperature;
    float *weights, *ent_weights, *logprobs, *entropy, *logits;
} fixture_t;

static const trn_st_tensor_t *
need(const trn_st_t *st, const char *name)
{
    const trn_st_tensor_t *t = trn_st_find(st, name);
    cr_assert_not_null(t, "fixture lacks %s", name);
    return t;
}

static float *
f32_of(const trn_st_t *st, const char *name, size_t *numel)
{
    const trn_st_tensor_t *t = need(st, name);
    float *p = malloc(t->numel * sizeof *p);
    cr_assert_eq(trn_st_to_f32(t, p), LISA_OK);
    if (numel)
        *numel = t->numel;
    return p;
}

static int64_t *
i64_of(const trn_st_t *st, const char *name, size_t *numel)
{
    const trn_st_tensor_t *t = need(st, name);
    cr_assert_eq(t->dtype, TRN_DT_I64);
    int64_t *p = malloc(t->numel * sizeof *p);
    memcpy(p, t->data, t->numel * sizeof *p);
    *numel = t->numel;
    return p;
}

static void
fixture_open(fixture_t *f, const char *name)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", FIXROOT, name);
    snprintf(path, sizeof path, "%s/fixture.safetensors", dir);
    trn_err_t err;
    cr_assert_eq(trn_model_load(dir, 2, &f->m, &err), LISA_OK, "%s", err.msg);
    cr_assert_eq(trn_st_open(path, &f->fx, &err), LISA_OK, "%s", err.msg);
    size_t k;
    int64_t *tok = i64_of(f->fx, "tokens", &f->n);
    int64_t *tgt = i64_of(f->fx, "targets", &k);
    cr_assert_eq(k, f->n);
    int64_t *off = i64_of(f->fx, "seq_offsets", &k);
    f->nseq = k - 1;
    f->tokens = malloc(f->n * sizeof(int32_t));
    f->targets = malloc(f->n * sizeof(int32_t));
    f->offsets = malloc(k * sizeof(size_t));
    for (size_t i = 0; i < f->n; i++) {
        f->tokens[i] = (int32_t) tok[i];
        f->targets[i] = (int32_t) tgt[i];
    }
    for (size_t i = 0; i < k; i++)
        f->offsets[i] = (size_t) off[i];
    free(tok);
    free(tgt);
    free(off);
    float *temp = f32_of(f->fx, "temperature", NULL);
    f->temperature = temp[0];
    free(temp);
    f->weights = f32_of(f->fx, "weights", NULL);
    f->ent_weights = f32_of(f->fx, "entropy_weights", NULL);
    f->entropy = f32_of(f->fx, "entropy", NULL);
    f->logprobs = f32_of(f->fx, "logprobs", NULL);
    f->logits = f32_of(f->fx, "logits", NULL);
}

static void
fixture_close(fixture_t *f)
{
    trn_model_destroy(&f->m);
    trn_st_destroy(&f->fx);
    free(f->tokens);
    free(f->targets);
    free(f->offsets);
    free(f->weights);
    free(f->ent_weights);
    free(f->entropy);
    free(f->logprobs);
    free(f->logits);
}

/* Largest |a - b| over the array, relative to the largest |b|. */
static double
rel_err(const float *a, const float *b, size_t n)
{
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double) a[i] - b[i]));
        mb = fmax(mb, fabs((double) b[i]));
    }
    return mb > 0 ? md / mb : md;
}

Test(trn_fixture, usage)
{
    /* Load a directory transformers saved, score chosen tokens. */
    trn_model_t *m = NULL;
    trn_err_t err;
    cr_assert_eq(trn_model_load(FIXDIR "/tied", 1, &m, &err), LISA_OK, "%s",
                 err.msg);
    const trn_config_t *c = trn_model_config(m);
    cr_assert_eq(c->hidden_size, 64);
    cr_assert_eq(c->head_dim, 16);
    cr_assert_eq(c->num_key_value_heads, 2);
    cr_assert(c->tie_word_embeddings);
    cr_assert_float_eq(c->rope_theta, 1e6, 1e-3);
    cr_assert_eq(trn_model_tensor_find(m, "lm_head.weight"), -1);
    trn_model_destroy(&m);
}

static void
check_fixture(const char *name)
{
    fixture_t f = {0};
    fixture_open(&f, name);
    size_t V = (size_t) trn_model_config(f.m)->vocab_size;

    /* logits of every position, one sequence at a time */
    float *lg = malloc(f.n * V * sizeof *lg);
    for (size_t s = 0; s < f.nseq; s++) {
        size_t o = f.offsets[s], len = f.offsets[s + 1] - o;
        cr_assert_eq(trn_model_logits(f.m, f.tokens + o, len, lg + o * V, NULL),
                     LISA_OK);
    }
    double e_logits = rel_err(lg, f.logits, f.n * V);

    /* packed log-probs and gradients */
    trn_batch_t b = {f.tokens, f.targets,     f.n, f.offsets,
                     f.nseq,   f.temperature, NULL};
    float *lp = malloc(f.n * sizeof *lp), *ent = malloc(f.n * sizeof *ent);
    cr_assert_eq(trn_model_forward(f.m, &b, lp, ent, NULL), LISA_OK);
    double e_lp = rel_err(lp, f.logprobs, f.n);
    double e_ent = rel_err(ent, f.entropy, f.n);
    trn_model_zero_grad(f.m);
    cr_assert_eq(trn_model_backward(f.m, f.weights, f.ent_weights, NULL),
                 LISA_OK);
    fprintf(stderr, "%s: logits rel err %.3g, logprobs %.3g, entropy %.3g\n",
            name, e_logits, e_lp, e_ent);
    cr_assert_lt(e_logits, 1e-5);
    cr_assert_lt(e_lp, 1e-5);
    cr_assert_lt(e_ent, 1e-5);
    size_t checked = 0;
    for (size_t i = 0; i < trn_model_num_tensors(f.m); i++) {
        char key[160];
        const char *tn = trn_model_tensor_name(f.m, i);
        snprintf(key, sizeof key, "grad.%s", tn);
        size_t n;
        float *want = f32_of(f.fx, key, &n);
        cr_assert_eq(n, trn_model_tensor_numel(f.m, i));
        double e = rel_err(trn_model_tensor_grad(f.m, i), want, n);
        fprintf(stderr, "%s: %-48s grad rel err %.3g\n", name, tn, e);
        cr_assert_lt(e, 1e-4, "%s: gradient of %s off by %.3g", name, tn, e);
        free(want);
        checked++;
    }
    cr_assert_eq(checked, trn_st_count(f.fx) - 9);
    free(lg);
    free(lp);
    free(ent);
    fixture_close(&f);
}

Test(trn_fixture, tied_matches_transformers)
{
    check_fixture("qwen3-tiny/tied");
}

Test(trn_fixture, untied_matches_transformers)
{
    check_fixture("qwen3-tiny/untied");
}

Test(trn_fixture, llama_matches_transformers)
{
    trn_model_t *m = NULL;
    cr_assert_eq(trn_model_load(FIXROOT "/llama-tiny/tied", 1, &m, NULL),
                 LISA_OK);
    cr_assert_eq(trn_model_config(m)->family, TRN_FAMILY_LLAMA);
    cr_assert_eq(trn_model_tensor_find(m, "model.layers.0.self_attn.q_norm"
                                          ".weight"),
                 -1);
    trn_model_destroy(&m);
    check_fixture("llama-tiny/tied");
}

Test(trn_fixture, qwen2_matches_transformers)
{
    trn_model_t *m = NULL;
    cr_assert_eq(trn_model_load(FIXROOT "/qwen2-tiny/untied", 1, &m, NULL),
                 LISA_OK);
    cr_assert_eq(trn_model_config(m)->family, TRN_FAMILY_QWEN2);
    cr_assert_geq(trn_model_tensor_find(m, "model.layers.1.self_attn.v_proj"
                                           ".bias"),
                  0);
    trn_model_destroy(&m);
    check_fixture("qwen2-tiny/untied");
}

static void
check_kv_generation(const char *name)
{
    fixture_t f = {0};
    fixture_open(&f, name);
    size_t V = (size_t) trn_model_config(f.m)->vocab_size;
    trn_kv_geom_t g = {.block_size = 4,
                       .n_blocks = 16,
                       .max_seqs = 2,
                       .max_blocks = 8,
                       .max_tokens = 8};
    trn_kv_t *kv = trn_kv_new(f.m, &g);
    cr_assert(kv);
    /* both sequences: prefill 4 tokens, then decode the rest together;
     * their blocks interleave */
    int32_t t0[8] = {1, 3, 5, 7, 9, 11, 13, 15},
            t1[8] = {0, 2, 4, 6, 8, 10, 12, 14};
    const int32_t *tp[2] = {f.tokens + f.offsets[0], f.tokens + f.offsets[1]};
    trn_gen_seq_t sq[2] = {
        {.slot = 0, .blocks = t0, .n_blocks = 8, .tokens = tp[0], .n_new = 4},
        {.slot = 1, .blocks = t1, .n_blocks = 8, .tokens = tp[1], .n_new = 4}};
    float out[2 * 512];
    cr_assert_leq(V, 512);
    cr_assert_eq(trn_model_step(f.m, kv, 2, sq, out, NULL), LISA_OK);
    size_t len1 = f.offsets[2] - f.offsets[1];
    for (size_t pos = 4; pos < len1; pos++) {
        for (int s = 0; s < 2; s++)
            cr_assert_lt(rel_err(out + s * V,
                                 f.logits + (f.offsets[s] + pos - 1) * V, V),
                         1e-5);
        for (int s = 0; s < 2; s++) {
            sq[s].start = pos;
            sq[s].tokens = tp[s] + pos;
            sq[s].n_new = 1;
        }
        cr_assert_eq(trn_model_step(f.m, kv, 2, sq, out, NULL), LISA_OK);
    }
    trn_kv_destroy(&kv);
    fixture_close(&f);
}

Test(trn_fixture, kv_cache_generation_matches_transformers)
{
    check_kv_generation("qwen3-tiny/untied");
    check_kv_generation("llama-tiny/tied");
    check_kv_generation("qwen2-tiny/untied");
}
