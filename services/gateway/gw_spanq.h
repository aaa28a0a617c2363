/*
 * gw_spanq: spans on their way to the broker.
 *
 * The gateway stores spans with SpanPutReq RPCs, which the broker answers
 * only once the spans are durable (and answers again, as duplicates, if
 * they already were: the broker is idempotent on (rollout, attempt, seq)).
 * Until that acknowledgement a span stays in this bounded in-memory queue
 * and is sent again after a backoff, so a broker restart or a lost reply
 * loses nothing; a gateway restart loses only unacknowledged spans, and the
 * agent's result is never forwarded before every span of its attempt was
 * acknowledged (gw_spanq_pending_for). This module holds the queue and its
 * batching/backoff decisions; the caller owns the RPC.
 */
#ifndef GW_SPANQ_H
#define GW_SPANQ_H

#include "lisa.pb-c.h"
#include "lisa/lisa_rc.h"

#include <stddef.h>
#include <stdint.h>

typedef struct gw_spanq_t gw_spanq_t;

/* New queue holding at most `max_spans` unacknowledged spans. */
gw_spanq_t *gw_spanq_new(size_t max_spans);

/* Destroys it with every span; safe on NULL, sets *self to NULL. */
void gw_spanq_destroy(gw_spanq_t **self);

/* True when `n` more spans fit (check before doing work that makes one). */
int gw_spanq_has_room(const gw_spanq_t *self, size_t n);

/* Takes ownership of *span (sets it NULL). LISA_TOOLARGE when full (the
 * span is freed; the caller must not have promised it to anyone). */
lisa_rc_t gw_spanq_push(gw_spanq_t *self, Lisa__Span **span) LISA_NODISCARD;

/* Collects up to `max` spans ready to send at `now_ms` (never sent, or
 * whose retry time passed) into `out` (borrowed pointers), marks them in
 * flight under batch id *batch. Returns how many. */
size_t gw_spanq_take(gw_spanq_t *self, uint64_t now_ms, size_t max,
                     Lisa__Span **out, uint64_t *batch);

/* The batch was acknowledged: its spans are dropped. */
void gw_spanq_acked(gw_spanq_t *self, uint64_t batch);

/* The batch failed: its spans are sent again at now_ms + backoff (doubling
 * per failure of a span, from 100 ms up to 5 s). */
void gw_spanq_failed(gw_spanq_t *self, uint64_t batch, uint64_t now_ms);

/* The broker refused the batch as invalid (e.g. an unknown attempt). A
 * batch of one span is dropped (returns 1); a larger batch is split: its
 * spans are resent one by one at once, so one bad span cannot hold the
 * others back (returns 0). */
size_t gw_spanq_refused(gw_spanq_t *self, uint64_t batch);

/* Spans held (queued or in flight). */
size_t gw_spanq_size(const gw_spanq_t *self);

/* Spans held for one attempt. */
size_t gw_spanq_pending_for(const gw_spanq_t *self, const char *rollout,
                            uint32_t attempt);

/* Spans acknowledged since creation. */
uint64_t gw_spanq_acked_total(const gw_spanq_t *self);

#endif
