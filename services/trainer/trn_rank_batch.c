/*
 * trn_rank_batch: a batch of trajectories as rank 0 sends it to the other
 * ranks (see trn_rank_batch.h).
 */
#include "trn_rank_batch.h"

#include "lisa/lisa_mem.h"
#include "trn_err.h"

#include <string.h>

/* Points `b` at r's arrays (no copies; tokens are converted into *tok). */
void
trn_rank_batch_out(const trn_rollouts_t *r, Lisa__RankBatch *b, uint64_t **off,
                   uint32_t **tok)
{
    size_t n = r->n_seqs, nt = r->seq_offsets[n];
    *off = lisa_malloc((n + 1) * sizeof **off);
    *tok = lisa_malloc((nt ? nt : 1) * sizeof **tok);
    for (size_t i = 0; i <= n; i++)
        (*off)[i] = r->seq_offsets[i];
    for (size_t t = 0; t < nt; t++)
        (*tok)[t] = (uint32_t) r->tokens[t];
    b->n_seq_offsets = n + 1;
    b->seq_offsets = *off;
    b->n_tokens = nt;
    b->tokens = *tok;
    b->mask.data = (uint8_t *) (uintptr_t) r->mask;
    b->mask.len = nt;
    b->n_rollout_logp = r->rollout_logp ? nt : 0;
    b->rollout_logp = (float *) (uintptr_t) r->rollout_logp;
    b->n_old_logp = r->old_logp ? nt : 0;
    b->old_logp = (float *) (uintptr_t) r->old_logp;
    b->n_group = n;
    b->group = (int64_t *) (uintptr_t) r->group;
    b->n_score = n;
    b->score = (double *) (uintptr_t) r->score;
}

/* The batch a command carries, checked: every array the length the
 * offsets say. Owned arrays go to *off and *tok. */
lisa_rc_t
trn_rank_batch_in(const Lisa__RankBatch *b, trn_rollouts_t *r, size_t **off,
                  int32_t **tok, trn_err_t *err)
{
    memset(r, 0, sizeof *r);
    if (!b || b->n_seq_offsets < 2 || b->seq_offsets[0] != 0)
        return trn_fail(err, LISA_INVALID, "dp: command without a batch");
    size_t n = b->n_seq_offsets - 1, nt = b->n_tokens;
    if (nt > TRN_MAX_BATCH_TOKENS)
        return trn_fail(err, LISA_TOOLARGE,
                        "dp: batch of %zu tokens exceeds %u", nt,
                        (unsigned) TRN_MAX_BATCH_TOKENS);
    for (size_t i = 0; i < n; i++)
        if (b->seq_offsets[i + 1] <= b->seq_offsets[i])
            return trn_fail(err, LISA_INVALID, "dp: unordered offsets");
    if (b->seq_offsets[n] != nt || b->mask.len != nt || b->n_group != n ||
        b->n_score != n ||
        (b->n_rollout_logp != 0 && b->n_rollout_logp != nt) ||
        (b->n_old_logp != 0 && b->n_old_logp != nt))
        return trn_fail(err, LISA_INVALID,
                        "dp: batch arrays disagree with its offsets");
    *off = lisa_malloc((n + 1) * sizeof **off);
    *tok = lisa_malloc((nt ? nt : 1) * sizeof **tok);
    for (size_t i = 0; i <= n; i++)
        (*off)[i] = (size_t) b->seq_offsets[i];
    for (size_t t = 0; t < nt; t++) {
        if (b->tokens[t] > (uint32_t) INT32_MAX) {
            lisa_free(off);
            lisa_free(tok);
            return trn_fail(err, LISA_INVALID, "dp: bad token id");
        }
        (*tok)[t] = (int32_t) b->tokens[t];
    }
    r->n_seqs = n;
    r->seq_offsets = *off;
    r->tokens = *tok;
    r->mask = b->mask.data;
    r->rollout_logp = b->n_rollout_logp ? b->rollout_logp : NULL;
    r->old_logp = b->n_old_logp ? b->old_logp : NULL;
    r->group = b->group;
    r->score = b->score;
    return LISA_OK;
}
