/*
 * brk_outbox: pending effects, group commit and the syncer (see
 * brk_outbox.h).
 *
 * Why the waits' replies join the batch that completes them: a wait is
 * answered when its rollouts end, and the answer must not reach the client
 * before the end is durable. Replies queued by requests of the
 * transaction still open while the syncer ran belong to the next batch,
 * so the replies a flush produces are cut from the pending list by
 * position and moved into the batch being flushed.
 */
#include "brk_outbox.h"

#include "lisa/lisa_codec.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_unicode.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define S_ERR_LEN 512
/* How long span log garbage waits for a moment with no batch waiting on
 * the syncer before the loop syncs the store itself, once. */
#define S_GC_WAIT_MS 10000

typedef struct {
    zmsg_t **v;
    size_t n, cap;
} s_msgs_t;

typedef struct {
    char **v;
    size_t n, cap;
} s_strs_t;

/* A score job to start once durable. */
typedef struct {
    char *rollout_id;
    uint32_t attempt;
    char *data_source;
} s_job_t;

typedef struct {
    s_job_t *v;
    size_t n, cap;
} s_jobs_t;

/* The effects of one transaction. */
typedef struct {
    s_msgs_t replies;
    s_msgs_t events;
    s_strs_t finished;
    s_strs_t drop_jobs;
    s_jobs_t jobs;
} s_pending_t;

/* What one group commit owes the world once it is durable. */
typedef struct {
    uint64_t id;
    s_pending_t p;
} s_batch_t;

struct brk_outbox_t {
    brk_store_t *store;
    zsock_t *rpc, *pub;
    brk_outbox_sink_t sink;
    s_pending_t open; /* pending until COMMIT */
    uint64_t event_seq;
    uint64_t errors;
    zactor_t *syncer; /* NULL with sync "normal" */
    uint64_t batch_seq;
    uint64_t durable_seq; /* highest batch the syncer made durable */
    s_batch_t **batches;  /* committed, waiting for fsync */
    size_t n_batches, cap_batches;
    /* span log segments may be freed once batch gc_after is durable (an
     * export pruned rollouts in it); 0: nothing to do */
    uint64_t gc_after;
    int64_t gc_since; /* when gc_after first waited for the syncer */
};

/* ------------------------------------------------------------------ */
/* lists                                                              */

static void
s_msgs_push(s_msgs_t *l, zmsg_t *m)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = lisa_realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = m;
}

static void
s_msgs_truncate(s_msgs_t *l, size_t n)
{
    while (l->n > n)
        zmsg_destroy(&l->v[--l->n]);
}

static void
s_strs_push(s_strs_t *l, const char *s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = lisa_realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = lisa_strdup(s);
}

static void
s_strs_truncate(s_strs_t *l, size_t n)
{
    while (l->n > n)
        lisa_free(&l->v[--l->n]);
}

static void
s_jobs_truncate(s_jobs_t *l, size_t n)
{
    while (l->n > n) {
        s_job_t *j = &l->v[--l->n];
        lisa_free(&j->rollout_id);
        lisa_free(&j->data_source);
    }
}

/* Frees what p holds and leaves it empty (its arrays too). */
static void
s_pending_clear(s_pending_t *p)
{
    s_msgs_truncate(&p->replies, 0);
    s_msgs_truncate(&p->events, 0);
    s_strs_truncate(&p->finished, 0);
    s_strs_truncate(&p->drop_jobs, 0);
    s_jobs_truncate(&p->jobs, 0);
    lisa_free(&p->replies.v);
    lisa_free(&p->events.v);
    lisa_free(&p->finished.v);
    lisa_free(&p->drop_jobs.v);
    lisa_free(&p->jobs.v);
    memset(p, 0, sizeof *p);
}

static bool
s_pending_empty(const s_pending_t *p)
{
    return !p->replies.n && !p->events.n && !p->finished.n && !p->drop_jobs.n &&
           !p->jobs.n;
}

/* ------------------------------------------------------------------ */
/* queueing                                                           */

void
brk_outbox_reply(brk_outbox_t *self, zframe_t *identity, bool delim,
                 Lisa__Reply *rep)
{
    zmsg_t *m = zmsg_new();
    zframe_t *id = zframe_dup(identity);
    zmsg_append(m, &id);
    if (delim)
        zmsg_addmem(m, NULL, 0);
    lisa_codec_append(m, &rep->base);
    if (rep->code != LISA__CODE__CODE_OK)
        self->errors++;
    s_msgs_push(&self->open.replies, m);
}

