/*
 * trn_model tests on a tiny random Qwen3: gradients against finite
 * differences for every parameter kind, cached generation against the full
 * forward, packed sequences against separate ones, chunked log-probs
 * against unchunked, and a save/load round trip. The first test is the
 * usage example.
 */
#include "trn_model.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static trn_config_t
tiny_config(bool tied)
{
    trn_config_t c = {
        .hidden_size = 16,
        .intermediate_size = 24,
        .num_hidden_layers = 2,
        .num_attention_heads = 4,
        .num_key_value_heads = 2,
        .head_dim = 8,
        .vocab_size = 37,
        .max_position_embeddings = 64,
        .rms_norm_eps = 1e-6,
        .rope_theta = 10000.0,
        .tie_word_embeddings = tied,
    };
    return c;
}

static void
fill_tokens(int32_t *t, size_t n, int V, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t) ((seed >> 8) % (unsigned) V);
    }
}

Test(trn_model, usage)
{
    /* A model: loaded from a Hugging Face directory in real use
     * (trn_model_load), random here. */
    trn_config_t cfg = tiny_config(true);
    trn_model_t *m = trn_model_new_random(&cfg, 42, 0.1f, 2);
    cr_assert_not_null(m);
    cr_assert_eq(trn_model_num_params(m), trn_config_num_params(&cfg));

    /* Training: log-probs of chosen tokens, then gradients of a loss. */
    int32_t tokens[6] = {1, 5, 9, 3, 7, 2};
    int32_t targets[6] = {-1, 9, 3, 7, 2, -1}; /* score tokens 2..5 */
    size_t offsets[2] = {0, 6};
    trn_batch_t b = {.tokens = tokens,
                     .targets = targets,
                     .n_tokens = 6,
                     .seq_offsets = offsets,
                     .n_seqs = 1,
                     .temperature = 1.0f};
    float logp[6], dlogp[6];
    trn_err_t err;
    cr_assert_eq(trn_model_forward(m, &b, logp, NULL, &err), LISA_OK, "%s",
                 err.msg);
    cr_assert_eq(logp[0], 0.0f);
    for (int t = 1; t < 5; t++)
        cr_assert(logp[t] < 0 && logp[t] > -20);
    for (int t = 0; t < 6; t++)
        dlogp[t] = -1.0f / 4; /* loss = -mean logp */
    trn_model_zero_grad(m);
    cr_assert_eq(trn_model_backward(m, dlogp, NULL, &err), LISA_OK, "%s",
                 err.msg);
    long q = trn_model_tensor_find(m, "model.layers.1.self_attn.q_proj.weight");
    cr_assert_geq(q, 0);
    float *g = trn_model_tensor_grad(m, (size_t) q);
    double gn = 0;
    for (size_t i = 0; i < trn_model_tensor_numel(m, (size_t) q); i++)
        gn += (double) g[i] * g[i];
    cr_assert_gt(gn, 0.0);

    /* Generation: a paged cache of 16 blocks of 4 positions; a sequence's
     * blocks are any blocks, in its table. Prefill, then decode. */
    trn_kv_geom_t kg = {.block_size = 4,
                        .n_blocks = 16,
                        .max_seqs = 2,
                        .max_blocks = 8,
                        .max_tokens = 32};
    trn_kv_t *kv = trn_kv_new(m, &kg);
    cr_assert(kv);
    int32_t table[8] = {5, 2, 7, 0, 1, 3, 4, 6};
    float logits[37];
    trn_gen_seq_t sq = {.slot = 0,
                        .blocks = table,
                        .n_blocks = 8,
                        .start = 0,
                        .tokens = tokens,
                        .n_new = 4};
    cr_assert_eq(trn_model_step(m, kv, 1, &sq, logits, &err), LISA_OK, "%s",
                 err.msg);
    int32_t next = 0;
    for (int j = 1; j < 37; j++)
        if (logits[j] > logits[next])
            next = j;
    sq.start = 4;
    sq.tokens = &next;
    sq.n_new = 1;
    cr_assert_eq(trn_model_step(m, kv, 1, &sq, logits, &err), LISA_OK);
    trn_kv_destroy(&kv);
    trn_model_destroy(&m);
    cr_assert_null(m);
    trn_model_destroy(&m);
}

