/*
 * lisa_spanseq: token sequences rebuilt from an attempt's spans.
 *
 * The broker stores one span per chat completion, linearly: a span holds
 * only what it adds. Its full sequence is its parent's full sequence
 * (prev_seq; none when -1), then its appended_ids (prompt tokens the model
 * did not sample: tool observations, chat scaffolding; mask 0), then its
 * response_ids (sampled; mask 1, with the engine's log-probs). Spans thus
 * form prefix-exact chains, and a trajectory's storage is linear in its
 * length. A span that is no other span's parent ends a sequence, and each
 * such leaf becomes one sequence: a linear chat gives one, and a new
 * segment (prev_seq = -1, after the agent rewrote its history) starts
 * another one.
 *
 * Building is linear too: one pass computes each span's full length from
 * its parent's, and only the leaves' sequences are written out, each by
 * walking its chain back to the root. No span's copy of its parent's
 * sequence is ever made.
 *
 * The trainer (trn_traj) and `lisa export` use this one builder, so what
 * is exported is what would be trained on. Spans may come in any order;
 * they are sorted by seq. An attempt whose spans do not form whole chains
 * is refused with a reason naming the span: a gap in 0..max seq, fewer
 * spans than the attempt's expected count, a duplicate, a prev_seq that
 * names no earlier span or one of another segment, a prompt_len that
 * disagrees with the chain, a logprob count that is not the response's, a
 * token id beyond int32.
 */
#ifndef LISA_SPANSEQ_H
#define LISA_SPANSEQ_H

#include "lisa.pb-c.h"
#include "lisa/lisa_rc.h"

#include <stddef.h>
#include <stdint.h>

#define LISA_SPANSEQ_MAX_SPANS 4096u /* spans of one attempt */

/* One sequence (owned arrays of len elements). */
typedef struct {
    int32_t *tokens;
    uint8_t *mask; /* 1: sampled by the model */
    float *logp;   /* engine log-prob where mask is 1, else 0 */
    size_t len;
    size_t prompt_len;    /* the chain's first prompt (its root's appended
                             ids): the tokens before the first turn's
                             response */
    uint32_t last_seq;    /* the leaf span */
    uint32_t segment;     /* its segment */
    uint64_t min_version; /* lowest policy_version of its sampled spans */
    uint64_t max_version; /* (both 0 when nothing in it was sampled) */
} lisa_spanseq_t;

/* The sequences of one attempt, in the order of their leaves' seq. */
typedef struct {
    lisa_spanseq_t *seqs;
    size_t n;
} lisa_spanseqs_t;

/* Builds the sequences of one attempt from `n` spans (any order, one
 * rollout and attempt). `expected` is the attempt's span count (0:
 * unknown); `max_len` bounds each sequence. LISA_OK; LISA_INVALID with a
 * reason in err (see above); LISA_TOOLARGE over max_len or
 * LISA_SPANSEQ_MAX_SPANS. On error *out is empty. */
lisa_rc_t lisa_spanseq_build(Lisa__Span *const *spans, size_t n,
                             size_t expected, size_t max_len,
                             lisa_spanseqs_t *out, char *err,
                             size_t errlen) LISA_NODISCARD;

/* Frees the sequences; safe on an empty or zeroed value, and twice. */
void lisa_spanseq_free(lisa_spanseqs_t *s);

#endif
