/*
 * trn_model: a causal language model of the Qwen3 / Llama / Qwen2 family,
 * as the trainer sees it.
 *
 * This is the one interface between the trainer's logic (GRPO losses,
 * optimizer, generation endpoint) and a compute backend. It speaks plain C:
 * host pointers, int32 token ids, float32 values; no backend types leak
 * through it. The CPU backend (services/trainer/cpu/) is the fp32 reference
 * that reproduces Hugging Face transformers' modeling_qwen3 op for op; a
 * CUDA backend implements the same contract. Llama's layer is Qwen3's
 * without the per-head q/k norms; Qwen2's (and Qwen2.5's) is Llama's with
 * biases on the q, k and v projections (trn_family_t).
 *
 * What it covers:
 * - the configuration, parsed from a Hugging Face config.json;
 * - weights, loaded from safetensors (one file, or shards listed in
 *   model.safetensors.index.json; F32, BF16 or F16 on disk, fp32 in memory)
 *   and saved back as safetensors + config.json that transformers loads;
 * - generation: a paged KV cache (blocks of positions, a block table per
 *   sequence, blocks shared between sequences with a common prefix) and
 *   one call that appends tokens to any number of sequences and returns
 *   the next-token logits of each (prefill, chunks of prefill after a
 *   cached prefix and decode are the same call);
 * - training: forward over packed sequences returning the log-probability
 *   of a chosen target token per position (the vocabulary projection runs
 *   over chunks of positions, so T x V logits never exist at once), then
 *   backward given d(loss)/d(logprob) per position, accumulating gradients
 *   into every parameter.
 *
 * Errors: functions that read input return a lisa_rc_t, log one line and,
 * when `err` is not NULL, leave a human-readable reason in err->msg.
 *
 * A model is driven by one thread at a time; it runs its own worker
 * threads inside each call.
 */
#ifndef TRN_MODEL_H
#define TRN_MODEL_H

#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRN_ERR_MAX 256

/* A reason for the last failure, for people. */
typedef struct {
    char msg[TRN_ERR_MAX];
} trn_err_t;

/* Bounds that keep sizes computed from a config.json far from overflow. */
#define TRN_MAX_HIDDEN       65536
#define TRN_MAX_LAYERS       1024
#define TRN_MAX_HEADS        1024
#define TRN_MAX_HEAD_DIM     1024
#define TRN_MAX_VOCAB        (1 << 24)
#define TRN_MAX_POSITIONS    (1 << 24)
#define TRN_MAX_CONFIG_LEN   (1u << 20)
#define TRN_MAX_BATCH_TOKENS (1u << 22) /* tokens in one training batch */
#define TRN_MAX_KV_SLOTS     (1u << 16) /* sequences in one KV cache */

/* The family of a model, from config.json's model_type (or, without one,
 * its architectures). The first value is 0, so a zeroed config is Qwen3. */
typedef enum {
    TRN_FAMILY_QWEN3 = 0, /* per-head RMSNorm of q and k, no biases */
    TRN_FAMILY_LLAMA,     /* no q/k norms, no biases */
    TRN_FAMILY_QWEN2,     /* no q/k norms, biases on q, k and v */
} trn_family_t;

/* The architecture numbers of a model (names as in config.json). */
typedef struct {
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads;
    int64_t head_dim;
    int64_t vocab_size;
    int64_t max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    bool tie_word_embeddings;
    trn_family_t family;
} trn_config_t;

/* Whether the family norms q and k per head (Qwen3). */
static inline bool
trn_config_qk_norm(const trn_config_t *c)
{
    return c->family == TRN_FAMILY_QWEN3;
}

/* Whether the family has biases on the q, k and v projections (Qwen2). */
static inline bool
trn_config_qkv_bias(const trn_config_t *c)
{
    return c->family == TRN_FAMILY_QWEN2;
}

/* config.json's model_type of a family ("qwen3", "llama", "qwen2"). */
const char *trn_family_model_type(trn_family_t f);
/* Its transformers class ("Qwen3ForCausalLM", ...). */
const char *trn_family_architecture(trn_family_t f);

/* On-disk dtype of saved weights. */
typedef enum { TRN_SAVE_F32 = 0, TRN_SAVE_BF16 = 1 } trn_save_dtype_t;