/* loss = sum_t w_t * logp_t + we_t * entropy_t over a packed batch of two
 * sequences. */
typedef struct {
    int32_t tokens[20], targets[20];
    size_t offsets[3];
    float w[20], we[20];
    trn_batch_t b;
} fd_batch_t;

static void
fd_batch_init(fd_batch_t *fb, int V)
{
    fill_tokens(fb->tokens, 20, V, 7);
    fb->offsets[0] = 0;
    fb->offsets[1] = 9;
    fb->offsets[2] = 20;
    for (size_t s = 0; s < 2; s++)
        for (size_t t = fb->offsets[s]; t < fb->offsets[s + 1]; t++)
            fb->targets[t] =
                t + 1 < fb->offsets[s + 1] ? fb->tokens[t + 1] : -1;
    for (int t = 0; t < 20; t++) {
        fb->w[t] = 0.3f + 0.05f * (float) ((t * 7) % 11) - 0.25f;
        fb->we[t] = 0.2f - 0.04f * (float) ((t * 5) % 9);
    }
    fb->b = (trn_batch_t){.tokens = fb->tokens,
                          .targets = fb->targets,
                          .n_tokens = 20,
                          .seq_offsets = fb->offsets,
                          .n_seqs = 2,
                          .temperature = 0.9f};
}

static double
fd_loss(trn_model_t *m, fd_batch_t *fb)
{
    float logp[20], ent[20];
    cr_assert_eq(trn_model_forward(m, &fb->b, logp, ent, NULL), LISA_OK);
    double l = 0;
    for (int t = 0; t < 20; t++)
        l += (double) fb->w[t] * logp[t] + (double) fb->we[t] * ent[t];
    return l;
}

/* Central difference of the loss along direction d of tensor i. */
static double
fd_dir(trn_model_t *m, fd_batch_t *fb, size_t i, const float *d, float h)
{
    float *p = trn_model_tensor_data(m, i);
    size_t n = trn_model_tensor_numel(m, i);
    float *save = malloc(n * sizeof *save);
    memcpy(save, p, n * sizeof *save);
    for (size_t k = 0; k < n; k++)
        p[k] = save[k] + h * d[k];
    double lp = fd_loss(m, fb);
    for (size_t k = 0; k < n; k++)
        p[k] = save[k] - h * d[k];
    double lm = fd_loss(m, fb);
    memcpy(p, save, n * sizeof *save);
    free(save);
    return (lp - lm) / (2.0 * (double) h);
}

