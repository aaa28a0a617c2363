/*
 * trn_traj: token sequences for training, rebuilt from an attempt's spans.
 *
 * The sequences are lisa_spanseq's (the same builder `lisa export` uses,
 * so what is exported is what is trained on): one per span no other span
 * continues, its tokens the chain's appended and response ids, the mask on
 * the sampled ids with the engine's log-probs there. Every sequence of an
 * attempt shares the attempt's score and group. This module adds the
 * trainer's view: the names the training step uses, and a warning in the
 * log for an attempt whose spans are refused.
 */
#ifndef TRN_TRAJ_H
#define TRN_TRAJ_H

#include "lisa.pb-c.h"
#include "lisa/lisa_rc.h"
#include "lisa/lisa_spanseq.h"

#include <stddef.h>
#include <stdint.h>

#define TRN_TRAJ_MAX_SPANS LISA_SPANSEQ_MAX_SPANS /* spans of one attempt */

/* One training sequence (tokens, mask, logp of len elements; last_seq,
 * segment, min/max policy version of its sampled spans). */
typedef lisa_spanseq_t trn_seq_t;

/* The sequences of one attempt. */
typedef lisa_spanseqs_t trn_traj_t;

/* Builds the sequences of one attempt from `n` spans (any order, same
 * rollout and attempt). `expected` is the attempt's span count (0: unknown);
 * `max_len` bounds each sequence. LISA_OK; LISA_INVALID with a reason in
 * err (missing or duplicate span, broken chain, logprob count, prompt_len
 * mismatch, token id out of int32); LISA_TOOLARGE over max_len. On error
 * *out is empty and the reason is logged. */
lisa_rc_t trn_traj_build(Lisa__Span *const *spans, size_t n, size_t expected,
                         size_t max_len, trn_traj_t *out, char *err,
                         size_t errlen) LISA_NODISCARD;

/* Frees the sequences; safe on an empty or zeroed traj. */
void trn_traj_free(trn_traj_t *t);

#endif
