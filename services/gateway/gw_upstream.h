/*
 * gw_upstream: the engine protocol, token ids in and token ids out.
 *
 * Request (POST {engine}/v1/completions), the vLLM / SGLang shape:
 *   {"model": M, "prompt": [ids], "max_tokens": N, "temperature": T,
 *    "top_p": P, "logprobs": 1, "return_token_ids": true,
 *    "stop_token_ids": [ids], "stop": [strings], "skip_special_tokens":
 *    false, "stream": false}
 *
 * Response, as lisa's trainer serves it (docs/gateway.md):
 *   {"choices": [{"index": 0, "token_ids": [ids], "finish_reason":
 *     "stop"|"length", "logprobs": {"token_logprobs": [floats]}}],
 *    "policy_version": V,
 *    "usage": {"prompt_tokens_details": {"cached_tokens": K}}}
 * (usage optional: K, the prompt ids found in the engine's prefix cache,
 * is 0 when absent or not a non-negative integer). Also accepted: vLLM's
 * return_tokens_as_token_ids form, where choices[0].logprobs.tokens holds
 * "token_id:<id>" strings (and no token_ids array). Logprobs are required:
 * finite, <= 0, one per id (the trainer's importance weights need them).
 */
#ifndef GW_UPSTREAM_H
#define GW_UPSTREAM_H

#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sampling parameters of one engine call. */
typedef struct {
    const char *model;
    int64_t max_tokens;
    double temperature; /* < 0: omitted (engine default) */
    double top_p;       /* < 0: omitted */
    int64_t top_k;      /* <= 0: omitted (off) */
    const int32_t *stop_ids;
    size_t n_stop_ids;
    const char *const *stop; /* stop strings */
    size_t n_stop;
} gw_sampling_t;

/* The request body for `n` prompt ids (caller frees); *len gets its length.
 */
char *gw_upstream_body(const uint32_t *ids, size_t n, const gw_sampling_t *s,
                       size_t *len);

/* The same body for a prompt given as the text of its first ids (`text`,
 * `text_len` bytes of "id,id,...", as gw_upstream_write_ids writes them;
 * may be empty) followed by `n` more ids. */
char *gw_upstream_body_parts(const char *text, size_t text_len,
                             const uint32_t *ids, size_t n,
                             const gw_sampling_t *s, size_t *len);

/* The same body in three parts, so the text need not be copied: *pre
 * (allocated, caller frees) holds what comes before `text_len` bytes of
 * id text, *post (allocated) what comes after it (the `n` ids and the
 * rest). pre + text + post is byte for byte gw_upstream_body_parts. */
void gw_upstream_body_split(size_t text_len, const uint32_t *ids, size_t n,
                            const gw_sampling_t *s, char **pre, size_t *pre_len,
                            char **post, size_t *post_len);

/* Most bytes gw_upstream_write_ids writes for `n` ids. */
#define GW_UPSTREAM_ID_TEXT_MAX(n) ((n) *11u)

/* Writes `n` ids as "id,id,...,id" at dst (room for
 * GW_UPSTREAM_ID_TEXT_MAX(n) bytes, no NUL); returns the bytes written. */
size_t gw_upstream_write_ids(char *dst, const uint32_t *ids, size_t n);

/* What an engine sampled. */
typedef struct {
    uint32_t *ids;
    float *logprobs; /* one per id */
    size_t n;
    char finish_reason[16]; /* "stop" or "length" */
    uint64_t policy_version;
    uint64_t cached_tokens; /* usage.prompt_tokens_details.cached_tokens,
                             * 0 when the engine does not report it */
} gw_completion_t;

/* Parses an engine response; at most `max_ids` ids. LISA_INVALID (with
 * `why`) for anything that is not the shape above. The small reader
 * answers the usual replies; anything it is not sure of goes to jansson. */
lisa_rc_t gw_upstream_parse(const char *body, size_t len, size_t max_ids,
                            gw_completion_t *out, char *why,
                            size_t whylen) LISA_NODISCARD;

/* The small reader alone: LISA_OK with *out filled, exactly what
 * gw_upstream_parse_json gives for the same bytes, or LISA_UNSUPPORTED
 * (nothing filled) when it cannot be sure; never an error of its own. */
lisa_rc_t gw_upstream_parse_fast(const char *body, size_t len, size_t max_ids,
                                 gw_completion_t *out) LISA_NODISCARD;

/* The reference reader (a jansson tree); same contract as
 * gw_upstream_parse. */
lisa_rc_t gw_upstream_parse_json(const char *body, size_t len, size_t max_ids,
                                 gw_completion_t *out, char *why,
                                 size_t whylen) LISA_NODISCARD;

/* What an engine's error answer says, for the agent's and the log's
 * error text: error.message (or error, message, detail when a string) of
 * a JSON body, else the body itself when it is short text; printable
 * ASCII only (anything else becomes '?'), cut to cap - 1 bytes with
 * "..." at the cut. "" when the body says nothing usable. Returns out. */
char *gw_upstream_error_text(const char *body, size_t len, char *out,
                             size_t cap);

/* Frees what gw_upstream_parse filled; safe twice. */
void gw_completion_clear(gw_completion_t *c);

#endif