/* Parses config.json text. The family comes from model_type ("qwen3",
 * "llama", "qwen2"), else from architectures[0] (Qwen3ForCausalLM,
 * LlamaForCausalLM, Qwen2ForCausalLM), else Qwen3. Required: hidden_size,
 * intermediate_size, num_hidden_layers, num_attention_heads, vocab_size.
 * Optional, with transformers' defaults: num_key_value_heads (= heads),
 * head_dim (= hidden / heads), rms_norm_eps (1e-6), rope_theta (10000;
 * also read from rope_parameters.rope_theta), max_position_embeddings
 * (32768; Llama 2048), tie_word_embeddings (false). Refuses other model
 * types, biases the family does not have (attention_bias, mlp_bias),
 * sliding windows, RoPE scaling and inconsistent numbers (LISA_INVALID or
 * LISA_UNSUPPORTED). */
lisa_rc_t trn_config_parse(const char *json, size_t len, trn_config_t *out,
                           trn_err_t *err) LISA_NODISCARD;

/* Reads and parses `path` (at most TRN_MAX_CONFIG_LEN bytes). */
lisa_rc_t trn_config_load(const char *path, trn_config_t *out,
                          trn_err_t *err) LISA_NODISCARD;

/* Checks the numbers of a filled config (what trn_config_parse applies). */
lisa_rc_t trn_config_validate(const trn_config_t *cfg,
                              trn_err_t *err) LISA_NODISCARD;

/* Parameter count (elements) of a model with this config. */
size_t trn_config_num_params(const trn_config_t *cfg);

typedef struct trn_model trn_model_t;

/* A model with weights drawn from N(0, std^2) (norm weights 1), seeded;
 * for tests. `threads` is the worker count for big matmuls (>= 1). NULL if
 * the config is invalid. */
trn_model_t *trn_model_new_random(const trn_config_t *cfg, uint64_t seed,
                                  float std, int threads);

/* Loads a Hugging Face model directory: config.json plus model.safetensors
 * or (when there is none) model.safetensors.index.json and its shards. Every
 * tensor the config needs must be present with the right shape; lm_head.weight
 * is required when the embeddings are untied and ignored when tied. When
 * `dir` is a file, it is read as GGUF (trn_gguf.h: config from the
 * metadata, tensors dequantized, tied when there is no output.weight). */
lisa_rc_t trn_model_load(const char *dir, int threads, trn_model_t **out,
                         trn_err_t *err) LISA_NODISCARD;

/* Writes config.json and model.safetensors into `dir` (which must exist),
 * in F32 or BF16 (round to nearest even). Tied models store no
 * lm_head.weight, as transformers does. config.json is the loaded one with
 * sizes and dtype updated; tokenizer, chat-template and generation files of
 * the directory the model was loaded from are copied along; a stale
 * model.safetensors.index.json in `dir` is removed. */
lisa_rc_t trn_model_save(const trn_model_t *m, const char *dir,
                         trn_save_dtype_t dtype, trn_err_t *err) LISA_NODISCARD;

/* Frees the model; safe on NULL and twice. */
void trn_model_destroy(trn_model_t **m);

/* The model's configuration (borrowed). */
const trn_config_t *trn_model_config(const trn_model_t *m);

/* Number of parameter tensors (tied models have no lm_head tensor). */
size_t trn_model_num_tensors(const trn_model_t *m);
/* Hugging Face name of tensor i, e.g. "model.layers.0.mlp.up_proj.weight". */
const char *trn_model_tensor_name(const trn_model_t *m, size_t i);
/* Rank (1 or 2) and shape of tensor i; shape has room for 2. */
int trn_model_tensor_shape(const trn_model_t *m, size_t i, int64_t shape[2]);
/* Element count of tensor i. */
size_t trn_model_tensor_numel(const trn_model_t *m, size_t i);
/* fp32 values of tensor i (writable: the optimizer updates them). */
float *trn_model_tensor_data(trn_model_t *m, size_t i);
/* fp32 gradient of tensor i, accumulated by trn_model_backward. */
float *trn_model_tensor_grad(trn_model_t *m, size_t i);
/* Index of the tensor named `name`, or -1. */
long trn_model_tensor_find(const trn_model_t *m, const char *name);
/* All parameters as one contiguous array (tensors in index order), and the
 * gradients likewise; trn_model_num_params elements each. */
float *trn_model_params(trn_model_t *m);
float *trn_model_grads(trn_model_t *m);
size_t trn_model_num_params(const trn_model_t *m);
/* Sets every gradient to zero. */
void trn_model_zero_grad(trn_model_t *m);

