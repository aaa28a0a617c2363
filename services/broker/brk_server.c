/*
 * brk_server: sockets, the group-commit loop, the RPC handlers, waits,
 * reward-worker dispatch and timers.
 *
 * How a message becomes durable. Every handler runs inside the loop
 * iteration's store transaction, under a SAVEPOINT of its own so that a
 * request that fails half-way leaves nothing behind. What a handler wants
 * to send (its reply, events, newly finished rollouts, score jobs) goes to
 * pending lists; the iteration COMMITs and only then flushes them. If the
 * COMMIT fails, the pending lists are thrown away: nothing was
 * acknowledged, and clients retry.
 *
 * Every state change goes through s_apply, which looks the (state, event)
 * pair up in brk_fsm's table and performs the row's actions. Nothing else
 * writes a rollout's state.
 */
#include "brk_server.h"

#include "brk_arena.h"
#include "brk_fsm.h"
#include "brk_spanscan.h"
#include "brk_store.h"
#include "brk_token.h"
#include "brk_wire.h"
#include "lisa/lisa_codec.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <czmq.h>
#include <inttypes.h>
#include <jansson.h>
#include <openssl/rand.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define S_MAX_ID      128u
#define S_MAX_CLAIM   1000u
#define S_MAX_PAGE    1000u
#define S_MAX_ENGINES 1024u
#define S_MAX_WORKERS 4096u
#define S_DEFAULT_TTL 10000u
#define S_ERR_LEN     512
/* repeat of the "no reward worker connected" warning */
#define S_NO_WORKER_WARN_MS 60000
/* Spans of one SpanPut taken by the fast path (more: the full decoder). */
#define S_SCAN_MAX 64

/* A pending outbound message, or an in-flight score job, or a held wait. */
typedef struct {
    zmsg_t **v;
    size_t n, cap;
} s_msgs_t;

typedef struct {
    char **v;
    size_t n, cap;
} s_strs_t;

typedef struct {
    uint64_t job_id;
    char *rollout_id;
    uint32_t attempt;
    uint32_t tries;           /* dispatches answered with a worker error */
    char *worker;             /* key of the worker holding it; NULL: queued */
    int64_t due;              /* mono ms by which the worker must answer */
    int64_t unroutable_since; /* mono ms since when workers are connected
                                 but none serves data_source; 0: not so */
    char *data_source;
} s_job_t;

typedef struct {
    char *key; /* identity as hex */
    zframe_t *identity;
    bool delim; /* speaks with an empty delimiter frame */
    char *worker_id;
    uint32_t capacity;
    uint32_t inflight;
    char **prefixes;
    size_t n_prefixes;
    int64_t expiry;  /* mono ms; dead after this */
    int64_t next_hb; /* mono ms of our next heartbeat */
} s_worker_t;

typedef struct {
    zframe_t *identity;
    bool delim;
    uint64_t request_id;
    int64_t deadline; /* mono ms */
    uint64_t timeout_ms;
    char **ids;
    size_t n_ids;
    zhashx_t *open; /* ids still open (keys only) */
} s_wait_t;

typedef struct {
    char *engine_id;
    char *url;
    uint64_t policy_version;
    bool paused;
    uint32_t max_batch;
    int64_t expiry; /* mono ms */
} s_engine_t;

/* The context an event is applied with. */
typedef struct {
    uint32_t attempt;
    Lisa__FailureKind kind;
    const char *reason;
    const char *sandbox_id;
    const char *controller_id;
    Lisa__AttemptResult *result;
    uint32_t expected_spans;
    Lisa__Reward *reward;
    Lisa__Attempt *attempt_out; /* set by s_apply: the attempt it touched */
} s_ctx_t;

/* What s_span_check looks at of a span, decoded or scanned. */
typedef struct {
    const char *rollout_id;
    uint32_t attempt, seq;
    int32_t prev_seq;
    size_t n_response_ids, n_response_logprobs;
} s_span_key_t;

typedef struct {
    uint64_t rpc_errors;
    uint64_t span_dups;
    uint64_t spans_dropped;
    uint64_t stale_scores;
    uint64_t spans_stored;
} s_counters_t;

struct brk_server_t {
    const brk_config_t *cfg;
    brk_store_t *store;
    brk_arena_t *arena;
    brk_token_t *token;
    zsock_t *rpc, *pull, *pub, *wrk;
    char *ep_rpc, *ep_spans, *ep_events, *ep_workers;
    lisa_codec_stats_t st_rpc, st_span, st_wrk;
    s_counters_t cnt;

    /* pending until COMMIT */
    s_msgs_t out_replies;
    s_msgs_t out_events;
    s_strs_t finished;
    s_job_t **new_jobs;
    size_t n_new_jobs, cap_new_jobs;
    s_strs_t drop_jobs;

    /* in memory */
    uint64_t event_seq;
    uint64_t policy_version;
    uint64_t next_job_id;
    uint32_t id_counter;
    s_job_t **jobs;
    size_t n_jobs, cap_jobs;
    zhashx_t *workers; /* key -> s_worker_t */
    s_wait_t **waits;
    size_t n_waits, cap_waits;
    zhashx_t *engines;        /* engine_id -> s_engine_t */
    zhashx_t *known_attempts; /* "rollout\x1fattempt" that exist */
    int64_t next_tick;
    struct {
        const uint8_t *data; /* the RPC frame being handled */
        size_t len;
    } cur_frame;
    brk_spanscan_span_t scan[S_SCAN_MAX]; /* the span fast path's output */
    zactor_t *syncer;                     /* NULL with sync "normal" */
    uint64_t batch_seq;
    uint64_t durable_seq; /* highest batch the syncer made durable */
    uint64_t txn_msgs;    /* messages handled in the open transaction */
    /* span log segments may be freed once batch gc_after is durable (an
     * export pruned rollouts in it); 0: nothing to do */
    uint64_t gc_after;
    int64_t gc_since;           /* when gc_after first waited for the syncer */
    int64_t no_worker_since;    /* mono ms since scores wait with no reward
                                   worker connected; 0: not so */
    int64_t no_worker_warn;     /* mono ms of the next such warning */
    struct s_batch_s **batches; /* committed, waiting for fsync */
    size_t n_batches, cap_batches;
    struct {
        uint64_t iterations, messages, commits, work_us, commit_us;
        uint64_t max_batch;
    } loop;
};

/* ------------------------------------------------------------------ */
/* small helpers                                                      */

/* protobuf-c strings are `char *`; empty ones point here. */
static char s_empty[1];

static uint32_t
s_random32(void)
{
    uint32_t v = 0;
    if (RAND_bytes((unsigned char *) &v, sizeof v) != 1)
        v = (uint32_t) zclock_usecs();
    return v;
}

static uint64_t
s_now_ms(void)
{
    return (uint64_t) zclock_time();
}

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
s_job_free(s_job_t **pj)
{
    if (!pj || !*pj)
        return;
    lisa_free(&(*pj)->rollout_id);
    lisa_free(&(*pj)->worker);
    lisa_free(&(*pj)->data_source);
    lisa_free(pj);
}

static void
s_ptrs_push(void ***v, size_t *n, size_t *cap, void *p)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        *v = lisa_realloc(*v, *cap * sizeof **v);
    }
    (*v)[(*n)++] = p;
}

/* Printable ASCII, 1..128 bytes. */
static bool
s_id_ok(const char *s)
{
    if (!s || !*s)
        return false;
    size_t n = 0;
    for (; s[n]; n++)
        if (s[n] < 0x21 || s[n] > 0x7e || n >= S_MAX_ID)
            return false;
    return true;
}

static lisa_rc_t s_fail(char *err, lisa_rc_t rc, const char *fmt, ...)
    LISA_PRINTF(3, 4);

static lisa_rc_t
s_fail(char *err, lisa_rc_t rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, S_ERR_LEN, fmt, ap);
    va_end(ap);
    return rc;
}

static char *
s_hex(zframe_t *f)
{
    return zframe_strhex(f);
}

/* ------------------------------------------------------------------ */
/* events                                                             */

static void
s_event(brk_server_t *self, const char *topic, Lisa__Event *ev)
{
    ev->seq = self->event_seq + self->out_events.n + 1;
    ev->time_ms = s_now_ms();
    zmsg_t *m = zmsg_new();
    zmsg_addstr(m, topic);
    lisa_codec_append(m, &ev->base);
    s_msgs_push(&self->out_events, m);
}

static void
s_rollout_event(brk_server_t *self, const Lisa__Rollout *r,
                const Lisa__Attempt *a)
{
    Lisa__Event ev = LISA__EVENT__INIT;
    Lisa__RolloutEvent re = LISA__ROLLOUT_EVENT__INIT;
    re.rollout_id = r->rollout_id;
    re.attempt = a ? a->attempt : r->attempts;
    re.state = r->state;
    re.attempt_state = a ? a->state : 0;
    re.failure_kind = a && a->failure_kind ? a->failure_kind : r->failure_kind;
    re.reason = r->reason;
    re.run_id = r->run_id;
    re.step = r->step;
    re.reward = r->has_reward && r->reward ? r->reward->value : 0.0;
    ev.body_case = LISA__EVENT__BODY_ROLLOUT;
    ev.rollout = &re;
    s_event(self, "rollout", &ev);
}

static void
s_engine_event(brk_server_t *self, const s_engine_t *e, bool up)
{
    Lisa__Event ev = LISA__EVENT__INIT;
    Lisa__EngineEvent ee = LISA__ENGINE_EVENT__INIT;
    Lisa__Engine eng = LISA__ENGINE__INIT;
    eng.engine_id = e->engine_id;
    eng.url = e->url;
    eng.policy_version = e->policy_version;
    eng.up = up;
    eng.paused = e->paused;
    eng.max_batch = e->max_batch;
    ee.engine = &eng;
    ev.body_case = LISA__EVENT__BODY_ENGINE;
    ev.engine = &ee;
    s_event(self, "engine", &ev);
}

/* ------------------------------------------------------------------ */
/* the state machine driver                                           */

static uint64_t
s_backoff(const brk_config_t *cfg, uint32_t attempts)
{
    uint64_t d = cfg->backoff_ms;
    for (uint32_t i = 1; i < attempts && d < cfg->backoff_max_ms; i++)
        d *= 2;
    return d < cfg->backoff_max_ms ? d : cfg->backoff_max_ms;
}

/* Deadline length for a rollout: the task's limit, else the default. */
static uint64_t
s_deadline_len(brk_server_t *self, const Lisa__Rollout *r,
               Lisa__Limits **limits)
{
    Lisa__TaskSpec *task = NULL;
    *limits = NULL;
    if (brk_store_group_task(self->store, self->arena, r->group_id, &task) ==
            LISA_OK &&
        task->limits) {
        *limits = task->limits;
        if (task->limits->deadline_ms)
            return task->limits->deadline_ms;
    }
    return self->cfg->deadline_ms;
}

/* Applies `ev` to rollout r (in the current transaction). On LISA_CONFLICT
 * nothing was written and err says why. */
