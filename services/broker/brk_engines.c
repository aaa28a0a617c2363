/*
 * brk_engines: the engine registry (see brk_engines.h).
 */
#include "brk_engines.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <string.h>

#define S_MAX_ENGINES 1024u
#define S_DEFAULT_TTL 10000u

typedef struct {
    char *engine_id;
    char *url;
    uint64_t policy_version;
    bool paused;
    uint32_t max_batch;
    int64_t expiry; /* mono ms */
} s_engine_t;

struct brk_engines_t {
    brk_env_t env;
    zhashx_t *engines; /* engine_id -> s_engine_t */
};

static void
s_engine_event(brk_engines_t *self, const s_engine_t *e, bool up)
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
    brk_outbox_event(self->env.outbox, "engine", &ev);
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
s_h_engine_register(brk_engines_t *self, const Lisa__Request *req,
                    Lisa__Reply *rep, char *err)
{
    const Lisa__EngineRegisterReq *q = req->engine_register;
    rep->body_case = LISA__REPLY__BODY_ENGINE_REGISTER;
    rep->engine_register =
        brk_arena_alloc(self->env.arena, sizeof *rep->engine_register);
    lisa__engine_register_rep__init(rep->engine_register);
    const Lisa__Engine *e = q->engine;
    if (!e || !brk_call_id_ok(e->engine_id))
        return brk_call_fail(err, LISA_INVALID,
                             "engine_id is missing or invalid");
    if (!e->url || strncmp(e->url, "http", 4) != 0 || strlen(e->url) > 1024)
        return brk_call_fail(err, LISA_INVALID,
                             "engine url must be an http(s) URL");
    uint64_t ttl = q->ttl_ms ? q->ttl_ms : S_DEFAULT_TTL;
    if (ttl > 3600000)
        return brk_call_fail(err, LISA_INVALID, "ttl_ms exceeds one hour");
    s_engine_t *old = zhashx_lookup(self->engines, e->engine_id);
    if (!old && zhashx_size(self->engines) >= S_MAX_ENGINES)
        return brk_call_fail(err, LISA_AGAIN, "too many engines");
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
s_h_engine_list(brk_engines_t *self, const Lisa__Request *req, Lisa__Reply *rep,
                char *err)
{
    (void) req, (void) err;
    Lisa__EngineListRep *out = brk_arena_alloc(self->env.arena, sizeof *out);
    lisa__engine_list_rep__init(out);
    rep->body_case = LISA__REPLY__BODY_ENGINE_LIST;
    rep->engine_list = out;
    size_t n = zhashx_size(self->engines);
    out->engines =
        brk_arena_alloc(self->env.arena, (n ? n : 1) * sizeof(void *));
    for (s_engine_t *e = zhashx_first(self->engines); e;
         e = zhashx_next(self->engines)) {
        Lisa__Engine *x = brk_arena_alloc(self->env.arena, sizeof *x);
        lisa__engine__init(x);
        x->engine_id = brk_arena_strdup(self->env.arena, e->engine_id);
        x->url = brk_arena_strdup(self->env.arena, e->url);
        x->policy_version = e->policy_version;
        x->up = true;
        x->paused = e->paused;
        x->max_batch = e->max_batch;
        out->engines[out->n_engines++] = x;
    }
    return LISA_OK;
}

bool
brk_engines_serves(Lisa__Request__BodyCase body)
{
    return body == LISA__REQUEST__BODY_ENGINE_REGISTER ||
           body == LISA__REQUEST__BODY_ENGINE_LIST;
}

lisa_rc_t
brk_engines_handle(brk_engines_t *self, brk_call_t *call)
{
    switch (call->req->body_case) {
    case LISA__REQUEST__BODY_ENGINE_REGISTER:
        return s_h_engine_register(self, call->req, call->rep, call->err);
    case LISA__REQUEST__BODY_ENGINE_LIST:
        return s_h_engine_list(self, call->req, call->rep, call->err);
    default:
        return brk_call_fail(call->err, LISA_UNSUPPORTED,
                             "not an engine request");
    }
}

void
brk_engines_tick(brk_engines_t *self, int64_t mono)
{
    s_engine_t *e = zhashx_first(self->engines);
    while (e) {
        if (e->expiry <= mono) {
            s_engine_event(self, e, false);
            lisa_log_info("engine %s expired", e->engine_id);
            zhashx_delete(self->engines, e->engine_id);
            /* zhashx iteration is invalid after a delete: restart */
            e = zhashx_first(self->engines);
            continue;
        }
        e = zhashx_next(self->engines);
    }
}

size_t
brk_engines_count(const brk_engines_t *self)
{
    return zhashx_size(self->engines);
}

brk_engines_t *
brk_engines_new(const brk_env_t *env)
{
    brk_engines_t *self = lisa_calloc(1, sizeof *self);
    self->env = *env;
    self->engines = zhashx_new();
    zhashx_set_destructor(self->engines, s_engine_free);
    return self;
}

void
brk_engines_destroy(brk_engines_t **pself)
{
    if (!pself || !*pself)
        return;
    zhashx_destroy(&(*pself)->engines);
    lisa_free(pself);
}
