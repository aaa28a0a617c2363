/*
 * A small random Qwen3 model saved into a fresh temporary directory, for
 * the trainer's unit tests that need a model directory (engine, data
 * parallel). Header-only: each test file is its own program.
 */
#ifndef TRN_TINY_MODEL_H
#define TRN_TINY_MODEL_H

#include "trn_model.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Saves a 32-wide, `layers`-layer random model (weights from `seed`) of
 * `context` positions into a new directory named from `prefix`, written
 * to dir. */
static inline void
trn_tiny_model_dir_ctx(char *dir, size_t len, const char *prefix,
                       int64_t layers, uint64_t seed, int64_t context)
{
    trn_config_t c = {.hidden_size = 32,
                      .intermediate_size = 64,
                      .num_hidden_layers = layers,
                      .num_attention_heads = 2,
                      .num_key_value_heads = 1,
                      .head_dim = 16,
                      .vocab_size = 64,
                      .max_position_embeddings = context,
                      .rms_norm_eps = 1e-6,
                      .rope_theta = 10000,
                      .tie_word_embeddings = true};
    trn_model_t *m = trn_model_new_random(&c, seed, 0.5f, 1);
    cr_assert(m);
    snprintf(dir, len, "/tmp/%s.XXXXXX", prefix);
    cr_assert(mkdtemp(dir));
    trn_err_t err;
    cr_assert_eq(trn_model_save(m, dir, TRN_SAVE_F32, &err), LISA_OK, "%s",
                 err.msg);
    trn_model_destroy(&m);
}

/* The same with 256 positions. */
static inline void
trn_tiny_model_dir(char *dir, size_t len, const char *prefix, int64_t layers,
                   uint64_t seed)
{
    trn_tiny_model_dir_ctx(dir, len, prefix, layers, seed, 256);
}

#endif