static lisa_rc_t
s_apply(brk_server_t *self, Lisa__Rollout *r, brk_event_t ev, s_ctx_t *c,
        char *err)
{
    const brk_fsm_row_t *row = brk_fsm_lookup(r->state, ev);
    if (!row)
        return s_fail(err, LISA_CONFLICT, "rollout %s is %s: '%s' not allowed",
                      r->rollout_id, brk_fsm_state_name(r->state),
                      brk_fsm_event_name(ev));
    uint64_t now = s_now_ms();
    Lisa__RolloutState from = r->state;
    Lisa__Attempt *a = NULL;
    lisa_rc_t rc;
    if (row->actions & BRK_A_NEW_ATTEMPT) {
        Lisa__Limits *lim = NULL;
        uint64_t len = s_deadline_len(self, r, &lim);
        a = brk_arena_alloc(self->arena, sizeof *a);
        lisa__attempt__init(a);
        r->attempts++;
        a->rollout_id = r->rollout_id;
        a->attempt = r->attempts;
        a->controller_id = brk_arena_strdup(self->arena, c->controller_id);
        a->claimed_ms = now;
        a->deadline_ms = now + len;
        a->reason = s_empty;
        a->sandbox_id = s_empty;
        r->deadline_ms = a->deadline_ms;
    } else if (r->attempts > 0) {
        rc = brk_store_attempt_get(self->store, self->arena, r->rollout_id,
                                   r->attempts, &a);
        if (rc != LISA_OK)
            return s_fail(err, LISA_ERR, "attempt %u of %s is missing",
                          r->attempts, r->rollout_id);
    }
    uint64_t not_before = 0;
    uint64_t lease = a ? a->lease_expiry_ms : 0;
    if (a && (row->actions & BRK_A_RENEW_LEASE)) {
        a->lease_expiry_ms = now + self->cfg->lease_ms;
        lease = a->lease_expiry_ms;
    }
    if (a && (row->actions & BRK_A_SET_SANDBOX)) {
        if (c->sandbox_id && *c->sandbox_id)
            a->sandbox_id = brk_arena_strdup(self->arena, c->sandbox_id);
        if (!a->started_ms)
            a->started_ms = now;
    }
    if (a && (row->actions & BRK_A_SAVE_RESULT))
        a->result = c->result;
    if (a && row->attempt_to)
        a->state = row->attempt_to;
    if (a && (row->actions & BRK_A_END_ATTEMPT)) {
        a->ended_ms = now;
        a->failure_kind = c->kind;
        a->reason = brk_arena_strdup(self->arena, c->reason);
    }
    if (row->actions & BRK_A_REQUEUE) {
        not_before = now + s_backoff(self->cfg, r->attempts);
        size_t n = strlen(c->reason ? c->reason : "") + 64;
        char *why = brk_arena_alloc(self->arena, n);
        snprintf(why, n, "attempt %u: %s (%s); retrying", r->attempts,
                 c->reason ? c->reason : "", brk_fsm_failure_name(c->kind));
        r->reason = why;
        r->failure_kind = LISA__FAILURE_KIND__FAILURE_NONE;
        lease = 0;
    }
    if (row->actions & BRK_A_SAVE_REWARD) {
        r->reward = c->reward;
        r->has_reward = c->reward != NULL;
    }
    if (row->actions & BRK_A_FINISH) {
        r->ended_ms = now;
        r->failure_kind = c->kind;
        r->reason = brk_arena_strdup(self->arena, c->reason);
        s_strs_push(&self->finished, r->rollout_id);
    }
    r->state = row->to;
    rc = brk_store_rollout_update(self->store, r, not_before, lease);
    if (rc == LISA_OK && a)
        rc = brk_store_attempt_put(self->store, a, c->expected_spans);
    if (rc == LISA_OK && (row->actions & BRK_A_RECORD))
        rc = brk_store_transition(
            self->store, r->rollout_id, a ? a->attempt : 0, from, r->state,
            brk_fsm_event_name(ev), c->reason ? c->reason : "", now);
    if (rc != LISA_OK)
        return s_fail(err, LISA_ERR, "store write failed");
    if (row->actions & BRK_A_DISPATCH) {
        s_job_t *j = lisa_calloc(1, sizeof *j);
        j->job_id = ++self->next_job_id;
        j->rollout_id = lisa_strdup(r->rollout_id);
        j->attempt = a->attempt;
        j->data_source = lisa_strdup(r->data_source);
        s_ptrs_push((void ***) &self->new_jobs, &self->n_new_jobs,
                    &self->cap_new_jobs, j);
    }
    if (row->actions & BRK_A_DROP_JOB)
        s_strs_push(&self->drop_jobs, r->rollout_id);
    if (row->actions & BRK_A_RECORD)
        s_rollout_event(self, r, a);
    c->attempt_out = a;
    if (lisa_log_enabled(LISA_LOG_DEBUG))
        lisa_log_debug("rollout %s: %s --%s--> %s", r->rollout_id,
                       brk_fsm_state_name(from), brk_fsm_event_name(ev),
                       brk_fsm_state_name(r->state));
    return LISA_OK;
}

/* Loads rollout `id` and checks that `attempt` is its current attempt. */
static lisa_rc_t
s_load_current(brk_server_t *self, const char *id, uint32_t attempt,
               Lisa__Rollout **r, char *err)
{
    if (!s_id_ok(id))
        return s_fail(err, LISA_INVALID, "rollout_id is missing or invalid");
    if (brk_store_rollout_get(self->store, self->arena, id, r) != LISA_OK)
        return s_fail(err, LISA_NOTFOUND, "unknown rollout '%s'", id);
    if (attempt == 0 || attempt > (*r)->attempts)
        return s_fail(err, LISA_NOTFOUND, "rollout %s has no attempt %u", id,
                      attempt);
    if (attempt != (*r)->attempts)
        return s_fail(err, LISA_CONFLICT,
                      "attempt %u of %s is over (current attempt is %u)",
                      attempt, id, (*r)->attempts);
    return LISA_OK;
}

/* ------------------------------------------------------------------ */
/* RPC handlers                                                       */

typedef lisa_rc_t(s_handler_fn)(brk_server_t *self, const Lisa__Request *req,
                                Lisa__Reply *rep, char *err, bool *held,
                                zframe_t *identity, bool delim);

static void
s_new_id(brk_server_t *self, char prefix, char *out, size_t n)
{
    uint32_t rnd = s_random32();
    snprintf(out, n, "%c-%012" PRIx64 "-%06x%04x", prefix, s_now_ms(),
             ++self->id_counter & 0xffffffu, rnd & 0xffffu);
}

static lisa_rc_t
s_h_enqueue(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
            char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__EnqueueReq *q = req->enqueue;
    Lisa__EnqueueRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__enqueue_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_ENQUEUE;
    rep->enqueue = out;
    bool keyed = q->idempotency_key && *q->idempotency_key;
    if (keyed && !s_id_ok(q->idempotency_key))
        return s_fail(err, LISA_INVALID, "idempotency_key is not a valid id");
    if (keyed) {
        uint8_t *blob = NULL;
        size_t len = 0;
        if (brk_store_idem_get(self->store, self->arena, q->idempotency_key,
                               &blob, &len) == LISA_OK) {
            Lisa__EnqueueRep *old = lisa__enqueue_rep__unpack(NULL, len, blob);
            if (!old)
                return s_fail(err, LISA_ERR, "stored reply is corrupt");
            brk_arena_own(self->arena, &old->base);
            rep->enqueue = old;
            return LISA_OK;
        }
    }
    if (q->run_id && *q->run_id && !s_id_ok(q->run_id))
        return s_fail(err, LISA_INVALID, "run_id is not a valid id");
    if (q->n_tasks == 0)
        return s_fail(err, LISA_INVALID, "no tasks to enqueue");
    uint64_t total = 0;
    for (size_t i = 0; i < q->n_tasks; i++) {
        const Lisa__TaskSpec *t = q->tasks[i];
        uint32_t n = t->n ? t->n : 1;
        if (n > 4096)
            return s_fail(err, LISA_TOOLARGE, "task %zu: n=%u exceeds 4096", i,
                          n);
        if (t->task_id && *t->task_id && strlen(t->task_id) > S_MAX_ID)
            return s_fail(err, LISA_INVALID, "task %zu: task_id too long", i);
        if (t->extra_info_json && *t->extra_info_json) {
            json_t *j = json_loads(t->extra_info_json, 0, NULL);
            bool obj = j && json_is_object(j);
            json_decref(j);
            if (!obj)
                return s_fail(err, LISA_INVALID,
                              "task %zu: extra_info_json is not a JSON object",
                              i);
        }
        for (size_t f = 0; f < t->n_files; f++) {
            const char *p = t->files[f]->path;
            if (!p || !*p || strlen(p) > 255 || p[0] == '/' || strstr(p, ".."))
                return s_fail(err, LISA_INVALID, "task %zu: bad file path", i);
        }
        total += n;
    }
    if (total > self->cfg->max_batch)
        return s_fail(err, LISA_TOOLARGE,
                      "%" PRIu64 " rollouts exceed the batch bound %" PRIu64,
                      total, self->cfg->max_batch);
    out->rollout_ids = brk_arena_alloc(self->arena, total * sizeof(char *));
    out->group_ids = brk_arena_alloc(self->arena, q->n_tasks * sizeof(char *));
    uint64_t now = s_now_ms();
    for (size_t i = 0; i < q->n_tasks; i++) {
        const Lisa__TaskSpec *t = q->tasks[i];
        uint32_t n = t->n ? t->n : 1;
        char gid[64];
        s_new_id(self, 'g', gid, sizeof gid);
        if (brk_store_group_put(self->store, gid, q->run_id, q->step, t) !=
            LISA_OK)
            return s_fail(err, LISA_ERR, "store write failed");
        out->group_ids[out->n_group_ids++] = brk_arena_strdup(self->arena, gid);
        for (uint32_t k = 0; k < n; k++) {
            char rid[64];
            s_new_id(self, 'r', rid, sizeof rid);
            Lisa__Rollout r = LISA__ROLLOUT__INIT;
            r.rollout_id = rid;
            r.group_id = gid;
            r.run_id = q->run_id;
            r.step = q->step;
            r.policy_version = q->policy_version;
            r.mode = q->mode;
            r.state = LISA__ROLLOUT_STATE__ROLLOUT_QUEUED;
            r.reason = s_empty;
            r.max_attempts = t->max_attempts
                                 ? t->max_attempts
                                 : (uint32_t) self->cfg->max_attempts;
            r.created_ms = now;
            r.task_id = t->task_id;
            r.data_source = t->data_source;
            r.index_in_group = k;
            if (brk_store_rollout_put(self->store, &r) != LISA_OK ||
                brk_store_transition(
                    self->store, rid, 0,
                    LISA__ROLLOUT_STATE__ROLLOUT_STATE_UNSPECIFIED, r.state,
                    "enqueue", "", now) != LISA_OK)
                return s_fail(err, LISA_ERR, "store write failed");
            s_rollout_event(self, &r, NULL);
            out->rollout_ids[out->n_rollout_ids++] =
                brk_arena_strdup(self->arena, rid);
        }
    }
    if (keyed) {
        size_t len = lisa__enqueue_rep__get_packed_size(out);
        uint8_t *buf = brk_arena_alloc(self->arena, len + 1);
        lisa__enqueue_rep__pack(out, buf);
        if (brk_store_idem_put(self->store, q->idempotency_key, buf, len,
                               now) != LISA_OK)
            return s_fail(err, LISA_ERR, "store write failed");
    }
    return LISA_OK;
}

static lisa_rc_t
s_h_claim(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
          char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__ClaimReq *q = req->claim;
    Lisa__ClaimRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__claim_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_CLAIM;
    rep->claim = out;
    if (!s_id_ok(q->controller_id))
        return s_fail(err, LISA_INVALID, "controller_id is missing or invalid");
    if (q->capacity == 0 || q->capacity > S_MAX_CLAIM)
        return s_fail(err, LISA_INVALID, "capacity must be in 1..%u",
                      S_MAX_CLAIM);
    char **ids = NULL;
    size_t n = 0;
    if (brk_store_claimable(self->store, self->arena, q->run_id, s_now_ms(),
                            q->capacity, &ids, &n) != LISA_OK)
        return s_fail(err, LISA_ERR, "store read failed");
    out->attempts = brk_arena_alloc(self->arena, (n ? n : 1) * sizeof(void *));
    for (size_t i = 0; i < n; i++) {
        Lisa__Rollout *r = NULL;
        if (brk_store_rollout_get(self->store, self->arena, ids[i], &r) !=
            LISA_OK)
            return s_fail(err, LISA_ERR, "store read failed");
        s_ctx_t c = {.controller_id = q->controller_id, .reason = "claimed"};
        lisa_rc_t rc = s_apply(self, r, BRK_EV_CLAIM, &c, err);
        if (rc != LISA_OK)
            return rc;
        Lisa__ClaimedAttempt *ca = brk_arena_alloc(self->arena, sizeof *ca);
        lisa__claimed_attempt__init(ca);
        ca->rollout = r;
        ca->attempt = c.attempt_out->attempt;
        ca->deadline_ms = c.attempt_out->deadline_ms;
        char *tok = brk_token_issue(self->token, r->rollout_id, ca->attempt,
                                    ca->deadline_ms);
        ca->token = brk_arena_strdup(self->arena, tok);
        lisa_free(&tok);
        Lisa__Limits *lim = NULL;
        (void) s_deadline_len(self, r, &lim);
        ca->limits = lim;
        out->attempts[out->n_attempts++] = ca;
    }
    return LISA_OK;
}

static lisa_rc_t
s_h_attempt_start(brk_server_t *self, const Lisa__Request *req,
                  Lisa__Reply *rep, char *err, bool *held, zframe_t *identity,
                  bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__AttemptStartReq *q = req->attempt_start;
    rep->body_case = LISA__REPLY__BODY_ATTEMPT_START;
    rep->attempt_start =
        brk_arena_alloc(self->arena, sizeof *rep->attempt_start);
    lisa__attempt_start_rep__init(rep->attempt_start);
    if (q->sandbox_id && strlen(q->sandbox_id) > 255)
        return s_fail(err, LISA_INVALID, "sandbox_id too long");
    Lisa__Rollout *r = NULL;
    lisa_rc_t rc = s_load_current(self, q->rollout_id, q->attempt, &r, err);
    if (rc != LISA_OK)
        return rc;
    s_ctx_t c = {.sandbox_id = q->sandbox_id, .reason = "sandbox started"};
    return s_apply(self, r, BRK_EV_START, &c, err);
}

static lisa_rc_t
s_h_heartbeat(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
              char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__HeartbeatReq *q = req->heartbeat;
    Lisa__HeartbeatRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__heartbeat_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_HEARTBEAT;
    rep->heartbeat = out;
    Lisa__Rollout *r = NULL;
    lisa_rc_t rc = s_load_current(self, q->rollout_id, q->attempt, &r, err);
    if (rc == LISA_CONFLICT) {
        out->cancel = true; /* an older attempt: tell it to stop */
        return LISA_OK;
    }
    if (rc != LISA_OK)
        return rc;
    if (!brk_fsm_lookup(r->state, BRK_EV_HEARTBEAT)) {
        out->cancel = true; /* ended or re-queued: stop */
        return LISA_OK;
    }
    s_ctx_t c = {.reason = "heartbeat"};
    rc = s_apply(self, r, BRK_EV_HEARTBEAT, &c, err);
    if (rc == LISA_OK && c.attempt_out)
        out->lease_expiry_ms = c.attempt_out->lease_expiry_ms;
    return rc;
}

