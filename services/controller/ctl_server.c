/*
 * ctl_server: records of the attempts this controller runs, and the tick
 * that reconciles them with the backend and the broker.
 *
 * Every broker call is asynchronous on one DEALER (lisa_rpc): a request
 * goes out with a deadline and the loop goes on; its reply (or its
 * timeout) runs a callback from the loop. A callback finds its record
 * again by rollout id and attempt, never by pointer, since records move
 * and may be gone by the time the broker answers. A sandbox whose
 * outcome needs the broker's word first (adopted, its attempt not yet
 * confirmed) waits in place for the cross-check's answer; the pass after
 * the answer acts on it.
 */
#include "ctl_server.h"

#include "ctl_outcome.h"
#include "ctl_rate.h"
#include "lisa/lisa_clock.h"
#include "lisa/lisa_codec.h"
#include "lisa/lisa_events.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_rpc.h"
#include "lisa/lisa_unicode.h"

#include <czmq.h>
#include <inttypes.h>
#include <string.h>

#define S_MAX_CLAIM_BATCH 64u
#define S_QUERY_BATCH     500u
#define S_MISSES          5 /* listings without a sandbox: it is gone */

typedef struct {
    char rollout_id[CTL_ID_MAX];
    char run_id[CTL_ID_MAX];
    char name[CTL_NAME_MAX];
    unsigned attempt;
    uint64_t deadline_ms;
    bool stop;       /* the broker ended the attempt: remove, no report */
    bool verified;   /* the broker confirmed the attempt is current */
    bool seen;       /* present in the latest listing */
    bool checked;    /* a cross-check covering it was answered or failed */
    int misses;      /* listings in a row without it */
    int64_t next_hb; /* monotonic ms of the next lease renewal (pending) */
} s_rec_t;

struct ctl_server {
    const ctl_config_t *cfg;
    ctl_backend_t be;
    lisa_rpc_t *rpc; /* every broker call, asynchronous */
    zsock_t *sub;
    s_rec_t *recs;
    size_t n_recs, cap_recs;
    ctl_rate_t rate;
    int64_t pause_until; /* monotonic ms */
    uint64_t pause_ms;   /* current backoff */
    int64_t next_verify; /* monotonic ms */
    uint64_t last_seq;
    bool claiming;  /* a claim is in flight */
    int verifying;  /* cross-check queries in flight */
    bool stopping;  /* claims answered from now on are handed back */
    bool dirty;     /* something changed: a pass without waiting */
    bool wake_ok;   /* poll the backend's wake descriptor */
    bool async;     /* the backend has the asynchronous face */
    bool listing;   /* a listing is in flight */
    bool pass_open; /* between a listing's answer and its removals */
    bool removing;  /* the pass's removals are in flight */
    bool starting;  /* a claim's starts are in flight */
    bool pinging;   /* a ping is in flight */
    int tails;      /* log tails the open pass waits for (+ 1 while open) */
    zloop_t *loop;
    int kick_timer; /* one-shot pass timer; -1: none */
    int stop_timer;
    int wake_fd; /* the descriptor on the loop; -1: none */
    volatile sig_atomic_t *stop;
    char (*doomed)[CTL_NAME_MAX]; /* sandboxes to remove at the pass's end */
    size_t n_doomed, cap_doomed;
    ctl_stats_t st;
};

static int64_t
s_mono(void)
{
    return zclock_mono();
}

static void s_kick(ctl_server_t *s);
static void s_on_wake(void *ctx);

/* A pass (or a claim's starts) is under way. */
static bool
s_busy(const ctl_server_t *s)
{
    return s->listing || s->pass_open || s->removing || s->starting;
}

ctl_server_t *
ctl_server_new(const ctl_config_t *cfg, ctl_backend_t *backend)
{
    lisa_rpc_t *rpc = lisa_rpc_new(cfg->broker_rpc, "controller");
    if (!rpc) {
        lisa_log_error("controller: bad broker endpoint %s", cfg->broker_rpc);
        backend->ops->destroy(backend->impl);
        return NULL;
    }
    zsock_t *sub = lisa_events_sub(cfg->broker_events, "rollout");
    if (!sub) {
        lisa_log_error("controller: cannot subscribe to %s",
                       cfg->broker_events);
        lisa_rpc_destroy(&rpc);
        backend->ops->destroy(backend->impl);
        return NULL;
    }
    ctl_server_t *s = lisa_calloc(1, sizeof *s);
    s->cfg = cfg;
    s->be = *backend;
    backend->ops = NULL;
    backend->impl = NULL;
    s->rpc = rpc;
    s->sub = sub;
    s->wake_ok = true;
    s->kick_timer = s->stop_timer = s->wake_fd = -1;
    s->loop = zloop_new();
    s->async = s->be.ops->attach != NULL;
    if (lisa_rpc_attach(rpc, s->loop, 50) != LISA_OK ||
        (s->async &&
         s->be.ops->attach(s->be.impl, s->loop, s_on_wake, s) != LISA_OK)) {
        lisa_log_error("controller: cannot set up the loop");
        ctl_server_destroy(&s);
        return NULL;
    }
    ctl_rate_init(&s->rate, cfg->create_per_s, cfg->create_burst,
                  (uint64_t) s_mono());
    s->pause_ms = 0;
    return s;
}

void
ctl_server_destroy(ctl_server_t **sp)
{
    if (!sp || !*sp)
        return;
    ctl_server_t *s = *sp;
    /* the backend first: its pending requests go without callbacks */
    if (s->be.ops)
        s->be.ops->destroy(s->be.impl);
    lisa_rpc_detach(s->rpc);
    lisa_rpc_destroy(&s->rpc); /* open callbacks run with LISA_ERR */
    zloop_destroy(&s->loop);
    zsock_destroy(&s->sub);
    lisa_free(&s->recs);
    lisa_free(&s->doomed);
    lisa_free(sp);
}

const ctl_stats_t *
ctl_server_stats(const ctl_server_t *s)
{
    return &s->st;
}