static void
check_grads(bool tied, trn_family_t family)
{
    trn_config_t cfg = tiny_config(tied);
    cfg.family = family;
    trn_model_t *m = trn_model_new_random(&cfg, 1234, 0.3f, 2);
    fd_batch_t fb;
    fd_batch_init(&fb, 37);
    float logp[20];
    cr_assert_eq(trn_model_forward(m, &fb.b, logp, NULL, NULL), LISA_OK);
    trn_model_zero_grad(m);
    cr_assert_eq(trn_model_backward(m, fb.w, fb.we, NULL), LISA_OK);
    size_t nt = trn_model_num_tensors(m);
    size_t per_layer = family == TRN_FAMILY_QWEN3   ? 11
                       : family == TRN_FAMILY_QWEN2 ? 12
                                                    : 9;
    cr_assert_eq(nt, 2 + 2 * per_layer + (tied ? 0 : 1));
    unsigned seed = 99;
    for (size_t i = 0; i < nt; i++) {
        size_t n = trn_model_tensor_numel(m, i);
        const float *g = trn_model_tensor_grad(m, i);
        float *d = malloc(n * sizeof *d);
        /* along the gradient: the derivative is |g| */
        double gn = 0;
        for (size_t k = 0; k < n; k++)
            gn += (double) g[k] * g[k];
        gn = sqrt(gn);
        cr_assert_gt(gn, 1e-6, "%s has a zero gradient",
                     trn_model_tensor_name(m, i));
        for (size_t k = 0; k < n; k++)
            d[k] = (float) (g[k] / gn);
        double fd = fd_dir(m, &fb, i, d, 1e-2f);
        cr_assert(fabs(fd - gn) <= 2e-2 * gn + 2e-4,
                  "%s: along the gradient fd %.6g vs |g| %.6g",
                  trn_model_tensor_name(m, i), fd, gn);
        /* along a random direction */
        double an = 0, dn = 0;
        for (size_t k = 0; k < n; k++) {
            seed = seed * 1664525u + 1013904223u;
            d[k] = (float) ((double) (seed >> 8) / 16777216.0 - 0.5);
            dn += (double) d[k] * d[k];
        }
        dn = sqrt(dn);
        for (size_t k = 0; k < n; k++) {
            d[k] = (float) (d[k] / dn);
            an += (double) g[k] * d[k];
        }
        fd = fd_dir(m, &fb, i, d, 1e-2f);
        cr_assert(fabs(fd - an) <= 2e-2 * fabs(an) + 1e-3 * gn + 2e-4,
                  "%s: random direction fd %.6g vs analytic %.6g (|g| %.3g)",
                  trn_model_tensor_name(m, i), fd, an, gn);
        free(d);
    }
    trn_model_destroy(&m);
}

Test(trn_model, grads_match_finite_differences_tied)
{
    check_grads(true, TRN_FAMILY_QWEN3);
}

Test(trn_model, grads_match_finite_differences_untied)
{
    check_grads(false, TRN_FAMILY_QWEN3);
}

Test(trn_model, grads_match_finite_differences_llama)
{
    check_grads(true, TRN_FAMILY_LLAMA);
}

Test(trn_model, grads_match_finite_differences_qwen2_biases)
{
    check_grads(false, TRN_FAMILY_QWEN2);
}

Test(trn_model, logp_matches_logits_with_temperature)
{
    trn_config_t cfg = tiny_config(false);
    trn_model_t *m = trn_model_new_random(&cfg, 5, 0.2f, 1);
    int32_t tok[10], tgt[10];
    fill_tokens(tok, 10, 37, 3);
    for (int t = 0; t < 10; t++)
        tgt[t] = (t * 5) % 37;
    size_t off[2] = {0, 10};
    float T = 0.7f;
    trn_batch_t b = {tok, tgt, 10, off, 1, T, NULL};
    float logp[10], ent[10], logits[10 * 37];
    cr_assert_eq(trn_model_forward(m, &b, logp, ent, NULL), LISA_OK);
    cr_assert_eq(trn_model_logits(m, tok, 10, logits, NULL), LISA_OK);
    for (int t = 0; t < 10; t++) {
        double mx = -1e30, s = 0;
        for (int j = 0; j < 37; j++)
            mx = fmax(mx, logits[t * 37 + j] / T);
        for (int j = 0; j < 37; j++)
            s += exp(logits[t * 37 + j] / T - mx);
        double want = logits[t * 37 + tgt[t]] / T - mx - log(s);
        cr_assert(fabs(logp[t] - want) < 1e-5, "t=%d %g vs %g", t, logp[t],
                  want);
        double h = 0;
        for (int j = 0; j < 37; j++) {
            double lp = logits[t * 37 + j] / T - mx - log(s);
            h -= exp(lp) * lp;
        }
        cr_assert(fabs(ent[t] - h) < 1e-5, "t=%d entropy %g vs %g", t, ent[t],
                  h);
    }
    trn_model_destroy(&m);
}

