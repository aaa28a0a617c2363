/*
 * trn_gpu_model: the model of trn_model.h (Qwen3, Llama, Qwen2) on one
 * CUDA device.
 *
 * Weights live on the device as fp32 master copies plus bf16 working
 * copies, in the same tensor order as the CPU model's contiguous parameter
 * array, so q|k|v and gate|up are adjacent rows and each pair runs as one
 * fused matrix product. Activations: the residual stream is fp32; matrix
 * inputs are bf16. Activation recomputation (trn_gpu_model_set_recompute):
 * either every layer's internals are kept from the forward pass, or the
 * backward pass recomputes each layer's internals from its saved input, so
 * memory grows as layers x tokens x hidden_size only; by default the
 * model keeps them when the device has room.
 *
 * The CPU model (services/trainer/cpu/) is the reference; the GPU tests
 * compare log-probabilities and every gradient against it.
 */
#ifndef TRN_GPU_MODEL_H
#define TRN_GPU_MODEL_H

#include "trn_dist.h"
#include "trn_model.h"

typedef struct trn_gpu_model trn_gpu_model_t;

/* A device copy of `src` (config and weights) on the current device; NULL
 * on failure (logged, reason in err). */
trn_gpu_model_t *trn_gpu_model_new(const trn_model_t *src, trn_err_t *err);
/* A model of config `cfg` with weights drawn on the device from
 * N(0, std^2) (norm weights 1), seeded; for benchmarks at real shapes. */
trn_gpu_model_t *trn_gpu_model_new_random(const trn_config_t *cfg,
                                          uint64_t seed, float std,
                                          trn_err_t *err);
/* The model's configuration (borrowed) and parameter count. */
const trn_config_t *trn_gpu_model_config(const trn_gpu_model_t *g);
size_t trn_gpu_model_num_params(const trn_gpu_model_t *g);
/* Frees device memory; safe on NULL and twice. */
void trn_gpu_model_destroy(trn_gpu_model_t **g);

/* Activation recomputation: AUTO keeps every layer's activations when
 * they fit in free device memory with room to spare; else (with
 * LISA_CUDA_LEAN=1, until the lean mode has run on a GPU) it keeps them
 * leanly when that fits (every product's output and the layer inputs, but
 * not the normed inputs of the products, the rotated q|k|v and the SwiGLU
 * output: the backward pass remakes those four with element-wise kernels
 * from what is kept, a few percent of the step, instead of running the
 * layer's products again); else it recomputes each layer (keeping its
 * attention output and log-sum-exp when those fit, so the recomputed
 * forward skips the attention). ON always recomputes everything; OFF
 * always keeps (a forward that does not fit fails with LISA_TOOLARGE);
 * KEEP_ATTN recomputes all but the attention (its outputs kept when they
 * fit); LEAN always keeps leanly. Applies from the next forward. */
enum {
    TRN_RECOMPUTE_AUTO = 0,
    TRN_RECOMPUTE_ON = 1,
    TRN_RECOMPUTE_OFF = 2,
    TRN_RECOMPUTE_KEEP_ATTN = 3,
    TRN_RECOMPUTE_LEAN = 4
};
void trn_gpu_model_set_recompute(trn_gpu_model_t *g, int mode);
/* The most tokens a batch can have on this device now, with every layer
 * recomputed: its buffers and one layer's activations fit the free
 * memory (with the buffers held now, less the spare that keeping
 * activations leaves); at most TRN_MAX_BATCH_TOKENS, 0 when the device
 * does not say. */
size_t trn_gpu_model_max_tokens(trn_gpu_model_t *g);
/* Most rows of the LM head's logits in one chunk (fp32 logits and bf16
 * gradients of `rows` x vocabulary values in memory); 0, the default: up
 * to 4096 when they fit, else 1024. A forward of at most that many tokens
 * keeps its logits for the backward pass instead of recomputing them.
 * Applies from the next forward. */
void trn_gpu_model_set_head_chunk(trn_gpu_model_t *g, size_t rows);
/* Whether the last forward kept every layer's activations, and whether it
 * kept (only) every layer's attention outputs. */
int trn_gpu_model_keeps_activations(const trn_gpu_model_t *g);
/* Whether the last forward kept them leanly (TRN_RECOMPUTE_LEAN's way). */
int trn_gpu_model_keeps_lean(const trn_gpu_model_t *g);
int trn_gpu_model_keeps_attention(const trn_gpu_model_t *g);

/* Device time of the forward and backward passes by kind of work, when
 * the model was made with LISA_CUDA_PHASES=1 (CUDA events around every
 * operation; they cost a little): adds the milliseconds since the last
 * call to ms[0..TRN_GPU_PHASES-1] (names from trn_gpu_model_phase_name)
 * and returns 1; returns 0, adding nothing, when timing is off. */
#define TRN_GPU_PHASES 10
int trn_gpu_model_phases(trn_gpu_model_t *g, double *ms);
const char *trn_gpu_model_phase_name(int i);

