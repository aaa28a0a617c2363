/*
 * brk_lifecycle: the state machine driver and the lifecycle RPCs (see
 * brk_lifecycle.h).
 */
#include "brk_lifecycle.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <inttypes.h>
#include <jansson.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>

#define S_MAX_CLAIM 1000u

struct brk_lifecycle_t {
    brk_env_t env;
    brk_token_t *token;
    uint64_t policy_version;
    uint32_t id_counter;
    brk_lifecycle_end_fn *on_end;
    void *on_end_arg;
};

/* protobuf-c strings are `char *`; empty ones point here. */
static char s_empty[1];

static bool
s_attempt_over(Lisa__AttemptState s)
{
    return s == LISA__ATTEMPT_STATE__ATTEMPT_SUCCEEDED ||
           s == LISA__ATTEMPT_STATE__ATTEMPT_FAILED ||
           s == LISA__ATTEMPT_STATE__ATTEMPT_CANCELLED;
}

static uint32_t
s_random32(void)
{
    uint32_t v = 0;
    if (RAND_bytes((unsigned char *) &v, sizeof v) != 1)
        v = (uint32_t) zclock_usecs();
    return v;
}

static void
s_rollout_event(brk_lifecycle_t *self, const Lisa__Rollout *r,
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
    brk_outbox_event(self->env.outbox, "rollout", &ev);
}

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
s_deadline_len(brk_lifecycle_t *self, const Lisa__Rollout *r,
               Lisa__Limits **limits)
{
    Lisa__TaskSpec *task = NULL;
    *limits = NULL;
    if (brk_store_group_task(self->env.store, self->env.arena, r->group_id,
                             &task) == LISA_OK &&
        task->limits) {
        *limits = task->limits;
        if (task->limits->deadline_ms)
            return task->limits->deadline_ms;
    }
    return self->env.cfg->deadline_ms;
}

/* Applies `ev` to rollout r (in the current transaction). On LISA_CONFLICT
 * nothing was written and err says why. */
