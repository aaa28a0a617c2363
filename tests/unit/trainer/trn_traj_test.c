/*
 * trn_traj tests: span chains -> training sequences. A two-turn chat gives
 * one sequence (prompt, response, observation, response) with the mask on
 * the sampled ids and the engine's log-probs there; a new segment starts a
 * second sequence; spans in any order give the same result; missing,
 * duplicate and broken spans are errors that name the span. The first test
 * is the usage example.
 */
#include "trn_traj.h"

#include <criterion/criterion.h>
#include <string.h>

typedef struct {
    Lisa__Span s;
    uint32_t app[8], resp[8];
    float lp[8];
} span_t;

static void
mk(span_t *x, uint32_t seq, int32_t prev, uint32_t seg, const uint32_t *app,
   size_t na, const uint32_t *resp, size_t nr, uint32_t prompt_len)
{
    memset(x, 0, sizeof *x);
    lisa__span__init(&x->s);
    x->s.seq = seq;
    x->s.prev_seq = prev;
    x->s.segment = seg;
    memcpy(x->app, app, na * sizeof *app);
    memcpy(x->resp, resp, nr * sizeof *resp);
    for (size_t i = 0; i < nr; i++)
        x->lp[i] = -0.5f * (float) (i + 1) - (float) seq;
    x->s.appended_ids = x->app;
    x->s.n_appended_ids = na;
    x->s.response_ids = x->resp;
    x->s.n_response_ids = nr;
    x->s.response_logprobs = x->lp;
    x->s.n_response_logprobs = nr;
    x->s.prompt_len = prompt_len;
    x->s.policy_version = 3 + seq;
}

