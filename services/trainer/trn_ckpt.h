/*
 * trn_ckpt: training checkpoints.
 *
 * <out>/global_step_<N>/ is a Hugging Face model directory (config.json,
 * model.safetensors, the tokenizer files copied from the model directory)
 * that transformers and trn_model_load open as is, plus
 *   optimizer.bin       AdamW state (trn_optim_state_save format);
 *   trainer_state.json  {"global_step", "policy_version", "run_id",
 *                        "data_seed", "train_batch_size", "n_train"}.
 * The directory is written as global_step_<N>.tmp and renamed when
 * complete, and <out>/latest_checkpointed_iteration.txt then names N.
 * Resuming opens the model from the checkpoint directory and reads the
 * optimizer and the state back; the data position follows from
 * global_step (the order of each epoch is a function of the seed).
 */
#ifndef TRN_CKPT_H
#define TRN_CKPT_H

#include "trn_backend.h"

#include <stdint.h>

typedef struct {
    uint64_t global_step;
    uint64_t policy_version;
    char run_id[128];
    uint64_t data_seed;
    uint64_t batch_size;
    uint64_t n_train;
} trn_ckpt_state_t;

/* Writes <out>/global_step_<step>/ (see above); `dir_out` (may be NULL,
 * size dir_len) receives its path. */
lisa_rc_t trn_ckpt_save(trn_backend_t *b, const char *out,
                        const trn_ckpt_state_t *st, bool bf16, char *dir_out,
                        size_t dir_len, trn_err_t *err) LISA_NODISCARD;

/* Reads trainer_state.json and optimizer.bin of checkpoint `dir` into the
 * backend (whose model was loaded from `dir`). */
lisa_rc_t trn_ckpt_load(trn_backend_t *b, const char *dir, trn_ckpt_state_t *st,
                        trn_err_t *err) LISA_NODISCARD;

#endif
