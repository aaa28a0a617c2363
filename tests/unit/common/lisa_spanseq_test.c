/*
 * lisa_spanseq tests: sequences rebuilt from linearly stored spans. The
 * first test is the usage example (a two-turn chat). A long chat, given
 * in shuffled order, is compared token by token with the naive build
 * (every span's full sequence concatenated from its parent's); branches
 * give one sequence per leaf; broken chains, too long sequences and too
 * many spans are refused with the span named and nothing allocated.
 */
#include "lisa/lisa_mem.h"
#include "lisa/lisa_spanseq.h"

#include <criterion/criterion.h>
#include <string.h>

typedef struct {
    Lisa__Span s;
    uint32_t app[16], resp[16];
    float lp[16];
} span_t;

static void
mk(span_t *x, uint32_t seq, int32_t prev, const uint32_t *app, size_t na,
   const uint32_t *resp, size_t nr)
{
    memset(x, 0, sizeof *x);
    lisa__span__init(&x->s);
    x->s.seq = seq;
    x->s.prev_seq = prev;
    memcpy(x->app, app, na * sizeof *app);
    memcpy(x->resp, resp, nr * sizeof *resp);
    for (size_t i = 0; i < nr; i++)
        x->lp[i] = -0.25f * (float) (i + 1) - (float) seq;
    x->s.appended_ids = x->app;
    x->s.n_appended_ids = na;
    x->s.response_ids = x->resp;
    x->s.n_response_ids = nr;
    x->s.response_logprobs = x->lp;
    x->s.n_response_logprobs = nr;
    x->s.policy_version = 5 + seq;
}

