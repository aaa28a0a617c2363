/*
 * trn_engine: the generation endpoint of the trainer.
 *
 * HTTP (lisa_http_server, internal threads; handlers never block):
 *   POST /v1/completions  token-id prompt -> token ids, per-token logprobs
 *                         of the sampling distribution, finish_reason,
 *                         policy_version, usage with
 *                         prompt_tokens_details.cached_tokens (the shape
 *                         docs/gateway.md, "Engines", requires); `n` up to
 *                         64 choices, each its own sample (seeds derived
 *                         from the request's), the prompt computed once by
 *                         choice 0 and the others forked from its blocks;
 *   GET  /healthz         200 {"status":"ok","policy_version":V,...}.
 * A handler validates the request and puts it in a bounded queue (full:
 * 429 with Retry-After; a prompt the context cannot hold: 400) and keeps
 * the HTTP request. One engine thread schedules (continuous batching over
 * a paged KV cache, docs/trainer-service.md, "The engine"): every step
 * takes one token of each decoding sequence, then chunks of prompts up to
 * the step's token budget; a prompt starts from the longest prefix of
 * full blocks already cached (an earlier turn of its conversation, another
 * sample of its prompt); queued requests are admitted first come first
 * served while blocks are free, keeping those the running sequences are
 * expected to take before they end; when a decode finds no free block the
 * youngest running sequence is preempted (its blocks released, it is
 * queued again at the front and recomputed, mostly from the cache).
 *
 * Weight updates: trn_engine_pause stops admitting (new requests wait in
 * the queue) and returns once every in-flight generation has finished;
 * the caller then owns the backend until trn_engine_resume, which sets the
 * new policy version. Queued requests older than queue_timeout_ms get 503.
 *
 * The engine registers itself with the broker (EngineRegisterReq with a
 * TTL, renewed every ttl / 3, paused flag and policy version included) when
 * a broker endpoint is given; on shutdown it registers once more as paused
 * with a 1 ms TTL, so gateways stop routing to it at once.
 */
#ifndef TRN_ENGINE_H
#define TRN_ENGINE_H

#include "trn_backend.h"

#include <stdint.h>

/* Defaults of the scheduler and the paged cache. */
#define TRN_ENGINE_DEFAULT_MAX_SEQS    256u
#define TRN_ENGINE_DEFAULT_BLOCK       32u
#define TRN_ENGINE_DEFAULT_STEP_TOKENS 4096u

typedef struct {
    const char *address; /* listen address ("127.0.0.1") */
    uint16_t port;       /* 0: ephemeral */
    const char *url;     /* advertised base URL (NULL: http://addr:port) */
    const char *engine_id;
    const char *broker; /* NULL: no registration */
    uint64_t register_ttl_ms;
    size_t max_batch;          /* sequences generating at once (0: 256) */
    size_t max_len;            /* context: prompt + completion (0: the model's
                                  max_position_embeddings) */
    size_t block_size;         /* positions a KV block (0: 32; power of two) */
    size_t max_step_tokens;    /* new tokens a step (0: 4096) */
    size_t kv_bytes;           /* memory for KV blocks (0: kv_fraction) */
    double kv_fraction;        /* of free memory (0: the backend's default) */
    bool no_prefix_cache;      /* every request computes its whole prompt */
    bool offload_train;        /* training state off the device while the
                                  engine serves (backends with train_state) */
    bool time_share;           /* with offload_train: a paused engine gives
                                  its KV memory back and the training state
                                  comes onto the device; resumed, the
                                  reverse */
    size_t queue_max;          /* waiting requests (0: 1024) */
    uint64_t queue_timeout_ms; /* most time a request may wait */
    /* A new request waits while callers answered lately have not all
     * sent their next request and the last answer or request came less
     * than this many ms ago, at most 4 times as long (agents answered
     * together send their next prompts a few ms apart: computed in one
     * step, not over several); 0: never waits */
    uint64_t batch_wait_ms;
    uint64_t policy_version;   /* initial */
    uint64_t seed;             /* for requests without a seed */
    const char *tokenizer_dir; /* its tokenizer files decode sampled tokens
                                  for `stop` strings (NULL: requests with
                                  stop strings get 400) */
} trn_engine_cfg_t;

typedef struct {
    uint64_t requests, completed, rejected_full, rejected_bad, timed_out;
    uint64_t tokens_generated, tokens_prefilled, steps;
    uint64_t shared_tokens; /* prompt positions the choices of an n > 1
                               request took from the first one's blocks by
                               reference instead of computing them */
    uint64_t prompt_tokens, cached_tokens; /* prompts, and their part served
                                              from the prefix cache */
    uint64_t preemptions, step_tokens_max;
    uint64_t computed;      /* positions the backend computed */
    uint64_t recomputed;    /* ... that their sequence had computed before
                               a preemption (not found in the cache) */
    uint64_t preempted_max; /* most preemptions of one sequence */
    uint64_t shed;          /* queued sequences that released their held
                               prefix for others' blocks */
    uint64_t evictions;     /* cached blocks reused for new content */
    uint64_t decode_steps, mixed_steps; /* steps of one token a sequence,
                                           and steps with prompt chunks */
    double decode_s, mixed_s;           /* their time in the backend */
    uint64_t holds; /* times new prompts waited for callers answered
                       lately (batch_wait_ms) */
    uint64_t inflight, queued;
    uint64_t kv_blocks, kv_blocks_used, kv_blocks_cached, block_size;
    uint64_t mem_serve, mem_train, mem_total; /* device bytes in use while
                                                 serving / training */
} trn_engine_stats_t;

typedef struct trn_engine trn_engine_t;

/* Starts the HTTP server and the engine thread over backend `b` (borrowed;
 * the engine calls gen_open). NULL on error (logged). */
trn_engine_t *trn_engine_new(trn_backend_t *b, const trn_engine_cfg_t *cfg);

/* Stops everything (queued and in-flight requests are answered 503). */
void trn_engine_destroy(trn_engine_t **e);

/* The bound port and advertised URL (borrowed). */
uint16_t trn_engine_port(const trn_engine_t *e);
const char *trn_engine_url(const trn_engine_t *e);

/* Stops admitting and waits (up to timeout_ms) for in-flight generations
 * to end. LISA_OK: the backend is the caller's; LISA_TIMEOUT: still busy
 * (the engine stays paused; call again or resume). */
lisa_rc_t trn_engine_pause(trn_engine_t *e, uint64_t timeout_ms);

/* Sets the policy version and admits again. */
void trn_engine_resume(trn_engine_t *e, uint64_t policy_version);

/* Current policy version. */
uint64_t trn_engine_policy_version(trn_engine_t *e);

/* Counters snapshot. */
trn_engine_stats_t trn_engine_stats(trn_engine_t *e);

#endif