static lisa_rc_t
s_apply(brk_lifecycle_t *self, Lisa__Rollout *r, brk_event_t ev,
        brk_lifecycle_ctx_t *c, char *err)
{
    const brk_fsm_row_t *row = brk_fsm_lookup(r->state, ev);
    if (!row)
        return brk_call_fail(err, LISA_CONFLICT,
                             "rollout %s is %s: '%s' not allowed",
                             r->rollout_id, brk_fsm_state_name(r->state),
                             brk_fsm_event_name(ev));
    uint64_t now = brk_call_now_ms();
    Lisa__RolloutState from = r->state;
    Lisa__Attempt *a = NULL;
    lisa_rc_t rc;
    if (row->actions & BRK_A_NEW_ATTEMPT) {
        Lisa__Limits *lim = NULL;
        uint64_t len = s_deadline_len(self, r, &lim);
        a = brk_arena_alloc(self->env.arena, sizeof *a);
        lisa__attempt__init(a);
        r->attempts++;
        a->rollout_id = r->rollout_id;
        a->attempt = r->attempts;
        a->controller_id = brk_arena_strdup(self->env.arena, c->controller_id);
        a->claimed_ms = now;
        a->deadline_ms = now + len;
        a->reason = s_empty;
        a->sandbox_id = s_empty;
        r->deadline_ms = a->deadline_ms;
    } else if (r->attempts > 0) {
        rc = brk_store_attempt_get(self->env.store, self->env.arena,
                                   r->rollout_id, r->attempts, &a);
        if (rc != LISA_OK)
            return brk_call_fail(err, LISA_ERR, "attempt %u of %s is missing",
                                 r->attempts, r->rollout_id);
    }
    uint64_t not_before = 0;
    uint64_t lease = a ? a->lease_expiry_ms : 0;
    if (a && (row->actions & BRK_A_RENEW_LEASE)) {
        a->lease_expiry_ms = now + self->env.cfg->lease_ms;
        lease = a->lease_expiry_ms;
    }
    if (a && (row->actions & BRK_A_SET_SANDBOX)) {
        if (c->sandbox_id && *c->sandbox_id)
            a->sandbox_id = brk_arena_strdup(self->env.arena, c->sandbox_id);
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
        a->reason = brk_arena_strdup(self->env.arena, c->reason);
    }
    if (row->actions & BRK_A_REQUEUE) {
        not_before = now + s_backoff(self->env.cfg, r->attempts);
        size_t n = strlen(c->reason ? c->reason : "") + 64;
        char *why = brk_arena_alloc(self->env.arena, n);
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
        r->reason = brk_arena_strdup(self->env.arena, c->reason);
        brk_outbox_finished(self->env.outbox, r->rollout_id);
    }
    r->state = row->to;
    rc = brk_store_rollout_update(self->env.store, r, not_before, lease);
    if (rc == LISA_OK && a)
        rc = brk_store_attempt_put(self->env.store, a, c->expected_spans);
    if (rc == LISA_OK && (row->actions & BRK_A_RECORD))
        rc = brk_store_transition(
            self->env.store, r->rollout_id, a ? a->attempt : 0, from, r->state,
            brk_fsm_event_name(ev), c->reason ? c->reason : "", now);
    if (rc != LISA_OK)
        return brk_call_fail(err, LISA_ERR, "store write failed");
    if (row->actions & BRK_A_DISPATCH)
        brk_outbox_job(self->env.outbox, r->rollout_id, a->attempt,
                       r->data_source);
    if (a && s_attempt_over(a->state) && self->on_end)
        self->on_end(self->on_end_arg, r->rollout_id, a->attempt);
    if (row->actions & BRK_A_DROP_JOB)
        brk_outbox_drop_job(self->env.outbox, r->rollout_id);
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
s_load_current(brk_lifecycle_t *self, const char *id, uint32_t attempt,
               Lisa__Rollout **r, char *err)
{
    if (!brk_call_id_ok(id))
        return brk_call_fail(err, LISA_INVALID,
                             "rollout_id is missing or invalid");
    if (brk_store_rollout_get(self->env.store, self->env.arena, id, r) !=
        LISA_OK)
        return brk_call_fail(err, LISA_NOTFOUND, "unknown rollout '%s'", id);
    if (attempt == 0 || attempt > (*r)->attempts)
        return brk_call_fail(err, LISA_NOTFOUND, "rollout %s has no attempt %u",
                             id, attempt);
    if (attempt != (*r)->attempts)
        return brk_call_fail(err, LISA_CONFLICT,
                             "attempt %u of %s is over (current attempt is %u)",
                             attempt, id, (*r)->attempts);
    return LISA_OK;
}

static void
s_new_id(brk_lifecycle_t *self, char prefix, char *out, size_t n)
{
    uint32_t rnd = s_random32();
    snprintf(out, n, "%c-%012" PRIx64 "-%06x%04x", prefix, brk_call_now_ms(),
             ++self->id_counter & 0xffffffu, rnd & 0xffffu);
}

static lisa_rc_t
s_h_enqueue(brk_lifecycle_t *self, const Lisa__Request *req, Lisa__Reply *rep,
            char *err)
{
    const Lisa__EnqueueReq *q = req->enqueue;
    Lisa__EnqueueRep *out = brk_arena_alloc(self->env.arena, sizeof *out);
    lisa__enqueue_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_ENQUEUE;
    rep->enqueue = out;
    bool keyed = q->idempotency_key && *q->idempotency_key;
    if (keyed && !brk_call_id_ok(q->idempotency_key))
        return brk_call_fail(err, LISA_INVALID,
                             "idempotency_key is not a valid id");
    if (keyed) {
        uint8_t *blob = NULL;
        size_t len = 0;
        if (brk_store_idem_get(self->env.store, self->env.arena,
                               q->idempotency_key, &blob, &len) == LISA_OK) {
            Lisa__EnqueueRep *old = lisa__enqueue_rep__unpack(NULL, len, blob);
            if (!old)
                return brk_call_fail(err, LISA_ERR, "stored reply is corrupt");
            brk_arena_own(self->env.arena, &old->base);
            rep->enqueue = old;
            return LISA_OK;
        }
    }
    if (q->run_id && *q->run_id && !brk_call_id_ok(q->run_id))
        return brk_call_fail(err, LISA_INVALID, "run_id is not a valid id");
    if (q->n_tasks == 0)
        return brk_call_fail(err, LISA_INVALID, "no tasks to enqueue");
    uint64_t total = 0;
    for (size_t i = 0; i < q->n_tasks; i++) {
        const Lisa__TaskSpec *t = q->tasks[i];
        uint32_t n = t->n ? t->n : 1;
        if (n > 4096)
            return brk_call_fail(err, LISA_TOOLARGE,
                                 "task %zu: n=%u exceeds 4096", i, n);
        if (t->task_id && *t->task_id && strlen(t->task_id) > BRK_MAX_ID)
            return brk_call_fail(err, LISA_INVALID,
                                 "task %zu: task_id too long", i);
        if (t->extra_info_json && *t->extra_info_json) {
            json_t *j = json_loads(t->extra_info_json, 0, NULL);
            bool obj = j && json_is_object(j);
            json_decref(j);
            if (!obj)
                return brk_call_fail(
                    err, LISA_INVALID,
                    "task %zu: extra_info_json is not a JSON object", i);
        }
        for (size_t f = 0; f < t->n_files; f++) {
            const char *p = t->files[f]->path;
            if (!p || !*p || strlen(p) > 255 || p[0] == '/' || strstr(p, ".."))
                return brk_call_fail(err, LISA_INVALID,
                                     "task %zu: bad file path", i);
        }
        total += n;
    }
    if (total > self->env.cfg->max_batch)
        return brk_call_fail(err, LISA_TOOLARGE,
                             "%" PRIu64
                             " rollouts exceed the batch bound %" PRIu64,
                             total, self->env.cfg->max_batch);
    out->rollout_ids = brk_arena_alloc(self->env.arena, total * sizeof(char *));
    out->group_ids =
        brk_arena_alloc(self->env.arena, q->n_tasks * sizeof(char *));
    uint64_t now = brk_call_now_ms();
    for (size_t i = 0; i < q->n_tasks; i++) {
        const Lisa__TaskSpec *t = q->tasks[i];
        uint32_t n = t->n ? t->n : 1;
        char gid[64];
        s_new_id(self, 'g', gid, sizeof gid);
        if (brk_store_group_put(self->env.store, gid, q->run_id, q->step, t) !=
            LISA_OK)
            return brk_call_fail(err, LISA_ERR, "store write failed");
        out->group_ids[out->n_group_ids++] =
            brk_arena_strdup(self->env.arena, gid);
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
                                 : (uint32_t) self->env.cfg->max_attempts;
            r.created_ms = now;
            r.task_id = t->task_id;
            r.data_source = t->data_source;
            r.index_in_group = k;
            if (brk_store_rollout_put(self->env.store, &r) != LISA_OK ||
                brk_store_transition(
                    self->env.store, rid, 0,
                    LISA__ROLLOUT_STATE__ROLLOUT_STATE_UNSPECIFIED, r.state,
                    "enqueue", "", now) != LISA_OK)
                return brk_call_fail(err, LISA_ERR, "store write failed");
            s_rollout_event(self, &r, NULL);
            out->rollout_ids[out->n_rollout_ids++] =
                brk_arena_strdup(self->env.arena, rid);
        }
    }
    if (keyed) {
        size_t len = lisa__enqueue_rep__get_packed_size(out);
        uint8_t *buf = brk_arena_alloc(self->env.arena, len + 1);
        lisa__enqueue_rep__pack(out, buf);
        if (brk_store_idem_put(self->env.store, q->idempotency_key, buf, len,
                               now) != LISA_OK)
            return brk_call_fail(err, LISA_ERR, "store write failed");
    }
    return LISA_OK;
}

