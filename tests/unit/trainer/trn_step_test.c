/*
 * trn_step tests: GRPO steps on a tiny random Qwen3. An on-policy step has
 * ratio 1; repeated steps raise the log-probability of the high-scoring
 * responses of each group and lower the others; micro-batching does not
 * change the gradient; bypass mode uses the engine's log-probs; KL against
 * a reference model starts at zero. The first test is the usage example.
 */
#include "trn_step.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    NSEQ = 8,
    PROMPT = 3,
    OBS = 2,
    RESP = 3,
    LEN = PROMPT + RESP + OBS + RESP
};

/* Two prompts x four responses. Each trajectory: prompt (3), sampled (3),
 * observation (2, not sampled), sampled (3). */
typedef struct {
    size_t off[NSEQ + 1];
    int32_t tok[NSEQ * LEN];
    uint8_t mask[NSEQ * LEN];
    float roll[NSEQ * LEN];
    int64_t group[NSEQ];
    double score[NSEQ];
    trn_rollouts_t r;
} data_t;

static trn_config_t
tiny(void)
{
    trn_config_t c = {.hidden_size = 16,
                      .intermediate_size = 24,
                      .num_hidden_layers = 2,
                      .num_attention_heads = 4,
                      .num_key_value_heads = 2,
                      .head_dim = 8,
                      .vocab_size = 29,
                      .max_position_embeddings = 64,
                      .rms_norm_eps = 1e-6,
                      .rope_theta = 1e4,
                      .tie_word_embeddings = true};
    return c;
}

static void
data_init(data_t *d)
{
    unsigned seed = 17;
    for (size_t s = 0; s < NSEQ; s++) {
        d->off[s] = s * LEN;
        d->group[s] = (int64_t) (s / 4);
        d->score[s] = (s % 4 == 0) ? 1.0 : 0.0; /* one winner per group */
        for (size_t i = 0; i < LEN; i++) {
            seed = seed * 1103515245u + 12345u;
            size_t t = s * LEN + i;
            d->tok[t] = (int32_t) ((seed >> 8) % 29);
            if (i < PROMPT)
                d->tok[t] = (int32_t) (s / 4 * 3 + i); /* shared prompt */
            bool obs = i >= PROMPT + RESP && i < PROMPT + RESP + OBS;
            d->mask[t] = i >= PROMPT && !obs;
        }
    }
    d->off[NSEQ] = NSEQ * LEN;
    d->r = (trn_rollouts_t){.n_seqs = NSEQ,
                            .seq_offsets = d->off,
                            .tokens = d->tok,
                            .mask = d->mask,
                            .rollout_logp = NULL,
                            .group = d->group,
                            .score = d->score};
}

/* Sum of log-probs of the sampled tokens of each trajectory. */
static void
seq_logp(trn_model_t *m, const data_t *d, double *out)
{
    int32_t tgt[NSEQ * LEN];
    float lp[NSEQ * LEN];
    for (size_t t = 0; t < NSEQ * LEN; t++)
        tgt[t] = (t % LEN + 1 < LEN && d->mask[t + 1]) ? d->tok[t + 1] : -1;
    trn_batch_t b = {d->tok, tgt, NSEQ * LEN, d->off, NSEQ, 1.0f, NULL};
    cr_assert_eq(trn_model_forward(m, &b, lp, NULL, NULL), LISA_OK);
    for (size_t s = 0; s < NSEQ; s++) {
        out[s] = 0;
        for (size_t i = 0; i < LEN; i++)
            out[s] += lp[s * LEN + i];
    }
}

Test(trn_step, usage)
{
    trn_config_t cfg = tiny();
    trn_model_t *m = trn_model_new_random(&cfg, 3, 0.2f, 2);
    trn_adamw_t *opt = trn_adamw_new(trn_model_num_params(m));
    data_t d;
    data_init(&d);
    trn_step_cfg_t sc = trn_step_defaults(); /* GRPO, token-mean */
    sc.optim.lr = 1e-2;
    trn_step_out_t out;
    trn_err_t err;
    cr_assert_eq(trn_step_run(m, NULL, opt, &sc, &d.r, &out, &err), LISA_OK,
                 "%s", err.msg);
    cr_assert_eq(out.tokens, NSEQ * 2 * RESP); /* observations excluded */
    cr_assert_eq(out.ppo_kl, 0.0);             /* on-policy: ratio 1 */
    cr_assert_eq(out.pg_clipfrac, 0.0);
    cr_assert_gt(out.grad_norm, 0.0);
    cr_assert_gt(out.entropy, 0.0);
    cr_assert_not(out.skipped);
    cr_assert_eq(out.micro_batches, 1);
    cr_assert_eq(trn_adamw_steps(opt), 1);
    trn_adamw_destroy(&opt);
    trn_model_destroy(&m);
}