/* Sets the reply body that matches a request body (Reply numbers its
 * bodies 100 above Request) to a new empty message; returns it (the
 * caller frees it) or NULL. */
static ProtobufCMessage *
s_empty_body(Lisa__Reply *rep, uint32_t request_body)
{
    const ProtobufCFieldDescriptor *f =
        request_body ? protobuf_c_message_descriptor_get_field(
                           &lisa__reply__descriptor, request_body + 100)
                     : NULL;
    if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE)
        return NULL;
    const ProtobufCMessageDescriptor *d = f->descriptor;
    ProtobufCMessage *m = lisa_calloc(1, d->sizeof_message);
    protobuf_c_message_init(d, m);
    memcpy((char *) rep + f->offset, &m, sizeof m);
    uint32_t which = f->id;
    memcpy((char *) rep + f->quantifier_offset, &which, sizeof which);
    return m;
}

void
brk_outbox_error(brk_outbox_t *self, zframe_t *identity, bool delim,
                 uint64_t request_id, uint32_t request_body, lisa_rc_t rc,
                 const char *why)
{
    Lisa__Reply rep = LISA__REPLY__INIT;
    ProtobufCMessage *body = s_empty_body(&rep, request_body);
    rep.request_id = request_id;
    rep.code = (Lisa__Code) lisa_rc_to_code(rc);
    char text[S_ERR_LEN];
    snprintf(text, sizeof text, "%s", why ? why : "");
    /* reasons quote requests: a protobuf string is valid UTF-8, and the
     * bound never cuts a character in half */
    (void) lisa_utf8_fix(text, sizeof text);
    rep.error = text;
    if (rep.code == LISA__CODE__CODE_OK)
        self->errors++; /* an error all the same */
    brk_outbox_reply(self, identity, delim, &rep);
    lisa_free(&body);
}

void
brk_outbox_event(brk_outbox_t *self, const char *topic, Lisa__Event *ev)
{
    ev->seq = self->event_seq + self->open.events.n + 1;
    ev->time_ms = (uint64_t) zclock_time();
    zmsg_t *m = zmsg_new();
    zmsg_addstr(m, topic);
    lisa_codec_append(m, &ev->base);
    s_msgs_push(&self->open.events, m);
}

void
brk_outbox_finished(brk_outbox_t *self, const char *rollout_id)
{
    s_strs_push(&self->open.finished, rollout_id);
}

void
brk_outbox_job(brk_outbox_t *self, const char *rollout_id, uint32_t attempt,
               const char *data_source)
{
    s_jobs_t *l = &self->open.jobs;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = lisa_realloc(l->v, l->cap * sizeof *l->v);
    }
    l->v[l->n++] = (s_job_t){lisa_strdup(rollout_id), attempt,
                             lisa_strdup(data_source ? data_source : "")};
}

void
brk_outbox_drop_job(brk_outbox_t *self, const char *rollout_id)
{
    s_strs_push(&self->open.drop_jobs, rollout_id);
}

brk_outbox_mark_t
brk_outbox_mark(const brk_outbox_t *self)
{
    return (brk_outbox_mark_t){self->open.events.n, self->open.finished.n,
                               self->open.jobs.n, self->open.drop_jobs.n};
}

void
brk_outbox_undo(brk_outbox_t *self, const brk_outbox_mark_t *mark)
{
    s_msgs_truncate(&self->open.events, mark->events);
    s_strs_truncate(&self->open.finished, mark->finished);
    s_jobs_truncate(&self->open.jobs, mark->jobs);
    s_strs_truncate(&self->open.drop_jobs, mark->drops);
}

void
brk_outbox_gc_after_commit(brk_outbox_t *self)
{
    self->gc_after = self->batch_seq + 1;
}

/* ------------------------------------------------------------------ */
/* flushing                                                           */

/* The batch is durable: publish its events, hand on its score jobs and
 * finished rollouts, send its replies. */