/* Positions per chunk of the vocabulary projection in training (>= 1;
 * default 32). Results do not depend on it. */
void trn_model_set_logits_chunk(trn_model_t *m, size_t rows);

/* Context parallelism: one batch's positions spread over the ranks of a
 * context group, for sequences longer than one device holds. Each rank
 * computes only its own rows (every projection, the MLP, the vocabulary
 * projection, the loss); attention meets the other ranks' keys and values
 * through `sum`: per layer, the keys and values of the whole batch are
 * gathered (each rank writes its rows into a zeroed [n_global] buffer, then
 * the buffers are summed), and in the backward their gradients are summed
 * the same way and each rank keeps its rows'. Every rank of the group calls
 * forward and backward together with the same global layout; the
 * parameters' gradients of the ranks add up to those of the whole batch on
 * one rank (the caller sums them, as data parallel does). */
typedef struct {
    const size_t *rows; /* rows[i]: global index of local row i, increasing */
    size_t n_global;    /* tokens of the whole batch */
    int rank, world;    /* this rank in the group (the GPU model's host sum
                         * divides the attention's heads by them) */
    void *self;
    /* In-place sum of n floats over the group; every rank gets the total.
     * Every rank calls it in the same order. */
    lisa_rc_t (*sum)(void *self, float *v, size_t n, trn_err_t *err);
} trn_cp_t;

/* Rows of rank `rank` of `world` under the balanced causal split: each
 * sequence is cut into 2 x world nearly equal chunks and rank r takes chunk
 * r and chunk 2 x world - 1 - r, so every rank gets about the same share of
 * the attention's (triangular) work. Writes the global indices, in order,
 * into rows (room for seq_offsets[n_seqs] entries) and returns their
 * count. */
size_t trn_cp_rows(const size_t *seq_offsets, size_t n_seqs, int rank,
                   int world, size_t *rows);

/* The KV heads rank `rank` of `world` takes where the attention is
 * divided by heads (the GPU model): [*k0, *k1) of Hk, runs in rank order
 * as even as they come (rank r: [Hk r / W, Hk (r + 1) / W)); with more
 * ranks than heads some take none. */
void trn_cp_heads(int Hk, int rank, int world, int *k0, int *k1);

typedef struct trn_batch trn_batch_t;

/* This rank's share of a whole batch under the balanced split: its rows
 * into rows, their tokens and targets into tok and tgt (room for the
 * whole batch's n_tokens each), cp's rows, n_global, rank and world, and
 * *part: the batch of those rows with cp set (the caller sets cp->sum and
 * cp->self). Returns the row count. */
size_t trn_cp_part(const trn_batch_t *whole, int rank, int world, size_t *rows,
                   int32_t *tok, int32_t *tgt, trn_cp_t *cp, trn_batch_t *part);

/* One training batch: `n_tokens` token ids packed back to back, split into
 * sequences by `seq_offsets` (n_seqs + 1 increasing offsets, first 0, last
 * n_tokens). Positions restart at 0 in each sequence and no token attends
 * to another sequence. targets[t] is the token whose log-probability is
 * wanted at position t (normally the next token of the same sequence), or
 * -1 for none. Logits are divided by `temperature` (> 0) first.
 *
 * With `cp` (context parallelism, NULL otherwise): tokens and targets are
 * this rank's n_tokens rows (cp->rows; n_tokens may be 0), and
 * seq_offsets / n_seqs describe the whole batch of cp->n_global tokens.
 * The CPU reference divides all the work; the GPU model (trn_gpu_cp.c)
 * all but the attention, which every rank runs over the whole batch. */
struct trn_batch {
    const int32_t *tokens;
    const int32_t *targets;
    size_t n_tokens;
    const size_t *seq_offsets;
    size_t n_seqs;
    float temperature;
    const trn_cp_t *cp;
};

/* Forward for training (at most TRN_MAX_BATCH_TOKENS tokens, else
 * LISA_TOOLARGE): logp[t] = log softmax(logits_t / T)[targets[t]]
 * and, when `entropy` is not NULL, entropy[t] = the entropy of that
 * distribution (both 0 where targets[t] < 0). Keeps the activations for
 * trn_model_backward; the batch's arrays must stay valid until then. */
lisa_rc_t trn_model_forward(trn_model_t *m, const trn_batch_t *b, float *logp,
                            float *entropy, trn_err_t *err) LISA_NODISCARD;