Test(trn_model, kv_cache_decode_equals_full_forward)
{
    trn_config_t cfg = tiny_config(true);
    trn_model_t *m = trn_model_new_random(&cfg, 77, 0.2f, 2);
    int32_t a[12], b[9];
    fill_tokens(a, 12, 37, 11);
    fill_tokens(b, 9, 37, 12);
    float fa[12 * 37], fbl[9 * 37];
    cr_assert_eq(trn_model_logits(m, a, 12, fa, NULL), LISA_OK);
    cr_assert_eq(trn_model_logits(m, b, 9, fbl, NULL), LISA_OK);
    trn_kv_geom_t g = {.block_size = 4,
                       .n_blocks = 12,
                       .max_seqs = 3,
                       .max_blocks = 4,
                       .max_tokens = 16};
    trn_kv_t *kv = trn_kv_new(m, &g);
    cr_assert(kv);
    /* tables of shuffled blocks; prefill a (5 tokens, slot 2) and b (3
     * tokens, slot 0) together */
    int32_t ta[4] = {7, 1, 9, 3}, tb[4] = {0, 11, 5, 2};
    trn_gen_seq_t sq[2] = {
        {.slot = 2, .blocks = ta, .n_blocks = 4, .tokens = a, .n_new = 5},
        {.slot = 0, .blocks = tb, .n_blocks = 4, .tokens = b, .n_new = 3}};
    float out[2 * 37];
    cr_assert_eq(trn_model_step(m, kv, 2, sq, out, NULL), LISA_OK);
    for (int j = 0; j < 37; j++) {
        cr_assert_float_eq(out[j], fa[4 * 37 + j], 1e-4);
        cr_assert_float_eq(out[37 + j], fbl[2 * 37 + j], 1e-4);
    }
    /* decode both one token at a time, across block boundaries */
    for (size_t step = 0; step < 6; step++) {
        sq[0].start = 5 + step;
        sq[0].tokens = a + 5 + step;
        sq[0].n_new = 1;
        sq[1].start = 3 + step;
        sq[1].tokens = b + 3 + step;
        sq[1].n_new = 1;
        cr_assert_eq(trn_model_step(m, kv, 2, sq, out, NULL), LISA_OK);
        for (int j = 0; j < 37; j++) {
            cr_assert_float_eq(out[j], fa[(5 + step) * 37 + j], 1e-4);
            cr_assert_float_eq(out[37 + j], fbl[(3 + step) * 37 + j], 1e-4);
        }
    }
    /* a prefix shared: c's table starts with a's first two blocks (a's
     * positions 0..7) and continues in its own; its chunk a[8..11] after
     * the cached prefix gives a's logits */
    int32_t tc[4] = {7, 1, 4, 6};
    trn_gen_seq_t c = {.slot = 1,
                       .blocks = tc,
                       .n_blocks = 4,
                       .start = 8,
                       .tokens = a + 8,
                       .n_new = 3};
    cr_assert_eq(trn_model_step(m, kv, 1, &c, out, NULL), LISA_OK);
    for (int j = 0; j < 37; j++)
        cr_assert_float_eq(out[j], fa[10 * 37 + j], 1e-4);
    /* bounds: a table too short, a bad slot, a bad block, too many tokens
     * for a step, a slot twice */
    trn_err_t err;
    trn_gen_seq_t bad = {.slot = 0,
                         .blocks = tb,
                         .n_blocks = 4,
                         .start = 12,
                         .tokens = a,
                         .n_new = 8};
    cr_assert_eq(trn_model_step(m, kv, 1, &bad, out, &err), LISA_TOOLARGE);
    cr_assert(strstr(err.msg, "blocks") != NULL, "%s", err.msg);
    bad = (trn_gen_seq_t){
        .slot = 9, .blocks = tb, .n_blocks = 4, .tokens = a, .n_new = 1};
    cr_assert_eq(trn_model_step(m, kv, 1, &bad, out, &err), LISA_INVALID);
    int32_t tz[4] = {0, 12, 1, 2};
    bad = (trn_gen_seq_t){.slot = 0,
                          .blocks = tz,
                          .n_blocks = 4,
                          .start = 4,
                          .tokens = a,
                          .n_new = 1};
    cr_assert_eq(trn_model_step(m, kv, 1, &bad, out, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "block 12") != NULL, "%s", err.msg);
    int32_t big[17] = {0};
    bad = (trn_gen_seq_t){
        .slot = 0, .blocks = tb, .n_blocks = 4, .tokens = big, .n_new = 16};
    trn_gen_seq_t two[2] = {bad, bad};
    two[1].n_new = 1;
    two[1].slot = 1;
    cr_assert_eq(trn_model_step(m, kv, 2, two, out, &err), LISA_TOOLARGE);
    two[0].n_new = 1;
    two[1].slot = 0;
    cr_assert_eq(trn_model_step(m, kv, 2, two, out, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "twice") != NULL, "%s", err.msg);
    trn_kv_destroy(&kv);
    trn_model_destroy(&m);
}