static lisa_rc_t
s_h_attempt_complete(brk_server_t *self, const Lisa__Request *req,
                     Lisa__Reply *rep, char *err, bool *held,
                     zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__AttemptCompleteReq *q = req->attempt_complete;
    rep->body_case = LISA__REPLY__BODY_ATTEMPT_COMPLETE;
    rep->attempt_complete =
        brk_arena_alloc(self->arena, sizeof *rep->attempt_complete);
    lisa__attempt_complete_rep__init(rep->attempt_complete);
    if (!q->result)
        return s_fail(err, LISA_INVALID, "result is missing");
    if (q->result->answer && strlen(q->result->answer) > self->cfg->max_answer)
        return s_fail(err, LISA_TOOLARGE, "answer exceeds %" PRIu64 " bytes",
                      self->cfg->max_answer);
    Lisa__Rollout *r = NULL;
    lisa_rc_t rc = s_load_current(self, q->rollout_id, q->attempt, &r, err);
    if (rc != LISA_OK)
        return rc;
    if (r->state == LISA__ROLLOUT_STATE__ROLLOUT_SCORING ||
        r->state == LISA__ROLLOUT_STATE__ROLLOUT_SUCCEEDED) {
        /* a repeated complete of this attempt: already accepted */
        Lisa__Attempt *a = NULL;
        if (brk_store_attempt_get(self->store, self->arena, r->rollout_id,
                                  q->attempt, &a) == LISA_OK &&
            a->result)
            return LISA_OK;
    }
    s_ctx_t c = {.result = q->result,
                 .expected_spans = q->expected_spans,
                 .reason = "result posted"};
    return s_apply(self, r, BRK_EV_COMPLETE, &c, err);
}

static lisa_rc_t
s_h_attempt_fail(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
                 char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__AttemptFailReq *q = req->attempt_fail;
    Lisa__AttemptFailRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__attempt_fail_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_ATTEMPT_FAIL;
    rep->attempt_fail = out;
    if (q->kind == LISA__FAILURE_KIND__FAILURE_NONE ||
        q->kind == LISA__FAILURE_KIND__FAILURE_CANCELLED ||
        (unsigned) q->kind > LISA__FAILURE_KIND__FAILURE_CANCELLED)
        return s_fail(err, LISA_INVALID,
                      "kind must name a failure (use cancel to cancel)");
    if (q->reason && strlen(q->reason) > 4096)
        return s_fail(err, LISA_TOOLARGE, "reason exceeds 4096 bytes");
    Lisa__Rollout *r = NULL;
    lisa_rc_t rc = s_load_current(self, q->rollout_id, q->attempt, &r, err);
    Lisa__Attempt *a = NULL;
    if ((rc == LISA_OK || rc == LISA_CONFLICT) && r &&
        brk_store_attempt_get(self->store, self->arena, r->rollout_id,
                              q->attempt, &a) == LISA_OK &&
        a->ended_ms && a->failure_kind == q->kind) {
        /* a repeated report of a failure already applied */
        out->retried = r->attempts > q->attempt ||
                       r->state == LISA__ROLLOUT_STATE__ROLLOUT_QUEUED;
        return LISA_OK;
    }
    if (rc != LISA_OK)
        return rc;
    brk_event_t ev = brk_fsm_fail_event(q->kind, r->attempts, r->max_attempts);
    s_ctx_t c = {.kind = q->kind, .reason = q->reason};
    rc = s_apply(self, r, ev, &c, err);
    out->retried = rc == LISA_OK && ev == BRK_EV_FAIL_RETRY;
    return rc;
}

/* Removes every "ground_truth" key, at any depth. */
static void
s_strip_gt(json_t *j)
{
    if (json_is_object(j)) {
        json_object_del(j, "ground_truth");
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) s_strip_gt(v);
    } else if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) s_strip_gt(v);
    }
}

static lisa_rc_t
s_h_get_task(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
             char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__GetTaskReq *q = req->get_task;
    Lisa__GetTaskRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__get_task_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_GET_TASK;
    rep->get_task = out;
    Lisa__Rollout *r = NULL;
    lisa_rc_t rc = s_load_current(self, q->rollout_id, q->attempt, &r, err);
    if (rc != LISA_OK)
        return rc;
    Lisa__TaskSpec *t = NULL;
    if (brk_store_group_task(self->store, self->arena, r->group_id, &t) !=
        LISA_OK)
        return s_fail(err, LISA_ERR, "task of %s is missing", r->rollout_id);
    s_ctx_t c = {.reason = "task fetched"};
    rc = s_apply(self, r, BRK_EV_GET_TASK, &c, err);
    if (rc != LISA_OK)
        return rc;
    Lisa__TaskView *v = brk_arena_alloc(self->arena, sizeof *v);
    lisa__task_view__init(v);
    v->rollout_id = r->rollout_id;
    v->attempt = r->attempts;
    v->group_id = r->group_id;
    v->task_id = t->task_id;
    v->data_source = t->data_source;
    v->problem_statement = t->problem_statement;
    v->n_files = t->n_files;
    v->files = t->files;
    v->limits = t->limits;
    v->deadline_ms = c.attempt_out ? c.attempt_out->deadline_ms : 0;
    v->policy_version = r->policy_version;
    v->extra_info_json = s_empty;
    if (t->extra_info_json && *t->extra_info_json) {
        json_t *j = json_loads(t->extra_info_json, 0, NULL);
        if (j) {
            s_strip_gt(j);
            char *s = json_dumps(j, JSON_COMPACT);
            v->extra_info_json = brk_arena_strdup(self->arena, s);
            free(s);
            json_decref(j);
        }
    }
    out->task = v;
    return LISA_OK;
}

/* Terminal rollouts among ids, and the ids still open. */
static lisa_rc_t
s_split(brk_server_t *self, char **ids, size_t n, Lisa__WaitRep *out)
{
    out->rollouts = brk_arena_alloc(self->arena, (n ? n : 1) * sizeof(void *));
    out->pending_ids =
        brk_arena_alloc(self->arena, (n ? n : 1) * sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        Lisa__Rollout *r = NULL;
        if (brk_store_rollout_get(self->store, self->arena, ids[i], &r) !=
            LISA_OK) {
            out->pending_ids[out->n_pending_ids++] = ids[i];
            continue;
        }
        if (brk_fsm_terminal(r->state))
            out->rollouts[out->n_rollouts++] = r;
        else
            out->pending_ids[out->n_pending_ids++] = r->rollout_id;
    }
    return LISA_OK;
}

static lisa_rc_t
s_h_wait(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
         char *err, bool *held, zframe_t *identity, bool delim)
{
    const Lisa__WaitReq *q = req->wait;
    Lisa__WaitRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__wait_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_WAIT;
    rep->wait = out;
    if (q->timeout_ms == 0)
        return s_fail(err, LISA_INVALID, "timeout_ms is required (> 0)");
    if (q->timeout_ms > self->cfg->max_wait_ms)
        return s_fail(err, LISA_INVALID,
                      "timeout_ms %" PRIu64 " exceeds the maximum %" PRIu64,
                      q->timeout_ms, self->cfg->max_wait_ms);
    if (q->n_rollout_ids == 0)
        return s_fail(err, LISA_INVALID, "no rollout ids to wait for");
    if (q->n_rollout_ids > self->cfg->max_batch)
        return s_fail(err, LISA_TOOLARGE, "too many rollout ids");
    for (size_t i = 0; i < q->n_rollout_ids; i++) {
        Lisa__Rollout *r = NULL;
        if (!s_id_ok(q->rollout_ids[i]) ||
            brk_store_rollout_get(self->store, self->arena, q->rollout_ids[i],
                                  &r) != LISA_OK)
            return s_fail(err, LISA_NOTFOUND, "unknown rollout '%s'",
                          q->rollout_ids[i]);
    }
    s_split(self, q->rollout_ids, q->n_rollout_ids, out);
    if (out->n_pending_ids == 0)
        return LISA_OK;
    if (self->n_waits >= self->cfg->max_waits)
        return s_fail(err, LISA_AGAIN, "too many waits held (%zu)",
                      self->n_waits);
    s_wait_t *w = lisa_calloc(1, sizeof *w);
    w->identity = zframe_dup(identity);
    w->delim = delim;
    w->request_id = req->request_id;
    w->timeout_ms = q->timeout_ms;
    w->deadline = zclock_mono() + (int64_t) q->timeout_ms;
    w->n_ids = q->n_rollout_ids;
    w->ids = lisa_calloc(w->n_ids, sizeof *w->ids);
    w->open = zhashx_new();
    for (size_t i = 0; i < w->n_ids; i++)
        w->ids[i] = lisa_strdup(q->rollout_ids[i]);
    for (size_t i = 0; i < out->n_pending_ids; i++)
        zhashx_insert(w->open, out->pending_ids[i], (void *) 1);
    s_ptrs_push((void ***) &self->waits, &self->n_waits, &self->cap_waits, w);
    *held = true;
    return LISA_OK;
}

static lisa_rc_t
s_h_query(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
          char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__QueryReq *q = req->query;
    Lisa__QueryRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__query_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_QUERY;
    rep->query = out;
    out->next_after = s_empty;
    if (q->limit > S_MAX_PAGE)
        return s_fail(err, LISA_INVALID, "limit exceeds %u", S_MAX_PAGE);
    if (q->n_rollout_ids > S_MAX_PAGE)
        return s_fail(err, LISA_TOOLARGE, "more than %u ids", S_MAX_PAGE);
    if ((q->with_spans || q->with_transitions) && q->n_rollout_ids == 0)
        return s_fail(err, LISA_INVALID,
                      "with_spans/with_transitions need rollout_ids");
    if (q->n_rollout_ids == 0) {
        size_t n = 0;
        char *next = NULL;
        if (brk_store_list(self->store, self->arena, q->run_id, q->by_step,
                           q->step, q->state, false, q->after,
                           q->limit ? q->limit : 100, &out->rollouts, &n,
                           &next) != LISA_OK)
            return s_fail(err, LISA_ERR, "store read failed");
        out->n_rollouts = n;
        out->next_after = next;
    } else {
        out->rollouts =
            brk_arena_alloc(self->arena, q->n_rollout_ids * sizeof(void *));
        for (size_t i = 0; i < q->n_rollout_ids; i++) {
            Lisa__Rollout *r = NULL;
            if (!s_id_ok(q->rollout_ids[i]) ||
                brk_store_rollout_get(self->store, self->arena,
                                      q->rollout_ids[i], &r) != LISA_OK)
                return s_fail(err, LISA_NOTFOUND, "unknown rollout '%s'",
                              q->rollout_ids[i]);
            out->rollouts[out->n_rollouts++] = r;
        }
    }
    if (q->with_attempts || q->with_spans || q->with_transitions) {
        void **att = NULL, **sp = NULL, **tr = NULL;
        size_t na = 0, ca = 0, ns = 0, cs = 0, nt = 0, ct = 0;
        for (size_t i = 0; i < out->n_rollouts; i++) {
            const char *id = out->rollouts[i]->rollout_id;
            void **v = NULL;
            size_t n = 0;
            if (q->with_attempts &&
                brk_store_attempts_of(self->store, self->arena, id,
                                      (Lisa__Attempt ***) &v, &n) == LISA_OK)
                for (size_t k = 0; k < n; k++)
                    s_ptrs_push(&att, &na, &ca, v[k]);
            if (q->with_spans &&
                brk_store_spans_of(self->store, self->arena, id, 0,
                                   (Lisa__Span ***) &v, &n) == LISA_OK)
                for (size_t k = 0; k < n; k++)
                    s_ptrs_push(&sp, &ns, &cs, v[k]);
            if (q->with_transitions &&
                brk_store_transitions_of(self->store, self->arena, id,
                                         (Lisa__Transition ***) &v,
                                         &n) == LISA_OK)
                for (size_t k = 0; k < n; k++)
                    s_ptrs_push(&tr, &nt, &ct, v[k]);
        }
        /* copy the heap arrays into the arena so the reset frees them */
        if (na) {
            out->attempts = brk_arena_alloc(self->arena, na * sizeof(void *));
            memcpy(out->attempts, att, na * sizeof(void *));
            out->n_attempts = na;
        }
        if (ns) {
            out->spans = brk_arena_alloc(self->arena, ns * sizeof(void *));
            memcpy(out->spans, sp, ns * sizeof(void *));
            out->n_spans = ns;
        }
        if (nt) {
            out->transitions =
                brk_arena_alloc(self->arena, nt * sizeof(void *));
            memcpy(out->transitions, tr, nt * sizeof(void *));
            out->n_transitions = nt;
        }
        lisa_free(&att);
        lisa_free(&sp);
        lisa_free(&tr);
    }
    return LISA_OK;
}

static lisa_rc_t
s_cancel_one(brk_server_t *self, Lisa__Rollout *r, const char *reason,
             uint32_t *count, char *err)
{
    if (brk_fsm_terminal(r->state))
        return LISA_OK;
    s_ctx_t c = {.kind = LISA__FAILURE_KIND__FAILURE_CANCELLED,
                 .reason = reason && *reason ? reason : "cancelled"};
    lisa_rc_t rc = s_apply(self, r, BRK_EV_CANCEL, &c, err);
    if (rc == LISA_OK)
        (*count)++;
    return rc;
}