static lisa_rc_t
s_h_claim(brk_lifecycle_t *self, const Lisa__Request *req, Lisa__Reply *rep,
          char *err)
{
    const Lisa__ClaimReq *q = req->claim;
    Lisa__ClaimRep *out = brk_arena_alloc(self->env.arena, sizeof *out);
    lisa__claim_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_CLAIM;
    rep->claim = out;
    if (!brk_call_id_ok(q->controller_id))
        return brk_call_fail(err, LISA_INVALID,
                             "controller_id is missing or invalid");
    if (q->capacity == 0 || q->capacity > S_MAX_CLAIM)
        return brk_call_fail(err, LISA_INVALID, "capacity must be in 1..%u",
                             S_MAX_CLAIM);
    char **ids = NULL;
    size_t n = 0;
    if (brk_store_claimable(self->env.store, self->env.arena, q->run_id,
                            brk_call_now_ms(), q->capacity, &ids,
                            &n) != LISA_OK)
        return brk_call_fail(err, LISA_ERR, "store read failed");
    out->attempts =
        brk_arena_alloc(self->env.arena, (n ? n : 1) * sizeof(void *));
    for (size_t i = 0; i < n; i++) {
        Lisa__Rollout *r = NULL;
        if (brk_store_rollout_get(self->env.store, self->env.arena, ids[i],
                                  &r) != LISA_OK)
            return brk_call_fail(err, LISA_ERR, "store read failed");
        brk_lifecycle_ctx_t c = {.controller_id = q->controller_id,
                                 .reason = "claimed"};
        lisa_rc_t rc = s_apply(self, r, BRK_EV_CLAIM, &c, err);
        if (rc != LISA_OK)
            return rc;
        Lisa__ClaimedAttempt *ca = brk_arena_alloc(self->env.arena, sizeof *ca);
        lisa__claimed_attempt__init(ca);
        ca->rollout = r;
        ca->attempt = c.attempt_out->attempt;
        ca->deadline_ms = c.attempt_out->deadline_ms;
        char *tok = brk_token_issue(self->token, r->rollout_id, ca->attempt,
                                    ca->deadline_ms);
        ca->token = brk_arena_strdup(self->env.arena, tok);
        lisa_free(&tok);
        Lisa__Limits *lim = NULL;
        (void) s_deadline_len(self, r, &lim);
        ca->limits = lim;
        out->attempts[out->n_attempts++] = ca;
    }
    return LISA_OK;
}