static void
s_flush(brk_outbox_t *self, s_batch_t *b)
{
    s_pending_t *p = &b->p;
    for (size_t i = 0; i < p->events.n; i++)
        if (zmsg_send(&p->events.v[i], self->pub) != 0)
            zmsg_destroy(&p->events.v[i]);
    p->events.n = 0;
    const brk_outbox_sink_t *k = &self->sink;
    for (size_t i = 0; i < p->jobs.n; i++)
        k->adopt_job(k->arg, p->jobs.v[i].rollout_id, p->jobs.v[i].attempt,
                     p->jobs.v[i].data_source);
    for (size_t d = 0; d < p->drop_jobs.n; d++)
        k->drop_job(k->arg, p->drop_jobs.v[d]);
    /* the waits this batch completes are answered with it; replies
     * queued before wait for their own batch */
    size_t mark = self->open.replies.n;
    k->finished(k->arg, p->finished.v, p->finished.n);
    for (size_t i = mark; i < self->open.replies.n; i++)
        s_msgs_push(&p->replies, self->open.replies.v[i]);
    self->open.replies.n = mark;
    for (size_t i = 0; i < p->replies.n; i++)
        if (zmsg_send(&p->replies.v[i], self->rpc) != 0)
            zmsg_destroy(&p->replies.v[i]);
    p->replies.n = 0;
}

static void
s_batch_free(s_batch_t **pb)
{
    if (!pb || !*pb)
        return;
    s_pending_clear(&(*pb)->p);
    lisa_free(pb);
}

/* Flushes every waiting batch with an id up to `durable`, in order. */
static void
s_flush_durable(brk_outbox_t *self, uint64_t durable)
{
    while (self->n_batches && self->batches[0]->id <= durable) {
        s_batch_t *b = self->batches[0];
        memmove(self->batches, self->batches + 1,
                (self->n_batches - 1) * sizeof *self->batches);
        self->n_batches--;
        s_flush(self, b);
        s_batch_free(&b);
    }
    self->sink.flushed(self->sink.arg);
}

/* Deletes span log segments freed by a prune once the prune is durable
 * (between transactions). The deletion must not run ahead of any commit:
 * a segment whose rows a committed but not yet fsynced prune deleted
 * would be gone while a power cut could bring the rows back. So it waits
 * until no batch waits for the syncer, and when the loop never gets there
 * for S_GC_WAIT_MS it syncs the store itself once, blocking the loop for
 * one fsync. */
static void
s_span_gc(brk_outbox_t *self, uint64_t durable)
{
    if (!self->gc_after || durable < self->gc_after)
        return;
    if (self->n_batches) {
        if (!self->gc_since)
            self->gc_since = zclock_mono();
        if (zclock_mono() - self->gc_since < S_GC_WAIT_MS ||
            brk_store_sync(self->store) != LISA_OK)
            return;
    }
    size_t dropped = 0;
    if (brk_store_span_gc(self->store, &dropped) == LISA_OK) {
        self->gc_after = 0;
        self->gc_since = 0;
    }
}

lisa_rc_t
brk_outbox_commit(brk_outbox_t *self)
{
    if (self->open.events.n &&
        brk_store_meta_set(self->store, "event_seq",
                           self->event_seq + self->open.events.n) != LISA_OK)
        brk_store_rollback(self->store);
    lisa_rc_t rc = brk_store_commit(self->store);
    if (rc != LISA_OK) {
        lisa_log_error("store: group commit failed; %zu replies withheld",
                       self->open.replies.n);
        s_pending_clear(&self->open);
        return rc;
    }
    self->event_seq += self->open.events.n;
    if (s_pending_empty(&self->open) && !self->n_batches) {
        self->sink.flushed(self->sink.arg);
        return LISA_OK;
    }
    s_batch_t *b = lisa_calloc(1, sizeof *b);
    b->id = ++self->batch_seq;
    b->p = self->open;
    memset(&self->open, 0, sizeof self->open);
    if (!self->syncer) {
        /* sync "normal": COMMIT is the durability point (process crash) */
        s_span_gc(self, b->id);
        s_flush(self, b);
        s_batch_free(&b);
        self->sink.flushed(self->sink.arg);
        return LISA_OK;
    }
    /* sync "full": the syncer fsyncs the WAL, which covers this COMMIT
     * and every earlier one; the batch waits for its answer while the
     * loop goes on with the next one. */
    if (self->n_batches == self->cap_batches) {
        self->cap_batches = self->cap_batches ? self->cap_batches * 2 : 16;
        self->batches = lisa_realloc(self->batches,
                                     self->cap_batches * sizeof *self->batches);
    }
    self->batches[self->n_batches++] = b;
    if (zstr_sendf(self->syncer, "%" PRIu64, b->id) != 0) {
        lisa_log_error("syncer unreachable");
        return LISA_ERR;
    }
    return LISA_OK;
}