/* Backward of the last trn_model_forward: adds d(loss)/d(param) to the
 * gradients, given dlogp[t] = d(loss)/d(logp[t]) for each position and
 * optionally dentropy[t] = d(loss)/d(entropy[t]) (NULL: zero). */
lisa_rc_t trn_model_backward(trn_model_t *m, const float *dlogp,
                             const float *dentropy,
                             trn_err_t *err) LISA_NODISCARD;

/* Logits of every position of one sequence (n x vocab, row-major) without
 * a cache; for tests and small inputs. */
lisa_rc_t trn_model_logits(trn_model_t *m, const int32_t *tokens, size_t n,
                           float *logits, trn_err_t *err) LISA_NODISCARD;

/* ---- generation: a paged KV cache ------------------------------------
 * Keys and values live in fixed-size blocks of `block_size` positions (a
 * power of two); a sequence is a list of blocks (its block table), so the
 * cache holds as many sequences of any length as its blocks allow, and a
 * block may appear in several sequences' tables (a shared prefix). The
 * caller (the engine's block manager) owns the tables and decides which
 * blocks a step writes; a step writes only positions start..start+n_new-1
 * of each sequence and reads positions 0..start+n_new-1. */
typedef struct {
    size_t block_size;  /* positions a block: a power of two, 1..1024 */
    size_t n_blocks;    /* blocks; 0: the backend sizes the cache from
                           memory (kv_bytes, else kv_fraction of what is
                           free) and sets it */
    size_t max_seqs;    /* sequences in one step, rows of the table */
    size_t max_blocks;  /* blocks one sequence may have */
    size_t max_tokens;  /* new tokens in one step (its buffers) */
    size_t kv_bytes;    /* memory for the blocks (0: kv_fraction) */
    double kv_fraction; /* of free memory after the step buffers (0: 0.9) */
} trn_kv_geom_t;

/* One sequence of a step. */
typedef struct {
    size_t slot;           /* its row in the block table, < max_seqs;
                              distinct within a step */
    const int32_t *blocks; /* its block table: block ids < n_blocks, at
                              least ceil((start + n_new) / block_size) */
    size_t n_blocks;       /* entries of `blocks`, <= max_blocks */
    size_t start;          /* positions already in the cache */
    const int32_t *tokens; /* the new tokens, positions start.. */
    size_t n_new;          /* > 0 */
} trn_gen_seq_t;

/* Checks a step's sequences against a geometry and a vocabulary:
 * LISA_INVALID (err says which) for a bad slot, block id, token or a slot
 * twice; LISA_TOOLARGE for more sequences or tokens than the geometry's
 * step, or a table too short for the sequence. Backends call it first. */
lisa_rc_t trn_gen_check(const trn_kv_geom_t *geom, size_t vocab, size_t n,
                        const trn_gen_seq_t *seqs,
                        trn_err_t *err) LISA_NODISCARD;

/* Bytes one block of the CPU cache takes (fp32 keys and values of every
 * layer). */
size_t trn_kv_block_bytes(const trn_model_t *m, size_t block_size);

/* A paged cache (fp32) for model `m`. geom->n_blocks 0: from kv_bytes
 * (0: 256 MiB). NULL on bad sizes. */
typedef struct trn_kv trn_kv_t;
trn_kv_t *trn_kv_new(const trn_model_t *m, trn_kv_geom_t *geom);
/* Frees the cache; safe on NULL and twice. */
void trn_kv_destroy(trn_kv_t **kv);
/* The geometry the cache was made with (borrowed). */
const trn_kv_geom_t *trn_kv_geom(const trn_kv_t *kv);

/* Runs the step: appends each sequence's new tokens at positions start..
 * (their keys and values written into their blocks) and writes the
 * logits of each sequence's last new token into logits[i * vocab]. */
lisa_rc_t trn_model_step(trn_model_t *m, trn_kv_t *kv, size_t n,
                         const trn_gen_seq_t *seqs, float *logits,
                         trn_err_t *err) LISA_NODISCARD;

/* A contiguous helper for one sequence (tests, SFT checks, benchmarks):
 * a table of blocks 0, 1, ... in `blocks` (at least n_blocks entries) for
 * slot `slot` of a geometry whose blocks are laid out slot after slot. */
void trn_gen_seq_contiguous(trn_gen_seq_t *s, int32_t *blocks,
                            const trn_kv_geom_t *geom, size_t slot,
                            size_t start, const int32_t *tokens, size_t n_new);

#endif
