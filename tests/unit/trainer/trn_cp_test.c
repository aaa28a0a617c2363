/*
 * Context parallelism on the CPU reference (trn_cp_t in trn_model.h):
 * ranks, each a thread with its own copy of the model, share one batch's
 * positions under the balanced split and meet through an in-process sum;
 * their log-probs and entropies equal one model's over the whole batch and
 * their summed gradients equal its gradients. Also the split itself, a rank
 * with no rows, bad layouts and a sum that fails.
 */
#include "trn_model.h"

#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXW 4
#define MAXT 96

/* ---- an in-process group: every rank posts its buffer, all add them in
 * rank order (the same bits everywhere), then each takes the total ---- */

typedef struct {
    pthread_barrier_t bar;
    int world;
    float *slot[MAXW];
    int fail_at; /* the call at which every rank's sum fails (0: never) */
    int calls[MAXW];
} group_t;

typedef struct {
    group_t *g;
    int rank;
} member_t;

static lisa_rc_t
group_sum(void *self, float *v, size_t n, trn_err_t *err)
{
    member_t *me = self;
    group_t *g = me->g;
    if (g->fail_at && ++g->calls[me->rank] == g->fail_at) {
        if (err)
            snprintf(err->msg, sizeof err->msg, "peer gone");
        return LISA_UNAVAILABLE;
    }
    float *tot = calloc(n ? n : 1, sizeof *tot);
    g->slot[me->rank] = v;
    pthread_barrier_wait(&g->bar);
    for (int r = 0; r < g->world; r++)
        for (size_t i = 0; i < n; i++)
            tot[i] += g->slot[r][i];
    pthread_barrier_wait(&g->bar); /* nobody reads the slots any more */
    memcpy(v, tot, n * sizeof *v);
    free(tot);
    return LISA_OK;
}

/* ---- a batch and a loss ------------------------------------------------ */

typedef struct {
    int32_t tokens[MAXT], targets[MAXT];
    size_t offsets[8];
    size_t n_seqs, T;
    float dlogp[MAXT], dent[MAXT];
} batch_t;

static void
batch_init(batch_t *b, const size_t *lens, size_t n_seqs, int V)
{
    unsigned seed = 17;
    b->n_seqs = n_seqs;
    b->offsets[0] = 0;
    for (size_t s = 0; s < n_seqs; s++)
        b->offsets[s + 1] = b->offsets[s] + lens[s];
    b->T = b->offsets[n_seqs];
    cr_assert_leq(b->T, MAXT);
    for (size_t t = 0; t < b->T; t++) {
        seed = seed * 1103515245u + 12345u;
        b->tokens[t] = (int32_t) ((seed >> 8) % (unsigned) V);
    }
    for (size_t s = 0; s < n_seqs; s++)
        for (size_t t = b->offsets[s]; t < b->offsets[s + 1]; t++) {
            bool last = t + 1 == b->offsets[s + 1];
            /* every fifth position unscored, as prompts are */
            b->targets[t] = last || t % 5 == 2 ? -1 : b->tokens[t + 1];
            b->dlogp[t] =
                b->targets[t] < 0 ? 0 : 0.1f - 0.03f * (float) (t % 7);
            b->dent[t] = b->targets[t] < 0 ? 0 : 0.02f * (float) (t % 3);
        }
}

static trn_config_t
cfg_of(trn_family_t family, bool tied)
{
    trn_config_t c = {.hidden_size = 16,
                      .intermediate_size = 24,
                      .num_hidden_layers = 2,
                      .num_attention_heads = 4,
                      .num_key_value_heads = 2,
                      .head_dim = 8,
                      .vocab_size = 41,
                      .max_position_embeddings = 128,
                      .rms_norm_eps = 1e-6,
                      .rope_theta = 10000.0,
                      .tie_word_embeddings = tied,
                      .family = family};
    return c;
}

/* ---- one rank ------------------------------------------------------------ */