Test(trn_step, no_learning_signal_no_update)
{
    trn_config_t cfg = tiny();
    trn_model_t *m = trn_model_new_random(&cfg, 3, 0.2f, 2);
    size_t np = trn_model_num_params(m);
    trn_adamw_t *opt = trn_adamw_new(np);
    data_t d;
    data_init(&d);
    for (size_t s = 0; s < NSEQ; s++)
        d.score[s] = 1.0; /* every group all-equal: every advantage 0 */
    trn_step_cfg_t sc = trn_step_defaults();
    sc.optim.lr = 1e-2;
    float *before = malloc(np * sizeof *before);
    memcpy(before, trn_model_params(m), np * sizeof *before);
    trn_step_out_t out;
    trn_err_t err;
    cr_assert_eq(trn_step_run(m, NULL, opt, &sc, &d.r, &out, &err), LISA_OK,
                 "%s", err.msg);
    cr_assert(out.skipped);
    cr_assert_eq(trn_adamw_steps(opt), 0);
    cr_assert_eq(memcmp(before, trn_model_params(m), np * sizeof *before), 0);
    cr_assert_gt(out.entropy, 0.0); /* the step's figures are still there */
    /* an entropy term is a signal of its own */
    sc.loss.entropy_coef = 0.01;
    cr_assert_eq(trn_step_run(m, NULL, opt, &sc, &d.r, &out, &err), LISA_OK,
                 "%s", err.msg);
    cr_assert_not(out.skipped);
    cr_assert_eq(trn_adamw_steps(opt), 1);
    cr_assert_neq(memcmp(before, trn_model_params(m), np * sizeof *before), 0);
    free(before);
    trn_adamw_destroy(&opt);
    trn_model_destroy(&m);
}

Test(trn_step, training_moves_probability_to_winners)
{
    trn_config_t cfg = tiny();
    trn_model_t *m = trn_model_new_random(&cfg, 4, 0.2f, 2);
    trn_adamw_t *opt = trn_adamw_new(trn_model_num_params(m));
    data_t d;
    data_init(&d);
    double before[NSEQ], after[NSEQ];
    seq_logp(m, &d, before);
    trn_step_cfg_t sc = trn_step_defaults();
    sc.optim.lr = 3e-3;
    trn_step_out_t out;
    for (int i = 0; i < 8; i++)
        cr_assert_eq(trn_step_run(m, NULL, opt, &sc, &d.r, &out, NULL),
                     LISA_OK);
    seq_logp(m, &d, after);
    for (size_t s = 0; s < NSEQ; s++) {
        if (d.score[s] > 0)
            cr_assert_gt(after[s], before[s] + 0.5, "winner %zu: %g -> %g", s,
                         before[s], after[s]);
        else
            cr_assert_lt(after[s], before[s], "loser %zu: %g -> %g", s,
                         before[s], after[s]);
    }
    trn_adamw_destroy(&opt);
    trn_model_destroy(&m);
}

Test(trn_step, micro_batching_keeps_the_gradient)
{
    trn_config_t cfg = tiny();
    static const char *aggs[] = {"token-mean", "seq-mean-token-mean",
                                 "seq-mean-token-sum-norm"};
    for (size_t a = 0; a < 3; a++) {
        trn_model_t *m1 = trn_model_new_random(&cfg, 5, 0.2f, 1);
        trn_model_t *m2 = trn_model_new_random(&cfg, 5, 0.2f, 1);
        size_t np = trn_model_num_params(m1);
        trn_adamw_t *o1 = trn_adamw_new(np), *o2 = trn_adamw_new(np);
        data_t d;
        data_init(&d);
        trn_step_cfg_t sc = trn_step_defaults();
        cr_assert_eq(trn_agg_parse(aggs[a], &sc.loss.agg), LISA_OK);
        sc.optim.lr = 0; /* compare the gradients left in the models */
        sc.grad_clip = 1e9;
        trn_step_out_t out1, out2;
        cr_assert_eq(trn_step_run(m1, NULL, o1, &sc, &d.r, &out1, NULL),
                     LISA_OK);
        sc.micro_tokens = 2 * LEN + 1; /* two trajectories per micro-batch */
        cr_assert_eq(trn_step_run(m2, NULL, o2, &sc, &d.r, &out2, NULL),
                     LISA_OK);
        cr_assert_eq(out1.micro_batches, 1);
        cr_assert_eq(out2.micro_batches, 4);
        cr_assert_float_eq(out1.loss, out2.loss, 1e-6);
        const float *g1 = trn_model_grads(m1), *g2 = trn_model_grads(m2);
        for (size_t i = 0; i < np; i++)
            if (!(fabsf(g1[i] - g2[i]) <= 1e-6f + 1e-4f * fabsf(g1[i])))
                cr_assert(fabsf(g1[i] - g2[i]) <= 1e-6f + 1e-4f * fabsf(g1[i]),
                          "%s: param %zu %g vs %g", aggs[a], i, g1[i], g2[i]);
        trn_adamw_destroy(&o1);
        trn_adamw_destroy(&o2);
        trn_model_destroy(&m1);
        trn_model_destroy(&m2);
    }
}

