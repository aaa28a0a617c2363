/*
 * brk_ingest: the one span path (see brk_ingest.h).
 */
#include "brk_ingest.h"

#include "brk_fsm.h"
#include "brk_spanscan.h"
#include "brk_wire.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <stdio.h>
#include <string.h>

/* Spans of one SpanPut taken by the fast path (more: the full decoder). */
#define S_SCAN_MAX 64
/* Open attempts remembered (the cache is emptied when it grows past). */
#define S_MAX_KNOWN 100000u

/* One span as the path sees it, whichever way it came. */
typedef struct {
    const char *rollout_id;
    uint32_t attempt, seq;
    int32_t prev_seq;
    size_t n_response_ids, n_response_logprobs;
    const uint8_t *raw; /* the bytes as received; NULL: pack span */
    size_t raw_len;
    const Lisa__Span *span; /* decoded, or NULL */
} s_span_t;

struct brk_ingest_t {
    brk_env_t env;
    zhashx_t *open; /* "rollout\x1fattempt" of attempts known open */
    lisa_codec_stats_t st_push;
    uint64_t stored, dups, dropped, refused;
    brk_spanscan_span_t scan[S_SCAN_MAX]; /* the fast path's output */
};

static char s_empty[1];

static s_span_t
s_of_scan(const brk_spanscan_span_t *s)
{
    return (s_span_t){s->rollout_id, s->attempt,        s->seq,
                      s->prev_seq,   s->n_response_ids, s->n_response_logprobs,
                      s->raw,        s->raw_len,        NULL};
}

static s_span_t
s_of_decoded(const Lisa__Span *s, const brk_wire_slice_t *raw)
{
    return (s_span_t){s->rollout_id,
                      s->attempt,
                      s->seq,
                      s->prev_seq,
                      s->n_response_ids,
                      s->n_response_logprobs,
                      raw ? raw->data : NULL,
                      raw ? raw->len : 0,
                      s};
}

static bool
s_attempt_over(Lisa__AttemptState s)
{
    return s == LISA__ATTEMPT_STATE__ATTEMPT_SUCCEEDED ||
           s == LISA__ATTEMPT_STATE__ATTEMPT_FAILED ||
           s == LISA__ATTEMPT_STATE__ATTEMPT_CANCELLED;
}

static void
s_key(char *key, size_t n, const char *rollout_id, uint32_t attempt)
{
    snprintf(key, n, "%s\x1f%u", rollout_id, attempt);
}

/* Checks a span's shape and that its attempt exists and is open. */
static lisa_rc_t
s_check(brk_ingest_t *self, const s_span_t *s, char *err)
{
    if (!brk_call_id_ok(s->rollout_id))
        return brk_call_fail(err, LISA_INVALID,
                             "span: rollout_id missing or invalid");
    if (s->attempt == 0)
        return brk_call_fail(err, LISA_INVALID, "span: attempt must be >= 1");
    if (s->n_response_logprobs != s->n_response_ids)
        return brk_call_fail(err, LISA_INVALID,
                             "span %s/%u/%u: %zu logprobs for %zu response ids",
                             s->rollout_id, s->attempt, s->seq,
                             s->n_response_logprobs, s->n_response_ids);
    if (s->prev_seq < -1 ||
        (s->prev_seq >= 0 && (uint32_t) s->prev_seq >= s->seq))
        return brk_call_fail(err, LISA_INVALID,
                             "span %s/%u/%u: bad prev_seq %d", s->rollout_id,
                             s->attempt, s->seq, s->prev_seq);
    char key[BRK_MAX_ID + 16];
    s_key(key, sizeof key, s->rollout_id, s->attempt);
    if (zhashx_lookup(self->open, key))
        return LISA_OK;
    Lisa__Attempt *a = NULL;
    if (brk_store_attempt_get(self->env.store, self->env.arena, s->rollout_id,
                              s->attempt, &a) != LISA_OK)
        return brk_call_fail(err, LISA_NOTFOUND,
                             "span for unknown attempt %s/%u", s->rollout_id,
                             s->attempt);
    if (s_attempt_over(a->state)) {
        self->refused++;
        return brk_call_fail(err, LISA_CONFLICT,
                             "span %s/%u/%u refused: attempt %u is %s (it "
                             "ended; spans are taken only while it is open)",
                             s->rollout_id, s->attempt, s->seq, s->attempt,
                             brk_fsm_attempt_state_name(a->state));
    }
    if (zhashx_size(self->open) > S_MAX_KNOWN)
        zhashx_purge(self->open);
    zhashx_insert(self->open, key, (void *) 1);
    return LISA_OK;
}

/* The one path: checks every span, then stores them, counting into
 * *stored and *dups. Nothing is stored when a check fails. */