Test(trn_traj, usage)
{
    /* turn 1: prompt [1 2 3] -> [10 11]; turn 2: observation [4 5] -> [12] */
    span_t a, b;
    mk(&a, 0, -1, 0, (uint32_t[]){1, 2, 3}, 3, (uint32_t[]){10, 11}, 2, 3);
    mk(&b, 1, 0, 0, (uint32_t[]){4, 5}, 2, (uint32_t[]){12}, 1, 7);
    Lisa__Span *spans[2] = {&a.s, &b.s};
    trn_traj_t t;
    char err[256];
    cr_assert_eq(trn_traj_build(spans, 2, 2, 1024, &t, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_eq(t.n, 1);
    const trn_seq_t *q = &t.seqs[0];
    const int32_t tok[8] = {1, 2, 3, 10, 11, 4, 5, 12};
    const uint8_t mask[8] = {0, 0, 0, 1, 1, 0, 0, 1};
    const float lp[8] = {0, 0, 0, -0.5f, -1.0f, 0, 0, -1.5f};
    cr_assert_eq(q->len, 8);
    for (size_t i = 0; i < 8; i++) {
        cr_assert_eq(q->tokens[i], tok[i], "token %zu", i);
        cr_assert_eq(q->mask[i], mask[i], "mask %zu", i);
        cr_assert_float_eq(q->logp[i], lp[i], 1e-7, "logp %zu", i);
    }
    cr_assert_eq(q->last_seq, 1);
    cr_assert_eq(q->min_version, 3);
    cr_assert_eq(q->max_version, 4);
    trn_traj_free(&t);
    cr_assert_eq(t.n, 0);
}

Test(trn_traj, out_of_order_spans_give_the_same_sequence)
{
    span_t a, b, c;
    mk(&a, 0, -1, 0, (uint32_t[]){1}, 1, (uint32_t[]){10}, 1, 1);
    mk(&b, 1, 0, 0, (uint32_t[]){2}, 1, (uint32_t[]){11}, 1, 3);
    mk(&c, 2, 1, 0, (uint32_t[]){3}, 1, (uint32_t[]){12, 13}, 2, 5);
    Lisa__Span *spans[3] = {&c.s, &a.s, &b.s};
    trn_traj_t t;
    cr_assert_eq(trn_traj_build(spans, 3, 0, 64, &t, NULL, 0), LISA_OK);
    cr_assert_eq(t.n, 1);
    const int32_t tok[7] = {1, 10, 2, 11, 3, 12, 13};
    cr_assert_eq(t.seqs[0].len, 7);
    for (size_t i = 0; i < 7; i++)
        cr_assert_eq(t.seqs[0].tokens[i], tok[i]);
    trn_traj_free(&t);
}

Test(trn_traj, a_new_segment_starts_a_new_sequence)
{
    span_t a, b, c;
    mk(&a, 0, -1, 0, (uint32_t[]){1, 2}, 2, (uint32_t[]){10}, 1, 2);
    mk(&b, 1, 0, 0, (uint32_t[]){3}, 1, (uint32_t[]){11}, 1, 4);
    /* history rewritten: segment 1 starts over with a fresh prompt */
    mk(&c, 2, -1, 1, (uint32_t[]){1, 7}, 2, (uint32_t[]){12, 13}, 2, 2);
    Lisa__Span *spans[3] = {&a.s, &b.s, &c.s};
    trn_traj_t t;
    cr_assert_eq(trn_traj_build(spans, 3, 3, 64, &t, NULL, 0), LISA_OK);
    cr_assert_eq(t.n, 2);
    cr_assert_eq(t.seqs[0].len, 5);
    cr_assert_eq(t.seqs[0].segment, 0);
    cr_assert_eq(t.seqs[0].tokens[4], 11);
    cr_assert_eq(t.seqs[1].len, 4);
    cr_assert_eq(t.seqs[1].segment, 1);
    cr_assert_eq(t.seqs[1].tokens[1], 7);
    cr_assert_eq(t.seqs[1].mask[2], 1);
    cr_assert_eq(t.seqs[1].mask[1], 0);
    trn_traj_free(&t);
}

Test(trn_traj, missing_spans_are_errors)
{
    span_t a, c;
    mk(&a, 0, -1, 0, (uint32_t[]){1}, 1, (uint32_t[]){10}, 1, 1);
    mk(&c, 2, 1, 0, (uint32_t[]){3}, 1, (uint32_t[]){12}, 1, 0);
    Lisa__Span *spans[2] = {&a.s, &c.s};
    trn_traj_t t;
    char err[256];
    cr_assert_eq(trn_traj_build(spans, 2, 0, 64, &t, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "missing span 1"), "%s", err);
    cr_assert_eq(t.n, 0);
    /* fewer than the attempt's expected count */
    Lisa__Span *one[1] = {&a.s};
    cr_assert_eq(trn_traj_build(one, 1, 3, 64, &t, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "1 of 3"), "%s", err);
    cr_assert_eq(trn_traj_build(one, 0, 0, 64, &t, err, sizeof err),
                 LISA_INVALID);
}

Test(trn_traj, broken_chains_are_errors)
{
    span_t a, b;
    trn_traj_t t;
    char err[256];
    Lisa__Span *spans[2] = {&a.s, &b.s};
    /* duplicate seq */
    mk(&a, 0, -1, 0, (uint32_t[]){1}, 1, (uint32_t[]){10}, 1, 0);
    mk(&b, 0, -1, 0, (uint32_t[]){1}, 1, (uint32_t[]){10}, 1, 0);
    cr_assert_eq(trn_traj_build(spans, 2, 0, 64, &t, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "duplicate span 0"), "%s", err);
    /* prompt_len disagrees with the chain */
    mk(&b, 1, 0, 0, (uint32_t[]){2}, 1, (uint32_t[]){11}, 1, 9);
    cr_assert_eq(trn_traj_build(spans, 2, 0, 64, &t, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "prompt_len 9"), "%s", err);
    /* chaining across segments */
    mk(&b, 1, 0, 1, (uint32_t[]){2}, 1, (uint32_t[]){11}, 1, 0);
    cr_assert_eq(trn_traj_build(spans, 2, 0, 64, &t, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "segment"), "%s", err);
    /* a parent that is not earlier */
    mk(&b, 1, 1, 0, (uint32_t[]){2}, 1, (uint32_t[]){11}, 1, 0);
    cr_assert_eq(trn_traj_build(spans, 2, 0, 64, &t, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "not an earlier span"), "%s", err);
    /* logprob count */
    mk(&b, 1, 0, 0, (uint32_t[]){2}, 1, (uint32_t[]){11, 12}, 2, 0);
    b.s.n_response_logprobs = 1;
    cr_assert_eq(trn_traj_build(spans, 2, 0, 64, &t, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "1 logprobs for 2"), "%s", err);
    /* too long */
    mk(&b, 1, 0, 0, (uint32_t[]){2}, 1, (uint32_t[]){11}, 1, 0);
    cr_assert_eq(trn_traj_build(spans, 2, 0, 3, &t, err, sizeof err),
                 LISA_TOOLARGE);
    cr_assert_eq(t.n, 0);
}

Test(trn_traj, branches_give_one_sequence_per_leaf)
{
    /* two completions from the same parent (a retry of a turn) */
    span_t a, b, c;
    mk(&a, 0, -1, 0, (uint32_t[]){1}, 1, (uint32_t[]){10}, 1, 0);
    mk(&b, 1, 0, 0, (uint32_t[]){2}, 1, (uint32_t[]){11}, 1, 0);
    mk(&c, 2, 0, 0, (uint32_t[]){3}, 1, (uint32_t[]){12}, 1, 0);
    Lisa__Span *spans[3] = {&a.s, &b.s, &c.s};
    trn_traj_t t;
    cr_assert_eq(trn_traj_build(spans, 3, 0, 64, &t, NULL, 0), LISA_OK);
    cr_assert_eq(t.n, 2);
    cr_assert_eq(t.seqs[0].tokens[2], 2);
    cr_assert_eq(t.seqs[1].tokens[2], 3);
    cr_assert_eq(t.seqs[1].tokens[1], 10);
    trn_traj_free(&t);
}

Test(trn_traj, sequences_are_the_shared_builders)
{
    /* the trainer's sequences are lisa_spanseq's, prompt length included:
     * what `lisa export` writes is what is trained on */
    span_t a, b;
    mk(&a, 0, -1, 0, (uint32_t[]){1, 2}, 2, (uint32_t[]){10}, 1, 2);
    mk(&b, 1, 0, 0, (uint32_t[]){3}, 1, (uint32_t[]){11}, 1, 4);
    Lisa__Span *spans[2] = {&a.s, &b.s};
    trn_traj_t t;
    lisa_spanseqs_t s;
    cr_assert_eq(trn_traj_build(spans, 2, 2, 64, &t, NULL, 0), LISA_OK);
    cr_assert_eq(lisa_spanseq_build(spans, 2, 2, 64, &s, NULL, 0), LISA_OK);
    cr_assert_eq(t.n, s.n);
    cr_assert_eq(t.seqs[0].len, s.seqs[0].len);
    cr_assert_eq(t.seqs[0].prompt_len, 2);
    cr_assert_arr_eq(t.seqs[0].tokens, s.seqs[0].tokens,
                     s.seqs[0].len * sizeof *s.seqs[0].tokens);
    cr_assert_arr_eq(t.seqs[0].mask, s.seqs[0].mask, s.seqs[0].len);
    trn_traj_free(&t);
    lisa_spanseq_free(&s);
    trn_traj_free(&t); /* twice is safe */
    cr_assert_eq(t.n, 0);
}