Test(trn_step, bypass_uses_engine_logprobs_and_kl_starts_at_zero)
{
    trn_config_t cfg = tiny();
    trn_model_t *m = trn_model_new_random(&cfg, 6, 0.2f, 1);
    trn_model_t *ref = trn_model_new_random(&cfg, 6, 0.2f, 1);
    trn_adamw_t *opt = trn_adamw_new(trn_model_num_params(m));
    data_t d;
    data_init(&d);
    /* engine log-probs: the model's own, minus 0.1 */
    int32_t tgt[NSEQ * LEN];
    float lp[NSEQ * LEN];
    for (size_t t = 0; t < NSEQ * LEN; t++)
        tgt[t] = (t % LEN + 1 < LEN && d.mask[t + 1]) ? d.tok[t + 1] : -1;
    trn_batch_t b = {d.tok, tgt, NSEQ * LEN, d.off, NSEQ, 1.0f, NULL};
    cr_assert_eq(trn_model_forward(m, &b, lp, NULL, NULL), LISA_OK);
    for (size_t t = 0; t < NSEQ * LEN; t++)
        d.roll[t] = d.mask[t] ? lp[t - 1] - 0.1f : 0.0f;
    d.r.rollout_logp = d.roll;
    trn_step_cfg_t sc = trn_step_defaults();
    sc.bypass = true;
    sc.optim.lr = 1e-2;
    sc.loss.kl_coef = 0.001;
    cr_assert_eq(trn_kl_parse("low_var_kl", &sc.loss.kl_type), LISA_OK);
    trn_step_out_t out;
    trn_err_t err;
    cr_assert_eq(trn_step_run(m, ref, opt, &sc, &d.r, &out, &err), LISA_OK,
                 "%s", err.msg);
    cr_assert_float_eq(out.ppo_kl, -0.1, 1e-5); /* old - new */
    cr_assert_float_eq(out.kl_loss, 0.0, 1e-9); /* same weights as ref */
    /* after the update the policy has moved away from the reference */
    cr_assert_eq(trn_step_run(m, ref, opt, &sc, &d.r, &out, &err), LISA_OK);
    cr_assert_gt(out.kl_loss, 1e-7);
    /* truncated IS weights instead of bypass: ratio 1, weights e^0.1 */
    sc.bypass = false;
    sc.is_threshold = 2.0;
    cr_assert_eq(trn_step_run(m, ref, opt, &sc, &d.r, &out, &err), LISA_OK);
    cr_assert_eq(out.ppo_kl, 0.0);
    trn_adamw_destroy(&opt);
    trn_model_destroy(&m);
    trn_model_destroy(&ref);
}

Test(trn_step, bad_rollouts_are_refused)
{
    trn_config_t cfg = tiny();
    trn_model_t *m = trn_model_new_random(&cfg, 7, 0.2f, 1);
    trn_adamw_t *opt = trn_adamw_new(trn_model_num_params(m));
    data_t d;
    data_init(&d);
    trn_step_cfg_t sc = trn_step_defaults();
    trn_step_out_t out;
    trn_err_t err;
    d.mask[LEN] = 1; /* first token of trajectory 1 */
    cr_assert_eq(trn_step_run(m, NULL, opt, &sc, &d.r, &out, &err),
                 LISA_INVALID);
    cr_assert(strstr(err.msg, "starts with a sampled token"));
    d.mask[LEN] = 0;
    sc.loss.kl_coef = 0.1;
    cr_assert_eq(trn_step_run(m, NULL, opt, &sc, &d.r, &out, &err),
                 LISA_INVALID);
    sc.loss.kl_coef = 0;
    sc.bypass = true;
    cr_assert_eq(trn_step_run(m, NULL, opt, &sc, &d.r, &out, &err),
                 LISA_INVALID);
    sc.bypass = false;
    d.tok[5] = 99; /* outside the vocabulary */
    cr_assert_eq(trn_step_run(m, NULL, opt, &sc, &d.r, &out, &err),
                 LISA_INVALID);
    cr_assert_eq(trn_adamw_steps(opt), 0);
    trn_adamw_destroy(&opt);
    trn_model_destroy(&m);
}

