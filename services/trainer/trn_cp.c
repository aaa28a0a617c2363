/*
 * trn_cp: the balanced causal split of context parallelism (trn_model.h).
 *
 * Under a causal mask a position attends to every earlier one, so the
 * later part of a sequence costs more than the earlier part. Cutting each
 * sequence into 2 x world chunks and giving rank r chunks r and
 * 2 x world - 1 - r pairs a cheap chunk with an expensive one: every rank
 * gets the same number of positions (within one per chunk) and about the
 * same attention work.
 */
#include "trn_model.h"

size_t
trn_cp_rows(const size_t *seq_offsets, size_t n_seqs, int rank, int world,
            size_t *rows)
{
    size_t n = 0;
    if (world < 1 || rank < 0 || rank >= world)
        return 0;
    size_t parts = 2 * (size_t) world;
    size_t mine[2] = {(size_t) rank, parts - 1 - (size_t) rank};
    for (size_t s = 0; s < n_seqs; s++) {
        size_t a = seq_offsets[s], len = seq_offsets[s + 1] - a;
        for (int k = 0; k < 2; k++) {
            size_t c = mine[k];
            for (size_t t = len * c / parts; t < len * (c + 1) / parts; t++)
                rows[n++] = a + t;
        }
    }
    return n;
}

size_t
trn_cp_part(const trn_batch_t *whole, int rank, int world, size_t *rows,
            int32_t *tok, int32_t *tgt, trn_cp_t *cp, trn_batch_t *part)
{
    size_t n =
        trn_cp_rows(whole->seq_offsets, whole->n_seqs, rank, world, rows);
    for (size_t i = 0; i < n; i++) {
        tok[i] = whole->tokens[rows[i]];
        tgt[i] = whole->targets[rows[i]];
    }
    cp->rows = rows;
    cp->n_global = whole->n_tokens;
    cp->rank = rank;
    cp->world = world;
    *part = *whole;
    part->tokens = tok;
    part->targets = tgt;
    part->n_tokens = n;
    part->cp = cp;
    return n;
}

void
trn_cp_heads(int Hk, int rank, int world, int *k0, int *k1)
{
    if (Hk < 1 || world < 1 || rank < 0 || rank >= world) {
        *k0 = *k1 = 0;
        return;
    }
    *k0 = (int) ((long) Hk * rank / world);
    *k1 = (int) ((long) Hk * (rank + 1) / world);
}