Test(lisa_spanseq, usage)
{
    /* turn 1: prompt [1 2 3] -> [10 11]; turn 2: observation [4] -> [12] */
    span_t a, b;
    mk(&a, 0, -1, (uint32_t[]){1, 2, 3}, 3, (uint32_t[]){10, 11}, 2);
    mk(&b, 1, 0, (uint32_t[]){4}, 1, (uint32_t[]){12}, 1);
    Lisa__Span *spans[2] = {&b.s, &a.s};
    lisa_spanseqs_t out;
    char err[256];
    cr_assert_eq(lisa_spanseq_build(spans, 2, 2, 100, &out, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_eq(out.n, 1); /* one leaf: only the whole chat, not span 0 */
    const lisa_spanseq_t *q = &out.seqs[0];
    const int32_t tok[7] = {1, 2, 3, 10, 11, 4, 12};
    const uint8_t mask[7] = {0, 0, 0, 1, 1, 0, 1};
    cr_assert_eq(q->len, 7);
    for (size_t i = 0; i < 7; i++) {
        cr_assert_eq(q->tokens[i], tok[i], "token %zu", i);
        cr_assert_eq(q->mask[i], mask[i], "mask %zu", i);
    }
    cr_assert_float_eq(q->logp[3], -0.25f, 1e-7);
    cr_assert_float_eq(q->logp[6], -1.25f, 1e-7);
    cr_assert_eq(q->logp[5], 0.0f);
    cr_assert_eq(q->prompt_len, 3);
    cr_assert_eq(q->last_seq, 1);
    cr_assert_eq(q->min_version, 5);
    cr_assert_eq(q->max_version, 6);
    lisa_spanseq_free(&out);
    cr_assert_eq(out.n, 0);
    cr_assert_null(out.seqs);
    lisa_spanseq_free(&out); /* twice is safe */
}

static uint32_t
s_rand(uint32_t *state)
{
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

Test(lisa_spanseq, a_long_shuffled_chat_matches_the_naive_build)
{
    enum { TURNS = 300 };
    span_t *sp = lisa_calloc(TURNS, sizeof *sp);
    uint32_t st = 7;
    /* naive: the full sequence of every span, as copies of the parent's */
    size_t cap = TURNS * 32;
    int32_t *tok = lisa_calloc(cap, sizeof *tok);
    uint8_t *mask = lisa_calloc(cap, 1);
    float *lp = lisa_calloc(cap, sizeof *lp);
    size_t len = 0;
    for (uint32_t k = 0; k < TURNS; k++) {
        uint32_t app[16], resp[16];
        size_t na = 1 + s_rand(&st) % 15, nr = s_rand(&st) % 16;
        for (size_t i = 0; i < na; i++)
            app[i] = s_rand(&st) % 150000;
        for (size_t i = 0; i < nr; i++)
            resp[i] = s_rand(&st) % 150000;
        mk(&sp[k], k, (int32_t) k - 1, app, na, resp, nr);
        for (size_t i = 0; i < na; i++, len++)
            tok[len] = (int32_t) app[i];
        for (size_t i = 0; i < nr; i++, len++) {
            tok[len] = (int32_t) resp[i];
            mask[len] = 1;
            lp[len] = sp[k].lp[i];
        }
        sp[k].s.prompt_len = (uint32_t) (len - nr);
    }
    Lisa__Span **spans = lisa_calloc(TURNS, sizeof *spans);
    for (size_t i = 0; i < TURNS; i++)
        spans[i] = &sp[i].s;
    for (size_t i = TURNS - 1; i > 0; i--) {
        size_t j = s_rand(&st) % (i + 1);
        Lisa__Span *t = spans[i];
        spans[i] = spans[j];
        spans[j] = t;
    }
    lisa_spanseqs_t out;
    char err[256];
    cr_assert_eq(
        lisa_spanseq_build(spans, TURNS, TURNS, cap, &out, err, sizeof err),
        LISA_OK, "%s", err);
    cr_assert_eq(out.n, 1);
    cr_assert_eq(out.seqs[0].len, len);
    cr_assert_eq(out.seqs[0].prompt_len, sp[0].s.n_appended_ids);
    cr_assert_eq(out.seqs[0].last_seq, TURNS - 1);
    for (size_t i = 0; i < len; i++) {
        cr_assert_eq(out.seqs[0].tokens[i], tok[i], "token %zu", i);
        cr_assert_eq(out.seqs[0].mask[i], mask[i], "mask %zu", i);
        cr_assert_eq(out.seqs[0].logp[i], lp[i], "logp %zu", i);
    }
    lisa_spanseq_free(&out);
    lisa_free(&spans);
    lisa_free(&tok);
    lisa_free(&mask);
    lisa_free(&lp);
    lisa_free(&sp);
}

Test(lisa_spanseq, branches_give_one_sequence_per_leaf)
{
    /* span 1 and span 2 both continue span 0 (a retried tool call); a
     * second segment starts over */
    span_t a, b, c, d;
    mk(&a, 0, -1, (uint32_t[]){1, 2}, 2, (uint32_t[]){10}, 1);
    mk(&b, 1, 0, (uint32_t[]){3}, 1, (uint32_t[]){11}, 1);
    mk(&c, 2, 0, (uint32_t[]){4}, 1, (uint32_t[]){12, 13}, 2);
    mk(&d, 3, -1, (uint32_t[]){9}, 1, (uint32_t[]){14}, 1);
    d.s.segment = 1;
    Lisa__Span *spans[4] = {&a.s, &b.s, &c.s, &d.s};
    lisa_spanseqs_t out;
    cr_assert_eq(lisa_spanseq_build(spans, 4, 0, 64, &out, NULL, 0), LISA_OK);
    cr_assert_eq(out.n, 3);
    cr_assert_eq(out.seqs[0].last_seq, 1);
    cr_assert_eq(out.seqs[0].len, 5);
    cr_assert_eq(out.seqs[1].last_seq, 2);
    cr_assert_eq(out.seqs[1].len, 6);
    cr_assert_eq(out.seqs[1].tokens[0], 1);
    cr_assert_eq(out.seqs[1].tokens[3], 4);
    cr_assert_eq(out.seqs[1].prompt_len, 2);
    cr_assert_eq(out.seqs[2].segment, 1);
    cr_assert_eq(out.seqs[2].len, 2);
    cr_assert_eq(out.seqs[2].prompt_len, 1);
    lisa_spanseq_free(&out);
}

Test(lisa_spanseq, a_parent_that_never_arrived_is_refused)
{
    /* span 2 continues span 1, which is missing: no sequence without its
     * prefix */
    span_t a, c;
    mk(&a, 0, -1, (uint32_t[]){1}, 1, (uint32_t[]){10}, 1);
    mk(&c, 2, 1, (uint32_t[]){3}, 1, (uint32_t[]){12}, 1);
    Lisa__Span *spans[2] = {&a.s, &c.s};
    lisa_spanseqs_t out;
    char err[256];
    cr_assert_eq(lisa_spanseq_build(spans, 2, 0, 64, &out, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "missing span 1"), "%s", err);
    cr_assert_eq(out.n, 0);
    cr_assert_null(out.seqs);
    /* a prompt_len the chain contradicts */
    span_t b;
    mk(&b, 1, 0, (uint32_t[]){2}, 1, (uint32_t[]){11}, 1);
    b.s.prompt_len = 2; /* the chain gives 1 + 1 + 1 = 3 */
    Lisa__Span *two[2] = {&a.s, &b.s};
    cr_assert_eq(lisa_spanseq_build(two, 2, 0, 64, &out, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "span 1: prompt_len 2 but the chain gives 3"), "%s",
              err);
    /* fewer spans than the attempt's count */
    cr_assert_eq(lisa_spanseq_build(spans, 1, 2, 64, &out, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "1 of 2"), "%s", err);
}

Test(lisa_spanseq, bounds_are_enforced)
{
    span_t a, b;
    mk(&a, 0, -1, (uint32_t[]){1, 2, 3}, 3, (uint32_t[]){10, 11}, 2);
    mk(&b, 1, 0, (uint32_t[]){4}, 1, (uint32_t[]){12}, 1);
    Lisa__Span *spans[2] = {&a.s, &b.s};
    lisa_spanseqs_t out;
    char err[256];
    cr_assert_eq(lisa_spanseq_build(spans, 2, 0, 6, &out, err, sizeof err),
                 LISA_TOOLARGE);
    cr_assert(strstr(err, "span 1: sequence of 7 tokens (max 6)"), "%s", err);
    cr_assert_eq(lisa_spanseq_build(spans, 2, 0, 7, &out, err, sizeof err),
                 LISA_OK);
    lisa_spanseq_free(&out);
    cr_assert_eq(lisa_spanseq_build(spans, LISA_SPANSEQ_MAX_SPANS + 1, 0, 7,
                                    &out, err, sizeof err),
                 LISA_TOOLARGE);
    cr_assert_eq(lisa_spanseq_build(spans, 0, 0, 7, &out, err, sizeof err),
                 LISA_INVALID);
    a.resp[0] = 0x80000000u; /* beyond int32 */
    cr_assert_eq(lisa_spanseq_build(spans, 2, 0, 64, &out, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "bad token id"), "%s", err);
}
