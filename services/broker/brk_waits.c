/*
 * brk_waits: held waits (see brk_waits.h).
 */
#include "brk_waits.h"

#include "brk_fsm.h"
#include "lisa/lisa_mem.h"

#include <inttypes.h>
#include <stdio.h>

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

struct brk_waits_t {
    brk_env_t env;
    s_wait_t **waits;
    size_t n_waits, cap_waits;
};

/* Terminal rollouts among ids, and the ids still open. */
static lisa_rc_t
s_split(brk_waits_t *self, char **ids, size_t n, Lisa__WaitRep *out)
{
    out->rollouts =
        brk_arena_alloc(self->env.arena, (n ? n : 1) * sizeof(void *));
    out->pending_ids =
        brk_arena_alloc(self->env.arena, (n ? n : 1) * sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        Lisa__Rollout *r = NULL;
        if (brk_store_rollout_get(self->env.store, self->env.arena, ids[i],
                                  &r) != LISA_OK) {
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
s_wait_answer(brk_waits_t *self, size_t i, bool timed_out)
{
    s_wait_t *w = self->waits[i];
    Lisa__Reply rep = LISA__REPLY__INIT;
    Lisa__WaitRep out = LISA__WAIT_REP__INIT;
    rep.request_id = w->request_id;
    rep.body_case = LISA__REPLY__BODY_WAIT;
    rep.wait = &out;
    s_split(self, w->ids, w->n_ids, &out);
    char err[BRK_ERR_LEN] = "";
    if (timed_out && out.n_pending_ids > 0) {
        snprintf(err, sizeof err,
                 "timed out after %" PRIu64 " ms: %zu of %zu rollouts still "
                 "open",
                 w->timeout_ms, out.n_pending_ids, w->n_ids);
        rep.code = LISA__CODE__CODE_TIMEOUT;
    }
    rep.error = err;
    brk_outbox_reply(self->env.outbox, w->identity, w->delim, &rep);
    brk_arena_reset(self->env.arena);
    s_wait_free(&self->waits[i]);
    self->waits[i] = self->waits[--self->n_waits];
}

static lisa_rc_t
s_h_wait(brk_waits_t *self, brk_call_t *call)
{
    const Lisa__Request *req = call->req;
    Lisa__Reply *rep = call->rep;
    char *err = call->err;
    const Lisa__WaitReq *q = req->wait;
    Lisa__WaitRep *out = brk_arena_alloc(self->env.arena, sizeof *out);
    lisa__wait_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_WAIT;
    rep->wait = out;
    if (q->timeout_ms == 0)
        return brk_call_fail(err, LISA_INVALID, "timeout_ms is required (> 0)");
    if (q->timeout_ms > self->env.cfg->max_wait_ms)
        return brk_call_fail(err, LISA_INVALID,
                             "timeout_ms %" PRIu64
                             " exceeds the maximum %" PRIu64,
                             q->timeout_ms, self->env.cfg->max_wait_ms);
    if (q->n_rollout_ids == 0)
        return brk_call_fail(err, LISA_INVALID, "no rollout ids to wait for");
    if (q->n_rollout_ids > self->env.cfg->max_batch)
        return brk_call_fail(err, LISA_TOOLARGE, "too many rollout ids");
    for (size_t i = 0; i < q->n_rollout_ids; i++) {
        Lisa__Rollout *r = NULL;
        if (!brk_call_id_ok(q->rollout_ids[i]) ||
            brk_store_rollout_get(self->env.store, self->env.arena,
                                  q->rollout_ids[i], &r) != LISA_OK)
            return brk_call_fail(err, LISA_NOTFOUND, "unknown rollout '%s'",
                                 q->rollout_ids[i]);
    }
    s_split(self, q->rollout_ids, q->n_rollout_ids, out);
    if (out->n_pending_ids == 0)
        return LISA_OK;
    if (self->n_waits >= self->env.cfg->max_waits)
        return brk_call_fail(err, LISA_AGAIN, "too many waits held (%zu)",
                             self->n_waits);
    s_wait_t *w = lisa_calloc(1, sizeof *w);
    w->identity = zframe_dup(call->identity);
    w->delim = call->delim;
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
    if (self->n_waits == self->cap_waits) {
        self->cap_waits = self->cap_waits ? self->cap_waits * 2 : 16;
        self->waits =
            lisa_realloc(self->waits, self->cap_waits * sizeof *self->waits);
    }
    self->waits[self->n_waits++] = w;
    call->held = true;
    return LISA_OK;
}

lisa_rc_t
brk_waits_handle(brk_waits_t *self, brk_call_t *call)
{
    if (call->req->body_case != LISA__REQUEST__BODY_WAIT)
        return brk_call_fail(call->err, LISA_UNSUPPORTED, "not a wait");
    return s_h_wait(self, call);
}

void
brk_waits_finished(brk_waits_t *self, char *const *ids, size_t n)
{
    for (size_t f = 0; f < n; f++)
        for (size_t i = 0; i < self->n_waits; i++)
            zhashx_delete(self->waits[i]->open, ids[f]);
    for (size_t i = 0; i < self->n_waits;)
        if (zhashx_size(self->waits[i]->open) == 0)
            s_wait_answer(self, i, false);
        else
            i++;
}

void
brk_waits_tick(brk_waits_t *self, int64_t mono)
{
    for (size_t i = 0; i < self->n_waits;)
        if (self->waits[i]->deadline <= mono)
            s_wait_answer(self, i, true);
        else
            i++;
}

brk_waits_t *
brk_waits_new(const brk_env_t *env)
{
    brk_waits_t *self = lisa_calloc(1, sizeof *self);
    self->env = *env;
    return self;
}

void
brk_waits_destroy(brk_waits_t **pself)
{
    if (!pself || !*pself)
        return;
    brk_waits_t *self = *pself;
    for (size_t i = 0; i < self->n_waits; i++)
        s_wait_free(&self->waits[i]);
    lisa_free(&self->waits);
    lisa_free(pself);
}