Test(trn_model, packed_sequences_equal_separate_ones)
{
    trn_config_t cfg = tiny_config(false);
    trn_model_t *m = trn_model_new_random(&cfg, 8, 0.2f, 2);
    size_t np = trn_model_num_params(m);
    int32_t tok[15], tgt[15];
    fill_tokens(tok, 15, 37, 21);
    size_t off[3] = {0, 6, 15};
    for (size_t s = 0; s < 2; s++)
        for (size_t t = off[s]; t < off[s + 1]; t++)
            tgt[t] = t + 1 < off[s + 1] ? tok[t + 1] : -1;
    float w[15];
    for (int t = 0; t < 15; t++)
        w[t] = 0.1f * (float) (t % 4) - 0.12f;
    float lp[15], l1[15];
    trn_batch_t b = {tok, tgt, 15, off, 2, 1.0f, NULL};
    cr_assert_eq(trn_model_forward(m, &b, lp, NULL, NULL), LISA_OK);
    trn_model_zero_grad(m);
    cr_assert_eq(trn_model_backward(m, w, NULL, NULL), LISA_OK);
    float *gp = malloc(np * sizeof *gp);
    memcpy(gp, trn_model_grads(m), np * sizeof *gp);
    trn_model_zero_grad(m);
    for (size_t s = 0; s < 2; s++) {
        size_t o1[2] = {0, off[s + 1] - off[s]};
        trn_batch_t bs = {tok + off[s], tgt + off[s], o1[1], o1, 1, 1.0f, NULL};
        cr_assert_eq(trn_model_forward(m, &bs, l1, NULL, NULL), LISA_OK);
        for (size_t t = 0; t < o1[1]; t++)
            cr_assert_float_eq(l1[t], lp[off[s] + t], 1e-5);
        cr_assert_eq(trn_model_backward(m, w + off[s], NULL, NULL), LISA_OK);
    }
    const float *gs = trn_model_grads(m);
    for (size_t i = 0; i < np; i++)
        if (!(fabsf(gs[i] - gp[i]) <= 1e-5f + 1e-4f * fabsf(gp[i])))
            cr_assert(fabsf(gs[i] - gp[i]) <= 1e-5f + 1e-4f * fabsf(gp[i]),
                      "param %zu: %g vs %g", i, gs[i], gp[i]);
    free(gp);
    trn_model_destroy(&m);
}

