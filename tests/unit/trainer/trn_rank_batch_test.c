/*
 * trn_rank_batch tests: a batch of trajectories goes out as a RankBatch,
 * through protobuf bytes, and back unchanged; batches that do not hold
 * together are refused with a reason. The first test is the usage example.
 */
#include "trn_rank_batch.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const size_t s_off[] = {0, 4, 9};
static const int32_t s_tok[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
static const uint8_t s_mask[] = {0, 0, 1, 1, 0, 1, 1, 1, 1};
static const float s_lp[] = {0, 0, -1, -2, 0, -3, -4, -5, -6};
static const int64_t s_group[] = {7, 7};
static const double s_score[] = {1.0, 0.5};

static trn_rollouts_t
s_rollouts(void)
{
    trn_rollouts_t r = {.n_seqs = 2,
                        .seq_offsets = s_off,
                        .tokens = s_tok,
                        .mask = s_mask,
                        .rollout_logp = s_lp,
                        .group = s_group,
                        .score = s_score};
    return r;
}

Test(trn_rank_batch, usage_round_trip_through_the_wire)
{
    trn_rollouts_t r = s_rollouts();
    Lisa__RankBatch b = LISA__RANK_BATCH__INIT;
    uint64_t *off = NULL;
    uint32_t *tok = NULL;
    trn_rank_batch_out(&r, &b, &off, &tok);
    size_t n = lisa__rank_batch__get_packed_size(&b);
    uint8_t *buf = malloc(n);
    lisa__rank_batch__pack(&b, buf);
    free(off);
    free(tok);
    Lisa__RankBatch *in = lisa__rank_batch__unpack(NULL, n, buf);
    cr_assert(in);
    trn_rollouts_t back;
    size_t *boff = NULL;
    int32_t *btok = NULL;
    trn_err_t err = {{0}};
    cr_assert_eq(trn_rank_batch_in(in, &back, &boff, &btok, &err), LISA_OK,
                 "%s", err.msg);
    cr_assert_eq(back.n_seqs, 2);
    cr_assert_arr_eq(back.seq_offsets, s_off, sizeof s_off);
    cr_assert_arr_eq(back.tokens, s_tok, sizeof s_tok);
    cr_assert_arr_eq(back.mask, s_mask, sizeof s_mask);
    cr_assert_arr_eq(back.rollout_logp, s_lp, sizeof s_lp);
    cr_assert_arr_eq(back.group, s_group, sizeof s_group);
    cr_assert_arr_eq(back.score, s_score, sizeof s_score);
    free(boff);
    free(btok);
    lisa__rank_batch__free_unpacked(in, NULL);
    free(buf);
}

/* Runs trn_rank_batch_in on r's wire form after `spoil` changes it. */
static lisa_rc_t
s_in_after(void (*spoil)(Lisa__RankBatch *b), char *why, size_t len)
{
    trn_rollouts_t r = s_rollouts();
    Lisa__RankBatch b = LISA__RANK_BATCH__INIT;
    uint64_t *off = NULL;
    uint32_t *tok = NULL;
    trn_rank_batch_out(&r, &b, &off, &tok);
    spoil(&b);
    trn_rollouts_t back;
    size_t *boff = NULL;
    int32_t *btok = NULL;
    trn_err_t err = {{0}};
    lisa_rc_t rc = trn_rank_batch_in(&b, &back, &boff, &btok, &err);
    snprintf(why, len, "%s", err.msg);
    cr_assert(rc == LISA_OK || (!boff && !btok));
    free(boff);
    free(btok);
    free(off);
    free(tok);
    return rc;
}

static void
s_unordered(Lisa__RankBatch *b)
{
    b->seq_offsets[1] = 9;
}
static void
s_short_mask(Lisa__RankBatch *b)
{
    b->mask.len--;
}
static void
s_short_scores(Lisa__RankBatch *b)
{
    b->n_score = 1;
}
static void
s_no_offsets(Lisa__RankBatch *b)
{
    b->n_seq_offsets = 0;
}
static void
s_bad_token(Lisa__RankBatch *b)
{
    b->tokens[3] = 0x80000000u;
}
static void
s_huge(Lisa__RankBatch *b)
{
    b->n_tokens = (size_t) TRN_MAX_BATCH_TOKENS + 1;
}
static void
s_no_logp(Lisa__RankBatch *b)
{
    b->n_rollout_logp = 0;
}

Test(trn_rank_batch, batches_that_do_not_hold_together_are_refused)
{
    char why[256];
    cr_assert_eq(s_in_after(s_unordered, why, sizeof why), LISA_INVALID);
    cr_assert(strstr(why, "unordered"), "%s", why);
    cr_assert_eq(s_in_after(s_short_mask, why, sizeof why), LISA_INVALID);
    cr_assert(strstr(why, "disagree"), "%s", why);
    cr_assert_eq(s_in_after(s_short_scores, why, sizeof why), LISA_INVALID);
    cr_assert_eq(s_in_after(s_no_offsets, why, sizeof why), LISA_INVALID);
    cr_assert_eq(s_in_after(s_bad_token, why, sizeof why), LISA_INVALID);
    cr_assert(strstr(why, "token"), "%s", why);
    cr_assert_eq(s_in_after(s_huge, why, sizeof why), LISA_TOOLARGE);
    /* the engine's log-probs are optional */
    cr_assert_eq(s_in_after(s_no_logp, why, sizeof why), LISA_OK, "%s", why);
}
