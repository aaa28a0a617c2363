/*
 * trn_engine: the generation endpoint of the trainer.
 *
 * HTTP (lisa_http_server, internal threads; handlers never block):
 *   POST /v1/completions  token-id prompt -> token ids, per-token logprobs
 *                         of the sampling distribution, finish_reason,
 *                         policy_version (the shape docs/gateway.md,
 *                         "Engines", requires);
 *   GET  /healthz         200 {"status":"ok","policy_version":V,...}.
 * A handler validates the request and puts it in a bounded queue (full:
 * 429) and keeps the HTTP request; one engine thread admits queued requests
 * into free KV slots and steps every active sequence together (prefill of
 * new prompts and one decode token of the others in the same call), samples
 * with trn_sample and answers each request when it stops.
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

/* Positions per KV slot when the config leaves it 0 (capped by the
 * model's max_position_embeddings). */
#define TRN_ENGINE_DEFAULT_MAX_LEN 16384u

typedef struct {
    const char *address; /* listen address ("127.0.0.1") */
    uint16_t port;       /* 0: ephemeral */
    const char *url;     /* advertised base URL (NULL: http://addr:port) */
    const char *engine_id;
    const char *broker; /* NULL: no registration */
    uint64_t register_ttl_ms;
    size_t max_batch;          /* KV slots */
    size_t max_len;            /* positions per slot (0: default) */
    size_t queue_max;          /* waiting requests */
    uint64_t queue_timeout_ms; /* most time a request may wait */
    uint64_t policy_version;   /* initial */
    uint64_t seed;             /* for requests without a seed */
} trn_engine_cfg_t;

typedef struct {
    uint64_t requests, completed, rejected_full, rejected_bad, timed_out;
    uint64_t tokens_generated, tokens_prefilled, steps;
    uint64_t inflight, queued;
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
