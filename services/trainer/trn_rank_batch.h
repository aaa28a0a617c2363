/*
 * trn_rank_batch: a batch of finished trajectories (trn_rollouts_t) as a
 * RankBatch message, the form rank 0 sends it to the other ranks in.
 * Reading one back checks it whole (offsets in order and every array as
 * long as they say) before anything trusts it.
 */
#ifndef TRN_RANK_BATCH_H
#define TRN_RANK_BATCH_H

#include "lisa.pb-c.h"
#include "trn_step.h"

#include <stdint.h>

/* Points b at r's arrays, converting offsets and tokens into *off and *tok
 * (the caller frees both after sending). */
void trn_rank_batch_out(const trn_rollouts_t *r, Lisa__RankBatch *b,
                        uint64_t **off, uint32_t **tok);

/* The batch b carries as r (pointing into b; offsets and tokens converted
 * into *off and *tok, the caller's to free). LISA_INVALID, with err, for
 * a batch that does not hold together. */
lisa_rc_t trn_rank_batch_in(const Lisa__RankBatch *b, trn_rollouts_t *r,
                            size_t **off, int32_t **tok,
                            trn_err_t *err) LISA_NODISCARD;

#endif