/* ---- records --------------------------------------------------------- */

static s_rec_t *
s_find(ctl_server_t *s, const char *rollout_id, unsigned attempt)
{
    for (size_t i = 0; i < s->n_recs; i++)
        if (s->recs[i].attempt == attempt &&
            strcmp(s->recs[i].rollout_id, rollout_id) == 0)
            return &s->recs[i];
    return NULL;
}

static s_rec_t *
s_add(ctl_server_t *s, const char *rollout_id, unsigned attempt,
      const char *run_id, const char *name, uint64_t deadline_ms)
{
    if (s->n_recs == s->cap_recs) {
        s->cap_recs = s->cap_recs ? s->cap_recs * 2 : 16;
        s->recs = lisa_realloc(s->recs, s->cap_recs * sizeof *s->recs);
    }
    s_rec_t *r = &s->recs[s->n_recs++];
    memset(r, 0, sizeof *r);
    snprintf(r->rollout_id, sizeof r->rollout_id, "%s", rollout_id);
    snprintf(r->run_id, sizeof r->run_id, "%s", run_id ? run_id : "");
    snprintf(r->name, sizeof r->name, "%s", name);
    r->attempt = attempt;
    r->deadline_ms = deadline_ms;
    return r;
}

static void
s_drop(ctl_server_t *s, s_rec_t *r)
{
    size_t i = (size_t) (r - s->recs);
    s->recs[i] = s->recs[--s->n_recs];
}

/* ---- broker calls ---------------------------------------------------- */

/* The outcome of an answered call: the transport's rc, else the
 * reply's. */
static lisa_rc_t
s_reply_rc(lisa_rc_t rc, const Lisa__Reply *rep)
{
    if (rc == LISA_OK)
        rc = lisa_rpc_reply_rc(rep);
    if (rc != LISA_OK && rep)
        lisa_log_debug("broker: %s: %s", lisa_rc_str(rc),
                       rep->error ? rep->error : "");
    return rc;
}

/* One failure report in flight (the callback's argument). */
typedef struct {
    char rollout_id[CTL_ID_MAX];
    unsigned attempt;
    Lisa__FailureKind kind;
    char reason[512];
} s_pending_report_t;

static void
s_on_reported(void *arg, uint64_t request_id, lisa_rc_t rc,
              const Lisa__Reply *rep)
{
    (void) request_id;
    s_pending_report_t *p = arg;
    rc = s_reply_rc(rc, rep);
    if (rc == LISA_OK)
        lisa_log_info(
            "rollout %s attempt %u: reported %s (%s)%s", p->rollout_id,
            p->attempt,
            protobuf_c_enum_descriptor_get_value(
                &lisa__failure_kind__descriptor, (int) p->kind)
                ->name,
            p->reason,
            rep->attempt_fail && rep->attempt_fail->retried ? ", retried" : "");
    else
        lisa_log_warn("rollout %s attempt %u: failure report refused: %s",
                      p->rollout_id, p->attempt, lisa_rc_str(rc));
    lisa_free(&p);
}

/* AttemptFail, not waited for: the reply is logged when it comes. */
static void
s_report(ctl_server_t *s, const char *rollout_id, unsigned attempt,
         Lisa__FailureKind kind, const char *why, const char *detail)
{
    s_pending_report_t *p = lisa_calloc(1, sizeof *p);
    snprintf(p->rollout_id, sizeof p->rollout_id, "%s", rollout_id);
    p->attempt = attempt;
    p->kind = kind;
    /* the detail is a sandbox's log: any bytes; the reason is a protobuf
     * string, so it is valid UTF-8 and bounded */
    char *clean =
        lisa_utf8_clean(detail, detail ? strlen(detail) : 0, 400, NULL);
    snprintf(p->reason, sizeof p->reason, "%s%s%s", why, *clean ? ": " : "",
             clean);
    lisa_free(&clean);
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__AttemptFailReq f = LISA__ATTEMPT_FAIL_REQ__INIT;
    f.rollout_id = p->rollout_id;
    f.attempt = attempt;
    f.kind = kind;
    f.reason = p->reason;
    req.body_case = LISA__REQUEST__BODY_ATTEMPT_FAIL;
    req.attempt_fail = &f;
    s->st.reported++;
    if (lisa_rpc_send(s->rpc, &req, (int) s->cfg->rpc_timeout_ms, s_on_reported,
                      p, NULL) != LISA_OK) {
        lisa_log_warn("rollout %s attempt %u: failure report not sent",
                      rollout_id, attempt);
        lisa_free(&p);
    }
}

/* One start confirmation in flight (the callback's argument). */
typedef struct {
    char rollout_id[CTL_ID_MAX];
    unsigned attempt;
} s_pending_start_t;

static void
s_on_started(void *arg, uint64_t request_id, lisa_rc_t rc,
             const Lisa__Reply *rep)
{
    (void) request_id;
    s_pending_start_t *p = arg;
    if (rc == LISA_OK)
        rc = lisa_rpc_reply_rc(rep);
    if (rc == LISA_CONFLICT) /* the agent was quicker: it already moved on */
        lisa_log_debug("rollout %s attempt %u: start confirmed late (%s)",
                       p->rollout_id, p->attempt,
                       rep && rep->error ? rep->error : "");
    else if (rc != LISA_OK)
        lisa_log_warn("rollout %s attempt %u: start not confirmed: %s (%s)",
                      p->rollout_id, p->attempt, lisa_rc_str(rc),
                      rep && rep->error ? rep->error : "");
    lisa_free(&p);
}

/* AttemptStart, not waited for: the loop goes on to the next sandbox and
 * the reply is checked when it comes. */