static lisa_rc_t
s_h_cancel(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
           char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__CancelReq *q = req->cancel;
    Lisa__CancelRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__cancel_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_CANCEL;
    rep->cancel = out;
    if (q->n_rollout_ids == 0 && !(q->run_id && *q->run_id))
        return s_fail(err, LISA_INVALID, "name rollout ids or a run");
    if (q->n_rollout_ids > self->cfg->max_batch)
        return s_fail(err, LISA_TOOLARGE, "too many rollout ids");
    for (size_t i = 0; i < q->n_rollout_ids; i++) {
        Lisa__Rollout *r = NULL;
        if (!s_id_ok(q->rollout_ids[i]) ||
            brk_store_rollout_get(self->store, self->arena, q->rollout_ids[i],
                                  &r) != LISA_OK)
            return s_fail(err, LISA_NOTFOUND, "unknown rollout '%s'",
                          q->rollout_ids[i]);
        lisa_rc_t rc = s_cancel_one(self, r, q->reason, &out->cancelled, err);
        if (rc != LISA_OK)
            return rc;
    }
    if (q->run_id && *q->run_id) {
        char **ids = NULL;
        size_t n = 0;
        if (brk_store_open_of_run(self->store, self->arena, q->run_id, &ids,
                                  &n) != LISA_OK)
            return s_fail(err, LISA_ERR, "store read failed");
        for (size_t i = 0; i < n; i++) {
            Lisa__Rollout *r = NULL;
            if (brk_store_rollout_get(self->store, self->arena, ids[i], &r) !=
                LISA_OK)
                continue;
            lisa_rc_t rc =
                s_cancel_one(self, r, q->reason, &out->cancelled, err);
            if (rc != LISA_OK)
                return rc;
        }
    }
    return LISA_OK;
}

static uint64_t
s_live_engines(brk_server_t *self)
{
    return zhashx_size(self->engines);
}

static lisa_rc_t
s_h_stats(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
          char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    Lisa__StatsRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__stats_rep__init(out);
    Lisa__Stats *st = brk_arena_alloc(self->arena, sizeof *st);
    lisa__stats__init(st);
    out->stats = st;
    rep->body_case = LISA__REPLY__BODY_STATS;
    rep->stats = out;
    if (brk_store_counts(self->store, req->stats->run_id, st) != LISA_OK)
        return s_fail(err, LISA_ERR, "store read failed");
    st->workers = zhashx_size(self->workers);
    st->engines_up = s_live_engines(self);
    st->policy_version = self->policy_version;
    st->event_seq = self->event_seq;
    st->bad_frames = lisa_codec_stats_refused(&self->st_rpc) +
                     lisa_codec_stats_refused(&self->st_span) +
                     lisa_codec_stats_refused(&self->st_wrk);
    st->rpc_errors = self->cnt.rpc_errors;
    st->span_duplicates = self->cnt.span_dups;
    st->spans_dropped = self->cnt.spans_dropped;
    st->group_commits = brk_store_commits(self->store);
    st->stale_scores = self->cnt.stale_scores;
    return LISA_OK;
}

static lisa_rc_t
s_h_policy(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
           char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__PolicyReq *q = req->policy;
    Lisa__PolicyRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__policy_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_POLICY;
    rep->policy = out;
    out->version = self->policy_version;
    if (!q->set)
        return LISA_OK;
    if (q->version <= self->policy_version)
        return s_fail(err, LISA_CONFLICT,
                      "policy version %" PRIu64 " is not above %" PRIu64,
                      q->version, self->policy_version);
    if (brk_store_meta_set(self->store, "policy_version", q->version) !=
        LISA_OK)
        return s_fail(err, LISA_ERR, "store write failed");
    self->policy_version = q->version;
    out->version = q->version;
    Lisa__Event ev = LISA__EVENT__INIT;
    Lisa__PolicyEvent pe = LISA__POLICY_EVENT__INIT;
    pe.version = q->version;
    ev.body_case = LISA__EVENT__BODY_POLICY;
    ev.policy = &pe;
    s_event(self, "policy", &ev);
    return LISA_OK;
}

static s_span_key_t
s_key_of(const Lisa__Span *s)
{
    return (s_span_key_t){
        s->rollout_id, s->attempt,        s->seq,
        s->prev_seq,   s->n_response_ids, s->n_response_logprobs};
}

static s_span_key_t
s_key_of_scan(const brk_spanscan_span_t *s)
{
    return (s_span_key_t){
        s->rollout_id, s->attempt,        s->seq,
        s->prev_seq,   s->n_response_ids, s->n_response_logprobs};
}

/* Checks a span's shape and that its attempt exists. */
static lisa_rc_t
s_span_check(brk_server_t *self, const s_span_key_t *s, char *err)
{
    if (!s_id_ok(s->rollout_id))
        return s_fail(err, LISA_INVALID, "span: rollout_id missing or invalid");
    if (s->attempt == 0)
        return s_fail(err, LISA_INVALID, "span: attempt must be >= 1");
    if (s->n_response_logprobs != s->n_response_ids)
        return s_fail(err, LISA_INVALID,
                      "span %s/%u/%u: %zu logprobs for %zu response ids",
                      s->rollout_id, s->attempt, s->seq, s->n_response_logprobs,
                      s->n_response_ids);
    if (s->prev_seq < -1 ||
        (s->prev_seq >= 0 && (uint32_t) s->prev_seq >= s->seq))
        return s_fail(err, LISA_INVALID, "span %s/%u/%u: bad prev_seq %d",
                      s->rollout_id, s->attempt, s->seq, s->prev_seq);
    char key[S_MAX_ID + 16];
    snprintf(key, sizeof key, "%s\x1f%u", s->rollout_id, s->attempt);
    if (zhashx_lookup(self->known_attempts, key))
        return LISA_OK;
    Lisa__Attempt *a = NULL;
    if (brk_store_attempt_get(self->store, self->arena, s->rollout_id,
                              s->attempt, &a) != LISA_OK)
        return s_fail(err, LISA_NOTFOUND, "span for unknown attempt %s/%u",
                      s->rollout_id, s->attempt);
    if (zhashx_size(self->known_attempts) > 100000)
        zhashx_purge(self->known_attempts);
    zhashx_insert(self->known_attempts, key, (void *) 1);
    return LISA_OK;
}

static lisa_rc_t
s_h_span_put(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
             char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__SpanPutReq *q = req->span_put;
    Lisa__SpanPutRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__span_put_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_SPAN_PUT;
    rep->span_put = out;
    if (q->n_spans > self->cfg->max_batch)
        return s_fail(err, LISA_TOOLARGE, "too many spans in one put");
    for (size_t i = 0; i < q->n_spans; i++) {
        s_span_key_t k = s_key_of(q->spans[i]);
        lisa_rc_t rc = s_span_check(self, &k, err);
        if (rc != LISA_OK)
            return rc;
    }
    /* the spans' bytes as received, stored without packing them again */
    static const uint32_t path[] = {LISA__REQUEST__BODY_SPAN_PUT, 1};
    brk_wire_slice_t *raw = brk_arena_alloc(
        self->arena, (q->n_spans ? q->n_spans : 1) * sizeof *raw);
    long found = brk_wire_find(self->cur_frame.data, self->cur_frame.len, path,
                               2, raw, q->n_spans);
    bool use_raw = found >= 0 && (size_t) found == q->n_spans;
    for (size_t i = 0; i < q->n_spans; i++) {
        bool dup = false;
        if (brk_store_span_put(self->store, q->spans[i],
                               use_raw ? raw[i].data : NULL,
                               use_raw ? raw[i].len : 0, &dup) != LISA_OK)
            return s_fail(err, LISA_ERR, "store write failed");
        if (dup) {
            out->duplicates++;
            self->cnt.span_dups++;
        } else {
            out->stored++;
            self->cnt.spans_stored++;
        }
    }
    return LISA_OK;
}

static lisa_rc_t
s_h_span_status(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
                char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__SpanStatusReq *q = req->span_status;
    Lisa__SpanStatusRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__span_status_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_SPAN_STATUS;
    rep->span_status = out;
    if (!s_id_ok(q->rollout_id))
        return s_fail(err, LISA_INVALID, "rollout_id is missing or invalid");
    Lisa__Attempt *a = NULL;
    if (brk_store_attempt_get(self->store, self->arena, q->rollout_id,
                              q->attempt, &a) != LISA_OK)
        return s_fail(err, LISA_NOTFOUND, "unknown attempt %s/%u",
                      q->rollout_id, q->attempt);
    if (brk_store_span_status(self->store, q->rollout_id, q->attempt,
                              &out->contiguous_seq, &out->count) != LISA_OK)
        return s_fail(err, LISA_ERR, "store read failed");
    return LISA_OK;
}

static void
s_engine_free(void **item)
{
    s_engine_t *e = *item;
    if (!e)
        return;
    lisa_free(&e->engine_id);
    lisa_free(&e->url);
    lisa_free(item);
}

static lisa_rc_t
s_h_engine_register(brk_server_t *self, const Lisa__Request *req,
                    Lisa__Reply *rep, char *err, bool *held, zframe_t *identity,
                    bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__EngineRegisterReq *q = req->engine_register;
    rep->body_case = LISA__REPLY__BODY_ENGINE_REGISTER;
    rep->engine_register =
        brk_arena_alloc(self->arena, sizeof *rep->engine_register);
    lisa__engine_register_rep__init(rep->engine_register);
    const Lisa__Engine *e = q->engine;
    if (!e || !s_id_ok(e->engine_id))
        return s_fail(err, LISA_INVALID, "engine_id is missing or invalid");
    if (!e->url || strncmp(e->url, "http", 4) != 0 || strlen(e->url) > 1024)
        return s_fail(err, LISA_INVALID, "engine url must be an http(s) URL");
    uint64_t ttl = q->ttl_ms ? q->ttl_ms : S_DEFAULT_TTL;
    if (ttl > 3600000)
        return s_fail(err, LISA_INVALID, "ttl_ms exceeds one hour");
    s_engine_t *old = zhashx_lookup(self->engines, e->engine_id);
    if (!old && zhashx_size(self->engines) >= S_MAX_ENGINES)
        return s_fail(err, LISA_AGAIN, "too many engines");
    bool changed = !old || strcmp(old->url, e->url) != 0 ||
                   old->paused != e->paused ||
                   old->policy_version != e->policy_version;
    if (!old) {
        old = lisa_calloc(1, sizeof *old);
        old->engine_id = lisa_strdup(e->engine_id);
        old->url = lisa_strdup(e->url);
        zhashx_insert(self->engines, e->engine_id, old);
    } else if (strcmp(old->url, e->url) != 0) {
        lisa_free(&old->url);
        old->url = lisa_strdup(e->url);
    }
    old->policy_version = e->policy_version;
    old->paused = e->paused;
    old->max_batch = e->max_batch;
    old->expiry = zclock_mono() + (int64_t) ttl;
    if (changed)
        s_engine_event(self, old, true);
    return LISA_OK;
}

static lisa_rc_t
s_h_engine_list(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
                char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) req, (void) err, (void) held, (void) identity, (void) delim;
    Lisa__EngineListRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__engine_list_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_ENGINE_LIST;
    rep->engine_list = out;
    size_t n = zhashx_size(self->engines);
    out->engines = brk_arena_alloc(self->arena, (n ? n : 1) * sizeof(void *));
    for (s_engine_t *e = zhashx_first(self->engines); e;
         e = zhashx_next(self->engines)) {
        Lisa__Engine *x = brk_arena_alloc(self->arena, sizeof *x);
        lisa__engine__init(x);
        x->engine_id = brk_arena_strdup(self->arena, e->engine_id);
        x->url = brk_arena_strdup(self->arena, e->url);
        x->policy_version = e->policy_version;
        x->up = true;
        x->paused = e->paused;
        x->max_batch = e->max_batch;
        out->engines[out->n_engines++] = x;
    }
    return LISA_OK;
}

static lisa_rc_t
s_h_export(brk_server_t *self, const Lisa__Request *req, Lisa__Reply *rep,
           char *err, bool *held, zframe_t *identity, bool delim)
{
    (void) held, (void) identity, (void) delim;
    const Lisa__ExportReq *q = req->export;
    Lisa__ExportRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__export_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_EXPORT;
    rep->export = out;
    if (q->limit > S_MAX_PAGE)
        return s_fail(err, LISA_INVALID, "limit exceeds %u", S_MAX_PAGE);
    size_t n = 0;
    char *next = NULL;
    if (brk_store_list(self->store, self->arena, q->run_id, false, 0, 0, true,
                       q->after, q->limit ? q->limit : 100, &out->rollouts, &n,
                       &next) != LISA_OK)
        return s_fail(err, LISA_ERR, "store read failed");
    out->n_rollouts = n;
    out->next_after = next;
    void **att = NULL, **sp = NULL;
    size_t na = 0, ca = 0, ns = 0, cs = 0;
    for (size_t i = 0; i < n; i++) {
        const char *id = out->rollouts[i]->rollout_id;
        void **v = NULL;
        size_t k = 0;
        if (brk_store_attempts_of(self->store, self->arena, id,
                                  (Lisa__Attempt ***) &v, &k) == LISA_OK)
            for (size_t j = 0; j < k; j++)
                s_ptrs_push(&att, &na, &ca, v[j]);
        if (brk_store_spans_of(self->store, self->arena, id, 0,
                               (Lisa__Span ***) &v, &k) == LISA_OK)
            for (size_t j = 0; j < k; j++)
                s_ptrs_push(&sp, &ns, &cs, v[j]);
    }
    if (na) {
        out->attempts = brk_arena_alloc(self->arena, na * sizeof(void *));
        memcpy(out->attempts, att, na * sizeof(void *));
        out->n_attempts = na;
    }
    if (ns) {
        out->spans = brk_arena_alloc(self->arena, ns * sizeof(void *));
        memcpy(out->spans, sp, ns * sizeof(void *));
        out->n_spans = ns;
    }
    lisa_free(&att);
    lisa_free(&sp);
    if (q->prune)
        for (size_t i = 0; i < n; i++)
            if (brk_store_prune(self->store, out->rollouts[i]->rollout_id) !=
                LISA_OK)
                return s_fail(err, LISA_ERR, "store delete failed");
    if (q->prune && n) {
        lisa_log_info("export: pruned %zu finished rollouts", n);
        /* this iteration's batch; its segments go once it is durable */
        self->gc_after = self->batch_seq + 1;
    }
    return LISA_OK;
}