Test(trn_model, chunked_logprobs_equal_unchunked)
{
    trn_config_t cfg = tiny_config(true);
    trn_model_t *m = trn_model_new_random(&cfg, 9, 0.2f, 2);
    size_t np = trn_model_num_params(m);
    fd_batch_t fb;
    fd_batch_init(&fb, 37);
    float l1[20], l2[20];
    trn_model_set_logits_chunk(m, 1000);
    cr_assert_eq(trn_model_forward(m, &fb.b, l1, NULL, NULL), LISA_OK);
    trn_model_zero_grad(m);
    cr_assert_eq(trn_model_backward(m, fb.w, NULL, NULL), LISA_OK);
    float *g1 = malloc(np * sizeof *g1);
    memcpy(g1, trn_model_grads(m), np * sizeof *g1);
    trn_model_set_logits_chunk(m, 3);
    cr_assert_eq(trn_model_forward(m, &fb.b, l2, NULL, NULL), LISA_OK);
    trn_model_zero_grad(m);
    cr_assert_eq(trn_model_backward(m, fb.w, NULL, NULL), LISA_OK);
    for (int t = 0; t < 20; t++)
        cr_assert_eq(l1[t], l2[t]);
    const float *g2 = trn_model_grads(m);
    for (size_t i = 0; i < np; i++)
        if (!(fabsf(g1[i] - g2[i]) <= 1e-6f + 1e-5f * fabsf(g1[i])))
            cr_assert(fabsf(g1[i] - g2[i]) <= 1e-6f + 1e-5f * fabsf(g1[i]));
    free(g1);
    trn_model_destroy(&m);
}

Test(trn_model, threads_do_not_change_results)
{
    trn_config_t cfg = tiny_config(false);
    trn_model_t *m1 = trn_model_new_random(&cfg, 10, 0.2f, 1);
    trn_model_t *m3 = trn_model_new_random(&cfg, 10, 0.2f, 3);
    fd_batch_t fb;
    fd_batch_init(&fb, 37);
    float l1[20], l3[20];
    cr_assert_eq(trn_model_forward(m1, &fb.b, l1, NULL, NULL), LISA_OK);
    cr_assert_eq(trn_model_forward(m3, &fb.b, l3, NULL, NULL), LISA_OK);
    trn_model_zero_grad(m1);
    trn_model_zero_grad(m3);
    cr_assert_eq(trn_model_backward(m1, fb.w, NULL, NULL), LISA_OK);
    cr_assert_eq(trn_model_backward(m3, fb.w, NULL, NULL), LISA_OK);
    cr_assert_arr_eq(l1, l3, sizeof l1);
    cr_assert_arr_eq(trn_model_grads(m1), trn_model_grads(m3),
                     trn_model_num_params(m1) * sizeof(float));
    trn_model_destroy(&m1);
    trn_model_destroy(&m3);
}

Test(trn_model, bad_batches_are_refused)
{
    trn_config_t cfg = tiny_config(true);
    trn_model_t *m = trn_model_new_random(&cfg, 1, 0.2f, 1);
    int32_t tok[4] = {1, 2, 3, 40}, tgt[4] = {2, 3, -1, -1};
    size_t off[2] = {0, 4};
    float lp[4];
    trn_err_t err;
    trn_batch_t b = {tok, tgt, 4, off, 1, 1.0f, NULL};
    cr_assert_eq(trn_model_forward(m, &b, lp, NULL, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "vocabulary"));
    tok[3] = 4;
    b.temperature = 0;
    cr_assert_eq(trn_model_forward(m, &b, lp, NULL, &err), LISA_INVALID);
    b.temperature = 1;
    size_t bad[2] = {0, 3};
    b.seq_offsets = bad;
    cr_assert_eq(trn_model_forward(m, &b, lp, NULL, &err), LISA_INVALID);
    float d[4] = {0};
    cr_assert_eq(trn_model_backward(m, d, NULL, &err), LISA_CONFLICT);
    size_t huge[2] = {0, (size_t) TRN_MAX_BATCH_TOKENS + 1};
    trn_batch_t hb = {tok, tgt, huge[1], huge, 1, 1.0f, NULL};
    cr_assert_eq(trn_model_forward(m, &hb, lp, NULL, &err), LISA_TOOLARGE);
    trn_kv_geom_t g0 = {
        .block_size = 8, .max_seqs = 2, .max_blocks = 8, .max_tokens = 8};
    trn_kv_geom_t g = g0;
    g.max_seqs = 0;
    cr_assert_null(trn_kv_new(m, &g));
    g = g0;
    g.block_size = 3; /* not a power of two */
    cr_assert_null(trn_kv_new(m, &g));
    g = g0;
    g.max_blocks = 10; /* max_position_embeddings 64 */
    cr_assert_null(trn_kv_new(m, &g));
    g = g0;
    g.max_seqs = (size_t) TRN_MAX_KV_SLOTS + 1;
    cr_assert_null(trn_kv_new(m, &g));
    g = g0; /* n_blocks 0: from the memory given */
    g.kv_bytes = 10 * trn_kv_block_bytes(m, 8);
    trn_kv_t *kv = trn_kv_new(m, &g);
    cr_assert(kv);
    cr_assert_eq(g.n_blocks, 10);
    cr_assert_eq(trn_kv_geom(kv)->n_blocks, 10);
    trn_kv_destroy(&kv);
    trn_model_destroy(&m);
}