static void
s_confirm_start(ctl_server_t *s, const char *rollout_id, unsigned attempt,
                const char *name)
{
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__AttemptStartReq a = LISA__ATTEMPT_START_REQ__INIT;
    a.rollout_id = (char *) (uintptr_t) rollout_id;
    a.attempt = attempt;
    a.sandbox_id = (char *) (uintptr_t) name;
    req.body_case = LISA__REQUEST__BODY_ATTEMPT_START;
    req.attempt_start = &a;
    s_pending_start_t *p = lisa_calloc(1, sizeof *p);
    snprintf(p->rollout_id, sizeof p->rollout_id, "%s", rollout_id);
    p->attempt = attempt;
    if (lisa_rpc_send(s->rpc, &req, (int) s->cfg->rpc_timeout_ms, s_on_started,
                      p, NULL) != LISA_OK) {
        lisa_log_warn("rollout %s attempt %u: start confirmation not sent",
                      rollout_id, attempt);
        lisa_free(&p);
    }
}

/* One lease renewal in flight (the callback's argument). */
typedef struct {
    ctl_server_t *s;
    char rollout_id[CTL_ID_MAX];
    unsigned attempt;
} s_pending_hb_t;

static void
s_on_heartbeat(void *arg, uint64_t request_id, lisa_rc_t rc,
               const Lisa__Reply *rep)
{
    (void) request_id;
    s_pending_hb_t *p = arg;
    if (rc != LISA_ERR && s_reply_rc(rc, rep) == LISA_OK && rep->heartbeat &&
        rep->heartbeat->cancel) {
        s_rec_t *rec = s_find(p->s, p->rollout_id, p->attempt);
        if (rec && !rec->stop) {
            lisa_log_info("rollout %s attempt %u: cancelled while pending",
                          rec->rollout_id, rec->attempt);
            rec->stop = true;
            s_kick(p->s);
        }
    }
    lisa_free(&p);
}

/* Renews the lease of an attempt whose sandbox is still pending (image
 * pull, scheduling): its agent cannot heartbeat yet. */
static void
s_heartbeat(ctl_server_t *s, s_rec_t *rec)
{
    s_pending_hb_t *p = lisa_calloc(1, sizeof *p);
    p->s = s;
    snprintf(p->rollout_id, sizeof p->rollout_id, "%s", rec->rollout_id);
    p->attempt = rec->attempt;
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__HeartbeatReq h = LISA__HEARTBEAT_REQ__INIT;
    h.rollout_id = rec->rollout_id;
    h.attempt = rec->attempt;
    h.note = (char *) (uintptr_t) "sandbox pending";
    req.body_case = LISA__REQUEST__BODY_HEARTBEAT;
    req.heartbeat = &h;
    s->st.heartbeats++;
    if (lisa_rpc_send(s->rpc, &req, (int) s->cfg->rpc_timeout_ms,
                      s_on_heartbeat, p, NULL) != LISA_OK) {
        lisa_log_warn("rollout %s attempt %u: lease renewal not sent",
                      rec->rollout_id, rec->attempt);
        lisa_free(&p);
    }
}

/* ---- backend health -------------------------------------------------- */

static void
s_backend_down(ctl_server_t *s, const char *why)
{
    uint64_t max = s->cfg->backoff_max_ms;
    s->pause_ms = s->pause_ms ? s->pause_ms * 2 : 500;
    if (s->pause_ms > max)
        s->pause_ms = max;
    s->pause_until = s_mono() + (int64_t) s->pause_ms;
    s->st.pauses++;
    lisa_log_warn("backend %s unavailable (%s): claiming paused for %" PRIu64
                  " ms",
                  s->be.ops->name, why, s->pause_ms);
}

static void
s_backend_up(ctl_server_t *s)
{
    if (s->pause_ms)
        lisa_log_info("backend %s available again", s->be.ops->name);
    s->pause_ms = 0;
}

/* ---- cross-check with the broker ------------------------------------- */

static bool
s_terminal(Lisa__RolloutState st)
{
    return st == LISA__ROLLOUT_STATE__ROLLOUT_SUCCEEDED ||
           st == LISA__ROLLOUT_STATE__ROLLOUT_FAILED ||
           st == LISA__ROLLOUT_STATE__ROLLOUT_CANCELLED;
}

/* Marks records whose attempt is no longer the rollout's open attempt. */
static void
s_judge(ctl_server_t *s, const Lisa__Rollout *r)
{
    for (size_t i = 0; i < s->n_recs; i++) {
        s_rec_t *rec = &s->recs[i];
        if (strcmp(rec->rollout_id, r->rollout_id) != 0)
            continue;
        /* Over: the rollout ended, moved on to a later attempt, or was
         * queued again after this attempt (or before it ever existed). */
        bool over = s_terminal(r->state) || r->attempts > rec->attempt ||
                    r->attempts < rec->attempt ||
                    r->state == LISA__ROLLOUT_STATE__ROLLOUT_QUEUED;
        if (over && !rec->stop) {
            lisa_log_info("rollout %s attempt %u: ended at the broker "
                          "(state %d); stopping its sandbox",
                          rec->rollout_id, rec->attempt, (int) r->state);
            rec->stop = true;
        }
        rec->verified = true;
    }
}

/* One cross-check query in flight: the rollout ids it asked about. */
typedef struct {
    ctl_server_t *s;
    size_t n;
    char (*ids)[CTL_ID_MAX];
} s_pending_query_t;

/* Applies a query's answer: records the broker does not know any more
 * are over too; the others are judged by their rollout's state. */
static void
s_apply_query(ctl_server_t *s, const s_pending_query_t *p,
              const Lisa__QueryRep *q)
{
    for (size_t i = 0; i < p->n; i++) {
        bool known = false;
        for (size_t k = 0; k < q->n_rollouts; k++)
            known |= q->rollouts[k]->rollout_id &&
                     strcmp(q->rollouts[k]->rollout_id, p->ids[i]) == 0;
        if (known)
            continue;
        for (size_t r = 0; r < s->n_recs; r++) {
            s_rec_t *rec = &s->recs[r];
            if (strcmp(rec->rollout_id, p->ids[i]) != 0)
                continue;
            if (!rec->stop)
                lisa_log_info("rollout %s unknown to the broker; "
                              "stopping its sandbox",
                              rec->rollout_id);
            rec->stop = true;
            rec->verified = true; /* the broker has answered */
        }
    }
    for (size_t k = 0; k < q->n_rollouts; k++)
        if (q->rollouts[k]->rollout_id)
            s_judge(s, q->rollouts[k]);
}

