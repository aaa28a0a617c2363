/*
 * brk_ingest: spans in, by RPC (SpanPutReq) or by PUSH (SpanPush), checked
 * and stored by one path.
 *
 * Whichever way a span arrives, and whether brk_spanscan read its key off
 * the wire or the full decoder ran, it becomes one view (key, shape, the
 * bytes as received) and goes through one check and one store call: its
 * shape (attempt >= 1, one logprob per response id, prev_seq earlier than
 * seq) and its attempt, which must exist and still be open. A span for an
 * attempt that ended (succeeded, failed or was cancelled) is refused with
 * CODE_CONFLICT (pushed: dropped) and counted in spans_refused: the
 * trainer reads only final attempts, and an ended attempt's sequence must
 * not change under it. A SpanPutReq is checked whole before anything is
 * stored. Attempts known to be open are remembered (forget drops one when
 * it ends) so that a stream of spans costs no store read per span.
 */
#ifndef BRK_INGEST_H
#define BRK_INGEST_H

#include "brk_call.h"
#include "lisa/lisa_codec.h"

typedef struct brk_ingest_t brk_ingest_t;

brk_ingest_t *brk_ingest_new(const brk_env_t *env);
void brk_ingest_destroy(brk_ingest_t **self);

/* Whether this module answers requests with this body (span put and
 * span status). */
bool brk_ingest_serves(Lisa__Request__BodyCase body);
lisa_rc_t brk_ingest_handle(brk_ingest_t *self,
                            brk_call_t *call) LISA_NODISCARD;

/* The fast path of an RPC frame: a SpanPutReq that brk_spanscan reads is
 * checked, stored and answered without decoding its spans (the same rows,
 * log records and reply as the handler). false: nothing was done; the
 * caller decodes the frame. */
bool brk_ingest_rpc_fast(brk_ingest_t *self, zframe_t *identity, bool delim,
                         zframe_t *body);

/* One message of the PULL socket (in the loop's transaction). */
void brk_ingest_push(brk_ingest_t *self, zmsg_t *m);

/* Attempt (rollout_id, attempt) ended: its spans are refused from now. */
void brk_ingest_forget(brk_ingest_t *self, const char *rollout_id,
                       uint32_t attempt);

/* Forgets every attempt known open (after a failed commit). */
void brk_ingest_reset(brk_ingest_t *self);

/* Adds the span counters to *st (span_duplicates, spans_dropped,
 * spans_refused) and returns the PULL socket's refused frames. */
uint64_t brk_ingest_stats(const brk_ingest_t *self, Lisa__Stats *st);

#endif
