/*
 * gw_trace: per-attempt token state that makes the gateway token-exact.
 *
 * For each attempt the gateway keeps the exact token sequence of its last
 * call (prompt ids + the ids the engine sampled) and a digest of every
 * message of the conversation as the agent will send it back (the
 * request's messages followed by the assistant reply the gateway returned).
 *
 * On the next call, gw_attempt_plan compares the new request's message
 * digests with that history. When they are a pure extension, only the new
 * messages are rendered and tokenized and appended to the stored sequence:
 * earlier turns are never re-tokenized, so turn k's prompt is exactly turn
 * k-1's prompt + the sampled ids + the new ids. When the agent changed
 * earlier history (or the tools), a new segment starts: the whole prompt is
 * rendered, the span's prev_seq is -1 and its segment number is bumped.
 *
 * Every committed call becomes one lisa Span with only the appended ids, so
 * storage is linear in the trajectory. One call per attempt may be open at
 * a time. The table is bounded; idle attempts are evicted first.
 */
#ifndef GW_TRACE_H
#define GW_TRACE_H

#include "gw_openai.h"
#include "lisa.pb-c.h"
#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gw_trace_t gw_trace_t;
typedef struct gw_attempt_t gw_attempt_t;

/* New table of at most `max_attempts` attempts, each holding at most
 * `max_ids` token ids. */
gw_trace_t *gw_trace_new(size_t max_attempts, uint32_t max_ids);

/* Destroys the table and its attempts; safe on NULL, sets *self to NULL. */
void gw_trace_destroy(gw_trace_t **self);

/* The attempt's state, created when missing (evicting the least recently
 * used idle attempt when full). LISA_AGAIN when full of busy attempts. */
lisa_rc_t gw_trace_open(gw_trace_t *self, const char *rollout, uint32_t attempt,
                        uint64_t now_ms, gw_attempt_t **out) LISA_NODISCARD;

/* The attempt's state or NULL. */
gw_attempt_t *gw_trace_find(gw_trace_t *self, const char *rollout,
                            uint32_t attempt);

/* Forgets an attempt (its result was posted). No-op when missing or busy. */
void gw_trace_close(gw_trace_t *self, const char *rollout, uint32_t attempt);

/* Forgets idle attempts not used since `older_than_ms`; returns how many. */
size_t gw_trace_expire(gw_trace_t *self, uint64_t older_than_ms);

/* Number of attempts held. */
size_t gw_trace_size(const gw_trace_t *self);

/* True while a call of the attempt is open (between begin and commit/abort). */
bool gw_attempt_busy(const gw_attempt_t *a);

/* False until the attempt's first sequence number is known
 * (gw_attempt_set_base); a fresh gateway learns it from the broker so a
 * restart never reuses a stored (rollout, attempt, seq). */
bool gw_attempt_based(const gw_attempt_t *a);

/* Sets the next seq (and the next segment number, to the same value, so
 * segments keep increasing across a gateway restart). */
void gw_attempt_set_base(gw_attempt_t *a, uint32_t next_seq);

/* Spans committed by this gateway for the attempt. */
uint32_t gw_attempt_spans(const gw_attempt_t *a);

/* Next sequence number (= spans stored for the attempt, once based). */
uint32_t gw_attempt_next_seq(const gw_attempt_t *a);

/* The run's sampling for the attempt (from the broker: SpanStatusRep or
 * the task's limits), which every chat call of the attempt uses; false
 * when the rollout has none (the agent's request decides). */
bool gw_attempt_sampling(const gw_attempt_t *a, float *temperature,
                         float *top_p, int32_t *top_k);
/* Sets it; NULL leaves what is known. */
void gw_attempt_set_sampling(gw_attempt_t *a, const Lisa__Sampling *s);

/* The rollout's group id (borrowed; NULL when not known) and its setter
 * (copied, at most 128 bytes; NULL or "" clears it). */
const char *gw_attempt_group(const gw_attempt_t *a);
void gw_attempt_set_group(gw_attempt_t *a, const char *group_id);

/* Sticky engine id (borrowed; NULL when none) and its setter (copied). */
const char *gw_attempt_engine(const gw_attempt_t *a);
void gw_attempt_set_engine(gw_attempt_t *a, const char *engine_id);

/* Digest cache of the last committed request's messages: true and *out
 * filled when position i held a message with raw bytes hashing to `raw`
 * (so it need not be parsed again). */
