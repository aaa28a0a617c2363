/*
 * trn_traj: token sequences for training, rebuilt from an attempt's spans.
 *
 * The broker stores one span per chat completion. A span's full sequence
 * is its parent's full sequence (prev_seq; none when -1), then its
 * appended_ids (prompt tokens the model did not sample: tool observations,
 * chat scaffolding; mask 0), then its response_ids (sampled; mask 1, with
 * the engine's log-probs). Spans thus form prefix-exact chains. A span that
 * is no other span's parent ends a sequence, and each such leaf becomes one
 * training sequence: a linear chat gives one sequence, and a new segment
 * (prev_seq = -1, after the agent rewrote its history) starts another one.
 * Every sequence of an attempt shares the attempt's score and group.
 *
 * Spans may arrive in any order; they are sorted by seq. Missing spans (a
 * gap in 0..max seq, fewer than the attempt's expected count, a prev_seq
 * that names no earlier span) are errors with a reason naming the span.
 */
#ifndef TRN_TRAJ_H
#define TRN_TRAJ_H

#include "lisa.pb-c.h"
#include "lisa/lisa_rc.h"

#include <stddef.h>
#include <stdint.h>

#define TRN_TRAJ_MAX_SPANS 4096u /* spans of one attempt */

/* One training sequence (owned arrays of len elements). */
typedef struct {
    int32_t *tokens;
    uint8_t *mask; /* 1: sampled by the model */
    float *logp;   /* engine log-prob where mask is 1, else 0 */
    size_t len;
    uint32_t last_seq;    /* the leaf span */
    uint32_t segment;     /* its segment */
    uint64_t min_version; /* lowest policy_version of its sampled spans */
    uint64_t max_version;
} trn_seq_t;

typedef struct {
    trn_seq_t *seqs;
    size_t n;
} trn_traj_t;

/* Builds the sequences of one attempt from `n` spans (any order, same
 * rollout and attempt). `expected` is the attempt's span count (0: unknown);
 * `max_len` bounds each sequence. LISA_OK; LISA_INVALID with a reason in
 * err (missing or duplicate span, broken chain, logprob count, prompt_len
 * mismatch, token id out of int32); LISA_TOOLARGE over max_len. On error
 * *out is empty. */
lisa_rc_t trn_traj_build(Lisa__Span *const *spans, size_t n, size_t expected,
                         size_t max_len, trn_traj_t *out, char *err,
                         size_t errlen) LISA_NODISCARD;

/* Frees the sequences; safe on an empty or zeroed traj. */
void trn_traj_free(trn_traj_t *t);

#endif