static lisa_rc_t
s_ingest(brk_ingest_t *self, const s_span_t *v, size_t n, char *err,
         uint32_t *stored, uint32_t *dups)
{
    for (size_t i = 0; i < n; i++) {
        lisa_rc_t rc = s_check(self, &v[i], err);
        if (rc != LISA_OK)
            return rc;
    }
    for (size_t i = 0; i < n; i++) {
        bool dup = false;
        lisa_rc_t rc =
            v[i].raw
                ? brk_store_span_put_raw(self->env.store, v[i].rollout_id,
                                         v[i].attempt, v[i].seq, v[i].raw,
                                         v[i].raw_len, &dup)
                : brk_store_span_put(self->env.store, v[i].span, NULL, 0, &dup);
        if (rc != LISA_OK)
            return brk_call_fail(err, LISA_ERR, "store write failed");
        if (dup) {
            (*dups)++;
            self->dups++;
        } else {
            (*stored)++;
            self->stored++;
        }
    }
    return LISA_OK;
}

/* ------------------------------------------------------------------ */
/* RPC                                                                */

static lisa_rc_t
s_h_span_put(brk_ingest_t *self, brk_call_t *call)
{
    const Lisa__SpanPutReq *q = call->req->span_put;
    Lisa__SpanPutRep *out = brk_arena_alloc(self->env.arena, sizeof *out);
    lisa__span_put_rep__init(out);
    call->rep->body_case = LISA__REPLY__BODY_SPAN_PUT;
    call->rep->span_put = out;
    if (q->n_spans > self->env.cfg->max_batch)
        return brk_call_fail(call->err, LISA_TOOLARGE,
                             "too many spans in one put");
    /* the spans' bytes as received, stored without packing them again */
    static const uint32_t path[] = {LISA__REQUEST__BODY_SPAN_PUT, 1};
    size_t n = q->n_spans ? q->n_spans : 1;
    brk_wire_slice_t *raw = brk_arena_alloc(self->env.arena, n * sizeof *raw);
    long found =
        brk_wire_find(call->frame, call->frame_len, path, 2, raw, q->n_spans);
    bool use_raw = found >= 0 && (size_t) found == q->n_spans;
    s_span_t *v = brk_arena_alloc(self->env.arena, n * sizeof *v);
    for (size_t i = 0; i < q->n_spans; i++)
        v[i] = s_of_decoded(q->spans[i], use_raw ? &raw[i] : NULL);
    return s_ingest(self, v, q->n_spans, call->err, &out->stored,
                    &out->duplicates);
}

static lisa_rc_t
s_h_span_status(brk_ingest_t *self, brk_call_t *call)
{
    const Lisa__SpanStatusReq *q = call->req->span_status;
    Lisa__SpanStatusRep *out = brk_arena_alloc(self->env.arena, sizeof *out);
    lisa__span_status_rep__init(out);
    call->rep->body_case = LISA__REPLY__BODY_SPAN_STATUS;
    call->rep->span_status = out;
    if (!brk_call_id_ok(q->rollout_id))
        return brk_call_fail(call->err, LISA_INVALID,
                             "rollout_id is missing or invalid");
    Lisa__Attempt *a = NULL;
    if (brk_store_attempt_get(self->env.store, self->env.arena, q->rollout_id,
                              q->attempt, &a) != LISA_OK)
        return brk_call_fail(call->err, LISA_NOTFOUND, "unknown attempt %s/%u",
                             q->rollout_id, q->attempt);
    if (brk_store_span_status(self->env.store, q->rollout_id, q->attempt,
                              &out->contiguous_seq, &out->count) != LISA_OK)
        return brk_call_fail(call->err, LISA_ERR, "store read failed");
    /* the run's sampling, which the gateway applies to the attempt */
    Lisa__Rollout *r = NULL;
    Lisa__TaskSpec *t = NULL;
    if (brk_store_rollout_get(self->env.store, self->env.arena, q->rollout_id,
                              &r) == LISA_OK &&
        brk_store_group_task(self->env.store, self->env.arena, r->group_id,
                             &t) == LISA_OK &&
        t->limits)
        out->sampling = t->limits->sampling;
    return LISA_OK;
}

bool
brk_ingest_serves(Lisa__Request__BodyCase body)
{
    return body == LISA__REQUEST__BODY_SPAN_PUT ||
           body == LISA__REQUEST__BODY_SPAN_STATUS;
}

lisa_rc_t
brk_ingest_handle(brk_ingest_t *self, brk_call_t *call)
{
    switch (call->req->body_case) {
    case LISA__REQUEST__BODY_SPAN_PUT:
        return s_h_span_put(self, call);
    case LISA__REQUEST__BODY_SPAN_STATUS:
        return s_h_span_status(self, call);
    default:
        return brk_call_fail(call->err, LISA_UNSUPPORTED, "not a span request");
    }
}

