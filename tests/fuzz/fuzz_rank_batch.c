/*
 * Fuzz target: what another trainer rank reads from rank 0's socket. Any
 * bytes go through the bounded Bootstrap decoder; a command's batch goes
 * through trn_rank_batch_in, and a batch it accepts must hold together
 * (offsets rising from 0 to the token count, every array that long), then
 * survive the trip back out. Crashes, leaks and aborts are findings.
 */
#include "../../services/trainer/trn_err.c"
#include "../../services/trainer/trn_rank_batch.c"
#include "lisa/lisa_codec.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ProtobufCMessage *m = NULL;
    if (lisa_codec_decode(&lisa__bootstrap__descriptor, data, size, 1u << 20,
                          NULL, &m, NULL) != LISA_OK)
        return 0;
    Lisa__Bootstrap *b = (Lisa__Bootstrap *) m;
    if (b->body_case == LISA__BOOTSTRAP__BODY_COMMAND && b->command->batch) {
        trn_rollouts_t r;
        size_t *off = NULL;
        int32_t *tok = NULL;
        trn_err_t err;
        if (trn_rank_batch_in(b->command->batch, &r, &off, &tok, &err) ==
            LISA_OK) {
            size_t nt = r.seq_offsets[r.n_seqs];
            if (r.seq_offsets[0] != 0 || r.n_seqs == 0)
                abort();
            for (size_t s = 0; s < r.n_seqs; s++)
                if (r.seq_offsets[s + 1] <= r.seq_offsets[s])
                    abort();
            volatile uint32_t sum = 0; /* touch every element */
            for (size_t t = 0; t < nt; t++)
                sum +=
                    (uint32_t) r.tokens[t] + r.mask[t] +
                    (r.rollout_logp ? (uint32_t) (r.rollout_logp[t] > 0) : 0u);
            for (size_t s = 0; s < r.n_seqs; s++)
                sum += (uint32_t) r.group[s] + (uint32_t) (r.score[s] > 0);
            (void) sum;
            Lisa__RankBatch back = LISA__RANK_BATCH__INIT;
            uint64_t *o2 = NULL;
            uint32_t *t2 = NULL;
            trn_rank_batch_out(&r, &back, &o2, &t2);
            if (back.n_tokens != nt || back.n_seq_offsets != r.n_seqs + 1 ||
                memcmp(t2, b->command->batch->tokens, nt * sizeof *t2) != 0)
                abort();
            free(o2);
            free(t2);
            free(off);
            free(tok);
        }
    }
    lisa_codec_free(&m);
    return 0;
}