Test(trn_model, save_load_round_trip)
{
    char dir[] = "/tmp/trn_model_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    trn_config_t cfg = tiny_config(false);
    trn_model_t *m = trn_model_new_random(&cfg, 3, 0.2f, 1);
    trn_err_t err;
    cr_assert_eq(trn_model_save(m, dir, TRN_SAVE_F32, &err), LISA_OK, "%s",
                 err.msg);
    trn_model_t *r = NULL;
    cr_assert_eq(trn_model_load(dir, 1, &r, &err), LISA_OK, "%s", err.msg);
    cr_assert_eq(trn_model_num_params(r), trn_model_num_params(m));
    cr_assert_arr_eq(trn_model_params(r), trn_model_params(m),
                     trn_model_num_params(m) * sizeof(float));
    const trn_config_t *rc = trn_model_config(r);
    cr_assert_eq(rc->hidden_size, 16);
    cr_assert_eq(rc->tie_word_embeddings, false);
    cr_assert_float_eq(rc->rms_norm_eps, 1e-6, 1e-12);
    trn_model_destroy(&r);

    /* bf16: every value is the nearest bf16 of the original */
    cr_assert_eq(trn_model_save(m, dir, TRN_SAVE_BF16, &err), LISA_OK);
    cr_assert_eq(trn_model_load(dir, 1, &r, &err), LISA_OK, "%s", err.msg);
    const float *a = trn_model_params(m), *b = trn_model_params(r);
    for (size_t i = 0; i < trn_model_num_params(m); i++)
        if (!(fabsf(a[i] - b[i]) <= fabsf(a[i]) * (1.0f / 256)))
            cr_assert(fabsf(a[i] - b[i]) <= fabsf(a[i]) * (1.0f / 256),
                      "%zu: %g vs %g", i, a[i], b[i]);
    trn_model_destroy(&r);

    /* a saved config.json reloads and mentions the architecture */
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "r");
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    cr_assert(strstr(buf, "Qwen3ForCausalLM"));
    cr_assert(strstr(buf, "\"bfloat16\""));
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
    trn_model_destroy(&m);
}