static void
s_on_query(void *arg, uint64_t request_id, lisa_rc_t rc, const Lisa__Reply *rep)
{
    (void) request_id;
    s_pending_query_t *p = arg;
    ctl_server_t *s = p->s;
    if (rc != LISA_ERR) { /* LISA_ERR: the client is going away */
        s->verifying--;
        rc = s_reply_rc(rc, rep);
        if (rc == LISA_OK && rep->query)
            s_apply_query(s, p, rep->query);
        else
            lisa_log_warn("broker: query failed: %s", lisa_rc_str(rc));
        /* whatever the answer, the records asked about were checked */
        for (size_t i = 0; i < p->n; i++)
            for (size_t r = 0; r < s->n_recs; r++)
                if (strcmp(s->recs[r].rollout_id, p->ids[i]) == 0)
                    s->recs[r].checked = true;
        s_kick(s); /* act on the answer */
    }
    lisa_free(&p->ids);
    lisa_free(&p);
}

/* Cross-checks every record with the broker (queries of at most
 * S_QUERY_BATCH rollouts, answered from the loop); nothing when a
 * cross-check is still in flight. */
static void
s_verify(ctl_server_t *s)
{
    if (s->verifying)
        return;
    for (size_t from = 0; from < s->n_recs; from += S_QUERY_BATCH) {
        size_t n = s->n_recs - from;
        if (n > S_QUERY_BATCH)
            n = S_QUERY_BATCH;
        s_pending_query_t *p = lisa_calloc(1, sizeof *p);
        p->s = s;
        p->n = n;
        p->ids = lisa_calloc(n, sizeof *p->ids);
        char **ids = lisa_calloc(n, sizeof *ids);
        for (size_t i = 0; i < n; i++) {
            snprintf(p->ids[i], CTL_ID_MAX, "%s", s->recs[from + i].rollout_id);
            ids[i] = p->ids[i];
        }
        Lisa__Request req = LISA__REQUEST__INIT;
        Lisa__QueryReq q = LISA__QUERY_REQ__INIT;
        q.n_rollout_ids = n;
        q.rollout_ids = ids;
        q.limit = (uint32_t) n;
        req.body_case = LISA__REQUEST__BODY_QUERY;
        req.query = &q;
        if (lisa_rpc_send(s->rpc, &req, (int) s->cfg->rpc_timeout_ms,
                          s_on_query, p, NULL) == LISA_OK) {
            s->verifying++;
        } else {
            lisa_log_warn("broker: query not sent");
            lisa_free(&p->ids);
            lisa_free(&p);
        }
        lisa_free(&ids);
    }
    s->next_verify = s_mono() + (int64_t) s->cfg->verify_ms;
}

/* ---- events ---------------------------------------------------------- */

static void
s_on_event(void *arg, const Lisa__Event *ev)
{
    ctl_server_t *s = arg;
    s->st.events++;
    if (s->last_seq && ev->seq != s->last_seq + 1) {
        s->st.event_gaps++;
        s->next_verify = 0; /* missed events: cross-check now */
    }
    s->last_seq = ev->seq;
    if (ev->body_case != LISA__EVENT__BODY_ROLLOUT || !ev->rollout)
        return;
    const Lisa__RolloutEvent *re = ev->rollout;
    if (re->state == LISA__ROLLOUT_STATE__ROLLOUT_QUEUED)
        s_kick(s); /* work to claim */
    for (size_t i = 0; i < s->n_recs; i++) {
        s_rec_t *rec = &s->recs[i];
        if (!re->rollout_id || strcmp(rec->rollout_id, re->rollout_id) != 0)
            continue;
        bool attempt_over =
            re->attempt == rec->attempt &&
            (re->attempt_state == LISA__ATTEMPT_STATE__ATTEMPT_FAILED ||
             re->attempt_state == LISA__ATTEMPT_STATE__ATTEMPT_CANCELLED ||
             re->attempt_state == LISA__ATTEMPT_STATE__ATTEMPT_SUCCEEDED);
        if ((attempt_over || s_terminal(re->state) ||
             re->attempt > rec->attempt) &&
            !rec->stop) {
            lisa_log_info("rollout %s attempt %u: ended (event %" PRIu64
                          "); stopping its sandbox",
                          rec->rollout_id, rec->attempt, ev->seq);
            rec->stop = true;
            s_kick(s);
        }
    }
}

/* ---- the backend, either face ------------------------------------------ */

/* Each call answers through its callback: from the loop for a backend
 * with the asynchronous face, before the call returns for one without. */

static void
s_be_ping(ctl_server_t *s, ctl_rc_fn *done)
{
    if (s->async)
        s->be.ops->ping_async(s->be.impl, done, s);
    else
        done(s, s->be.ops->ping(s->be.impl));
}

static void s_on_list(void *arg, lisa_rc_t rc, const ctl_sandbox_t *list,
                      size_t n);

static void
s_be_list(ctl_server_t *s)
{
    if (s->async) {
        s->be.ops->list_async(s->be.impl, s_on_list, s);
        return;
    }
    ctl_sandbox_t *list = NULL;
    size_t n = 0;
    lisa_rc_t rc = s->be.ops->list(s->be.impl, &list, &n);
    s_on_list(s, rc, list, rc == LISA_OK ? n : 0);
    lisa_free(&list);
}

