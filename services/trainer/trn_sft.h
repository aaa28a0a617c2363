/*
 * trn_sft: supervised fine-tuning on chat conversations, for warm starts.
 *
 * A conversation (OpenAI messages + tool schemas) is rendered with the
 * model's chat template (lisa_chat, the variant the tokenizer's directory
 * names, as the gateway picks it) and tokenized; the tokens the model
 * would have sampled (each assistant turn after its "<|im_start|>assistant\n"
 * header, up to and including its <|im_end|>) are marked, exactly as the
 * gateway's token trace marks them in a rollout. A step is the mean
 * negative log-likelihood of the marked tokens over a batch of
 * conversations, then global-norm clipping and AdamW (trn_optim).
 *
 * The marking renders the conversation's prefixes and tokenizes the
 * pieces between them separately: exact for tokenizers whose pieces do
 * not merge across those borders (the byte-level tokenizer; every piece
 * border sits next to a special token for Qwen3's too).
 */
#ifndef TRN_SFT_H
#define TRN_SFT_H

#include "lisa/lisa_tokenizer.h"
#include "trn_model.h"
#include "trn_optim.h"
#include "trn_step.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define TRN_SFT_MAX_TOKENS (1u << 20) /* tokens of one conversation */

/* One tokenized conversation: ids and a mask (1: a sampled token). */
typedef struct {
    int32_t *ids;
    uint8_t *mask;
    size_t n;
    size_t prompt_len; /* tokens before the first marked one */
} trn_sft_seq_t;

/* Renders and tokenizes {"messages": [...], "tools": [...]} (tools may be
 * absent). LISA_INVALID (reason in err) for a conversation the template
 * refuses, one without an assistant turn, or one over TRN_SFT_MAX_TOKENS. */
lisa_rc_t trn_sft_encode(lisa_tokenizer_t *tok, json_t *conv,
                         trn_sft_seq_t *out, trn_err_t *err) LISA_NODISCARD;

/* Frees the arrays of a sequence; safe twice. */
void trn_sft_seq_clear(trn_sft_seq_t *s);

typedef struct {
    trn_adamw_cfg_t optim;
    double grad_clip; /* global norm; <= 0: none */
} trn_sft_cfg_t;

/* lr 1e-3, betas 0.9/0.95, wd 0.01, clip 1.0. */
trn_sft_cfg_t trn_sft_defaults(void);

typedef struct {
    double loss;      /* mean NLL per marked token */
    double tokens;    /* marked tokens */
    double accuracy;  /* fraction of marked tokens that are the argmax
                         (estimated as logp > log 0.5) */
    double grad_norm; /* before clipping */
} trn_sft_out_t;

/* One step over seqs[0..n): zero grads, forward + backward of the mean
 * NLL, clip, AdamW. */
lisa_rc_t trn_sft_step(trn_model_t *m, trn_adamw_t *opt,
                       const trn_sft_cfg_t *cfg, const trn_sft_seq_t *seqs,
                       size_t n, trn_sft_out_t *out,
                       trn_err_t *err) LISA_NODISCARD;

/* A batch of conversations as the rollouts a backend trains on
 * (trn_backend_ops_t's train_step and logprobs): tokens back to back, the
 * mask the SFT mask, rollout log-probs zero, no old log-probs (on-policy:
 * ratio 1), each conversation its own group with score 1. Owns its
 * arrays. */
typedef struct {
    trn_rollouts_t r;
    size_t *offs;
    int32_t *tokens;
    uint8_t *mask;
    float *rollout_logp;
    int64_t *group;
    double *score;
    size_t marked; /* marked tokens after the first of each sequence */
} trn_sft_batch_t;

/* Fills *out from seqs[0..n) (at most TRN_MAX_BATCH_TOKENS in all).
 * LISA_INVALID for an empty batch or one with no marked token;
 * LISA_TOOLARGE over the bound. */
lisa_rc_t trn_sft_batch_make(const trn_sft_seq_t *seqs, size_t n,
                             trn_sft_batch_t *out,
                             trn_err_t *err) LISA_NODISCARD;

/* Frees the arrays of a batch; safe twice. */
void trn_sft_batch_clear(trn_sft_batch_t *b);

/* The step configuration whose PPO gradient on a trn_sft_batch_t is the
 * mean NLL's of trn_sft_step: grpo advantages without std normalisation
 * (a group of one: advantage = score - 0 = exactly 1), token-mean, no KL,
 * no entropy term, temperature 1, c's AdamW settings and clip (none:
 * a bound no norm reaches). */
trn_step_cfg_t trn_sft_step_cfg(const trn_sft_cfg_t *c);

/* The mean NLL and token accuracy of a batch from its log-probs
 * (trn_step_logprobs: logp[t] of each marked token t); grad_norm 0. */
void trn_sft_batch_nll(const trn_sft_batch_t *b, const float *logp,
                       trn_sft_out_t *out);

/* Decodes seq's first assistant turn from its prompt (ids[0..prompt_len))
 * at `temperature` (0: greedy; else sampled with *rng, trn_sampler):
 * *match is true when the model reproduces the marked tokens of that turn
 * exactly, through its <|im_end|>. */
lisa_rc_t trn_sft_first_turn_match(trn_model_t *m, const trn_sft_seq_t *seq,
                                   float temperature, uint64_t *rng,
                                   bool *match, trn_err_t *err) LISA_NODISCARD;

#endif