Test(trn_step, old_logprobs_for_several_mini_batches)
{
    trn_config_t cfg = tiny();
    trn_model_t *m = trn_model_new_random(&cfg, 8, 0.2f, 2);
    trn_adamw_t *opt = trn_adamw_new(trn_model_num_params(m));
    data_t d;
    data_init(&d);
    trn_step_cfg_t sc = trn_step_defaults();
    sc.optim.lr = 1e-2;
    sc.micro_tokens = LEN; /* one trajectory per micro-batch */
    /* old log-probs of the whole batch, before any update */
    float old[NSEQ * LEN];
    trn_err_t err;
    cr_assert_eq(trn_step_logprobs(m, &sc, &d.r, old, &err), LISA_OK, "%s",
                 err.msg);
    double per_seq[NSEQ];
    seq_logp(m, &d, per_seq);
    for (size_t s = 0; s < NSEQ; s++) {
        double sum = 0;
        for (size_t i = 0; i < LEN; i++) {
            size_t t = s * LEN + i;
            if (!d.mask[t] && old[t] != 0.0f)
                cr_assert_fail("unmasked token %zu has a log-prob", t);
            sum += old[t];
        }
        cr_assert_float_eq(sum, per_seq[s], 1e-4);
    }
    /* two mini-batches of one group each, against the same old log-probs */
    d.r.old_logp = old;
    trn_rollouts_t half = d.r;
    half.n_seqs = NSEQ / 2;
    trn_step_out_t out;
    cr_assert_eq(trn_step_run(m, NULL, opt, &sc, &half, &out, &err), LISA_OK,
                 "%s", err.msg);
    cr_assert_float_eq(out.ppo_kl, 0.0, 1e-6); /* nothing updated yet */
    size_t off2[NSEQ / 2 + 1];
    for (size_t s = 0; s <= NSEQ / 2; s++)
        off2[s] = d.off[NSEQ / 2 + s] - d.off[NSEQ / 2];
    half.seq_offsets = off2;
    half.tokens = d.tok + NSEQ / 2 * LEN;
    half.mask = d.mask + NSEQ / 2 * LEN;
    half.old_logp = old + NSEQ / 2 * LEN;
    half.group = d.group + NSEQ / 2;
    half.score = d.score + NSEQ / 2;
    cr_assert_eq(trn_step_run(m, NULL, opt, &sc, &half, &out, &err), LISA_OK,
                 "%s", err.msg);
    cr_assert_gt(fabs(out.ppo_kl), 1e-6); /* the policy moved in between */
    cr_assert_eq(trn_adamw_steps(opt), 2);
    trn_adamw_destroy(&opt);
    trn_model_destroy(&m);
}

/* A model that only counts calls, for the step's call order. */
typedef struct {
    int backwards, hints, backwards_after_hint, updates;
} counter_t;

static lisa_rc_t
cnt_forward(void *self, const trn_batch_t *b, float *logp, float *ent,
            trn_err_t *err)
{
    (void) self, (void) err;
    for (size_t t = 0; t < b->n_tokens; t++) {
        logp[t] = -1.0f;
        if (ent)
            ent[t] = 0.5f;
    }
    return LISA_OK;
}

static lisa_rc_t
cnt_backward(void *self, const float *dlogp, const float *dent, trn_err_t *err)
{
    (void) dlogp, (void) dent, (void) err;
    counter_t *c = self;
    c->backwards++;
    if (c->hints)
        c->backwards_after_hint++;
    return LISA_OK;
}

static void
cnt_zero(void *self)
{
    (void) self;
}

static void
cnt_last(void *self)
{
    ((counter_t *) self)->hints++;
}

static lisa_rc_t
cnt_update(void *self, const trn_step_cfg_t *cfg, double *grad_norm,
           bool *skipped, trn_err_t *err)
{
    (void) cfg, (void) err;
    ((counter_t *) self)->updates++;
    *grad_norm = 0;
    *skipped = false;
    return LISA_OK;
}

/* Each rank's sum of one: the values stay as they are. */
static lisa_rc_t
cnt_sum(void *self, double *v, size_t n, trn_err_t *err)
{
    (void) self, (void) v, (void) n, (void) err;
    return LISA_OK;
}