/* The dispatch table: one row per Request body. `savepoint` marks the
 * handlers that may fail after a first write and so run under a SAVEPOINT
 * of their own; the others check everything before writing (a savepoint
 * costs a copy of every page the request touches). */
static const struct {
    Lisa__Request__BodyCase body;
    s_handler_fn *fn;
    const char *name;
    bool savepoint;
} s_handlers[] = {
    {LISA__REQUEST__BODY_ENQUEUE, s_h_enqueue, "enqueue", true},
    {LISA__REQUEST__BODY_CLAIM, s_h_claim, "claim", true},
    {LISA__REQUEST__BODY_ATTEMPT_START, s_h_attempt_start, "attempt_start",
     true},
    {LISA__REQUEST__BODY_HEARTBEAT, s_h_heartbeat, "heartbeat", true},
    {LISA__REQUEST__BODY_ATTEMPT_COMPLETE, s_h_attempt_complete,
     "attempt_complete", true},
    {LISA__REQUEST__BODY_ATTEMPT_FAIL, s_h_attempt_fail, "attempt_fail", true},
    {LISA__REQUEST__BODY_GET_TASK, s_h_get_task, "get_task", true},
    {LISA__REQUEST__BODY_WAIT, s_h_wait, "wait", false},
    {LISA__REQUEST__BODY_QUERY, s_h_query, "query", false},
    {LISA__REQUEST__BODY_CANCEL, s_h_cancel, "cancel", true},
    {LISA__REQUEST__BODY_STATS, s_h_stats, "stats", false},
    {LISA__REQUEST__BODY_POLICY, s_h_policy, "policy", true},
    {LISA__REQUEST__BODY_SPAN_PUT, s_h_span_put, "span_put", false},
    {LISA__REQUEST__BODY_SPAN_STATUS, s_h_span_status, "span_status", false},
    {LISA__REQUEST__BODY_ENGINE_REGISTER, s_h_engine_register,
     "engine_register", false},
    {LISA__REQUEST__BODY_ENGINE_LIST, s_h_engine_list, "engine_list", false},
    {LISA__REQUEST__BODY_EXPORT, s_h_export, "export", true},
};

/* ------------------------------------------------------------------ */
/* replies                                                            */

static void
s_queue_reply(brk_server_t *self, zframe_t *identity, bool delim,
              Lisa__Reply *rep)
{
    zmsg_t *m = zmsg_new();
    zframe_t *id = zframe_dup(identity);
    zmsg_append(m, &id);
    if (delim)
        zmsg_addmem(m, NULL, 0);
    lisa_codec_append(m, &rep->base);
    s_msgs_push(&self->out_replies, m);
}

/* Sets the reply body that matches a request body (Reply numbers its
 * bodies 100 above Request), as an empty message, so that an error reply
 * still says which request it answers. */
static void
s_empty_body(brk_server_t *self, Lisa__Reply *rep, uint32_t request_body)
{
    const ProtobufCFieldDescriptor *f =
        request_body ? protobuf_c_message_descriptor_get_field(
                           &lisa__reply__descriptor, request_body + 100)
                     : NULL;
    if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE)
        return;
    const ProtobufCMessageDescriptor *d = f->descriptor;
    void *m = brk_arena_alloc(self->arena, d->sizeof_message);
    protobuf_c_message_init(d, m);
    memcpy((char *) rep + f->offset, &m, sizeof m);
    uint32_t which = f->id;
    memcpy((char *) rep + f->quantifier_offset, &which, sizeof which);
}

static void
s_queue_error(brk_server_t *self, zframe_t *identity, bool delim,
              uint64_t request_id, uint32_t request_body, lisa_rc_t rc,
              const char *why)
{
    Lisa__Reply rep = LISA__REPLY__INIT;
    s_empty_body(self, &rep, request_body);
    rep.request_id = request_id;
    rep.code = (Lisa__Code) lisa_rc_to_code(rc);
    char text[S_ERR_LEN];
    snprintf(text, sizeof text, "%s", why ? why : "");
    rep.error = text;
    self->cnt.rpc_errors++;
    s_queue_reply(self, identity, delim, &rep);
}

/* Stores the scanned spans and counts them into *out; LISA_ERR when the
 * store failed. */
static lisa_rc_t
s_span_store_scanned(brk_server_t *self, const brk_spanscan_span_t *sp,
                     size_t n, Lisa__SpanPutRep *out)
{
    for (size_t i = 0; i < n; i++) {
        bool dup = false;
        if (brk_store_span_put_raw(self->store, sp[i].rollout_id, sp[i].attempt,
                                   sp[i].seq, sp[i].raw, sp[i].raw_len,
                                   &dup) != LISA_OK)
            return LISA_ERR;
        if (dup) {
            out->duplicates++;
            self->cnt.span_dups++;
        } else {
            out->stored++;
            self->cnt.spans_stored++;
        }
    }
    return LISA_OK;
}

/* The fast path of SpanPut: a request brk_spanscan takes, whose spans all
 * pass s_span_check, is stored and answered without decoding the spans
 * (the same rows, log records and reply as s_h_span_put). false: nothing
 * was stored or answered; the caller decodes the frame in full, which
 * also produces the error reply. */
static bool
s_rpc_span_fast(brk_server_t *self, zframe_t *identity, bool delim,
                zframe_t *body)
{
    size_t len = zframe_size(body), n = 0;
    uint64_t request_id = 0;
    if (len > self->cfg->max_rpc_frame ||
        !brk_spanscan_request(zframe_data(body), len, &request_id, self->scan,
                              S_SCAN_MAX, &n) ||
        n > self->cfg->max_batch || brk_store_begin(self->store) != LISA_OK)
        return false;
    char err[S_ERR_LEN] = "";
    for (size_t i = 0; i < n; i++) {
        s_span_key_t k = s_key_of_scan(&self->scan[i]);
        if (s_span_check(self, &k, err) != LISA_OK) {
            brk_arena_reset(self->arena);
            return false;
        }
    }
    self->st_rpc.ok++;
    Lisa__SpanPutRep out = LISA__SPAN_PUT_REP__INIT;
    Lisa__Reply rep = LISA__REPLY__INIT;
    rep.request_id = request_id;
    if (s_span_store_scanned(self, self->scan, n, &out) != LISA_OK) {
        s_queue_error(self, identity, delim, request_id,
                      LISA__REQUEST__BODY_SPAN_PUT, LISA_ERR,
                      "store write failed");
    } else {
        rep.code = LISA__CODE__CODE_OK;
        rep.error = s_empty;
        rep.body_case = LISA__REPLY__BODY_SPAN_PUT;
        rep.span_put = &out;
        s_queue_reply(self, identity, delim, &rep);
    }
    brk_arena_reset(self->arena);
    return true;
}

static void
s_on_rpc(brk_server_t *self, zmsg_t *m)
{
    size_t frames = zmsg_size(m);
    zframe_t *identity = zmsg_first(m);
    zframe_t *second = zmsg_next(m);
    bool delim = frames == 3 && second && zframe_size(second) == 0;
    zframe_t *body = delim ? zmsg_next(m) : second;
    if (!identity || !body || frames > 3 || (frames == 3 && !delim)) {
        self->st_rpc.bad_shape++;
        if (identity)
            s_queue_error(self, identity, frames >= 3, 0, 0, LISA_INVALID,
                          "expected frames [empty] Request");
        return;
    }
    if (s_rpc_span_fast(self, identity, delim, body))
        return;
    ProtobufCMessage *msg = NULL;
    const char *why = NULL;
    lisa_rc_t rc = lisa_codec_decode_frame(&lisa__request__descriptor, body,
                                           self->cfg->max_rpc_frame,
                                           &self->st_rpc, &msg, &why);
    if (rc != LISA_OK) {
        lisa_log_warn("rpc: refused a frame of %zu bytes: %s",
                      zframe_size(body), why);
        s_queue_error(self, identity, delim, 0, 0, rc, why);
        return;
    }
    Lisa__Request *req = (Lisa__Request *) msg;
    s_handler_fn *fn = NULL;
    const char *name = "?";
    bool savepoint = true;
    for (size_t i = 0; i < sizeof s_handlers / sizeof s_handlers[0]; i++)
        if (s_handlers[i].body == req->body_case) {
            fn = s_handlers[i].fn;
            name = s_handlers[i].name;
            savepoint = s_handlers[i].savepoint;
        }
    if (!fn) {
        s_queue_error(self, identity, delim, req->request_id, 0,
                      LISA_UNSUPPORTED, "unknown request type");
        lisa_codec_free(&msg);
        return;
    }
    /* A savepoint per request: a failed request leaves nothing behind. */
    size_t mark_ev = self->out_events.n, mark_fin = self->finished.n;
    size_t mark_jobs = self->n_new_jobs, mark_drop = self->drop_jobs.n;
    if (brk_store_begin(self->store) != LISA_OK) {
        s_queue_error(self, identity, delim, req->request_id, 0,
                      LISA_UNAVAILABLE, "store unavailable");
        lisa_codec_free(&msg);
        return;
    }
    if (savepoint && brk_store_savepoint(self->store) != LISA_OK) {
        s_queue_error(self, identity, delim, req->request_id, 0,
                      LISA_UNAVAILABLE, "store unavailable");
        lisa_codec_free(&msg);
        return;
    }
    char err[S_ERR_LEN] = "";
    bool held = false;
    Lisa__Reply rep = LISA__REPLY__INIT;
    rep.request_id = req->request_id;
    self->cur_frame.data = zframe_data(body);
    self->cur_frame.len = zframe_size(body);
    rc = fn(self, req, &rep, err, &held, identity, delim);
    self->cur_frame.data = NULL;
    self->cur_frame.len = 0;
    if (rc != LISA_OK) {
        if (savepoint)
            brk_store_savepoint_undo(self->store);
        s_msgs_truncate(&self->out_events, mark_ev);
        s_strs_truncate(&self->finished, mark_fin);
        while (self->n_new_jobs > mark_jobs)
            s_job_free(&self->new_jobs[--self->n_new_jobs]);
        s_strs_truncate(&self->drop_jobs, mark_drop);
        lisa_log_info("rpc %s from '%s' (req %" PRIu64 "): %s: %s", name,
                      req->caller ? req->caller : "", req->request_id,
                      lisa_rc_str(rc), err);
        s_queue_error(self, identity, delim, req->request_id,
                      (uint32_t) req->body_case, rc, err);
    } else {
        if (savepoint)
            brk_store_savepoint_keep(self->store);
        if (!held) {
            rep.code = LISA__CODE__CODE_OK;
            rep.error = s_empty;
            s_queue_reply(self, identity, delim, &rep);
        }
    }
    brk_arena_reset(self->arena);
    lisa_codec_free(&msg);
}

/* ------------------------------------------------------------------ */
/* span ingest (PULL)                                                 */

/* Stores a pushed span from the bytes it arrived in. */
static lisa_rc_t
s_span_put_pushed(brk_server_t *self, zframe_t *frame, const Lisa__Span *span,
                  bool *dup)
{
    static const uint32_t path[] = {LISA__SPAN_PUSH__BODY_SPAN};
    brk_wire_slice_t raw;
    bool use_raw = brk_wire_find(zframe_data(frame), zframe_size(frame), path,
                                 1, &raw, 1) == 1;
    return brk_store_span_put(self->store, span, use_raw ? raw.data : NULL,
                              use_raw ? raw.len : 0, dup);
}

static void
s_on_span(brk_server_t *self, zmsg_t *m)
{
    if (zmsg_size(m) != 1) {
        self->st_span.bad_shape++;
        self->cnt.spans_dropped++;
        return;
    }
    /* fast path: a frame brk_spanscan takes is checked and stored without
     * decoding the span; anything else is decoded in full below */
    zframe_t *f = zmsg_first(m);
    if (zframe_size(f) <= self->cfg->max_span_frame &&
        brk_spanscan_push(zframe_data(f), zframe_size(f), &self->scan[0])) {
        self->st_span.ok++;
        s_span_key_t k = s_key_of_scan(&self->scan[0]);
        char err[S_ERR_LEN] = "";
        bool dup = false;
        if (brk_store_begin(self->store) != LISA_OK ||
            s_span_check(self, &k, err) != LISA_OK) {
            self->cnt.spans_dropped++;
            lisa_log_warn("spans: dropped: %s",
                          err[0] ? err : "store unavailable");
        } else if (brk_store_span_put_raw(self->store, self->scan[0].rollout_id,
                                          self->scan[0].attempt,
                                          self->scan[0].seq, self->scan[0].raw,
                                          self->scan[0].raw_len,
                                          &dup) != LISA_OK) {
            self->cnt.spans_dropped++;
        } else if (dup) {
            self->cnt.span_dups++;
        } else {
            self->cnt.spans_stored++;
        }
        brk_arena_reset(self->arena);
        return;
    }
    ProtobufCMessage *msg = NULL;
    const char *why = NULL;
    if (lisa_codec_decode_frame(&lisa__span_push__descriptor, zmsg_first(m),
                                self->cfg->max_span_frame, &self->st_span, &msg,
                                &why) != LISA_OK) {
        self->cnt.spans_dropped++;
        lisa_log_warn("spans: dropped a frame: %s", why);
        return;
    }
    const Lisa__Span *span = ((Lisa__SpanPush *) msg)->span;
    char err[S_ERR_LEN] = "";
    bool dup = false;
    s_span_key_t key = s_key_of(span);
    if (brk_store_begin(self->store) != LISA_OK ||
        s_span_check(self, &key, err) != LISA_OK) {
        self->cnt.spans_dropped++;
        lisa_log_warn("spans: dropped: %s", err[0] ? err : "store unavailable");
    } else if (s_span_put_pushed(self, zmsg_first(m), span, &dup) != LISA_OK) {
        self->cnt.spans_dropped++;
    } else if (dup) {
        self->cnt.span_dups++;
    } else {
        self->cnt.spans_stored++;
    }
    brk_arena_reset(self->arena);
    lisa_codec_free(&msg);
}