bool gw_attempt_cached_digest(const gw_attempt_t *a, size_t i,
                              const uint8_t raw[GW_DIGEST_LEN],
                              uint8_t out[GW_DIGEST_LEN]);

/* Remembers (raw hash, digest) of the `n` messages of a request. */
void gw_attempt_cache(gw_attempt_t *a, const uint8_t (*raw)[GW_DIGEST_LEN],
                      const uint8_t (*digests)[GW_DIGEST_LEN], size_t n);

/* Remembers the beginning of the committed request's body, through its
 * last message, with each message's span and raw hash (bodies over 4 MiB
 * are not kept), for gw_chat_req_parse_after on the next call. */
void gw_attempt_keep_prefix(gw_attempt_t *a, const gw_chat_req_t *req);

/* The remembered beginning (borrowed until the next keep); false when
 * there is none. */
bool gw_attempt_prefix(const gw_attempt_t *a, gw_chat_prefix_t *out);

/* Remembers the answer given to turn `turn` (the agent's X-Lisa-Turn), so
 * a retried call of that turn gets the same answer and no second span. */
void gw_attempt_set_answer(gw_attempt_t *a, int64_t turn, const char *body,
                           size_t len, bool sse);

/* The stored answer of `turn` (borrowed), or NULL. */
const char *gw_attempt_answer(const gw_attempt_t *a, int64_t turn, size_t *len,
                              bool *sse);

/* Decides how to build the prompt of a call with `n` message digests and
 * the tools digest. True: pure extension, and *first_new is the index of
 * the first message that must be rendered. False: new segment (render all;
 * *first_new = 0). */
bool gw_attempt_plan(const gw_attempt_t *a,
                     const uint8_t (*digests)[GW_DIGEST_LEN], size_t n,
                     const uint8_t tools[GW_DIGEST_LEN], size_t *first_new);

/* Opens a call: the prompt becomes (extends ? stored sequence : nothing)
 * followed by the `n` appended ids. LISA_CONFLICT when a call is open,
 * LISA_TOOLARGE when the prompt would exceed max_ids (nothing changes). */
lisa_rc_t gw_attempt_begin(gw_attempt_t *a, bool extends,
                           const uint32_t *appended, size_t n,
                           uint64_t now_ms) LISA_NODISCARD;

/* The open call's prompt ids (borrowed until commit/abort). */
const uint32_t *gw_attempt_prompt(const gw_attempt_t *a, size_t *n);

/* The open call's prompt for the engine request: the text of its first
 * ids ("id,id,..." as gw_upstream_write_ids writes them; the committed
 * sequence it extends, kept per attempt so each id is written once;
 * borrowed until the next call on the attempt) and the ids after them
 * (borrowed until commit/abort). Empty when no call is open. */
void gw_attempt_prompt_parts(gw_attempt_t *a, const char **text,
                             size_t *text_len, const uint32_t **tail,
                             size_t *n_tail);

/* Last id of the stored sequence, -1 when empty. */
int32_t gw_attempt_last_id(const gw_attempt_t *a);

/* Length of the stored sequence (prompt + response of the last call). */
size_t gw_attempt_len(const gw_attempt_t *a);

/* What the engine returned for a call, and about whom. */
typedef struct {
    const uint32_t *ids;
    const float *logprobs; /* n entries */
    size_t n;
    const char *finish_reason;
    uint64_t policy_version;
    const char *engine_id;
    const char *gateway_id;
    uint64_t start_ms, first_token_ms, end_ms;
    /* the settings the engine was told to sample with (Span.sampling) */
    float temperature, top_p;
    int32_t top_k;
} gw_sample_t;

/* Closes the open call: appends the sampled ids to the sequence, records
 * the history (request digests + the reply digest + tools) and returns the
 * call's Span in *span (free with gw_span_free). LISA_CONFLICT when no call
 * is open; LISA_TOOLARGE when the ids overflow max_ids (the call is
 * aborted). */
lisa_rc_t gw_attempt_commit(gw_attempt_t *a,
                            const uint8_t (*digests)[GW_DIGEST_LEN], size_t n,
                            const uint8_t tools[GW_DIGEST_LEN],
                            const uint8_t reply[GW_DIGEST_LEN],
                            const gw_sample_t *s,
                            Lisa__Span **span) LISA_NODISCARD;

/* Closes the open call without recording anything. */
void gw_attempt_abort(gw_attempt_t *a);

/* Frees a span made by gw_attempt_commit; sets *span NULL. */
void gw_span_free(Lisa__Span **span);

#endif