Test(trn_step, last_backward_hint_precedes_the_ranks_last_micro_batch)
{
    data_t d;
    data_init(&d);
    trn_step_cfg_t sc = trn_step_defaults();
    sc.micro_tokens = 2 * LEN; /* four micro-batches of two trajectories */
    /* two ranks: two micro-batches each, the hint before the second; six
     * ranks: the last two have none, so no hint, and still an update */
    int worlds[] = {1, 2, 6};
    for (size_t w = 0; w < 3; w++) {
        for (int rank = 0; rank < worlds[w]; rank++) {
            counter_t c = {0};
            trn_step_model_t m = {.self = &c,
                                  .forward = cnt_forward,
                                  .backward = cnt_backward,
                                  .zero_grad = cnt_zero,
                                  .last_backward = cnt_last,
                                  .update = cnt_update};
            trn_comm_t comm = {rank, worlds[w], NULL, cnt_sum};
            sc.comm = &comm;
            trn_step_out_t out;
            cr_assert_eq(trn_step_run_with(&m, NULL, &sc, &d.r, &out, NULL),
                         LISA_OK);
            int want = worlds[w] == 1 ? 4 : worlds[w] == 2 ? 2 : rank < 4;
            cr_assert_eq(c.backwards, want, "world %d rank %d", worlds[w],
                         rank);
            cr_assert_eq(c.hints, want > 0, "world %d rank %d", worlds[w],
                         rank);
            cr_assert_eq(c.backwards_after_hint, want > 0);
            cr_assert_eq(c.updates, 1);
        }
    }
}

/* A model that counts its context-parallel forwards and says it takes at
 * most `cap` tokens alone (0: no limit). */
typedef struct {
    size_t cap;
    int cp_forwards, forwards;
    size_t cp_global; /* n_global of the last context-parallel one */
} capped_t;

static lisa_rc_t
cap_forward(void *self, const trn_batch_t *b, float *logp, float *ent,
            trn_err_t *err)
{
    capped_t *c = self;
    c->forwards++;
    if (b->cp) {
        c->cp_forwards++;
        c->cp_global = b->cp->n_global;
    }
    return cnt_forward(NULL, b, logp, ent, err);
}

static lisa_rc_t
cap_backward(void *self, const float *dlogp, const float *dent, trn_err_t *err)
{
    (void) self, (void) dlogp, (void) dent, (void) err;
    return LISA_OK;
}

static size_t
cap_max(void *self)
{
    return ((capped_t *) self)->cap;
}

/* The other rank of two, in a group whose sums are scripted: its cap is
 * posted in the first sum of two values (the step's agreement on the
 * limit); every other sum leaves the values as this rank's. */
typedef struct {
    int rank;
    double peer_cap;
    int sums;
} peer_t;

static lisa_rc_t
peer_sum(void *self, double *v, size_t n, trn_err_t *err)
{
    (void) err;
    peer_t *p = self;
    if (p->sums++ == 0 && n == 2)
        v[1 - p->rank] += p->peer_cap;
    return LISA_OK;
}

Test(trn_step, auto_context_parallelism_takes_the_least_cap_of_the_ranks)
{
    data_t d;
    data_init(&d); /* eight trajectories of LEN = 11 tokens */
    static const struct {
        int world;
        bool autom;
        size_t cp_tokens, cap;
        double peer_cap;
        bool cp; /* every trajectory context-parallel, or none */
    } cases[] = {
        {2, true, 0, 10, 0, true},    /* 11 > this rank's 10 */
        {2, true, 0, 20, 10, true},   /* 11 > the other rank's 10 */
        {2, true, 0, 20, 0, false},   /* both take 11 alone (peer: none) */
        {2, true, 0, 0, 0, false},    /* no limit anywhere */
        {2, false, 0, 10, 10, false}, /* auto off, no count: never */
        {2, true, 5, 20, 20, true},   /* the count is lower than the caps */
        {2, false, 20, 10, 10, false},
        {1, true, 0, 10, 0, false}, /* one rank: nothing to split */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int rank = 0; rank < cases[i].world; rank++) {
            capped_t c = {.cap = cases[i].cap};
            trn_step_model_t m = {.self = &c,
                                  .forward = cap_forward,
                                  .backward = cap_backward,
                                  .zero_grad = cnt_zero,
                                  .update = cnt_update,
                                  .max_tokens = cap_max};
            peer_t p = {.rank = rank, .peer_cap = cases[i].peer_cap};
            trn_comm_t comm = {rank, cases[i].world, &p, peer_sum};
            trn_step_cfg_t sc = trn_step_defaults();
            sc.micro_tokens = 2 * LEN;
            sc.comm = &comm;
            sc.cp_auto = cases[i].autom;
            sc.cp_tokens = cases[i].cp_tokens;
            trn_step_out_t out;
            trn_err_t err = {{0}};
            cr_assert_eq(trn_step_run_with(&m, NULL, &sc, &d.r, &out, &err),
                         LISA_OK, "case %zu: %s", i, err.msg);
            /* rank 0 counts the shared micro-batches (the scripted sum
             * adds no other rank's counts) */
            cr_assert_eq(out.cp_micro_batches,
                         cases[i].cp && rank == 0 ? NSEQ : 0,
                         "case %zu rank %d", i, rank);
            cr_assert_eq(c.cp_forwards, cases[i].cp ? NSEQ : 0, "case %zu", i);
            if (cases[i].cp)
                cr_assert_eq(c.cp_global, LEN);
            else
                cr_assert_gt(c.forwards, 0, "case %zu rank %d", i, rank);
            /* log-probs alone: the same plan */
            float logp[NSEQ * LEN];
            capped_t c2 = {.cap = cases[i].cap};
            m.self = &c2;
            p.sums = 0;
            cr_assert_eq(trn_step_logprobs_with(&m, &sc, &d.r, logp, &err),
                         LISA_OK, "case %zu: %s", i, err.msg);
            cr_assert_eq(c2.cp_forwards, cases[i].cp ? NSEQ : 0, "case %zu", i);
        }
    }
}