static void
s_be_start(ctl_server_t *s, const ctl_spec_t *specs, size_t n, ctl_rcs_fn *done,
           void *arg)
{
    if (s->async) {
        s->be.ops->start_async(s->be.impl, specs, n, done, arg);
        return;
    }
    lisa_rc_t *rcs = lisa_calloc(n ? n : 1, sizeof *rcs);
    if (s->be.ops->start_many && n > 1) {
        s->be.ops->start_many(s->be.impl, specs, n, rcs);
    } else {
        bool gone = false; /* one after another until the backend is down */
        for (size_t i = 0; i < n; i++) {
            rcs[i] = gone ? LISA_UNAVAILABLE
                          : s->be.ops->start(s->be.impl, &specs[i]);
            gone |= rcs[i] == LISA_UNAVAILABLE;
        }
    }
    done(arg, rcs, n);
    lisa_free(&rcs);
}

static void
s_be_remove(ctl_server_t *s, const char *const *names, size_t n,
            ctl_rc_fn *done)
{
    if (s->async) {
        s->be.ops->remove_async(s->be.impl, names, n, done, s);
        return;
    }
    if (n > 1 && s->be.ops->remove_many)
        s->be.ops->remove_many(s->be.impl, names, n);
    else
        for (size_t i = 0; i < n; i++)
            (void) s->be.ops->remove(s->be.impl, names[i]);
    done(s, LISA_OK);
}

static void
s_be_tail(ctl_server_t *s, const char *name, ctl_text_fn *done, void *arg)
{
    if (s->async) {
        s->be.ops->log_tail_async(s->be.impl, name, done, arg);
        return;
    }
    char buf[256] = "";
    if (s->be.ops->log_tail)
        s->be.ops->log_tail(s->be.impl, name, buf, sizeof buf);
    done(arg, buf);
}

/* ---- claims ---------------------------------------------------------- */

static void s_claim(ctl_server_t *s);

/* One sandbox of a batch of starts: copies of what the answer needs. */
typedef struct {
    char name[CTL_NAME_MAX];
    char rollout_id[CTL_ID_MAX];
    char run_id[CTL_ID_MAX];
    unsigned attempt;
    uint64_t deadline_ms;
} s_start_item_t;

typedef struct {
    ctl_server_t *s;
    s_start_item_t *items;
    size_t n;
} s_start_batch_t;

/* The spec of a claimed attempt (strings borrowed from ca and name);
 * false when the claim is unusable. */
static bool
s_spec_of(ctl_server_t *s, const Lisa__ClaimedAttempt *ca,
          char name[CTL_NAME_MAX], ctl_spec_t *spec)
{
    const Lisa__Rollout *r = ca->rollout;
    if (!r || !r->rollout_id || !ca->token) {
        lisa_log_warn("broker: claim without rollout or token; skipped");
        return false;
    }
    uint64_t now = lisa_clock_wall_ms();
    const Lisa__Limits *lim = ca->limits;
    ctl_backend_name(r->rollout_id, ca->attempt, name);
    *spec = (ctl_spec_t){
        .name = name,
        .controller_id = s->cfg->controller_id,
        .run_id = r->run_id ? r->run_id : "",
        .rollout_id = r->rollout_id,
        .attempt = ca->attempt,
        .token = ca->token,
        .created_ms = now,
        .deadline_ms =
            ca->deadline_ms ? ca->deadline_ms : now + s->cfg->deadline_ms,
        .cpu_millis = lim && lim->cpu_millis ? lim->cpu_millis
                                             : (uint32_t) s->cfg->cpu_millis,
        .memory_bytes =
            lim && lim->memory_bytes ? lim->memory_bytes : s->cfg->memory_bytes,
        .pids = lim && lim->pids ? lim->pids : (uint32_t) s->cfg->pids,
        .disk_bytes =
            lim && lim->disk_bytes ? lim->disk_bytes : s->cfg->disk_bytes,
    };
    s->st.claimed++;
    return true;
}

/* Acts on the backend's answer to one start: a record and AttemptStart,
 * or a failure report (INFRA when the backend is down: pause). */
static void
s_started(ctl_server_t *s, const s_start_item_t *it, lisa_rc_t rc, bool *down)
{
    if (rc == LISA_OK || rc == LISA_CONFLICT) {
        if (rc == LISA_CONFLICT)
            lisa_log_info("sandbox %s already exists; taking it", it->name);
        s->st.started++;
        s_rec_t *rec = s_find(s, it->rollout_id, it->attempt);
        if (!rec)
            rec = s_add(s, it->rollout_id, it->attempt, it->run_id, it->name,
                        it->deadline_ms);
        rec->verified = true;
        rec->stop = false;
        rec->deadline_ms = it->deadline_ms;
        s_confirm_start(s, it->rollout_id, it->attempt, it->name);
        s_backend_up(s);
        return;
    }
    s->st.start_failed++;
    if (rc == LISA_UNAVAILABLE) {
        if (!*down)
            s_backend_down(s, "start failed");
        *down = true;
        s_report(s, it->rollout_id, it->attempt,
                 LISA__FAILURE_KIND__FAILURE_INFRA, "backend unavailable",
                 NULL);
    } else {
        s_report(s, it->rollout_id, it->attempt,
                 LISA__FAILURE_KIND__FAILURE_SANDBOX,
                 "sandbox could not be started", lisa_rc_str(rc));
    }
}

static void
s_on_starts(void *arg, const lisa_rc_t *rcs, size_t n)
{
    s_start_batch_t *b = arg;
    ctl_server_t *s = b->s;
    bool down = false;
    for (size_t i = 0; i < n && i < b->n; i++)
        s_started(s, &b->items[i], rcs[i], &down);
    s->starting = false;
    lisa_free(&b->items);
    lisa_free(&b);
    s_kick(s); /* the next pass sees the new sandboxes */
}