Test(trn_model, save_load_round_trip_families)
{
    trn_family_t fams[] = {TRN_FAMILY_LLAMA, TRN_FAMILY_QWEN2};
    for (size_t k = 0; k < 2; k++) {
        char dir[] = "/tmp/trn_model_XXXXXX";
        cr_assert_not_null(mkdtemp(dir));
        trn_config_t cfg = tiny_config(k == 0);
        cfg.family = fams[k];
        trn_model_t *m = trn_model_new_random(&cfg, 5, 0.2f, 1);
        trn_err_t err;
        cr_assert_eq(trn_model_save(m, dir, TRN_SAVE_F32, &err), LISA_OK, "%s",
                     err.msg);
        trn_model_t *r = NULL;
        cr_assert_eq(trn_model_load(dir, 1, &r, &err), LISA_OK, "%s", err.msg);
        cr_assert_eq(trn_model_config(r)->family, fams[k]);
        cr_assert_eq(trn_model_num_params(r), trn_model_num_params(m));
        cr_assert_arr_eq(trn_model_params(r), trn_model_params(m),
                         trn_model_num_params(m) * sizeof(float));
        cr_assert_eq(trn_model_tensor_find(r, "model.layers.0.self_attn"
                                              ".q_proj.bias") >= 0,
                     fams[k] == TRN_FAMILY_QWEN2);
        trn_model_destroy(&r);
        trn_model_destroy(&m);
        char path[256];
        snprintf(path, sizeof path, "%s/config.json", dir);
        unlink(path);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        unlink(path);
        rmdir(dir);
    }
}

/* The attention backward with each KV head's rows split over threads (a
 * long batch, fewer KV heads than threads) gives the gradients one thread
 * gives, rows of unequal work (two sequences) included. */
Test(trn_model, attention_backward_split_over_threads)
{
    trn_config_t cfg = tiny_config(false);
    cfg.num_hidden_layers = 1;
    cfg.num_key_value_heads = 1;
    cfg.max_position_embeddings = 4096;
    enum { T = 3000 };
    static int32_t tok[T], tgt[T];
    static float lp[2][T], dl[T];
    fill_tokens(tok, T, (int) cfg.vocab_size, 7);
    size_t off[3] = {0, 1100, T};
    for (size_t t = 0; t < T; t++) {
        tgt[t] = t + 1 == 1100 || t + 1 == T ? -1 : tok[t + 1];
        dl[t] = tgt[t] < 0 ? 0.0f : -1.0f / T;
    }
    trn_batch_t b = {.tokens = tok,
                     .targets = tgt,
                     .n_tokens = T,
                     .seq_offsets = off,
                     .n_seqs = 2,
                     .temperature = 1.0f};
    trn_model_t *m[2] = {trn_model_new_random(&cfg, 9, 0.3f, 1),
                         trn_model_new_random(&cfg, 9, 0.3f, 4)};
    trn_err_t err;
    for (int i = 0; i < 2; i++) {
        cr_assert(m[i]);
        trn_model_zero_grad(m[i]);
        cr_assert_eq(trn_model_forward(m[i], &b, lp[i], NULL, &err), LISA_OK,
                     "%s", err.msg);
        cr_assert_eq(trn_model_backward(m[i], dl, NULL, &err), LISA_OK, "%s",
                     err.msg);
    }
    cr_assert_eq(memcmp(lp[0], lp[1], sizeof lp[0]), 0);
    const char *proj[] = {"q", "k", "v"};
    for (int p = 0; p < 3; p++) {
        char name[64];
        snprintf(name, sizeof name, "model.layers.0.self_attn.%s_proj.weight",
                 proj[p]);
        long i = trn_model_tensor_find(m[0], name);
        cr_assert_geq(i, 0);
        const float *g1 = trn_model_tensor_grad(m[0], (size_t) i),
                    *g4 = trn_model_tensor_grad(m[1], (size_t) i);
        double d = 0, n = 0;
        for (size_t j = 0; j < trn_model_tensor_numel(m[0], (size_t) i); j++) {
            d += ((double) g1[j] - g4[j]) * ((double) g1[j] - g4[j]);
            n += (double) g1[j] * g1[j];
        }
        cr_assert_gt(n, 0.0, "%s: no gradient", name);
        cr_assert_lt(sqrt(d / n), 1e-5, "%s: rel. err %g", name, sqrt(d / n));
    }
    trn_model_destroy(&m[0]);
    trn_model_destroy(&m[1]);
}