/* ---- the PPO update (trn_step_ppo) ------------------------------------ */

/* The CPU model and its optimizer as trn_step_ppo's actor. */
typedef struct {
    trn_model_t *m, *ref;
    trn_adamw_t *opt;
    int steps, logprob_calls;
} actor_t;

static lisa_rc_t
act_step(void *self, const trn_step_cfg_t *cfg, const trn_rollouts_t *r,
         trn_step_out_t *out, trn_err_t *err)
{
    actor_t *a = self;
    a->steps++;
    return trn_step_run(a->m, a->ref, a->opt, cfg, r, out, err);
}

static lisa_rc_t
act_logprobs(void *self, const trn_step_cfg_t *cfg, const trn_rollouts_t *r,
             float *logp, trn_err_t *err)
{
    actor_t *a = self;
    a->logprob_calls++;
    return trn_step_logprobs(a->m, cfg, r, logp, err);
}

static trn_step_actor_t
actor_ops(actor_t *a)
{
    trn_step_actor_t o = {
        .self = a, .train_step = act_step, .logprobs = act_logprobs};
    return o;
}

Test(trn_step, ppo_one_mini_batch_one_epoch_is_todays_update)
{
    trn_config_t cfg = tiny();
    /* 0: the whole batch; 2 groups per mini-batch: the whole batch too */
    size_t minis[] = {0, 2, 5};
    for (size_t i = 0; i < 3; i++) {
        trn_model_t *m1 = trn_model_new_random(&cfg, 9, 0.2f, 1);
        trn_model_t *m2 = trn_model_new_random(&cfg, 9, 0.2f, 1);
        size_t np = trn_model_num_params(m1);
        trn_adamw_t *o1 = trn_adamw_new(np), *o2 = trn_adamw_new(np);
        data_t d;
        data_init(&d);
        trn_step_cfg_t sc = trn_step_defaults();
        sc.optim.lr = 1e-2;
        sc.mini_groups = minis[i];
        trn_step_out_t want, got;
        trn_err_t err;
        cr_assert_eq(trn_step_run(m1, NULL, o1, &sc, &d.r, &want, &err),
                     LISA_OK, "%s", err.msg);
        actor_t a = {.m = m2, .opt = o2};
        trn_step_actor_t ops = actor_ops(&a);
        cr_assert_eq(trn_step_ppo(&ops, &sc, &d.r, NULL, &got, &err), LISA_OK,
                     "%s", err.msg);
        cr_assert_eq(a.steps, 1);
        cr_assert_eq(a.logprob_calls, 0); /* no old log-probs: ratio 1 */
        cr_assert_eq(got.updates, 1);
        cr_assert_eq(got.mini_batches, 1);
        cr_assert_eq(got.loss, want.loss);
        cr_assert_eq(got.grad_norm, want.grad_norm);
        cr_assert_eq(got.pg_clipfrac, 0.0);
        cr_assert_eq(memcmp(trn_model_params(m1), trn_model_params(m2),
                            np * sizeof(float)),
                     0, "mini_groups %zu: the weights differ", minis[i]);
        trn_adamw_destroy(&o1);
        trn_adamw_destroy(&o2);
        trn_model_destroy(&m1);
        trn_model_destroy(&m2);
    }
}

