/*
 * trn_sampler: picks the next token from a row of logits.
 *
 * Generation for rollouts: temperature, then top-k, then top-p (nucleus)
 * over the tokens that survive, then a draw from a seeded generator, so a
 * request with a seed is reproducible. Temperature 0 means greedy.
 *
 * The log-probability reported with each token is the one the trainer
 * recomputes: log softmax(logits / T) over the whole vocabulary, before
 * top-k/top-p truncation (with both off it is also what was sampled from).
 * Greedy reports log softmax(logits) at T = 1.
 */
#ifndef TRN_SAMPLER_H
#define TRN_SAMPLER_H

#include "trn_model.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    float temperature; /* 0: greedy */
    int32_t top_k;     /* <= 0: off */
    float top_p;       /* in (0, 1]; 1: off */
} trn_sampling_t;

/* A generator state from a seed (splitmix64; any seed is fine). */
uint64_t trn_rng_seed(uint64_t seed);

/* Uniform double in [0, 1) from *state, advancing it. */
double trn_rng_uniform(uint64_t *state);

/* Draws a token from logits[V] under s; writes it and its log-probability
 * (see above). LISA_INVALID for bad settings (negative or non-finite
 * temperature, top_p outside (0, 1]) or logits that are all -inf or NaN. */
lisa_rc_t trn_sample(const float *logits, size_t V, const trn_sampling_t *s,
                     uint64_t *rng, int32_t *token, float *logprob,
                     trn_err_t *err) LISA_NODISCARD;

#endif