static lisa_rc_t
s_h_attempt_start(brk_lifecycle_t *self, const Lisa__Request *req,
                  Lisa__Reply *rep, char *err)
{
    const Lisa__AttemptStartReq *q = req->attempt_start;
    rep->body_case = LISA__REPLY__BODY_ATTEMPT_START;
    rep->attempt_start =
        brk_arena_alloc(self->env.arena, sizeof *rep->attempt_start);
    lisa__attempt_start_rep__init(rep->attempt_start);
    if (q->sandbox_id && strlen(q->sandbox_id) > 255)
        return brk_call_fail(err, LISA_INVALID, "sandbox_id too long");
    Lisa__Rollout *r = NULL;
    lisa_rc_t rc = s_load_current(self, q->rollout_id, q->attempt, &r, err);
    if (rc != LISA_OK)
        return rc;
    brk_lifecycle_ctx_t c = {.sandbox_id = q->sandbox_id,
                             .reason = "sandbox started"};
    return s_apply(self, r, BRK_EV_START, &c, err);
}

static lisa_rc_t
s_h_heartbeat(brk_lifecycle_t *self, const Lisa__Request *req, Lisa__Reply *rep,
              char *err)
{
    const Lisa__HeartbeatReq *q = req->heartbeat;
    Lisa__HeartbeatRep *out = brk_arena_alloc(self->env.arena, sizeof *out);
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
    brk_lifecycle_ctx_t c = {.reason = "heartbeat"};
    rc = s_apply(self, r, BRK_EV_HEARTBEAT, &c, err);
    if (rc == LISA_OK && c.attempt_out)
        out->lease_expiry_ms = c.attempt_out->lease_expiry_ms;
    return rc;
}

static lisa_rc_t
s_h_attempt_complete(brk_lifecycle_t *self, const Lisa__Request *req,
                     Lisa__Reply *rep, char *err)
{
    const Lisa__AttemptCompleteReq *q = req->attempt_complete;
    rep->body_case = LISA__REPLY__BODY_ATTEMPT_COMPLETE;
    rep->attempt_complete =
        brk_arena_alloc(self->env.arena, sizeof *rep->attempt_complete);
    lisa__attempt_complete_rep__init(rep->attempt_complete);
    if (!q->result)
        return brk_call_fail(err, LISA_INVALID, "result is missing");
    if (q->result->answer &&
        strlen(q->result->answer) > self->env.cfg->max_answer)
        return brk_call_fail(err, LISA_TOOLARGE,
                             "answer exceeds %" PRIu64 " bytes",
                             self->env.cfg->max_answer);
    Lisa__Rollout *r = NULL;
    lisa_rc_t rc = s_load_current(self, q->rollout_id, q->attempt, &r, err);
    if (rc != LISA_OK)
        return rc;
    if (r->state == LISA__ROLLOUT_STATE__ROLLOUT_SCORING ||
        r->state == LISA__ROLLOUT_STATE__ROLLOUT_SUCCEEDED) {
        /* a repeated complete of this attempt: already accepted */
        Lisa__Attempt *a = NULL;
        if (brk_store_attempt_get(self->env.store, self->env.arena,
                                  r->rollout_id, q->attempt, &a) == LISA_OK &&
            a->result)
            return LISA_OK;
    }
    brk_lifecycle_ctx_t c = {.result = q->result,
                             .expected_spans = q->expected_spans,
                             .reason = "result posted"};
    return s_apply(self, r, BRK_EV_COMPLETE, &c, err);
}