typedef struct {
    member_t me;
    const trn_config_t *cfg;
    const batch_t *b;
    int world;
    size_t rows[MAXT], n;
    float logp[MAXT], ent[MAXT];
    float *grads; /* the rank's parameter gradients (owned) */
    lisa_rc_t fwd_rc, bwd_rc;
    trn_err_t err;
} rank_t;

static void *
rank_main(void *arg)
{
    rank_t *r = arg;
    const batch_t *b = r->b;
    trn_model_t *m = trn_model_new_random(r->cfg, 4242, 0.3f, 1);
    cr_assert(m);
    trn_batch_t whole = {.tokens = b->tokens,
                         .targets = b->targets,
                         .n_tokens = b->T,
                         .seq_offsets = b->offsets,
                         .n_seqs = b->n_seqs,
                         .temperature = 0.8f};
    int32_t tok[MAXT], tgt[MAXT];
    float dl[MAXT], de[MAXT];
    trn_cp_t cp = {.self = &r->me, .sum = group_sum};
    trn_batch_t mb;
    r->n =
        trn_cp_part(&whole, r->me.rank, r->world, r->rows, tok, tgt, &cp, &mb);
    for (size_t i = 0; i < r->n; i++) {
        dl[i] = b->dlogp[r->rows[i]];
        de[i] = b->dent[r->rows[i]];
    }
    trn_model_zero_grad(m);
    r->fwd_rc = trn_model_forward(m, &mb, r->logp, r->ent, &r->err);
    if (r->fwd_rc == LISA_OK)
        r->bwd_rc = trn_model_backward(m, dl, de, &r->err);
    size_t P = trn_model_num_params(m);
    r->grads = malloc(P * sizeof(float));
    memcpy(r->grads, trn_model_grads(m), P * sizeof(float));
    trn_model_destroy(&m);
    return NULL;
}

/* Runs `world` ranks over the batch; ranks[] gets their results. */
static void
run_ranks(group_t *g, rank_t *ranks, int world, const trn_config_t *cfg,
          const batch_t *b)
{
    pthread_t th[MAXW];
    g->world = world;
    pthread_barrier_init(&g->bar, NULL, (unsigned) world);
    for (int k = 0; k < world; k++) {
        ranks[k] = (rank_t){.me = {g, k}, .cfg = cfg, .b = b, .world = world};
        pthread_create(&th[k], NULL, rank_main, &ranks[k]);
    }
    for (int k = 0; k < world; k++)
        pthread_join(th[k], NULL);
    pthread_barrier_destroy(&g->bar);
}

/* One model over the whole batch, then `world` ranks: same log-probs,
 * entropies and summed gradients. */