/* Starts the claimed attempts, all at once where the backend can. */
static void
s_start_all(ctl_server_t *s, Lisa__ClaimedAttempt *const *cas, size_t got)
{
    ctl_spec_t *specs = lisa_calloc(got ? got : 1, sizeof *specs);
    char(*names)[CTL_NAME_MAX] = lisa_calloc(got ? got : 1, sizeof *names);
    s_start_batch_t *b = lisa_calloc(1, sizeof *b);
    b->s = s;
    b->items = lisa_calloc(got ? got : 1, sizeof *b->items);
    for (size_t i = 0; i < got; i++) {
        if (!s_spec_of(s, cas[i], names[b->n], &specs[b->n]))
            continue;
        s_start_item_t *it = &b->items[b->n];
        const ctl_spec_t *sp = &specs[b->n];
        snprintf(it->name, sizeof it->name, "%s", sp->name);
        snprintf(it->rollout_id, sizeof it->rollout_id, "%s", sp->rollout_id);
        snprintf(it->run_id, sizeof it->run_id, "%s", sp->run_id);
        it->attempt = sp->attempt;
        it->deadline_ms = sp->deadline_ms;
        b->n++;
    }
    if (b->n == 0) {
        lisa_free(&b->items);
        lisa_free(&b);
    } else {
        s->starting = true;
        s_be_start(s, specs, b->n, s_on_starts, b);
    }
    lisa_free(&names);
    lisa_free(&specs);
}

/* Hands a claimed attempt back (the controller is stopping). */
static void
s_hand_back(ctl_server_t *s, const Lisa__ClaimedAttempt *ca)
{
    s->st.claimed++;
    if (ca->rollout && ca->rollout->rollout_id)
        s_report(s, ca->rollout->rollout_id, ca->attempt,
                 LISA__FAILURE_KIND__FAILURE_INFRA, "controller stopped", NULL);
}

static void
s_on_claim(void *arg, uint64_t request_id, lisa_rc_t rc, const Lisa__Reply *rep)
{
    (void) request_id;
    ctl_server_t *s = arg;
    s->claiming = false;
    if (rc == LISA_ERR)
        return; /* the client is going away */
    if (rc == LISA_OK)
        rc = lisa_rpc_reply_rc(rep);
    if (rc != LISA_OK || !rep->claim) {
        lisa_log_warn("broker: claim failed: %s", lisa_rc_str(rc));
        return;
    }
    size_t got = rep->claim->n_attempts;
    ctl_rate_take(&s->rate, got);
    if (s->stopping) {
        for (size_t i = 0; i < got; i++)
            s_hand_back(s, rep->claim->attempts[i]);
        return;
    }
    s_start_all(s, rep->claim->attempts, got);
}

/* A ping on leaving a pause: claiming goes on only when it answers. */
static void
s_on_ping_claim(void *arg, lisa_rc_t rc)
{
    ctl_server_t *s = arg;
    s->pinging = false;
    if (rc != LISA_OK) {
        s_backend_down(s, "ping failed");
        return;
    }
    s_backend_up(s);
    s_claim(s);
}

/* Asks for as many attempts as there is room and rate for; the reply
 * starts them (s_on_claim). One claim (and its starts) at a time. */
static void
s_claim(ctl_server_t *s)
{
    if (s->claiming || s->starting || s->pinging || s->stopping)
        return;
    int64_t mono = s_mono();
    if (mono < s->pause_until)
        return;
    if (s->pause_ms) {
        /* Leaving a pause: the backend must answer first. */
        s->pinging = true;
        s_be_ping(s, s_on_ping_claim);
        return;
    }
    uint64_t max = s->cfg->max_concurrency;
    if (s->n_recs >= max)
        return;
    uint64_t n = max - s->n_recs;
    uint64_t tokens = ctl_rate_available(&s->rate, (uint64_t) mono);
    if (n > tokens)
        n = tokens;
    if (n > S_MAX_CLAIM_BATCH)
        n = S_MAX_CLAIM_BATCH;
    if (n == 0)
        return;
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__ClaimReq c = LISA__CLAIM_REQ__INIT;
    c.controller_id = s->cfg->controller_id;
    c.capacity = (uint32_t) n;
    c.run_id = s->cfg->run_id;
    req.body_case = LISA__REQUEST__BODY_CLAIM;
    req.claim = &c;
    if (lisa_rpc_send(s->rpc, &req, (int) s->cfg->rpc_timeout_ms, s_on_claim, s,
                      NULL) != LISA_OK) {
        lisa_log_warn("broker: claim not sent");
        return;
    }
    s->claiming = true;
}

/* ---- the pass -------------------------------------------------------- */

/* A pass: list the backend; act on each sandbox (reports, lease
 * renewals, log tails for the reports); once the tails are in, remove
 * what is doomed, settle the records whose sandbox vanished, cross-check
 * and claim. One pass at a time, and none while a claim's starts are in
 * flight (so a sandbox being started is never taken for a stranger). */

/* Marks a sandbox for removal at the end of this pass. */
static void
s_doom(ctl_server_t *s, const char *name)
{
    if (s->n_doomed == s->cap_doomed) {
        s->cap_doomed = s->cap_doomed ? s->cap_doomed * 2 : 16;
        s->doomed = lisa_realloc(s->doomed, s->cap_doomed * sizeof *s->doomed);
    }
    snprintf(s->doomed[s->n_doomed++], CTL_NAME_MAX, "%s", name);
}

static void
s_on_removed(void *arg, lisa_rc_t rc)
{
    (void) rc; /* a failed removal is seen again at the next listing */
    ctl_server_t *s = arg;
    s->removing = false;
    if (s->dirty)
        s_kick(s);
}

/* Removes the marked sandboxes, all at once where the backend can. */
static void
s_remove_doomed(ctl_server_t *s)
{
    if (s->n_doomed == 0)
        return;
    const char **names = lisa_calloc(s->n_doomed, sizeof *names);
    for (size_t i = 0; i < s->n_doomed; i++)
        names[i] = s->doomed[i];
    size_t n = s->n_doomed;
    s->n_doomed = 0; /* the backend copied the names by the time it returns */
    s->removing = true;
    s_be_remove(s, names, n, s_on_removed);
    lisa_free(&names);
}

/* A failure report that carries the sandbox's last output line. */
typedef struct {
    ctl_server_t *s;
    char rollout_id[CTL_ID_MAX];
    unsigned attempt;
    Lisa__FailureKind kind;
    const char *why; /* static text */
} s_tail_report_t;