Test(trn_step, ppo_mini_batches_make_the_ratio_clip)
{
    trn_config_t cfg = tiny();
    trn_model_t *m = trn_model_new_random(&cfg, 10, 0.2f, 1);
    trn_adamw_t *opt = trn_adamw_new(trn_model_num_params(m));
    data_t d;
    data_init(&d);
    trn_step_cfg_t sc = trn_step_defaults();
    sc.optim.lr = 5e-2; /* a large step, so the second update's ratio moves */
    sc.mini_groups = 1; /* ppo_mini_batch_size 1 prompt of the batch's 2 */
    actor_t a = {.m = m, .opt = opt};
    trn_step_actor_t ops = actor_ops(&a);
    trn_step_out_t out;
    trn_err_t err;
    cr_assert_eq(trn_step_ppo(&ops, &sc, &d.r, NULL, &out, &err), LISA_OK, "%s",
                 err.msg);
    cr_assert_eq(a.logprob_calls, 1); /* old log-probs before the first */
    cr_assert_eq(a.steps, 2);
    cr_assert_eq(out.mini_batches, 2);
    cr_assert_eq(out.updates, 2);
    cr_assert_eq(trn_adamw_steps(opt), 2);
    cr_assert_eq(out.tokens, NSEQ * 2 * RESP);
    cr_assert_gt(out.pg_clipfrac + out.pg_clipfrac_lower, 0.0,
                 "no token clipped: ppo_kl %g", out.ppo_kl);
    cr_assert_gt(fabs(out.ppo_kl), 1e-6);
    /* two epochs over one mini-batch: the second pass clips as well */
    trn_model_t *m2 = trn_model_new_random(&cfg, 10, 0.2f, 1);
    trn_adamw_t *o2 = trn_adamw_new(trn_model_num_params(m2));
    actor_t a2 = {.m = m2, .opt = o2};
    trn_step_actor_t ops2 = actor_ops(&a2);
    sc.mini_groups = 0;
    sc.ppo_epochs = 2;
    cr_assert_eq(trn_step_ppo(&ops2, &sc, &d.r, NULL, &out, &err), LISA_OK,
                 "%s", err.msg);
    cr_assert_eq(a2.steps, 2);
    cr_assert_eq(out.mini_batches, 1);
    cr_assert_gt(out.pg_clipfrac + out.pg_clipfrac_lower, 0.0);
    trn_adamw_destroy(&o2);
    trn_model_destroy(&m2);
    trn_adamw_destroy(&opt);
    trn_model_destroy(&m);
}

Test(trn_step, rejection_sampling_masks_tokens_and_sequences)
{
    /* two sequences of 4 tokens, the first unsampled */
    size_t off[] = {0, 4, 8};
    float old[8] = {0, -1, -1, -1, 0, -1, -1, -1};
    float roll[8] = {0, -1, -2, -1, 0, -1.0005f, -0.9995f, -1};
    uint8_t mask[8];
    const uint8_t all[8] = {0, 1, 1, 1, 0, 1, 1, 1};
    trn_step_cfg_t sc = trn_step_defaults();
    /* token: ratio e^1 at token 2 is above 2 */
    sc.rs_level = TRN_RS_TOKEN;
    sc.rs_upper = 2.0;
    memcpy(mask, all, 8);
    cr_assert_eq(trn_step_reject(&sc, 2, off, old, roll, mask), 1);
    cr_assert_eq(mask[2], 0);
    cr_assert_eq(mask[1] + mask[3] + mask[5] + mask[6] + mask[7], 5);
    /* geometric: exp(mean) of the first is e^(1/3), out of [1/1.001,
     * 1.001]; the second's log ratios cancel */
    sc.rs_level = TRN_RS_GEOMETRIC;
    sc.rs_upper = 1.001;
    memcpy(mask, all, 8);
    cr_assert_eq(trn_step_reject(&sc, 2, off, old, roll, mask), 3);
    cr_assert_eq(mask[1] + mask[2] + mask[3], 0);
    cr_assert_eq(mask[5] + mask[6] + mask[7], 3);
    /* sequence: e^1 > 2 rejects the first only */
    sc.rs_level = TRN_RS_SEQUENCE;
    sc.rs_upper = 2.0;
    memcpy(mask, all, 8);
    cr_assert_eq(trn_step_reject(&sc, 2, off, old, roll, mask), 3);
    /* veto: a token ratio below the threshold rejects its sequence */
    sc.rs_level = TRN_RS_OFF;
    sc.rs_veto = 0.5;
    float r2[8] = {0, -1, -1, -1, 0, -1, 0, -1}; /* token 6: ratio e^-1 */
    memcpy(mask, all, 8);
    cr_assert_eq(trn_step_reject(&sc, 2, off, old, r2, mask), 3);
    cr_assert_eq(mask[1] + mask[2] + mask[3], 3);
    cr_assert_eq(mask[5] + mask[6] + mask[7], 0);
    /* off: nothing */
    sc.rs_veto = 0;
    memcpy(mask, all, 8);
    cr_assert_eq(trn_step_reject(&sc, 2, off, old, roll, mask), 0);
}