bool
brk_outbox_syncing(const brk_outbox_t *self)
{
    return self->syncer && self->batch_seq > self->durable_seq;
}

void *
brk_outbox_syncer_handle(brk_outbox_t *self)
{
    return self->syncer ? zsock_resolve(zactor_sock(self->syncer)) : NULL;
}

lisa_rc_t
brk_outbox_on_syncer(brk_outbox_t *self)
{
    uint64_t durable = 0;
    while (zsock_events(zactor_sock(self->syncer)) & ZMQ_POLLIN) {
        char *msg = zstr_recv(self->syncer);
        if (!msg)
            break;
        unsigned long long id = 0;
        int err = 0;
        if (sscanf(msg, "%llu %d", &id, &err) != 2 || err != 0) {
            lisa_log_error("store: fsync of the WAL failed (%s); acknowledged "
                           "nothing after batch %" PRIu64,
                           msg, durable);
            zstr_free(&msg);
            return LISA_ERR;
        }
        if (id > durable)
            durable = id;
        zstr_free(&msg);
    }
    if (durable > self->durable_seq)
        self->durable_seq = durable;
    if (durable) {
        s_flush_durable(self, durable);
        s_span_gc(self, durable);
    }
    return LISA_OK;
}

void
brk_outbox_drain(brk_outbox_t *self)
{
    if (brk_outbox_commit(self) != LISA_OK)
        lisa_log_warn("store: the last group commit failed");
    if (self->syncer && self->n_batches &&
        brk_store_sync(self->store) == LISA_OK)
        s_flush_durable(self, self->batch_seq);
}

/* The syncer: fdatasync of the WAL, coalescing every request queued while
 * the previous one ran into one call. */
static void
s_syncer(zsock_t *pipe, void *arg)
{
    brk_store_t *store = arg;
    zsock_signal(pipe, 0);
    bool term = false;
    while (!term) {
        char *msg = zstr_recv(pipe);
        if (!msg || streq(msg, "$TERM")) {
            zstr_free(&msg);
            break;
        }
        unsigned long long id = strtoull(msg, NULL, 10);
        zstr_free(&msg);
        while (zsock_events(pipe) & ZMQ_POLLIN) {
            msg = zstr_recv(pipe);
            if (!msg || streq(msg, "$TERM"))
                term = true;
            else if (strtoull(msg, NULL, 10) > id)
                id = strtoull(msg, NULL, 10);
            zstr_free(&msg);
        }
        int rc = brk_store_sync(store) == LISA_OK ? 0 : 1;
        zstr_sendf(pipe, "%llu %d", id, rc);
    }
}

/* ------------------------------------------------------------------ */
/* construction                                                       */

brk_outbox_t *
brk_outbox_new(brk_store_t *store, zsock_t *rpc, zsock_t *pub, bool full_sync,
               const brk_outbox_sink_t *sink)
{
    brk_outbox_t *self = lisa_calloc(1, sizeof *self);
    self->store = store;
    self->rpc = rpc;
    self->pub = pub;
    self->sink = *sink;
    self->event_seq = brk_store_meta_get(store, "event_seq", 0);
    if (full_sync) {
        /* the syncer also writes the span log records (off the loop) */
        brk_store_defer_span_writes(store);
        self->syncer = zactor_new(s_syncer, store);
        if (!self->syncer) {
            brk_outbox_destroy(&self);
            return NULL;
        }
    }
    return self;
}

void
brk_outbox_destroy(brk_outbox_t **pself)
{
    if (!pself || !*pself)
        return;
    brk_outbox_t *self = *pself;
    zactor_destroy(&self->syncer);
    for (size_t i = 0; i < self->n_batches; i++)
        s_batch_free(&self->batches[i]);
    lisa_free(&self->batches);
    s_pending_clear(&self->open);
    lisa_free(pself);
}

uint64_t
brk_outbox_event_seq(const brk_outbox_t *self)
{
    return self->event_seq;
}

size_t
brk_outbox_pending_replies(const brk_outbox_t *self)
{
    return self->open.replies.n;
}

uint64_t
brk_outbox_errors(const brk_outbox_t *self)
{
    return self->errors;
}