/* Forward for training, as trn_model_forward: logp[t] and, when entropy is
 * not NULL, the entropy of each position's distribution (host arrays).
 * Keeps what backward needs. */
lisa_rc_t trn_gpu_model_forward(trn_gpu_model_t *g, const trn_batch_t *b,
                                float *logp, float *entropy,
                                trn_err_t *err) LISA_NODISCARD;
/* Backward of the last forward: adds gradients (device, fp32) given
 * d(loss)/d(logp) and, when not NULL, d(loss)/d(entropy). */
lisa_rc_t trn_gpu_model_backward(trn_gpu_model_t *g, const float *dlogp,
                                 const float *dentropy,
                                 trn_err_t *err) LISA_NODISCARD;
/* Sets every device gradient to zero. */
lisa_rc_t trn_gpu_model_zero_grad(trn_gpu_model_t *g) LISA_NODISCARD;
/* Copies the device gradients into dst's gradients (same config). */
lisa_rc_t trn_gpu_model_download_grads(trn_gpu_model_t *g,
                                       trn_model_t *dst) LISA_NODISCARD;
/* Copies the device fp32 master weights into dst's weights. */
lisa_rc_t trn_gpu_model_download_weights(trn_gpu_model_t *g,
                                         trn_model_t *dst) LISA_NODISCARD;

/* One AdamW step over all parameters with global-norm clipping (clip <= 0:
 * none); *grad_norm (may be NULL) receives the norm before clipping. A
 * non-finite norm skips the update, zeroes the gradients and returns
 * LISA_AGAIN. */
lisa_rc_t trn_gpu_model_adamw(trn_gpu_model_t *g, float lr, float beta1,
                              float beta2, float eps, float weight_decay,
                              float clip, float *grad_norm) LISA_NODISCARD;

/* AdamW state: step count and the m and v arrays (trn_gpu_model_num_params
 * values each, host memory). Data parallel: get is a collective (every
 * rank calls it; m and v may be NULL on ranks that only take part) that
 * gathers the shards; set keeps this rank's shard of the whole arrays
 * (call after trn_gpu_model_set_dist). */
lisa_rc_t trn_gpu_model_get_optim(trn_gpu_model_t *g, uint64_t *step, float *m,
                                  float *v) LISA_NODISCARD;
lisa_rc_t trn_gpu_model_set_optim(trn_gpu_model_t *g, uint64_t step,
                                  const float *m,
                                  const float *v) LISA_NODISCARD;

/* Makes the model one data-parallel replica of `d` (not owned; NULL: back
 * to one rank is not supported). From then on trn_gpu_model_adamw is
 * ZeRO-1: gradients are reduce-scattered (summed, so losses must be
 * normalised by whole-batch counts), each rank keeps and updates only its
 * shard of the fp32 master weights and optimizer state, and the bf16
 * weights are all-gathered; trn_gpu_model_download_weights gathers the
 * master (a collective then, through the gradient buffer, which it
 * zeroes). Call before the first step. */
lisa_rc_t trn_gpu_model_set_dist(trn_gpu_model_t *g,
                                 trn_dist_t *d) LISA_NODISCARD;
/* The communicator context-parallel batches gather over, for a model that
 * does not train data-parallel itself (the frozen reference of a KL
 * term); a model with trn_gpu_model_set_dist uses that one. NULL: the
 * batch's host sum. */
void trn_gpu_model_set_cp_dist(trn_gpu_model_t *g, trn_dist_t *d);
/* Data parallel: whether the gradient's sum across ranks overlaps the
 * backward pass (on by default). On: the gradient is summed in buckets
 * (each layer, then the final norm and the embedding), each started on a
 * communication stream as soon as the backward pass marked by
 * trn_gpu_model_last_backward has finished it, or all at once in
 * trn_gpu_model_adamw when no backward of this rank was marked (a rank
 * without micro-batches). Off: one reduce-scatter after the backward
 * pass. Every rank must use the same setting. */
void trn_gpu_model_set_overlap(trn_gpu_model_t *g, int on);
/* Marks the next backward pass as this rank's last before the optimizer
 * step (its gradients are final once it has passed each layer). */
void trn_gpu_model_last_backward(trn_gpu_model_t *g);

/* --- generation ---------------------------------------------------------
 * A paged KV cache on the device (trn_kv_geom_t, trn_gen_seq_t in
 * trn_model.h): per layer, keys and values of n_blocks blocks of
 * block_size positions ([n_blocks * block_size, Hk*D] bf16 each), a block
 * table of max_seqs rows of max_blocks entries on the device (rows
 * uploaded when they change), and the buffers of a step of up to
 * max_tokens new tokens and max_seqs sequences, allocated once here, so a
 * step never allocates. */
typedef struct trn_gpu_kv trn_gpu_kv_t;