Test(trn_step, kl_in_the_reward_changes_the_scores)
{
    trn_config_t cfg = tiny();
    trn_model_t *m = trn_model_new_random(&cfg, 11, 0.2f, 1);
    trn_model_t *ref = trn_model_new_random(&cfg, 12, 0.2f, 1);
    trn_adamw_t *opt = trn_adamw_new(trn_model_num_params(m));
    data_t d;
    data_init(&d);
    for (size_t s = 0; s < NSEQ; s++)
        d.score[s] = 1.0; /* no signal from the rewards */
    trn_step_cfg_t sc = trn_step_defaults();
    sc.optim.lr = 1e-2;
    trn_step_out_t out;
    trn_err_t err;
    cr_assert_eq(trn_step_run(m, ref, opt, &sc, &d.r, &out, &err), LISA_OK,
                 "%s", err.msg);
    cr_assert(out.skipped); /* all advantages 0 */
    cr_assert_eq(out.reward_kl_n, 0.0);
    /* the reference differs: each trajectory's KL makes its own score */
    sc.kl_reward_coef = 0.5;
    cr_assert_eq(trn_kl_parse("low_var_kl", &sc.kl_reward_type), LISA_OK);
    actor_t a = {.m = m, .ref = ref, .opt = opt};
    trn_step_actor_t ops = actor_ops(&a);
    cr_assert_eq(trn_step_ppo(&ops, &sc, &d.r, NULL, &out, &err), LISA_OK, "%s",
                 err.msg);
    cr_assert_eq(a.logprob_calls, 1); /* the old policy's log-probs */
    cr_assert_not(out.skipped);
    cr_assert_eq(out.reward_kl_n, (double) NSEQ);
    cr_assert_gt(out.reward_kl, 0.0);
    /* without a reference model it is refused */
    cr_assert_eq(trn_step_run(m, NULL, opt, &sc, &d.r, &out, &err),
                 LISA_INVALID);
    trn_adamw_destroy(&opt);
    trn_model_destroy(&m);
    trn_model_destroy(&ref);
}

Test(trn_step, length_caps_cut_or_drop)
{
    /* prompt 0..4 (5 tokens), response 5..9 (sampled 5, 6, 8, 9) */
    int32_t tok[10];
    uint8_t mask[10];
    float lp[10];
    const uint8_t m0[10] = {0, 0, 0, 0, 0, 1, 1, 0, 1, 1};
    size_t len;
#define RESET()                                                                \
    do {                                                                       \
        for (int i = 0; i < 10; i++) {                                         \
            tok[i] = i;                                                        \
            lp[i] = (float) -i;                                                \
        }                                                                      \
        memcpy(mask, m0, 10);                                                  \
        len = 10;                                                              \
    } while (0)
    RESET();
    cr_assert_eq(trn_step_cap(tok, mask, lp, &len, 0, 0, 'l', 0), 0);
    cr_assert_eq(len, 10);
    /* a prompt over the dropping cap drops the trajectory */
    cr_assert_eq(trn_step_cap(tok, mask, lp, &len, 4, 0, 'l', 0), -1);
    cr_assert_eq(trn_step_cap(tok, mask, lp, &len, 5, 0, 'l', 0), 0);
    /* left: the prompt's last 3 */
    RESET();
    cr_assert_eq(trn_step_cap(tok, mask, lp, &len, 0, 3, 'l', 0), 1);
    cr_assert_eq(len, 8);
    cr_assert_eq(tok[0], 2);
    cr_assert_eq(tok[3], 5);
    cr_assert_eq(mask[3], 1);
    cr_assert_float_eq(lp[3], -5.0f, 0);
    /* right: the prompt's first 3 */
    RESET();
    cr_assert_eq(trn_step_cap(tok, mask, lp, &len, 0, 3, 'r', 0), 1);
    cr_assert_eq(len, 8);
    cr_assert_eq(tok[2], 2);
    cr_assert_eq(tok[3], 5);
    /* middle: the first 2 and the last 2 of 5 for a cap of 4 */
    RESET();
    cr_assert_eq(trn_step_cap(tok, mask, lp, &len, 0, 4, 'm', 0), 1);
    cr_assert_eq(len, 9);
    cr_assert_eq(tok[1], 1);
    cr_assert_eq(tok[2], 3);
    cr_assert_eq(tok[4], 5);
    /* the response is cut at 3 tokens */
    RESET();
    cr_assert_eq(trn_step_cap(tok, mask, lp, &len, 0, 0, 'l', 3), 1);
    cr_assert_eq(len, 8);
    cr_assert_eq(tok[7], 7);
#undef RESET
}