static void
check_matches(trn_family_t family, bool tied, int world, const size_t *lens,
              size_t n_seqs)
{
    trn_config_t cfg = cfg_of(family, tied);
    batch_t b;
    batch_init(&b, lens, n_seqs, (int) cfg.vocab_size);

    trn_model_t *m = trn_model_new_random(&cfg, 4242, 0.3f, 1);
    trn_batch_t whole = {.tokens = b.tokens,
                         .targets = b.targets,
                         .n_tokens = b.T,
                         .seq_offsets = b.offsets,
                         .n_seqs = n_seqs,
                         .temperature = 0.8f};
    float logp[MAXT], ent[MAXT];
    trn_err_t err;
    trn_model_zero_grad(m);
    cr_assert_eq(trn_model_forward(m, &whole, logp, ent, &err), LISA_OK, "%s",
                 err.msg);
    cr_assert_eq(trn_model_backward(m, b.dlogp, b.dent, &err), LISA_OK, "%s",
                 err.msg);
    size_t P = trn_model_num_params(m);
    const float *gref = trn_model_grads(m);

    group_t g = {0};
    rank_t ranks[MAXW];
    run_ranks(&g, ranks, world, &cfg, &b);
    size_t covered = 0;
    for (int k = 0; k < world; k++) {
        rank_t *r = &ranks[k];
        cr_assert_eq(r->fwd_rc, LISA_OK, "rank %d: %s", k, r->err.msg);
        cr_assert_eq(r->bwd_rc, LISA_OK, "rank %d: %s", k, r->err.msg);
        covered += r->n;
        for (size_t i = 0; i < r->n; i++) {
            size_t t = r->rows[i];
            cr_assert_float_eq(r->logp[i], logp[t], 2e-5f,
                               "rank %d row %zu: %g vs %g", k, t,
                               (double) r->logp[i], (double) logp[t]);
            cr_assert_float_eq(r->ent[i], ent[t], 2e-5f, "entropy at %zu", t);
        }
    }
    cr_assert_eq(covered, b.T);
    double gmax = 0, dmax = 0;
    for (size_t i = 0; i < P; i++) {
        double s = 0;
        for (int k = 0; k < world; k++)
            s += ranks[k].grads[i];
        gmax = fmax(gmax, fabs(gref[i]));
        dmax = fmax(dmax, fabs(s - gref[i]));
    }
    cr_assert_gt(gmax, 1e-3, "the loss has a gradient");
    cr_assert_lt(dmax, 1e-4 * gmax, "summed gradients off by %g (max %g)", dmax,
                 gmax);
    for (int k = 0; k < world; k++)
        free(ranks[k].grads);
    trn_model_destroy(&m);
}

Test(trn_cp, split_is_balanced_and_covers_every_row)
{
    size_t offs[4] = {0, 37, 60, 63}; /* lengths 37, 23 and 3 */
    for (int world = 1; world <= MAXW; world++) {
        int seen[63] = {0};
        size_t counts[MAXW];
        for (int r = 0; r < world; r++) {
            size_t rows[63];
            counts[r] = trn_cp_rows(offs, 3, r, world, rows);
            for (size_t i = 0; i < counts[r]; i++) {
                cr_assert_lt(rows[i], 63);
                if (i > 0)
                    cr_assert_gt(rows[i], rows[i - 1]);
                seen[rows[i]]++;
            }
        }
        for (int t = 0; t < 63; t++)
            cr_assert_eq(seen[t], 1, "world %d: row %d taken %d times", world,
                         t, seen[t]);
        for (int r = 0; r < world; r++) /* at most one more per chunk */
            cr_assert_leq(counts[r], 63 / world + 6, "world %d rank %d: %zu",
                          world, r, counts[r]);
    }
    /* world 2, one sequence of 8: chunks of 2; rank 0 has chunks 0 and 3 */
    size_t one[2] = {0, 8}, rows[8];
    cr_assert_eq(trn_cp_rows(one, 1, 0, 2, rows), 4);
    size_t want[4] = {0, 1, 6, 7};
    cr_assert_arr_eq(rows, want, sizeof want);
    cr_assert_eq(trn_cp_rows(one, 1, 2, 2, rows), 0, "no such rank");
}

Test(trn_cp, heads_are_dealt_in_even_runs_each_to_one_rank)
{
    for (int Hk = 1; Hk <= 8; Hk++)
        for (int world = 1; world <= 9; world++) {
            int next = 0, lo = Hk, hi = 0;
            for (int r = 0; r < world; r++) {
                int k0, k1;
                trn_cp_heads(Hk, r, world, &k0, &k1);
                cr_assert_eq(k0, next, "Hk %d world %d rank %d", Hk, world, r);
                cr_assert_geq(k1, k0);
                next = k1;
                lo = k1 - k0 < lo ? k1 - k0 : lo;
                hi = k1 - k0 > hi ? k1 - k0 : hi;
            }
            cr_assert_eq(next, Hk, "Hk %d world %d: every head", Hk, world);
            cr_assert_leq(hi - lo, 1, "Hk %d world %d: even", Hk, world);
        }
    int k0 = -1, k1 = -1; /* the 4B shape's 8 KV heads over 4 GPUs */
    trn_cp_heads(8, 3, 4, &k0, &k1);
    cr_assert(k0 == 6 && k1 == 8);
    trn_cp_heads(8, 4, 4, &k0, &k1); /* no such rank: none */
    cr_assert(k0 == 0 && k1 == 0);
}