static void s_pass_finish(ctl_server_t *s);

static void
s_tail_release(ctl_server_t *s)
{
    if (--s->tails == 0)
        s_pass_finish(s);
}

static void
s_on_tail(void *arg, const char *text)
{
    s_tail_report_t *t = arg;
    ctl_server_t *s = t->s;
    s_report(s, t->rollout_id, t->attempt, t->kind, t->why, text);
    lisa_free(&t);
    s_tail_release(s);
}

static void
s_report_with_tail(ctl_server_t *s, const s_rec_t *rec, const char *name,
                   const ctl_outcome_t *o)
{
    s_tail_report_t *t = lisa_calloc(1, sizeof *t);
    t->s = s;
    snprintf(t->rollout_id, sizeof t->rollout_id, "%s", rec->rollout_id);
    t->attempt = rec->attempt;
    t->kind = o->kind;
    t->why = o->why;
    s->tails++;
    s_be_tail(s, name, s_on_tail, t);
}

/* An ended sandbox: reported (when it is to be and its attempt is
 * current), then removed. */
static void
s_handle_exit(ctl_server_t *s, s_rec_t *rec, const ctl_sandbox_t *sb)
{
    s->st.exited++;
    ctl_outcome_t o = ctl_outcome_of(sb);
    lisa_log_info("sandbox %s exited with %d%s: %s", sb->name, sb->exit_code,
                  sb->oom ? " (OOM)" : "", o.why);
    if (o.report && !rec->stop && rec->verified)
        s_report_with_tail(s, rec, sb->name, &o);
    s_doom(s, sb->name);
    s_drop(s, rec);
}

static void
s_handle(ctl_server_t *s, const ctl_sandbox_t *sb, uint64_t now)
{
    s_rec_t *rec = s_find(s, sb->rollout_id, sb->attempt);
    uint64_t grace = s->cfg->grace_ms;
    if (!rec) {
        if (sb->deadline_ms + grace <= now) {
            lisa_log_info("reaping %s (rollout %s attempt %u): past its "
                          "deadline and unknown",
                          sb->name, sb->rollout_id, sb->attempt);
            s_doom(s, sb->name);
            s->st.reaped++;
            return;
        }
        lisa_log_info("adopting %s (rollout %s attempt %u)", sb->name,
                      sb->rollout_id, sb->attempt);
        rec = s_add(s, sb->rollout_id, sb->attempt, sb->run_id, sb->name,
                    sb->deadline_ms);
        s->st.adopted++;
        s->next_verify = 0;
    }
    rec->seen = true;
    rec->misses = 0;
    if (sb->phase == CTL_PHASE_EXITED) {
        if (ctl_outcome_of(sb).report && !rec->verified && !rec->checked) {
            /* adopted: is its attempt still open? The sandbox waits for
             * the broker's answer; the pass after it acts. */
            s->next_verify = 0;
            return;
        }
        s_handle_exit(s, rec, sb);
        return;
    }
    if (now >= rec->deadline_ms + grace) {
        lisa_log_info("sandbox %s passed its deadline; killing it", sb->name);
        s_doom(s, sb->name);
        s->st.deadline_kills++;
        if (!rec->stop)
            s_report(s, rec->rollout_id, rec->attempt,
                     LISA__FAILURE_KIND__FAILURE_DEADLINE,
                     "killed at the attempt's deadline", NULL);
        s_drop(s, rec);
        return;
    }
    if (rec->stop && rec->verified) {
        s_doom(s, sb->name);
        s->st.stopped++;
        s_drop(s, rec);
        return;
    }
    if (sb->phase == CTL_PHASE_PENDING && rec->verified &&
        s_mono() >= rec->next_hb) {
        s_heartbeat(s, rec);
        rec->next_hb = s_mono() + (int64_t) s->cfg->verify_ms;
    }
}

static int s_on_wake_fd(zloop_t *loop, zmq_pollitem_t *item, void *arg);

/* Watches the backend's wake descriptor (it may change) while listings
 * work; a listing consumes its readiness. */
static void
s_arm_wake(ctl_server_t *s)
{
    int fd = -1;
    if (s->wake_ok && !s->async && s->be.ops->wake_fd)
        fd = s->be.ops->wake_fd(s->be.impl);
    if (fd == s->wake_fd)
        return;
    if (s->wake_fd >= 0) {
        zmq_pollitem_t old = {NULL, s->wake_fd, ZMQ_POLLIN, 0};
        zloop_poller_end(s->loop, &old);
    }
    s->wake_fd = -1;
    zmq_pollitem_t it = {NULL, fd, ZMQ_POLLIN, 0};
    if (fd >= 0 && zloop_poller(s->loop, &it, s_on_wake_fd, s) == 0)
        s->wake_fd = fd;
}

static void
s_on_list(void *arg, lisa_rc_t rc, const ctl_sandbox_t *list, size_t n)
{
    ctl_server_t *s = arg;
    s->listing = false;
    if (rc != LISA_OK) {
        if (s_mono() >= s->pause_until)
            s_backend_down(s, "list failed");
        /* A backend that cannot list keeps its descriptor ready: watch it
         * again only after a listing that worked. */
        s->wake_ok = false;
        s_arm_wake(s);
        return;
    }
    s->wake_ok = true;
    uint64_t now = lisa_clock_wall_ms();
    for (size_t i = 0; i < s->n_recs; i++)
        s->recs[i].seen = false;
    s->pass_open = true;
    s->tails = 1; /* the pass's own hold */
    for (size_t i = 0; i < n; i++)
        s_handle(s, &list[i], now);
    /* The claim goes out first: its round trip overlaps the removals. */
    s_claim(s);
    s_tail_release(s);
}