/* ------------------------------------------------------------------ */
/* reward workers                                                     */

static void
s_worker_free(void **item)
{
    s_worker_t *w = *item;
    if (!w)
        return;
    lisa_free(&w->key);
    zframe_destroy(&w->identity);
    lisa_free(&w->worker_id);
    for (size_t i = 0; i < w->n_prefixes; i++)
        lisa_free(&w->prefixes[i]);
    lisa_free(&w->prefixes);
    lisa_free(item);
}

static void
s_worker_send(brk_server_t *self, zframe_t *identity, bool delim,
              Lisa__WorkerMsg *wm)
{
    zmsg_t *m = zmsg_new();
    zframe_t *id = zframe_dup(identity);
    zmsg_append(m, &id);
    if (delim)
        zmsg_addmem(m, NULL, 0);
    lisa_codec_append(m, &wm->base);
    if (zmsg_send(&m, self->wrk) != 0)
        zmsg_destroy(&m);
}

static void
s_worker_disconnect(brk_server_t *self, zframe_t *identity, bool delim,
                    const char *reason)
{
    Lisa__WorkerMsg wm = LISA__WORKER_MSG__INIT;
    Lisa__WorkerDisconnect d = LISA__WORKER_DISCONNECT__INIT;
    char text[S_ERR_LEN];
    snprintf(text, sizeof text, "%s", reason);
    d.reason = text;
    wm.body_case = LISA__WORKER_MSG__BODY_DISCONNECT;
    wm.disconnect = &d;
    s_worker_send(self, identity, delim, &wm);
}

/* Forgets a worker; its jobs go back to the queue. */
static void
s_worker_remove(brk_server_t *self, s_worker_t *w, const char *why)
{
    size_t requeued = 0;
    for (size_t i = 0; i < self->n_jobs; i++) {
        s_job_t *j = self->jobs[i];
        if (j->worker && strcmp(j->worker, w->key) == 0) {
            lisa_free(&j->worker);
            requeued++;
        }
    }
    lisa_log_info("worker %s (%s) removed: %s; %zu score jobs re-queued",
                  w->worker_id ? w->worker_id : "?", w->key, why, requeued);
    zhashx_delete(self->workers, w->key);
}

static size_t
s_job_index(brk_server_t *self, uint64_t job_id)
{
    for (size_t i = 0; i < self->n_jobs; i++)
        if (self->jobs[i]->job_id == job_id)
            return i;
    return SIZE_MAX;
}

static void
s_job_remove(brk_server_t *self, size_t i)
{
    s_job_free(&self->jobs[i]);
    self->jobs[i] = self->jobs[--self->n_jobs];
}

/* Ends a scoring rollout with FAILURE_REWARD (in the transaction). */
static void
s_score_failed(brk_server_t *self, s_job_t *j, const char *why)
{
    Lisa__Rollout *r = NULL;
    char err[S_ERR_LEN] = "";
    if (brk_store_begin(self->store) == LISA_OK &&
        brk_store_rollout_get(self->store, self->arena, j->rollout_id, &r) ==
            LISA_OK &&
        r->attempts == j->attempt) {
        s_ctx_t c = {.kind = LISA__FAILURE_KIND__FAILURE_REWARD, .reason = why};
        if (s_apply(self, r, BRK_EV_REWARD_INVALID, &c, err) != LISA_OK)
            lisa_log_warn("score of %s: %s", j->rollout_id, err);
    }
    brk_arena_reset(self->arena);
}

static void
s_on_score(brk_server_t *self, s_worker_t *w, const Lisa__ScoreReply *sr)
{
    size_t i = s_job_index(self, sr->job_id);
    if (i == SIZE_MAX || !self->jobs[i]->worker ||
        strcmp(self->jobs[i]->worker, w->key) != 0) {
        self->cnt.stale_scores++;
        return;
    }
    s_job_t *j = self->jobs[i];
    if (w->inflight)
        w->inflight--;
    char why[S_ERR_LEN];
    if (sr->code == LISA__CODE__CODE_OK && sr->reward) {
        Lisa__Rollout *r = NULL;
        char err[S_ERR_LEN] = "";
        if (brk_store_begin(self->store) == LISA_OK &&
            brk_store_rollout_get(self->store, self->arena, j->rollout_id,
                                  &r) == LISA_OK &&
            r->attempts == j->attempt) {
            Lisa__Reward rw = *sr->reward;
            if (!rw.worker_id || !*rw.worker_id)
                rw.worker_id = w->worker_id;
            if (!rw.scored_ms)
                rw.scored_ms = s_now_ms();
            s_ctx_t c = {.reward = &rw, .reason = "scored"};
            if (s_apply(self, r, BRK_EV_SCORED, &c, err) != LISA_OK)
                lisa_log_warn("score of %s: %s", j->rollout_id, err);
        }
        brk_arena_reset(self->arena);
        s_job_remove(self, i);
        return;
    }
    if (sr->code == LISA__CODE__CODE_INVALID) {
        snprintf(why, sizeof why, "reward: %s",
                 sr->error && *sr->error ? sr->error : "unscorable");
        s_score_failed(self, j, why);
        s_job_remove(self, i);
        return;
    }
    j->tries++;
    lisa_free(&j->worker);
    if (j->tries >= self->cfg->score_tries) {
        snprintf(why, sizeof why, "reward failed %u times: %s", j->tries,
                 sr->error && *sr->error ? sr->error : "worker error");
        s_score_failed(self, j, why);
        s_job_remove(self, i);
    }
}

static void
s_on_worker(brk_server_t *self, zmsg_t *m)
{
    size_t frames = zmsg_size(m);
    zframe_t *identity = zmsg_first(m);
    zframe_t *second = zmsg_next(m);
    bool delim = frames == 3 && second && zframe_size(second) == 0;
    zframe_t *body = delim ? zmsg_next(m) : second;
    if (!identity || !body || frames > 3 || (frames == 3 && !delim)) {
        self->st_wrk.bad_shape++;
        return;
    }
    ProtobufCMessage *msg = NULL;
    const char *why = NULL;
    if (lisa_codec_decode_frame(&lisa__worker_msg__descriptor, body,
                                self->cfg->max_worker_frame, &self->st_wrk,
                                &msg, &why) != LISA_OK) {
        lisa_log_warn("workers: refused a frame: %s", why);
        return;
    }
    Lisa__WorkerMsg *wm = (Lisa__WorkerMsg *) msg;
    char *key = s_hex(identity);
    s_worker_t *w = zhashx_lookup(self->workers, key);
    int64_t now = zclock_mono();
    int64_t live =
        (int64_t) (self->cfg->worker_heartbeat_ms * self->cfg->worker_liveness);
    if (w)
        w->expiry = now + live;
    switch (wm->body_case) {
    case LISA__WORKER_MSG__BODY_READY: {
        if (w)
            s_worker_remove(self, w, "sent READY again");
        if (zhashx_size(self->workers) >= S_MAX_WORKERS ||
            wm->ready->n_data_sources > 64) {
            s_worker_disconnect(self, identity, delim, "refused");
            break;
        }
        w = lisa_calloc(1, sizeof *w);
        w->key = lisa_strdup(key);
        w->identity = zframe_dup(identity);
        w->delim = delim;
        w->worker_id = lisa_strndup(
            wm->ready->worker_id ? wm->ready->worker_id : "", S_MAX_ID);
        w->capacity = wm->ready->capacity ? wm->ready->capacity : 1;
        if (w->capacity > 1024)
            w->capacity = 1024;
        w->n_prefixes = wm->ready->n_data_sources;
        w->prefixes = lisa_calloc(w->n_prefixes + 1, sizeof(char *));
        for (size_t i = 0; i < w->n_prefixes; i++)
            w->prefixes[i] = lisa_strndup(wm->ready->data_sources[i], 256);
        w->expiry = now + live;
        w->next_hb = now + (int64_t) self->cfg->worker_heartbeat_ms;
        zhashx_insert(self->workers, key, w);
        lisa_log_info("worker %s ready (capacity %u)", w->worker_id,
                      w->capacity);
        break;
    }
    case LISA__WORKER_MSG__BODY_HEARTBEAT:
        if (!w)
            s_worker_disconnect(self, identity, delim, "unknown worker");
        break;
    case LISA__WORKER_MSG__BODY_REPLY:
        if (!w) {
            self->cnt.stale_scores++;
            s_worker_disconnect(self, identity, delim, "unknown worker");
        } else {
            s_on_score(self, w, wm->reply);
        }
        break;
    case LISA__WORKER_MSG__BODY_DISCONNECT:
        if (w)
            s_worker_remove(self, w, "disconnected");
        break;
    default:
        self->st_wrk.wrong_type++;
        s_worker_disconnect(self, identity, delim, "unexpected message");
        if (w)
            s_worker_remove(self, w, "protocol error");
        break;
    }
    zstr_free(&key);
    lisa_codec_free(&msg);
}

static bool
s_worker_serves(const s_worker_t *w, const char *data_source)
{
    if (w->n_prefixes == 0)
        return true;
    for (size_t i = 0; i < w->n_prefixes; i++)
        if (strncmp(data_source ? data_source : "", w->prefixes[i],
                    strlen(w->prefixes[i])) == 0)
            return true;
    return false;
}