static lisa_rc_t
s_h_attempt_fail(brk_lifecycle_t *self, const Lisa__Request *req,
                 Lisa__Reply *rep, char *err)
{
    const Lisa__AttemptFailReq *q = req->attempt_fail;
    Lisa__AttemptFailRep *out = brk_arena_alloc(self->env.arena, sizeof *out);
    lisa__attempt_fail_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_ATTEMPT_FAIL;
    rep->attempt_fail = out;
    if (q->kind == LISA__FAILURE_KIND__FAILURE_NONE ||
        q->kind == LISA__FAILURE_KIND__FAILURE_CANCELLED ||
        (unsigned) q->kind > LISA__FAILURE_KIND__FAILURE_CANCELLED)
        return brk_call_fail(err, LISA_INVALID,
                             "kind must name a failure (use cancel to cancel)");
    if (q->reason && strlen(q->reason) > 4096)
        return brk_call_fail(err, LISA_TOOLARGE, "reason exceeds 4096 bytes");
    Lisa__Rollout *r = NULL;
    lisa_rc_t rc = s_load_current(self, q->rollout_id, q->attempt, &r, err);
    Lisa__Attempt *a = NULL;
    if ((rc == LISA_OK || rc == LISA_CONFLICT) && r &&
        brk_store_attempt_get(self->env.store, self->env.arena, r->rollout_id,
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
    brk_lifecycle_ctx_t c = {.kind = q->kind, .reason = q->reason};
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
s_h_get_task(brk_lifecycle_t *self, const Lisa__Request *req, Lisa__Reply *rep,
             char *err)
{
    const Lisa__GetTaskReq *q = req->get_task;
    Lisa__GetTaskRep *out = brk_arena_alloc(self->env.arena, sizeof *out);
    lisa__get_task_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_GET_TASK;
    rep->get_task = out;
    Lisa__Rollout *r = NULL;
    lisa_rc_t rc = s_load_current(self, q->rollout_id, q->attempt, &r, err);
    if (rc != LISA_OK)
        return rc;
    Lisa__TaskSpec *t = NULL;
    if (brk_store_group_task(self->env.store, self->env.arena, r->group_id,
                             &t) != LISA_OK)
        return brk_call_fail(err, LISA_ERR, "task of %s is missing",
                             r->rollout_id);
    brk_lifecycle_ctx_t c = {.reason = "task fetched"};
    rc = s_apply(self, r, BRK_EV_GET_TASK, &c, err);
    if (rc != LISA_OK)
        return rc;
    Lisa__TaskView *v = brk_arena_alloc(self->env.arena, sizeof *v);
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
    v->system_prompt = t->system_prompt;
    v->instance_prompt = t->instance_prompt;
    v->deadline_ms = c.attempt_out ? c.attempt_out->deadline_ms : 0;
    v->policy_version = r->policy_version;
    v->extra_info_json = s_empty;
    if (t->extra_info_json && *t->extra_info_json) {
        json_t *j = json_loads(t->extra_info_json, 0, NULL);
        if (j) {
            s_strip_gt(j);
            char *s = json_dumps(j, JSON_COMPACT);
            v->extra_info_json = brk_arena_strdup(self->env.arena, s);
            free(s);
            json_decref(j);
        }
    }
    out->task = v;
    return LISA_OK;
}

static lisa_rc_t
s_cancel_one(brk_lifecycle_t *self, Lisa__Rollout *r, const char *reason,
             uint32_t *count, char *err)
{
    if (brk_fsm_terminal(r->state))
        return LISA_OK;
    brk_lifecycle_ctx_t c = {.kind = LISA__FAILURE_KIND__FAILURE_CANCELLED,
                             .reason =
                                 reason && *reason ? reason : "cancelled"};
    lisa_rc_t rc = s_apply(self, r, BRK_EV_CANCEL, &c, err);
    if (rc == LISA_OK)
        (*count)++;
    return rc;
}

static lisa_rc_t
s_h_cancel(brk_lifecycle_t *self, const Lisa__Request *req, Lisa__Reply *rep,
           char *err)
{
    const Lisa__CancelReq *q = req->cancel;
    Lisa__CancelRep *out = brk_arena_alloc(self->env.arena, sizeof *out);
    lisa__cancel_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_CANCEL;
    rep->cancel = out;
    if (q->n_rollout_ids == 0 && !(q->run_id && *q->run_id))
        return brk_call_fail(err, LISA_INVALID, "name rollout ids or a run");
    if (q->n_rollout_ids > self->env.cfg->max_batch)
        return brk_call_fail(err, LISA_TOOLARGE, "too many rollout ids");
    if (q->reason && strlen(q->reason) > 4096)
        return brk_call_fail(err, LISA_TOOLARGE, "reason exceeds 4096 bytes");
    for (size_t i = 0; i < q->n_rollout_ids; i++) {
        Lisa__Rollout *r = NULL;
        if (!brk_call_id_ok(q->rollout_ids[i]) ||
            brk_store_rollout_get(self->env.store, self->env.arena,
                                  q->rollout_ids[i], &r) != LISA_OK)
            return brk_call_fail(err, LISA_NOTFOUND, "unknown rollout '%s'",
                                 q->rollout_ids[i]);
        lisa_rc_t rc = s_cancel_one(self, r, q->reason, &out->cancelled, err);
        if (rc != LISA_OK)
            return rc;
    }
    if (q->run_id && *q->run_id) {
        char **ids = NULL;
        size_t n = 0;
        if (brk_store_open_of_run(self->env.store, self->env.arena, q->run_id,
                                  &ids, &n) != LISA_OK)
            return brk_call_fail(err, LISA_ERR, "store read failed");
        for (size_t i = 0; i < n; i++) {
            Lisa__Rollout *r = NULL;
            if (brk_store_rollout_get(self->env.store, self->env.arena, ids[i],
                                      &r) != LISA_OK)
                continue;
            lisa_rc_t rc =
                s_cancel_one(self, r, q->reason, &out->cancelled, err);
            if (rc != LISA_OK)
                return rc;
        }
    }
    return LISA_OK;
}

static lisa_rc_t
s_h_policy(brk_lifecycle_t *self, const Lisa__Request *req, Lisa__Reply *rep,
           char *err)
{
    const Lisa__PolicyReq *q = req->policy;
    Lisa__PolicyRep *out = brk_arena_alloc(self->env.arena, sizeof *out);
    lisa__policy_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_POLICY;
    rep->policy = out;
    out->version = self->policy_version;
    if (!q->set)
        return LISA_OK;
    if (q->version <= self->policy_version)
        return brk_call_fail(err, LISA_CONFLICT,
                             "policy version %" PRIu64 " is not above %" PRIu64,
                             q->version, self->policy_version);
    if (brk_store_meta_set(self->env.store, "policy_version", q->version) !=
        LISA_OK)
        return brk_call_fail(err, LISA_ERR, "store write failed");
    self->policy_version = q->version;
    out->version = q->version;
    Lisa__Event ev = LISA__EVENT__INIT;
    Lisa__PolicyEvent pe = LISA__POLICY_EVENT__INIT;
    pe.version = q->version;
    ev.body_case = LISA__EVENT__BODY_POLICY;
    ev.policy = &pe;
    brk_outbox_event(self->env.outbox, "policy", &ev);
    return LISA_OK;
}

lisa_rc_t
brk_lifecycle_apply(brk_lifecycle_t *self, Lisa__Rollout *r, brk_event_t ev,
                    brk_lifecycle_ctx_t *c, char *err)
{
    return s_apply(self, r, ev, c, err);
}

typedef lisa_rc_t(s_handler_fn)(brk_lifecycle_t *self, const Lisa__Request *req,
                                Lisa__Reply *rep, char *err);

static const struct {
    Lisa__Request__BodyCase body;
    s_handler_fn *fn;
} s_handlers[] = {
    {LISA__REQUEST__BODY_ENQUEUE, s_h_enqueue},
    {LISA__REQUEST__BODY_CLAIM, s_h_claim},
    {LISA__REQUEST__BODY_ATTEMPT_START, s_h_attempt_start},
    {LISA__REQUEST__BODY_HEARTBEAT, s_h_heartbeat},
    {LISA__REQUEST__BODY_ATTEMPT_COMPLETE, s_h_attempt_complete},
    {LISA__REQUEST__BODY_ATTEMPT_FAIL, s_h_attempt_fail},
    {LISA__REQUEST__BODY_GET_TASK, s_h_get_task},
    {LISA__REQUEST__BODY_CANCEL, s_h_cancel},
    {LISA__REQUEST__BODY_POLICY, s_h_policy},
};

static s_handler_fn *
s_handler(Lisa__Request__BodyCase body)
{
    for (size_t i = 0; i < sizeof s_handlers / sizeof s_handlers[0]; i++)
        if (s_handlers[i].body == body)
            return s_handlers[i].fn;
    return NULL;
}

bool
brk_lifecycle_serves(Lisa__Request__BodyCase body)
{
    return s_handler(body) != NULL;
}

lisa_rc_t
brk_lifecycle_handle(brk_lifecycle_t *self, brk_call_t *call)
{
    s_handler_fn *fn = s_handler(call->req->body_case);
    if (!fn)
        return brk_call_fail(call->err, LISA_UNSUPPORTED,
                             "not a lifecycle request");
    return fn(self, call->req, call->rep, call->err);
}

/* Fails attempt a of rollout r: its deadline or its lease passed. */
static void
s_expire(brk_lifecycle_t *self, Lisa__Rollout *r, const Lisa__Attempt *a,
         uint64_t now)
{
    brk_lifecycle_ctx_t c = {0};
    brk_event_t ev;
    char why[160], err[BRK_ERR_LEN];
    if (a->deadline_ms <= now) {
        ev = BRK_EV_DEADLINE;
        c.kind = LISA__FAILURE_KIND__FAILURE_DEADLINE;
        snprintf(why, sizeof why,
                 "deadline passed in state %s (%" PRIu64 " ms after claim)",
                 brk_fsm_state_name(r->state), now - a->claimed_ms);
    } else {
        c.kind = LISA__FAILURE_KIND__FAILURE_LEASE;
        ev = brk_fsm_fail_event(c.kind, r->attempts, r->max_attempts);
        snprintf(why, sizeof why,
                 "lease expired (no heartbeat for %" PRIu64 " ms)",
                 now - (a->lease_expiry_ms - self->env.cfg->lease_ms));
    }
    c.reason = why;
    if (s_apply(self, r, ev, &c, err) != LISA_OK)
        lisa_log_warn("tick: %s", err);
    else
        lisa_log_info("rollout %s attempt %u: %s", r->rollout_id, a->attempt,
                      why);
}

void
brk_lifecycle_tick(brk_lifecycle_t *self, uint64_t now)
{
    char **ids = NULL;
    size_t n = 0;
    brk_arena_t *arena = self->env.arena;
    if (brk_store_due(self->env.store, arena, now, 1000, &ids, &n) != LISA_OK)
        return;
    char **copy = lisa_calloc(n + 1, sizeof *copy);
    for (size_t i = 0; i < n; i++)
        copy[i] = lisa_strdup(ids[i]);
    brk_arena_reset(arena);
    for (size_t i = 0; i < n; i++) {
        Lisa__Rollout *r = NULL;
        Lisa__Attempt *a = NULL;
        if (brk_store_rollout_get(self->env.store, arena, copy[i], &r) ==
                LISA_OK &&
            brk_store_attempt_get(self->env.store, arena, copy[i], r->attempts,
                                  &a) == LISA_OK)
            s_expire(self, r, a, now);
        brk_arena_reset(arena);
    }
    for (size_t i = 0; i < n; i++)
        lisa_free(&copy[i]);
    lisa_free(&copy);
}

brk_lifecycle_t *
brk_lifecycle_new(const brk_env_t *env, brk_token_t *token)
{
    brk_lifecycle_t *self = lisa_calloc(1, sizeof *self);
    self->env = *env;
    self->token = token;
    self->id_counter = s_random32();
    brk_lifecycle_reload(self);
    return self;
}

void
brk_lifecycle_destroy(brk_lifecycle_t **pself)
{
    if (pself)
        lisa_free(pself);
}

void
brk_lifecycle_on_end(brk_lifecycle_t *self, brk_lifecycle_end_fn *fn, void *arg)
{
    self->on_end = fn;
    self->on_end_arg = arg;
}

uint64_t
brk_lifecycle_policy(const brk_lifecycle_t *self)
{
    return self->policy_version;
}

void
brk_lifecycle_reload(brk_lifecycle_t *self)
{
    self->policy_version =
        brk_store_meta_get(self->env.store, "policy_version", 0);
}