/* The rest of a pass, once its log tails are in. */
static void
s_pass_finish(ctl_server_t *s)
{
    s_remove_doomed(s);
    /* Records whose sandbox vanished without an exit status. */
    for (size_t i = 0; i < s->n_recs;) {
        s_rec_t *rec = &s->recs[i];
        if (rec->seen || ++rec->misses < S_MISSES) {
            i++;
            continue;
        }
        lisa_log_warn("sandbox %s disappeared", rec->name);
        if (!rec->stop && rec->verified)
            s_report(s, rec->rollout_id, rec->attempt,
                     LISA__FAILURE_KIND__FAILURE_SANDBOX, "sandbox disappeared",
                     NULL);
        s_drop(s, rec);
    }
    if (s->n_recs && s_mono() >= s->next_verify)
        s_verify(s);
    s_claim(s);
    s->pass_open = false;
    s_arm_wake(s);
    if (s->dirty && !s_busy(s)) /* a change came during the pass */
        s_kick(s);
}

/* Starts a pass, or notes that one is wanted when one is under way (it
 * runs when that one ends). */
static void
s_pass(ctl_server_t *s)
{
    if (s_busy(s) || s->stopping) {
        s->dirty = true;
        return;
    }
    s->dirty = false;
    s->listing = true;
    s_be_list(s);
}

/* ---- the loop -------------------------------------------------------- */

static int
s_on_kick(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    ctl_server_t *s = arg;
    s->kick_timer = -1;
    s_pass(s);
    return 0;
}

/* Something changed: a pass soon, not at the next tick. */
static void
s_kick(ctl_server_t *s)
{
    s->dirty = true;
    if (s->kick_timer < 0 && s->loop)
        s->kick_timer = zloop_timer(s->loop, 0, 1, s_on_kick, s);
}

static void
s_on_wake(void *ctx)
{
    s_kick(ctx);
}

static int
s_on_wake_fd(zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    (void) item;
    ctl_server_t *s = arg;
    /* ready until a listing consumes it: stop watching until then */
    zmq_pollitem_t it = {NULL, s->wake_fd, ZMQ_POLLIN, 0};
    zloop_poller_end(loop, &it);
    s->wake_fd = -1;
    s_kick(s);
    return 0;
}

static int
s_on_tick(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    ctl_server_t *s = arg;
    if (!s_busy(s)) /* a pass under way is this tick's pass */
        s_pass(s);
    return 0;
}

static int
s_on_sub(zloop_t *loop, zsock_t *sock, void *arg)
{
    (void) loop;
    lisa_events_drain(sock, s_on_event, arg, NULL);
    return 0;
}

static int
s_on_stop_check(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    ctl_server_t *s = arg;
    return *s->stop ? -1 : 0;
}

/* While stopping: ends the loop once nothing is in flight any more or
 * the deadline (arg's) passed. */
typedef struct {
    ctl_server_t *s;
    int64_t end;
} s_settle_t;

static int
s_on_settle_check(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    s_settle_t *st = arg;
    ctl_server_t *s = st->s;
    bool busy = s->claiming || s->starting || s->listing || s->removing ||
                s->pinging || s->tails > 0 || lisa_rpc_pending(s->rpc);
    return !busy || s_mono() >= st->end ? -1 : 0;
}

/* Runs the loop (bounded) until the claim, starts and calls in flight
 * are answered; a claim answered now is handed back, not started. */
static void
s_settle(ctl_server_t *s)
{
    s->stopping = true;
    s_settle_t st = {s, s_mono() + (int64_t) s->cfg->rpc_timeout_ms};
    int id = zloop_timer(s->loop, 20, 0, s_on_settle_check, &st);
    if (id < 0)
        return;
    if (s_on_settle_check(s->loop, id, &st) == 0)
        (void) zloop_start(s->loop);
    zloop_timer_end(s->loop, id);
}

static void
s_shutdown(ctl_server_t *s)
{
    s_settle(s);
    if (!s->be.ops->dies_with_controller)
        return;
    for (size_t i = 0; i < s->n_recs; i++) {
        s_rec_t *rec = &s->recs[i];
        const char *name = rec->name;
        s_be_remove(s, &name, 1, s_on_removed);
        if (!rec->stop)
            s_report(s, rec->rollout_id, rec->attempt,
                     LISA__FAILURE_KIND__FAILURE_INFRA, "controller stopped",
                     NULL);
    }
    s->n_recs = 0;
    s_settle(s); /* the reports' answers, bounded */
}

static void
s_on_ping_start(void *arg, lisa_rc_t rc)
{
    ctl_server_t *s = arg;
    s->pinging = false;
    if (rc != LISA_OK)
        s_backend_down(s, "ping failed at start");
    s_kick(s);
}

lisa_rc_t
ctl_server_run(ctl_server_t *s, volatile sig_atomic_t *stop)
{
    lisa_log_info("controller %s: backend %s, at most %" PRIu64
                  " sandboxes, %" PRIu64 " creations/s",
                  s->cfg->controller_id, s->be.ops->name,
                  s->cfg->max_concurrency, s->cfg->create_per_s);
    s->stop = stop;
    int tick = zloop_timer(s->loop, (size_t) s->cfg->tick_ms, 0, s_on_tick, s);
    s->stop_timer = zloop_timer(s->loop, 50, 0, s_on_stop_check, s);
    if (tick < 0 || s->stop_timer < 0 ||
        zloop_reader(s->loop, s->sub, s_on_sub, s) != 0) {
        lisa_log_error("controller: cannot set up the loop");
        return LISA_ERR;
    }
    s->pinging = true;
    s_be_ping(s, s_on_ping_start);
    if (!*stop)
        (void) zloop_start(s->loop);
    zloop_timer_end(s->loop, tick);
    zloop_timer_end(s->loop, s->stop_timer);
    zloop_reader_end(s->loop, s->sub);
    if (s->kick_timer >= 0)
        zloop_timer_end(s->loop, s->kick_timer);
    s->kick_timer = -1;
    lisa_log_info("controller stopping: %zu sandboxes open", s->n_recs);
    s_shutdown(s);
    return LISA_OK;
}