bool
brk_ingest_rpc_fast(brk_ingest_t *self, zframe_t *identity, bool delim,
                    zframe_t *body)
{
    size_t len = zframe_size(body), n = 0;
    uint64_t request_id = 0;
    if (len > self->env.cfg->max_rpc_frame ||
        !brk_spanscan_request(zframe_data(body), len, &request_id, self->scan,
                              S_SCAN_MAX, &n) ||
        n > self->env.cfg->max_batch ||
        brk_store_begin(self->env.store) != LISA_OK)
        return false;
    s_span_t v[S_SCAN_MAX];
    for (size_t i = 0; i < n; i++)
        v[i] = s_of_scan(&self->scan[i]);
    char err[BRK_ERR_LEN] = "";
    Lisa__SpanPutRep out = LISA__SPAN_PUT_REP__INIT;
    lisa_rc_t rc = s_ingest(self, v, n, err, &out.stored, &out.duplicates);
    if (rc != LISA_OK) {
        lisa_log_info("rpc span_put (req %llu): %s: %s",
                      (unsigned long long) request_id, lisa_rc_str(rc), err);
        brk_outbox_error(self->env.outbox, identity, delim, request_id,
                         LISA__REQUEST__BODY_SPAN_PUT, rc, err);
    } else {
        Lisa__Reply rep = LISA__REPLY__INIT;
        rep.request_id = request_id;
        rep.code = LISA__CODE__CODE_OK;
        rep.error = s_empty;
        rep.body_case = LISA__REPLY__BODY_SPAN_PUT;
        rep.span_put = &out;
        brk_outbox_reply(self->env.outbox, identity, delim, &rep);
    }
    brk_arena_reset(self->env.arena);
    return true;
}

/* ------------------------------------------------------------------ */
/* PULL                                                               */

/* Stores one pushed span (scanned, or else decoded); false when the frame
 * is not a span at all (counted by the codec). */
static lisa_rc_t
s_push_one(brk_ingest_t *self, zframe_t *f, char *err)
{
    uint32_t stored = 0, dups = 0;
    if (zframe_size(f) <= self->env.cfg->max_span_frame &&
        brk_spanscan_push(zframe_data(f), zframe_size(f), &self->scan[0])) {
        self->st_push.ok++;
        s_span_t v = s_of_scan(&self->scan[0]);
        return s_ingest(self, &v, 1, err, &stored, &dups);
    }
    ProtobufCMessage *msg = NULL;
    const char *why = NULL;
    if (lisa_codec_decode_frame(&lisa__span_push__descriptor, f,
                                self->env.cfg->max_span_frame, &self->st_push,
                                &msg, &why) != LISA_OK)
        return brk_call_fail(err, LISA_INVALID, "a bad frame: %s", why);
    static const uint32_t path[] = {LISA__SPAN_PUSH__BODY_SPAN};
    brk_wire_slice_t raw;
    bool use_raw =
        brk_wire_find(zframe_data(f), zframe_size(f), path, 1, &raw, 1) == 1;
    s_span_t v =
        s_of_decoded(((Lisa__SpanPush *) msg)->span, use_raw ? &raw : NULL);
    lisa_rc_t rc = s_ingest(self, &v, 1, err, &stored, &dups);
    lisa_codec_free(&msg);
    return rc;
}

void
brk_ingest_push(brk_ingest_t *self, zmsg_t *m)
{
    if (zmsg_size(m) != 1) {
        self->st_push.bad_shape++;
        self->dropped++;
        return;
    }
    char err[BRK_ERR_LEN] = "";
    if (brk_store_begin(self->env.store) != LISA_OK) {
        self->dropped++;
        lisa_log_warn("spans: dropped: store unavailable");
        return;
    }
    if (s_push_one(self, zmsg_first(m), err) != LISA_OK) {
        self->dropped++;
        lisa_log_warn("spans: dropped: %s", err);
    }
    brk_arena_reset(self->env.arena);
}

/* ------------------------------------------------------------------ */
/* construction and counters                                          */

brk_ingest_t *
brk_ingest_new(const brk_env_t *env)
{
    brk_ingest_t *self = lisa_calloc(1, sizeof *self);
    self->env = *env;
    self->open = zhashx_new();
    return self;
}

void
brk_ingest_destroy(brk_ingest_t **pself)
{
    if (!pself || !*pself)
        return;
    zhashx_destroy(&(*pself)->open);
    lisa_free(pself);
}

void
brk_ingest_forget(brk_ingest_t *self, const char *rollout_id, uint32_t attempt)
{
    char key[BRK_MAX_ID + 16];
    s_key(key, sizeof key, rollout_id, attempt);
    zhashx_delete(self->open, key);
}

void
brk_ingest_reset(brk_ingest_t *self)
{
    zhashx_purge(self->open);
}

uint64_t
brk_ingest_stats(const brk_ingest_t *self, Lisa__Stats *st)
{
    st->span_duplicates = self->dups;
    st->spans_dropped = self->dropped;
    st->spans_refused = self->refused;
    return lisa_codec_stats_refused(&self->st_push);
}
