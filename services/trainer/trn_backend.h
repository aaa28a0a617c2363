/*
 * trn_backend: what the trainer service needs from a compute backend, as a
 * small vtable, so the CPU reference (trn_model + trn_step) and a CUDA
 * model plug into the same engine and loop.
 *
 * One thread drives a backend at a time: the engine thread for generation,
 * the loop thread for training, never both (the engine is paused while a
 * step runs).
 */
#ifndef TRN_BACKEND_H
#define TRN_BACKEND_H

#include "trn_model.h"
#include "trn_sampler.h"
#include "trn_step.h"

#include <stddef.h>
#include <stdint.h>

typedef struct trn_backend trn_backend_t;

#define TRN_BACKEND_DIST_ID_BYTES 128

typedef struct {
    const char *name;
    /* Opens the paged KV cache of `geom` (replaces any); geom->n_blocks 0:
     * sized from memory, and set to what was made. */
    lisa_rc_t (*gen_open)(trn_backend_t *b, trn_kv_geom_t *geom,
                          trn_err_t *err);
    /* Frees the KV cache and the step buffers (the memory goes back to
     * training); gen_open makes them again. Safe when none is open. */
    void (*gen_close)(trn_backend_t *b);
    /* Runs a step of n sequences (trn_model_step) and writes each one's
     * next-token logits (n x vocab). */
    lisa_rc_t (*gen_step)(trn_backend_t *b, size_t n, const trn_gen_seq_t *seqs,
                          float *logits, trn_err_t *err);
    /* Optional (NULL: the engine samples on the host from gen_step's
     * logits): runs the step like gen_step and draws each sequence's next
     * token on the device under samp[i] with seeds[i] (mixed with the
     * position), writing the token and its log-probability (log softmax
     * of logits / T over the whole vocabulary, as trn_sampler). The drawn
     * token is not appended. For backends whose logits should stay on the
     * device (trn_gpu_model_step with a sampler). */
    lisa_rc_t (*gen_sample)(trn_backend_t *b, size_t n,
                            const trn_gen_seq_t *seqs,
                            const trn_sampling_t *samp, const uint64_t *seeds,
                            int32_t *out_tok, float *out_lp, trn_err_t *err);
    /* Optional (NULL: training state always resident): where the
     * training state (fp32 master weights, gradients, optimizer moments)
     * lives. on_device 0 moves it to page-locked host memory and frees its
     * device memory (while rollouts run); 1 brings it back (before a
     * train_step, after gen_close). The bf16 working weights stay on the
     * device in both phases. Idempotent. */
    lisa_rc_t (*train_state)(trn_backend_t *b, int on_device, trn_err_t *err);
    /* Optional: device memory in use and total (bytes), for the engine's
     * metrics; NULL or 0 where the backend has no device. */
    void (*mem_info)(trn_backend_t *b, size_t *used, size_t *total);
    /* One optimizer step over finished rollouts (trn_step_run). */
    lisa_rc_t (*train_step)(trn_backend_t *b, const trn_step_cfg_t *cfg,
                            const trn_rollouts_t *r, trn_step_out_t *out,
                            trn_err_t *err);
    /* Trainer log-probs of the sampled tokens (trn_step_logprobs): to
     * compare with the engine's. */
    lisa_rc_t (*logprobs)(trn_backend_t *b, const trn_step_cfg_t *cfg,
                          const trn_rollouts_t *r, float *logp, trn_err_t *err);
    /* Writes a Hugging Face directory (config.json, model.safetensors,
     * tokenizer files) into existing `dir`. dir NULL: another rank's part
     * of a data-parallel save (takes part in gathering sharded state,
     * writes nothing); the same for save_optim's path. */
    lisa_rc_t (*save)(trn_backend_t *b, const char *dir, trn_save_dtype_t dt,
                      trn_err_t *err);
    /* Writes / reads the optimizer state to / from a file. */
    lisa_rc_t (*save_optim)(trn_backend_t *b, const char *path, trn_err_t *err);
    lisa_rc_t (*load_optim)(trn_backend_t *b, const char *path, trn_err_t *err);
    const trn_config_t *(*config)(const trn_backend_t *b);
    /* Optional (NULL: gradients cross ranks through the step's trn_comm_t
     * on the host): a device communicator for data parallel. dist_id
     * makes rank 0's unique id (TRN_BACKEND_DIST_ID_BYTES); dist_join
     * joins it as `rank` of `world` (every rank at once, before any step
     * or optimizer state is loaded), within timeout_ms; from then on every
     * device wait also polls peers_ok(ctx) (may be NULL) and fails at once
     * when it returns 0 (another rank went away). */
    lisa_rc_t (*dist_id)(trn_backend_t *b, uint8_t *id, trn_err_t *err);
    lisa_rc_t (*dist_join)(trn_backend_t *b, const uint8_t *id, int rank,
                           int world, int timeout_ms, int (*peers_ok)(void *),
                           void *ctx, trn_err_t *err);
    void (*destroy)(trn_backend_t *b);
} trn_backend_ops_t;

struct trn_backend {
    const trn_backend_ops_t *ops;
};

/* The CPU reference backend over a model directory; `kl` loads a second
 * copy as the frozen reference model. NULL on error (err says why). */
trn_backend_t *trn_backend_cpu_new(const char *model_dir, int threads, bool kl,
                                   trn_err_t *err);

/* The CUDA backend (built when LISA_HAVE_CUDA): the model on device
 * LISA_CUDA_DEVICE (default 0), generation and training on the GPU. */
trn_backend_t *trn_backend_cuda_new(const char *model_dir, int threads, bool kl,
                                    trn_err_t *err);

/* Opens a backend by name ("cpu"; "cuda" when built in). */
trn_backend_t *trn_backend_new(const char *name, const char *model_dir,
                               int threads, bool kl, trn_err_t *err);

/* Destroys through the vtable; safe on NULL and twice. */
void trn_backend_destroy(trn_backend_t **b);

/* The optimizer state file format (shared by backends): magic "LISAOPT1",
 * u64 step, u64 n, then n floats m, n floats v, little-endian. */
lisa_rc_t trn_optim_state_save(const char *path, uint64_t step, const float *m,
                               const float *v, size_t n,
                               trn_err_t *err) LISA_NODISCARD;
lisa_rc_t trn_optim_state_load(const char *path, uint64_t *step, float *m,
                               float *v, size_t n,
                               trn_err_t *err) LISA_NODISCARD;

#endif
