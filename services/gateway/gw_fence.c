/*
 * gw_fence: ended attempts and open calls per attempt (see the header).
 */
#include "gw_fence.h"

#include "lisa/lisa_mem.h"

#include <czmq.h>
#include <stdio.h>
#include <string.h>

/* Rollouts whose ended attempts are remembered; the oldest entry goes
 * first when the table is full. */
#define S_FENCE_ROLLOUTS 65536u
#define S_KEY_MAX        (LISA_TOKEN_MAX_ROLLOUT_ID + 16)

/* Every attempt of `rollout` up to `upto` has ended. */
typedef struct {
    char *rollout;
    uint32_t upto;
    void *handle; /* node in the age list */
} s_ended_t;

/* Open calls of one attempt; freed when the last one is answered. */
typedef struct {
    gw_fence_t *fence;
    char key[S_KEY_MAX];
    uint32_t n;
} s_open_t;

struct gw_fence_t {
    uint32_t max_inflight;
    uint64_t epoch;  /* bumped by each gap */
    zhashx_t *known; /* attempt key -> epoch it was checked in (owned) */
    zhashx_t *ended; /* rollout id -> s_ended_t (owned) */
    zlistx_t *age;   /* s_ended_t, oldest first (borrowed) */
    zhashx_t *open;  /* attempt key -> s_open_t (owned) */
};

static void
s_ended_free(void **item)
{
    s_ended_t *e = *item;
    if (!e)
        return;
    lisa_free(&e->rollout);
    lisa_free(&e);
    *item = NULL;
}

static void
s_open_free(void **item)
{
    s_open_t *o = *item;
    lisa_free(&o);
    *item = NULL;
}

static void
s_known_free(void **item)
{
    uint64_t *at = *item;
    lisa_free(&at);
    *item = NULL;
}

gw_fence_t *
gw_fence_new(uint32_t max_inflight)
{
    gw_fence_t *self = lisa_calloc(1, sizeof *self);
    self->max_inflight = max_inflight;
    self->ended = zhashx_new();
    zhashx_set_destructor(self->ended, s_ended_free);
    self->age = zlistx_new();
    self->open = zhashx_new();
    zhashx_set_destructor(self->open, s_open_free);
    self->epoch = 1;
    self->known = zhashx_new();
    zhashx_set_destructor(self->known, s_known_free);
    return self;
}

void
gw_fence_destroy(gw_fence_t **self)
{
    if (!self || !*self)
        return;
    gw_fence_t *f = *self;
    zlistx_destroy(&f->age);
    zhashx_destroy(&f->ended);
    zhashx_destroy(&f->open);
    zhashx_destroy(&f->known);
    lisa_free(self);
}

static bool
s_terminal_attempt(Lisa__AttemptState s)
{
    return s == LISA__ATTEMPT_STATE__ATTEMPT_SUCCEEDED ||
           s == LISA__ATTEMPT_STATE__ATTEMPT_FAILED ||
           s == LISA__ATTEMPT_STATE__ATTEMPT_CANCELLED;
}

static bool
s_terminal_rollout(Lisa__RolloutState s)
{
    return s == LISA__ROLLOUT_STATE__ROLLOUT_SUCCEEDED ||
           s == LISA__ROLLOUT_STATE__ROLLOUT_FAILED ||
           s == LISA__ROLLOUT_STATE__ROLLOUT_CANCELLED;
}

/* Records that every attempt of `rollout` up to `upto` has ended. */
static void
s_end_upto(gw_fence_t *self, const char *rollout, uint32_t upto)
{
    s_ended_t *e = zhashx_lookup(self->ended, rollout);
    if (e) {
        if (upto > e->upto)
            e->upto = upto;
        return;
    }
    if (zhashx_size(self->ended) >= S_FENCE_ROLLOUTS) {
        s_ended_t *old = zlistx_first(self->age);
        zlistx_delete(self->age, old->handle);
        zhashx_delete(self->ended, old->rollout);
    }
    e = lisa_calloc(1, sizeof *e);
    e->rollout = lisa_strdup(rollout);
    e->upto = upto;
    e->handle = zlistx_add_end(self->age, e);
    zhashx_insert(self->ended, e->rollout, e);
}