/* Whether `list` (entries joined by ", ") holds `item`. */
static bool
s_list_has(const char *list, const char *item)
{
    size_t n = strlen(item);
    for (const char *p = list; *p;) {
        const char *e = strstr(p, ", ");
        size_t len = e ? (size_t) (e - p) : strlen(p);
        if (len == n && strncmp(p, item, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 2;
    }
    return false;
}

/* Whether reward workers are connected but none serves `data_source`. */
static bool
s_unroutable(brk_server_t *self, const char *data_source)
{
    if (zhashx_size(self->workers) == 0)
        return false;
    for (s_worker_t *w = zhashx_first(self->workers); w;
         w = zhashx_next(self->workers))
        if (s_worker_serves(w, data_source))
            return false;
    return true;
}

/* The prefixes the connected workers serve, each once, into list (size
 * n; cut short when it fills). */
static void
s_served_prefixes(brk_server_t *self, char *list, size_t n)
{
    size_t used = 0;
    list[0] = '\0';
    for (s_worker_t *w = zhashx_first(self->workers); w;
         w = zhashx_next(self->workers))
        for (size_t i = 0; i < w->n_prefixes && used < n; i++) {
            if (s_list_has(list, w->prefixes[i]))
                continue;
            int k = snprintf(list + used, n - used, "%s%s", used ? ", " : "",
                             w->prefixes[i]);
            used += k > 0 ? (size_t) k : 0;
        }
}

/* Sends queued score jobs to workers with room (after COMMIT). */
static void
s_dispatch(brk_server_t *self)
{
    for (size_t i = 0; i < self->n_jobs; i++) {
        s_job_t *j = self->jobs[i];
        if (j->worker)
            continue;
        s_worker_t *best = NULL;
        for (s_worker_t *w = zhashx_first(self->workers); w;
             w = zhashx_next(self->workers))
            if (w->inflight < w->capacity &&
                s_worker_serves(w, j->data_source) &&
                (!best || w->inflight < best->inflight))
                best = w;
        if (!best)
            continue;
        Lisa__Rollout *r = NULL;
        Lisa__Attempt *a = NULL;
        Lisa__TaskSpec *t = NULL;
        if (brk_store_rollout_get(self->store, self->arena, j->rollout_id,
                                  &r) != LISA_OK ||
            r->state != LISA__ROLLOUT_STATE__ROLLOUT_SCORING ||
            r->attempts != j->attempt ||
            brk_store_attempt_get(self->store, self->arena, j->rollout_id,
                                  j->attempt, &a) != LISA_OK ||
            brk_store_group_task(self->store, self->arena, r->group_id, &t) !=
                LISA_OK) {
            brk_arena_reset(self->arena);
            s_job_remove(self, i--);
            continue;
        }
        uint64_t now = s_now_ms();
        uint64_t budget = self->cfg->score_budget_ms;
        if (a->deadline_ms > now && a->deadline_ms - now < budget)
            budget = a->deadline_ms - now;
        Lisa__WorkerMsg wm = LISA__WORKER_MSG__INIT;
        Lisa__ScoreRequest sr = LISA__SCORE_REQUEST__INIT;
        sr.job_id = j->job_id;
        sr.rollout_id = r->rollout_id;
        sr.attempt = j->attempt;
        sr.data_source = r->data_source;
        sr.answer =
            a->result && a->result->answer ? a->result->answer : s_empty;
        sr.ground_truth = t->ground_truth;
        sr.extra_info_json = t->extra_info_json;
        sr.budget_ms = budget;
        wm.body_case = LISA__WORKER_MSG__BODY_REQUEST;
        wm.request = &sr;
        s_worker_send(self, best->identity, best->delim, &wm);
        brk_arena_reset(self->arena);
        j->worker = lisa_strdup(best->key);
        j->due = zclock_mono() + (int64_t) budget +
                 (int64_t) (self->cfg->worker_heartbeat_ms *
                            self->cfg->worker_liveness);
        best->inflight++;
    }
}

/* ------------------------------------------------------------------ */
/* waits                                                              */

static void
s_wait_free(s_wait_t **pw)
{
    s_wait_t *w = *pw;
    if (!w)
        return;
    zframe_destroy(&w->identity);
    for (size_t i = 0; i < w->n_ids; i++)
        lisa_free(&w->ids[i]);
    lisa_free(&w->ids);
    zhashx_destroy(&w->open);
    lisa_free(pw);
}

static void
s_wait_answer(brk_server_t *self, size_t i, bool timed_out)
{
    s_wait_t *w = self->waits[i];
    Lisa__Reply rep = LISA__REPLY__INIT;
    Lisa__WaitRep out = LISA__WAIT_REP__INIT;
    rep.request_id = w->request_id;
    rep.body_case = LISA__REPLY__BODY_WAIT;
    rep.wait = &out;
    s_split(self, w->ids, w->n_ids, &out);
    char err[S_ERR_LEN] = "";
    if (timed_out && out.n_pending_ids > 0) {
        snprintf(err, sizeof err,
                 "timed out after %" PRIu64 " ms: %zu of %zu rollouts still "
                 "open",
                 w->timeout_ms, out.n_pending_ids, w->n_ids);
        rep.code = LISA__CODE__CODE_TIMEOUT;
        self->cnt.rpc_errors++;
    }
    rep.error = err;
    s_queue_reply(self, w->identity, w->delim, &rep);
    brk_arena_reset(self->arena);
    s_wait_free(&self->waits[i]);
    self->waits[i] = self->waits[--self->n_waits];
}

static void
s_waits_update(brk_server_t *self, const s_strs_t *finished)
{
    for (size_t f = 0; f < finished->n; f++)
        for (size_t i = 0; i < self->n_waits; i++)
            zhashx_delete(self->waits[i]->open, finished->v[f]);
    for (size_t i = 0; i < self->n_waits;)
        if (zhashx_size(self->waits[i]->open) == 0)
            s_wait_answer(self, i, false);
        else
            i++;
}

/* ------------------------------------------------------------------ */
/* timers                                                             */

static void
s_tick(brk_server_t *self)
{
    if (brk_store_begin(self->store) != LISA_OK)
        return;
    uint64_t now = s_now_ms();
    int64_t mono = zclock_mono();
    char err[S_ERR_LEN];

    /* leases and deadlines */
    char **ids = NULL;
    size_t n = 0;
    if (brk_store_due(self->store, self->arena, now, 1000, &ids, &n) ==
        LISA_OK) {
        char **copy = lisa_calloc(n + 1, sizeof *copy);
        for (size_t i = 0; i < n; i++)
            copy[i] = lisa_strdup(ids[i]);
        brk_arena_reset(self->arena);
        for (size_t i = 0; i < n; i++) {
            Lisa__Rollout *r = NULL;
            Lisa__Attempt *a = NULL;
            if (brk_store_rollout_get(self->store, self->arena, copy[i], &r) !=
                    LISA_OK ||
                brk_store_attempt_get(self->store, self->arena, copy[i],
                                      r->attempts, &a) != LISA_OK) {
                brk_arena_reset(self->arena);
                continue;
            }
            s_ctx_t c = {0};
            brk_event_t ev;
            char why[160];
            if (a->deadline_ms <= now) {
                ev = BRK_EV_DEADLINE;
                c.kind = LISA__FAILURE_KIND__FAILURE_DEADLINE;
                snprintf(why, sizeof why,
                         "deadline passed in state %s (%" PRIu64
                         " ms after claim)",
                         brk_fsm_state_name(r->state), now - a->claimed_ms);
            } else {
                c.kind = LISA__FAILURE_KIND__FAILURE_LEASE;
                ev = brk_fsm_fail_event(c.kind, r->attempts, r->max_attempts);
                snprintf(why, sizeof why,
                         "lease expired (no heartbeat for %" PRIu64 " ms)",
                         now - (a->lease_expiry_ms - self->cfg->lease_ms));
            }
            c.reason = why;
            if (s_apply(self, r, ev, &c, err) != LISA_OK)
                lisa_log_warn("tick: %s", err);
            else
                lisa_log_info("rollout %s attempt %u: %s", r->rollout_id,
                              a->attempt, why);
            brk_arena_reset(self->arena);
        }
        for (size_t i = 0; i < n; i++)
            lisa_free(&copy[i]);
        lisa_free(&copy);
    }

    /* waits past their deadline */
    for (size_t i = 0; i < self->n_waits;)
        if (self->waits[i]->deadline <= mono)
            s_wait_answer(self, i, true);
        else
            i++;

    /* reward workers: heartbeats out, the dead out */
    s_worker_t *w = zhashx_first(self->workers);
    while (w) {
        s_worker_t *next = zhashx_next(self->workers);
        if (w->expiry <= mono) {
            const char *cursor = zhashx_cursor(self->workers);
            (void) cursor;
            s_worker_remove(self, w, "missed heartbeats");
            /* zhashx iteration is invalid after a delete: restart */
            w = zhashx_first(self->workers);
            continue;
        }
        if (w->next_hb <= mono) {
            Lisa__WorkerMsg wm = LISA__WORKER_MSG__INIT;
            Lisa__WorkerHeartbeat hb = LISA__WORKER_HEARTBEAT__INIT;
            wm.body_case = LISA__WORKER_MSG__BODY_HEARTBEAT;
            wm.heartbeat = &hb;
            s_worker_send(self, w->identity, w->delim, &wm);
            w->next_hb = mono + (int64_t) self->cfg->worker_heartbeat_ms;
        }
        w = next;
    }

    /* scores waiting with no reward worker connected: they wait (one may
     * still come), but say so now and then */
    if (self->n_jobs && zhashx_size(self->workers) == 0) {
        if (!self->no_worker_since) {
            self->no_worker_since = mono;
            self->no_worker_warn =
                mono + (int64_t) self->cfg->score_unroutable_ms;
        }
        if (mono >= self->no_worker_warn) {
            lisa_log_warn("no reward worker is connected: score jobs "
                          "waiting: %zu, for %lld s (start one: lisa-reward "
                          "worker --broker <this broker's --workers>)",
                          self->n_jobs,
                          (long long) (mono - self->no_worker_since) / 1000);
            self->no_worker_warn = mono + S_NO_WORKER_WARN_MS;
        }
    } else {
        self->no_worker_since = 0;
    }

    /* score jobs a live worker sat on for too long, and queued ones no
     * connected worker can score */
    for (size_t i = 0; i < self->n_jobs;) {
        s_job_t *j = self->jobs[i];
        if (!j->worker && s_unroutable(self, j->data_source)) {
            if (!j->unroutable_since)
                j->unroutable_since = mono;
            if (mono - j->unroutable_since >=
                (int64_t) self->cfg->score_unroutable_ms) {
                char serve[256], why[S_ERR_LEN];
                s_served_prefixes(self, serve, sizeof serve);
                snprintf(why, sizeof why,
                         "no reward worker scores data source '%.64s' "
                         "(connected workers serve: %s)",
                         j->data_source ? j->data_source : "", serve);
                lisa_log_warn("rollout %s: %s", j->rollout_id, why);
                s_score_failed(self, j, why);
                s_job_remove(self, i);
                continue;
            }
        } else if (!j->worker) {
            j->unroutable_since = 0;
        }
        if (j->worker && j->due <= mono) {
            s_worker_t *holder = zhashx_lookup(self->workers, j->worker);
            if (holder && holder->inflight)
                holder->inflight--;
            lisa_free(&j->worker);
            j->tries++;
            if (j->tries >= self->cfg->score_tries) {
                s_score_failed(self, j,
                               "reward workers did not answer in time");
                s_job_remove(self, i);
                continue;
            }
        }
        i++;
    }

    /* engines that stopped renewing */
    s_engine_t *e = zhashx_first(self->engines);
    while (e) {
        if (e->expiry <= mono) {
            s_engine_event(self, e, false);
            lisa_log_info("engine %s expired", e->engine_id);
            zhashx_delete(self->engines, e->engine_id);
            e = zhashx_first(self->engines);
            continue;
        }
        e = zhashx_next(self->engines);
    }
}

/* ------------------------------------------------------------------ */
/* the loop                                                           */

static void
s_discard_pending(brk_server_t *self)
{
    s_msgs_truncate(&self->out_replies, 0);
    s_msgs_truncate(&self->out_events, 0);
    s_strs_truncate(&self->finished, 0);
    while (self->n_new_jobs)
        s_job_free(&self->new_jobs[--self->n_new_jobs]);
    s_strs_truncate(&self->drop_jobs, 0);
}

/* What one group commit owes the world once it is durable. */
typedef struct s_batch_s {
    uint64_t id;
    s_msgs_t replies;
    s_msgs_t events;
    s_strs_t finished;
    s_strs_t drop_jobs;
    s_job_t **jobs;
    size_t n_jobs, cap_jobs;
} s_batch_t;

static void
s_batch_free(s_batch_t **pb)
{
    s_batch_t *b = *pb;
    if (!b)
        return;
    s_msgs_truncate(&b->replies, 0);
    s_msgs_truncate(&b->events, 0);
    s_strs_truncate(&b->finished, 0);
    s_strs_truncate(&b->drop_jobs, 0);
    while (b->n_jobs)
        s_job_free(&b->jobs[--b->n_jobs]);
    lisa_free(&b->replies.v);
    lisa_free(&b->events.v);
    lisa_free(&b->finished.v);
    lisa_free(&b->drop_jobs.v);
    lisa_free(&b->jobs);
    lisa_free(pb);
}

/* Moves the iteration's pending lists into a new batch. */
static s_batch_t *
s_batch_take(brk_server_t *self)
{
    s_batch_t *b = lisa_calloc(1, sizeof *b);
    b->id = ++self->batch_seq;
    b->replies = self->out_replies;
    b->events = self->out_events;
    b->finished = self->finished;
    b->drop_jobs = self->drop_jobs;
    b->jobs = self->new_jobs;
    b->n_jobs = self->n_new_jobs;
    b->cap_jobs = self->cap_new_jobs;
    memset(&self->out_replies, 0, sizeof self->out_replies);
    memset(&self->out_events, 0, sizeof self->out_events);
    memset(&self->finished, 0, sizeof self->finished);
    memset(&self->drop_jobs, 0, sizeof self->drop_jobs);
    self->new_jobs = NULL;
    self->n_new_jobs = self->cap_new_jobs = 0;
    return b;
}

/* The batch is durable: publish its events, adopt its score jobs, answer
 * the waits it completed, send its replies. */
static void
s_batch_flush(brk_server_t *self, s_batch_t *b)
{
    for (size_t i = 0; i < b->events.n; i++)
        if (zmsg_send(&b->events.v[i], self->pub) != 0)
            zmsg_destroy(&b->events.v[i]);
    b->events.n = 0;
    for (size_t i = 0; i < b->n_jobs; i++)
        s_ptrs_push((void ***) &self->jobs, &self->n_jobs, &self->cap_jobs,
                    b->jobs[i]);
    b->n_jobs = 0;
    for (size_t d = 0; d < b->drop_jobs.n; d++)
        for (size_t i = 0; i < self->n_jobs; i++)
            if (strcmp(self->jobs[i]->rollout_id, b->drop_jobs.v[d]) == 0) {
                s_worker_t *w =
                    self->jobs[i]->worker
                        ? zhashx_lookup(self->workers, self->jobs[i]->worker)
                        : NULL;
                if (w && w->inflight)
                    w->inflight--;
                s_job_remove(self, i);
                break;
            }
    /* the waits this batch completes are answered with it; replies
     * queued before (requests of the transaction still open while the
     * syncer ran) wait for their own batch */
    size_t mark = self->out_replies.n;
    s_waits_update(self, &b->finished);
    for (size_t i = mark; i < self->out_replies.n; i++)
        s_msgs_push(&b->replies, self->out_replies.v[i]);
    self->out_replies.n = mark;
    for (size_t i = 0; i < b->replies.n; i++)
        if (zmsg_send(&b->replies.v[i], self->rpc) != 0)
            zmsg_destroy(&b->replies.v[i]);
    b->replies.n = 0;
}

/* Flushes every waiting batch with an id up to `durable`, in order. */
static void
s_flush_durable(brk_server_t *self, uint64_t durable)
{
    while (self->n_batches && self->batches[0]->id <= durable) {
        s_batch_t *b = self->batches[0];
        memmove(self->batches, self->batches + 1,
                (self->n_batches - 1) * sizeof *self->batches);
        self->n_batches--;
        s_batch_flush(self, b);
        s_batch_free(&b);
    }
    s_dispatch(self);
}

/* Deletes span log segments freed by a prune once the prune is durable
 * (called between transactions). The deletion must not run ahead of
 * any commit: a segment whose rows a committed but not yet fsynced prune
 * deleted would be gone while a power cut could bring the rows back. So
 * it waits until every committed batch is durable (no batch waits for
 * the syncer), and when the loop never gets there for S_GC_WAIT_MS it
 * syncs the store itself once, blocking the loop for one fsync. */
#define S_GC_WAIT_MS 10000

static void
s_span_gc(brk_server_t *self, uint64_t durable)
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

static lisa_rc_t
s_finish_iteration(brk_server_t *self)
{
    if (self->out_events.n &&
        brk_store_meta_set(self->store, "event_seq",
                           self->event_seq + self->out_events.n) != LISA_OK)
        brk_store_rollback(self->store);
    lisa_rc_t rc = brk_store_commit(self->store);
    if (rc != LISA_OK) {
        lisa_log_error("store: group commit failed; %zu replies withheld",
                       self->out_replies.n);
        s_discard_pending(self);
        self->policy_version =
            brk_store_meta_get(self->store, "policy_version", 0);
        return rc;
    }
    self->event_seq += self->out_events.n;
    bool empty = !self->out_replies.n && !self->out_events.n &&
                 !self->finished.n && !self->n_new_jobs && !self->drop_jobs.n;
    if (empty && !self->n_batches) {
        s_dispatch(self);
        return LISA_OK;
    }
    s_batch_t *b = s_batch_take(self);
    if (!self->syncer) {
        /* sync "normal": COMMIT is the durability point (process crash) */
        s_span_gc(self, b->id);
        s_batch_flush(self, b);
        s_batch_free(&b);
        s_dispatch(self);
        return LISA_OK;
    }
    /* sync "full": the syncer fsyncs the WAL, which covers this COMMIT
     * and every earlier one; the batch waits for its answer while the
     * loop goes on with the next one. */
    s_ptrs_push((void ***) &self->batches, &self->n_batches, &self->cap_batches,
                b);
    if (zstr_sendf(self->syncer, "%" PRIu64, b->id) != 0) {
        lisa_log_error("syncer unreachable");
        return LISA_ERR;
    }
    return LISA_OK;
}

/* Reads the syncer's answers; LISA_ERR when an fsync failed. */
static lisa_rc_t
s_on_syncer(brk_server_t *self)
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

lisa_rc_t
brk_server_run(brk_server_t *self, volatile sig_atomic_t *stop)
{
    zmq_pollitem_t items[4] = {
        {zsock_resolve(self->rpc), 0, ZMQ_POLLIN, 0},
        {zsock_resolve(self->pull), 0, ZMQ_POLLIN, 0},
        {zsock_resolve(self->wrk), 0, ZMQ_POLLIN, 0},
        {self->syncer ? zsock_resolve(zactor_sock(self->syncer)) : NULL, 0,
         ZMQ_POLLIN, 0},
    };
    int n_items = self->syncer ? 4 : 3;
    zsock_t *socks[3] = {self->rpc, self->pull, self->wrk};
    unsigned failures = 0;
    while (!*stop && !zsys_interrupted) {
        int64_t wait = self->next_tick - zclock_mono();
        if (wait < 0)
            wait = 0;
        int rc = zmq_poll(items, n_items, (long) wait);
        if (rc < 0) {
            if (zmq_errno() == EINTR)
                continue;
            lisa_log_error("poll failed: %s", zmq_strerror(zmq_errno()));
            return LISA_ERR;
        }
        if (self->syncer && s_on_syncer(self) != LISA_OK)
            return LISA_ERR;
        int64_t t_start = zclock_usecs();
        size_t handled = 0;
        bool any = true;
        while (any && handled < self->cfg->group_max) {
            any = false;
            for (int s = 0; s < 3 && handled < self->cfg->group_max; s++) {
                if (!(zsock_events(socks[s]) & ZMQ_POLLIN))
                    continue;
                zmsg_t *m = zmsg_recv(socks[s]);
                if (!m)
                    continue;
                if (s == 0)
                    s_on_rpc(self, m);
                else if (s == 1)
                    s_on_span(self, m);
                else
                    s_on_worker(self, m);
                zmsg_destroy(&m);
                handled++;
                any = true;
            }
        }
        if (zclock_mono() >= self->next_tick) {
            s_tick(self);
            self->next_tick = zclock_mono() + (int64_t) self->cfg->tick_ms;
        }
        self->txn_msgs += handled;
        self->loop.iterations++;
        self->loop.messages += handled;
        int64_t t_work = zclock_usecs();
        self->loop.work_us += (uint64_t) (t_work - t_start);
        /* While the syncer runs, what arrives joins the open transaction
         * and is committed when the sync ends: its replies would wait for
         * the next sync anyway, and one COMMIT per sync writes each
         * touched page to the WAL once instead of once per iteration. */
        if (self->syncer && self->batch_seq > self->durable_seq &&
            self->txn_msgs < self->cfg->group_max)
            continue;
        lisa_rc_t frc = s_finish_iteration(self);
        int64_t t_done = zclock_usecs();
        self->loop.commit_us += (uint64_t) (t_done - t_work);
        self->loop.commits++;
        if (self->txn_msgs > self->loop.max_batch)
            self->loop.max_batch = self->txn_msgs;
        self->txn_msgs = 0;
        if (frc != LISA_OK) {
            if (++failures >= 50) {
                lisa_log_error("store keeps failing; stopping");
                return LISA_ERR;
            }
            zclock_sleep(20 * (int) failures);
        } else {
            failures = 0;
        }
    }
    /* commit what was held for the syncer, and answer what is committed
     * before leaving */
    if (s_finish_iteration(self) != LISA_OK)
        lisa_log_warn("store: the last group commit failed");
    if (self->syncer && self->n_batches) {
        if (brk_store_sync(self->store) == LISA_OK)
            s_flush_durable(self, self->batch_seq);
    }
    lisa_log_info(
        "loop: %" PRIu64 " iterations, %" PRIu64 " messages in %" PRIu64
        " group commits (largest %" PRIu64 "), %.3f s handling, %.3f s "
        "committing and sending",
        self->loop.iterations, self->loop.messages, self->loop.commits,
        self->loop.max_batch, (double) self->loop.work_us / 1e6,
        (double) self->loop.commit_us / 1e6);
    return LISA_OK;
}

/* ------------------------------------------------------------------ */
/* construction                                                       */

static zsock_t *
s_bind(int type, const char *endpoint, char **bound, uint64_t maxmsg)
{
    zsock_t *s = zsock_new(type);
    if (!s)
        return NULL;
    zsock_set_linger(s, 0);
    zsock_set_rcvhwm(s, 100000);
    zsock_set_sndhwm(s, 100000);
    /* Frames between the configured bound and this hard cap get a clear
     * CODE_TOO_LARGE reply; beyond it ZeroMQ drops the connection before
     * the frame is ever buffered whole. */
    if (maxmsg) {
        uint64_t hard =
            maxmsg * 4 > maxmsg + (1u << 20) ? maxmsg * 4 : maxmsg + (1u << 20);
        zsock_set_maxmsgsize(s, hard > INT32_MAX ? INT32_MAX : (int) hard);
    }
    if (zsock_bind(s, "%s", endpoint) < 0) {
        lisa_log_error("cannot bind '%s': %s", endpoint,
                       zmq_strerror(zmq_errno()));
        zsock_destroy(&s);
        return NULL;
    }
    char *last = zsock_last_endpoint(s);
    *bound = lisa_strdup(last ? last : endpoint);
    zstr_free(&last);
    return s;
}

brk_server_t *
brk_server_new(const brk_config_t *cfg)
{
    brk_server_t *self = lisa_calloc(1, sizeof *self);
    self->cfg = cfg;
    self->arena = brk_arena_new();
    self->workers = zhashx_new();
    zhashx_set_destructor(self->workers, s_worker_free);
    self->engines = zhashx_new();
    zhashx_set_destructor(self->engines, s_engine_free);
    self->known_attempts = zhashx_new();
    self->id_counter = s_random32();
    /* SQLite itself never fsyncs at COMMIT (synchronous=NORMAL); with
     * sync "full" the syncer thread fsyncs the WAL after each group
     * commit and replies wait for it, so fsync overlaps the next batch. */
    self->store = brk_store_open_ex(cfg->data_dir, false, cfg->span_segment);
    self->token = brk_token_new(cfg->token_key_file);
    if (!self->store || !self->token)
        goto fail;
    if (!*cfg->token_key_file)
        lisa_log_warn("no token key file: attempt tokens use a random key "
                      "that dies with this process");
    self->rpc = s_bind(ZMQ_ROUTER, cfg->rpc_endpoint, &self->ep_rpc,
                       cfg->max_rpc_frame);
    self->pull = s_bind(ZMQ_PULL, cfg->span_endpoint, &self->ep_spans,
                        cfg->max_span_frame);
    self->pub = s_bind(ZMQ_PUB, cfg->event_endpoint, &self->ep_events, 0);
    self->wrk = s_bind(ZMQ_ROUTER, cfg->worker_endpoint, &self->ep_workers,
                       cfg->max_worker_frame);
    if (!self->rpc || !self->pull || !self->pub || !self->wrk)
        goto fail;
    if (strcmp(cfg->sync, "full") == 0) {
        /* the syncer also writes the span log records (off the loop) */
        brk_store_defer_span_writes(self->store);
        self->syncer = zactor_new(s_syncer, self->store);
        if (!self->syncer)
            goto fail;
    }
    self->policy_version = brk_store_meta_get(self->store, "policy_version", 0);
    self->event_seq = brk_store_meta_get(self->store, "event_seq", 0);

    /* Recovery: leases get a fresh period (the broker's downtime is not
     * the agents' fault) and rollouts left in SCORING get a score job. */
    if (brk_store_begin(self->store) != LISA_OK ||
        brk_store_extend_leases(self->store, s_now_ms() + cfg->lease_ms) !=
            LISA_OK ||
        brk_store_commit(self->store) != LISA_OK)
        goto fail;
    char **ids = NULL;
    size_t n = 0;
    if (brk_store_in_state(self->store, self->arena,
                           LISA__ROLLOUT_STATE__ROLLOUT_SCORING, NULL, &ids,
                           &n) != LISA_OK)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        Lisa__Rollout *r = NULL;
        if (brk_store_rollout_get(self->store, self->arena, ids[i], &r) !=
            LISA_OK)
            continue;
        s_job_t *j = lisa_calloc(1, sizeof *j);
        j->job_id = ++self->next_job_id;
        j->rollout_id = lisa_strdup(r->rollout_id);
        j->attempt = r->attempts;
        j->data_source = lisa_strdup(r->data_source);
        s_ptrs_push((void ***) &self->jobs, &self->n_jobs, &self->cap_jobs, j);
    }
    brk_arena_reset(self->arena);
    /* segments a prune freed before a stop: the store is synced first, so
     * the deletions that freed them are durable */
    size_t dropped = 0;
    if (brk_store_sync(self->store) != LISA_OK ||
        brk_store_span_gc(self->store, &dropped) != LISA_OK)
        goto fail;
    self->next_tick = zclock_mono();
    lisa_log_info("broker up: rpc %s, spans %s, events %s, workers %s; "
                  "store %s/broker.db (schema %d, sync %s), policy %" PRIu64
                  ", %zu score jobs recovered",
                  self->ep_rpc, self->ep_spans, self->ep_events,
                  self->ep_workers, cfg->data_dir,
                  brk_store_schema(self->store), cfg->sync,
                  self->policy_version, self->n_jobs);
    return self;
fail:
    brk_server_destroy(&self);
    return NULL;
}

void
brk_server_destroy(brk_server_t **pself)
{
    if (!pself || !*pself)
        return;
    brk_server_t *self = *pself;
    zactor_destroy(&self->syncer);
    for (size_t i = 0; i < self->n_batches; i++)
        s_batch_free(&self->batches[i]);
    lisa_free(&self->batches);
    s_discard_pending(self);
    lisa_free(&self->out_replies.v);
    lisa_free(&self->out_events.v);
    lisa_free(&self->finished.v);
    lisa_free(&self->drop_jobs.v);
    lisa_free(&self->new_jobs);
    for (size_t i = 0; i < self->n_jobs; i++)
        s_job_free(&self->jobs[i]);
    lisa_free(&self->jobs);
    for (size_t i = 0; i < self->n_waits; i++)
        s_wait_free(&self->waits[i]);
    lisa_free(&self->waits);
    zhashx_destroy(&self->workers);
    zhashx_destroy(&self->engines);
    zhashx_destroy(&self->known_attempts);
    zsock_destroy(&self->rpc);
    zsock_destroy(&self->pull);
    zsock_destroy(&self->pub);
    zsock_destroy(&self->wrk);
    lisa_free(&self->ep_rpc);
    lisa_free(&self->ep_spans);
    lisa_free(&self->ep_events);
    lisa_free(&self->ep_workers);
    brk_store_close(&self->store);
    brk_token_destroy(&self->token);
    brk_arena_destroy(&self->arena);
    lisa_free(pself);
}

const char *
brk_server_endpoint(const brk_server_t *self, const char *which)
{
    if (strcmp(which, "rpc") == 0)
        return self->ep_rpc;
    if (strcmp(which, "spans") == 0)
        return self->ep_spans;
    if (strcmp(which, "events") == 0)
        return self->ep_events;
    if (strcmp(which, "workers") == 0)
        return self->ep_workers;
    return NULL;
}