Test(trn_cp, two_ranks_match_one_model_qwen3)
{
    size_t lens[2] = {29, 19};
    check_matches(TRN_FAMILY_QWEN3, true, 2, lens, 2);
}

Test(trn_cp, three_ranks_match_one_model_qwen2_untied)
{
    size_t lens[3] = {31, 17, 12};
    check_matches(TRN_FAMILY_QWEN2, false, 3, lens, 3);
}

Test(trn_cp, four_ranks_with_an_empty_rank_match_llama)
{
    /* a 5-token sequence in 8 chunks: rank 2 has no rows at all, and still
     * takes part in every gather */
    size_t lens[1] = {5};
    check_matches(TRN_FAMILY_LLAMA, true, 4, lens, 1);
    size_t rows[5], offs[2] = {0, 5};
    cr_assert_eq(trn_cp_rows(offs, 1, 2, 4, rows), 0);
}

Test(trn_cp, one_rank_group_is_the_plain_model)
{
    size_t lens[2] = {40, 20};
    check_matches(TRN_FAMILY_QWEN3, false, 1, lens, 2);
}

Test(trn_cp, a_failing_sum_fails_the_forward)
{
    trn_config_t cfg = cfg_of(TRN_FAMILY_QWEN3, true);
    batch_t b;
    size_t lens[1] = {24};
    batch_init(&b, lens, 1, (int) cfg.vocab_size);
    group_t g = {.fail_at = 2}; /* the second layer's gather */
    rank_t ranks[2];
    run_ranks(&g, ranks, 2, &cfg, &b);
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(ranks[k].fwd_rc, LISA_UNAVAILABLE);
        cr_assert_str_eq(ranks[k].err.msg, "peer gone");
        free(ranks[k].grads);
    }
}

Test(trn_cp, bad_layouts_are_refused)
{
    trn_config_t cfg = cfg_of(TRN_FAMILY_QWEN3, true);
    trn_model_t *m = trn_model_new_random(&cfg, 1, 0.3f, 1);
    group_t g = {.world = 1};
    member_t me = {&g, 0};
    size_t offs[2] = {0, 10};
    int32_t tok[3] = {1, 2, 3}, tgt[3] = {2, 3, -1};
    float logp[3];
    trn_err_t err;
    size_t unordered[3] = {4, 2, 7}, outside[3] = {1, 2, 10};
    trn_cp_t cp = {.n_global = 10, .self = &me, .sum = group_sum};
    trn_batch_t mb = {.tokens = tok,
                      .targets = tgt,
                      .n_tokens = 3,
                      .seq_offsets = offs,
                      .n_seqs = 1,
                      .temperature = 1.0f,
                      .cp = &cp};
    const size_t *bad[2] = {unordered, outside};
    for (int i = 0; i < 2; i++) {
        cp.rows = bad[i];
        cr_assert_eq(trn_model_forward(m, &mb, logp, NULL, &err), LISA_INVALID);
        cr_assert(strstr(err.msg, "context-parallel row"), "%s", err.msg);
    }
    /* seq_offsets must describe the whole batch, not the local rows */
    size_t rows[3] = {0, 1, 2}, local[2] = {0, 3};
    cp.rows = rows;
    mb.seq_offsets = local;
    cr_assert_eq(trn_model_forward(m, &mb, logp, NULL, &err), LISA_INVALID);
    /* no sum */
    cp.sum = NULL;
    mb.seq_offsets = offs;
    cr_assert_eq(trn_model_forward(m, &mb, logp, NULL, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "needs a sum"), "%s", err.msg);
    trn_model_destroy(&m);
}