/* Device bytes one block takes (keys and values of every layer). */
size_t trn_gpu_kv_block_bytes(const trn_gpu_model_t *g, size_t block_size);
/* LISA_INVALID (err says why) for a geometry trn_gpu_kv_new refuses
 * whatever the memory: block_size not a power of two up to 1024,
 * max_seqs 0 or over 1024, max_blocks or max_tokens 0 or too large (a
 * sequence over 2^24 positions, a table over 2^24 entries),
 * n_blocks * block_size of 2^31 rows or more, kv_fraction outside [0, 1]. */
lisa_rc_t trn_gpu_kv_geom_check(const trn_gpu_model_t *g,
                                const trn_kv_geom_t *geom,
                                trn_err_t *err) LISA_NODISCARD;
/* Makes the cache; geom->n_blocks 0: as many blocks as kv_bytes (else
 * kv_fraction of the device memory free after the step buffers) hold,
 * and geom->n_blocks is set. NULL on failure (err says why). */
trn_gpu_kv_t *trn_gpu_kv_new(trn_gpu_model_t *g, trn_kv_geom_t *geom,
                             trn_err_t *err);
void trn_gpu_kv_destroy(trn_gpu_kv_t **kv);
/* Whether pure decode steps (one new token per sequence) replay recorded
 * CUDA graphs (the default) or launch every kernel directly; both give the
 * same results. */
void trn_gpu_kv_set_graphs(trn_gpu_kv_t *kv, int on);

/* Sampling of one sequence. temperature <= 0 or top_k == 1: greedy.
 * top_p in (0, 1]; top_k 0: no limit. The logprob reported for a sampled
 * token is log softmax(logits / temperature) over the whole vocabulary
 * (temperature 1 when greedy): what a training forward at the same
 * temperature computes, whatever top_p / top_k truncated. */
typedef struct {
    float temperature;
    float top_p;
    int top_k;
    uint64_t seed; /* mixed with the position, so each step differs */
} trn_sample_t;

/* Runs a step of n sequences (see trn_gen_seq_t): their new tokens'
 * keys and values into their blocks, then for each sequence the logits of
 * its last new token (logits, host n x vocab, may be NULL) and, when `sp`
 * is not NULL, a sampled next token and its logprob (out_tok, out_lp).
 * The sampled token is not appended. Sequences with one new token
 * (decodes) attend through the cache with the decode kernels; longer ones
 * (prompts and prompt chunks after a cached prefix) with the paged
 * prefill kernel. */
lisa_rc_t trn_gpu_model_step(trn_gpu_model_t *g, trn_gpu_kv_t *kv, size_t n,
                             const trn_gen_seq_t *seqs, const trn_sample_t *sp,
                             int32_t *out_tok, float *out_lp, float *logits,
                             trn_err_t *err) LISA_NODISCARD;

/* Device pointers to the fp32 gradient array and its length, for
 * collective reductions across ranks (NULL while the training state is
 * off the device). */
float *trn_gpu_model_grad_buffer(trn_gpu_model_t *g, size_t *n);

/* --- training state ------------------------------------------------------
 * Where the training state lives: the fp32 master weights, the gradients
 * and the AdamW moments (each rank's shard of them when data parallel).
 * on_device 0 copies them to page-locked host memory (kept allocated for
 * the next time) and frees their device memory, and frees the training
 * activations too; 1 allocates them again and copies them back (a
 * gradient known to be zero is not copied, only zeroed). Either way is
 * idempotent and leaves every value bit for bit as it was; the bf16
 * working weights stay on the device throughout, so forwards (training
 * forwards too) and generation run in both phases. While the state is off
 * the device, backward, zero_grad, adamw, the optimizer state's get/set,
 * the weights' and gradients' downloads and set_dist return
 * LISA_CONFLICT. LISA_TOOLARGE when bringing it back does not fit (the
 * state stays on the host). */
lisa_rc_t trn_gpu_model_set_train_state(trn_gpu_model_t *g, int on_device,
                                        trn_err_t *err) LISA_NODISCARD;
/* Whether the training state is on the device. */
int trn_gpu_model_train_state_on_device(const trn_gpu_model_t *g);

/* Optimizer offload (one device): on moves the fp32 master weights and
 * AdamW's moments to page-locked host memory for good (the device keeps
 * the bf16 weights and the fp32 gradient); each update then streams
 * them through the device in chunks, overlapping copies and kernels, with
 * the same arithmetic. Off brings them back. LISA_UNSUPPORTED with data
 * parallel (the moments are sharded there), LISA_CONFLICT while the
 * training state is off the device, LISA_TOOLARGE when memory is short. */
lisa_rc_t trn_gpu_model_set_optim_offload(trn_gpu_model_t *g, int on,
                                          trn_err_t *err) LISA_NODISCARD;
int trn_gpu_model_optim_offloaded(const trn_gpu_model_t *g);
/* Frees the training activations (the next forward makes them again):
 * for the generation phase, whose KV cache takes the memory. */
void trn_gpu_model_free_activations(trn_gpu_model_t *g);

#endif