void
gw_fence_event(gw_fence_t *self, const Lisa__RolloutEvent *ev)
{
    if (!ev || !ev->rollout_id || !ev->rollout_id[0] ||
        strlen(ev->rollout_id) > LISA_TOKEN_MAX_ROLLOUT_ID)
        return;
    if (s_terminal_rollout(ev->state))
        s_end_upto(self, ev->rollout_id, UINT32_MAX); /* no attempt follows */
    else if (s_terminal_attempt(ev->attempt_state))
        s_end_upto(self, ev->rollout_id, ev->attempt);
    else if (ev->attempt > 0)
        s_end_upto(self, ev->rollout_id, ev->attempt - 1); /* a newer one */
}

bool
gw_fence_ended(const gw_fence_t *self, const char *rollout, uint32_t attempt)
{
    const s_ended_t *e = zhashx_lookup(self->ended, rollout);
    return e && attempt <= e->upto;
}

static void
s_key(char *key, const lisa_token_claims_t *who)
{
    snprintf(key, S_KEY_MAX, "%s/%u", who->rollout_id, who->attempt);
}

/* The release hook: one call of the attempt was answered. */
static void
s_left(void *arg)
{
    s_open_t *o = arg;
    if (--o->n == 0)
        zhashx_delete(o->fence->open, o->key); /* frees o */
}

lisa_rc_t
gw_fence_enter(gw_fence_t *self, lisa_http_req_t *req,
               const lisa_token_claims_t *who, gw_err_t *err)
{
    if (gw_fence_ended(self, who->rollout_id, who->attempt))
        return gw_err_set(err, LISA_CONFLICT, 409, "invalid_request_error",
                          "attempt_ended", NULL,
                          "attempt %u of rollout %.128s has ended; its token "
                          "is no longer accepted",
                          who->attempt, who->rollout_id);
    char key[S_KEY_MAX];
    s_key(key, who);
    s_open_t *o = zhashx_lookup(self->open, key);
    if (o && self->max_inflight && o->n >= self->max_inflight)
        return gw_err_set(
            err, LISA_AGAIN, 429, "rate_limit_error", "too_many_calls", NULL,
            "this attempt already has %u calls open", self->max_inflight);
    if (!o) {
        o = lisa_calloc(1, sizeof *o);
        o->fence = self;
        memcpy(o->key, key, sizeof key);
        zhashx_insert(self->open, o->key, o);
    }
    o->n++;
    lisa_http_req_on_release(req, s_left, o);
    return LISA_OK;
}

bool
gw_fence_known(const gw_fence_t *self, const lisa_token_claims_t *who)
{
    if (gw_fence_ended(self, who->rollout_id, who->attempt))
        return true;
    char key[S_KEY_MAX];
    s_key(key, who);
    const uint64_t *at = zhashx_lookup(self->known, key);
    return at && *at == self->epoch;
}

void
gw_fence_rollout(gw_fence_t *self, const lisa_token_claims_t *who,
                 Lisa__RolloutState state, uint32_t attempts)
{
    if (s_terminal_rollout(state))
        s_end_upto(self, who->rollout_id, UINT32_MAX);
    else if (state == LISA__ROLLOUT_STATE__ROLLOUT_QUEUED && attempts > 0)
        s_end_upto(self, who->rollout_id, attempts); /* waits for a retry */
    else if (attempts > 0)
        s_end_upto(self, who->rollout_id, attempts - 1);
    if (zhashx_size(self->known) >= S_FENCE_ROLLOUTS)
        zhashx_purge(self->known); /* bounded: the rest are checked again */
    char key[S_KEY_MAX];
    s_key(key, who);
    uint64_t *at = zhashx_lookup(self->known, key);
    if (!at) {
        at = lisa_calloc(1, sizeof *at);
        zhashx_insert(self->known, key, at);
    }
    *at = self->epoch;
}

void
gw_fence_gap(gw_fence_t *self)
{
    self->epoch++;
}

uint32_t
gw_fence_inflight(const gw_fence_t *self, const lisa_token_claims_t *who)
{
    char key[S_KEY_MAX];
    s_key(key, who);
    const s_open_t *o = zhashx_lookup(self->open, key);
    return o ? o->n : 0;
}

size_t
gw_fence_size(const gw_fence_t *self)
{
    return zhashx_size(self->ended);
}
