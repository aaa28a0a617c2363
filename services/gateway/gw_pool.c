/*
 * gw_pool: engine set and routing policy (see the header). Engines live in
 * a small array (tens of engines in practice); every lookup is a linear
 * scan, cheaper than hashing at this size. Once attached to a loop the
 * pool also keeps itself current: its refresh timer asks the broker for
 * the engine list and its health timer checks every engine.
 */
#include "gw_pool.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <czmq.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char *id;
    char *url;
    uint64_t policy_version;
    bool paused;
    bool from_broker;
    bool seen;
    bool up;
    uint32_t fails;
    uint32_t inflight;
    uint32_t capacity; /* advertised max_batch; 0: not known */
} s_engine_t;

struct gw_pool_t {
    s_engine_t *e;
    size_t n, cap;
    uint32_t max_inflight;
    uint32_t fail_limit;
    bool paused_all;
    size_t rr;        /* round-robin start among equally loaded engines */
    zhashx_t *groups; /* group id -> engine id the group is placed on */
    /* attached (gw_pool_attach): refresh and health checks */
    gw_pool_io_t io;
    zlistx_t *checks;         /* s_check_t of health checks in flight */
    bool listing;             /* an EngineListReq is on the wire */
    int64_t listed_on_demand; /* mono ms of the last gw_pool_refresh_soon */
    int refresh_timer, health_timer;
};

gw_pool_t *
gw_pool_new(uint32_t max_inflight, uint32_t fail_limit)
{
    gw_pool_t *self = lisa_calloc(1, sizeof *self);
    self->max_inflight = max_inflight;
    self->fail_limit = fail_limit ? fail_limit : 1;
    self->groups = zhashx_new();
    zhashx_set_destructor(self->groups, (zhashx_destructor_fn *) zstr_free);
    zhashx_set_duplicator(self->groups, (zhashx_duplicator_fn *) strdup);
    return self;
}

static void
s_engine_clear(s_engine_t *e)
{
    lisa_free(&e->id);
    lisa_free(&e->url);
}

void
gw_pool_destroy(gw_pool_t **self)
{
    if (!self || !*self)
        return;
    gw_pool_t *p = *self;
    if (p->io.loop && p->refresh_timer)
        zloop_timer_end(p->io.loop, p->refresh_timer);
    if (p->io.loop && p->health_timer)
        zloop_timer_end(p->io.loop, p->health_timer);
    if (p->checks) {
        void *c;
        while ((c = zlistx_first(p->checks))) {
            zlistx_delete(p->checks, zlistx_cursor(p->checks));
            lisa_free(&c);
        }
        zlistx_destroy(&p->checks);
    }
    zhashx_destroy(&p->groups);
    for (size_t i = 0; i < (*self)->n; i++)
        s_engine_clear(&(*self)->e[i]);
    lisa_free(&(*self)->e);
    lisa_free(self);
}

static s_engine_t *
s_find(const gw_pool_t *self, const char *id)
{
    if (!id)
        return NULL;
    for (size_t i = 0; i < self->n; i++)
        if (strcmp(self->e[i].id, id) == 0)
            return &self->e[i];
    return NULL;
}

lisa_rc_t
gw_pool_upsert(gw_pool_t *self, const char *id, const char *url,
               uint64_t policy_version, bool paused, bool from_broker)
{
    if (!id || !*id || !url || !*url)
        return LISA_INVALID;
    s_engine_t *e = s_find(self, id);
    if (!e) {
        if (self->n >= GW_POOL_MAX_ENGINES)
            return LISA_TOOLARGE;
        if (self->n == self->cap) {
            self->cap = self->cap ? self->cap * 2 : 8;
            self->e = lisa_realloc(self->e, self->cap * sizeof *self->e);
        }
        e = &self->e[self->n++];
        memset(e, 0, sizeof *e);
        e->id = lisa_strdup(id);
        e->up = true;
        lisa_log_info("engine %s at %s joins the pool", id, url);
    }
    if (!e->url || strcmp(e->url, url) != 0) {
        lisa_free(&e->url);
        e->url = lisa_strdup(url);
    }
    e->policy_version = policy_version;
    e->paused = paused;
    e->from_broker = from_broker;
    e->seen = true;
    return LISA_OK;
}

lisa_rc_t
gw_pool_add_static(gw_pool_t *self, const char *list)
{
    if (!list)
        return LISA_OK;
    char *copy = lisa_strdup(list);
    char *save = NULL;
    lisa_rc_t rc = LISA_OK;
    size_t k = 0;
    for (char *tok = strtok_r(copy, ", ", &save); tok;
         tok = strtok_r(NULL, ", ", &save), k++) {
        char name[32];
        const char *id = name, *url = tok;
        char *eq = strchr(tok, '=');
        if (eq) {
            *eq = '\0';
            id = tok;
            url = eq + 1;
        } else
            snprintf(name, sizeof name, "e%zu", k);
        if (strncmp(url, "http://", 7) != 0 &&
            strncmp(url, "https://", 8) != 0) {
            rc = LISA_INVALID;
            break;
        }
        rc = gw_pool_upsert(self, id, url, 0, false, false);
        if (rc != LISA_OK)
            break;
    }
    lisa_free(&copy);
    return rc;
}

void
gw_pool_sync_begin(gw_pool_t *self)
{
    for (size_t i = 0; i < self->n; i++)
        if (self->e[i].from_broker)
            self->e[i].seen = false;
}

size_t
gw_pool_sync_end(gw_pool_t *self)
{
    size_t removed = 0, j = 0;
    for (size_t i = 0; i < self->n; i++) {
        if (self->e[i].from_broker && !self->e[i].seen) {
            lisa_log_info("engine %s leaves the pool", self->e[i].id);
            s_engine_clear(&self->e[i]);
            removed++;
            continue;
        }
        self->e[j++] = self->e[i];
    }
    self->n = j;
    return removed;
}

static bool
s_usable(const gw_pool_t *self, const s_engine_t *e)
{
    return e->up && !e->paused && !self->paused_all &&
           (!self->max_inflight || e->inflight < self->max_inflight);
}

/* The least-loaded usable engine (round robin among equals), or NULL. */
static s_engine_t *
s_least_loaded(gw_pool_t *self)
{
    s_engine_t *e = NULL;
    for (size_t k = 0; k < self->n; k++) {
        s_engine_t *c = &self->e[(self->rr + k) % self->n];
        if (s_usable(self, c) && (!e || c->inflight < e->inflight))
            e = c;
    }
    if (self->n)
        self->rr = (self->rr + 1) % self->n;
    return e;
}

/* An engine is overloaded for a group's new attempt once its calls in
 * flight reach its advertised batch (unknown: never, below the pool's
 * own limit that s_usable checks). */
static bool
s_overloaded(const s_engine_t *e)
{
    return e->capacity && e->inflight >= e->capacity;
}

lisa_rc_t
gw_pool_pick(gw_pool_t *self, const char *sticky, const char **id,
             const char **url)
{
    return gw_pool_pick_group(self, sticky, NULL, id, url);
}

lisa_rc_t
gw_pool_pick_group(gw_pool_t *self, const char *sticky, const char *group,
                   const char **id, const char **url)
{
    s_engine_t *e = s_find(self, sticky);
    if (!e || !s_usable(self, e)) {
        e = NULL;
        s_engine_t *home =
            group && *group ? s_find(self, zhashx_lookup(self->groups, group))
                            : NULL;
        bool home_ok = home && s_usable(self, home);
        if (home_ok && !s_overloaded(home))
            e = home;
        else
            e = s_least_loaded(self);
        /* a group without a usable home moves to where it went; an
         * overloaded home stays its home (this call only went elsewhere) */
        if (e && group && *group && !home_ok) {
            if (zhashx_size(self->groups) >= GW_POOL_MAX_GROUPS)
                zhashx_purge(self->groups);
            zhashx_update(self->groups, group, e->id);
        }
    }
    if (!e) {
        for (size_t i = 0; i < self->n; i++)
            if (self->e[i].up)
                return LISA_AGAIN;
        return LISA_UNAVAILABLE;
    }
    *id = e->id;
    *url = e->url;
    return LISA_OK;
}

void
gw_pool_set_capacity(gw_pool_t *self, const char *id, uint32_t max_batch)
{
    s_engine_t *e = s_find(self, id);
    if (e)
        e->capacity = max_batch;
}

const char *
gw_pool_group_engine(const gw_pool_t *self, const char *group)
{
    return group ? zhashx_lookup(self->groups, group) : NULL;
}

void
gw_pool_call_started(gw_pool_t *self, const char *id)
{
    s_engine_t *e = s_find(self, id);
    if (e)
        e->inflight++;
}

static void
s_outcome(gw_pool_t *self, s_engine_t *e, bool ok)
{
    if (ok) {
        if (!e->up)
            lisa_log_info("engine %s is up", e->id);
        e->up = true;
        e->fails = 0;
        return;
    }
    e->fails++;
    if (e->up && e->fails >= self->fail_limit) {
        e->up = false;
        lisa_log_warn("engine %s is down after %u failures", e->id, e->fails);
    }
}

void
gw_pool_call_ended(gw_pool_t *self, const char *id, bool conn_error)
{
    s_engine_t *e = s_find(self, id);
    if (!e)
        return;
    if (e->inflight)
        e->inflight--;
    s_outcome(self, e, !conn_error);
}

void
gw_pool_health(gw_pool_t *self, const char *id, bool ok)
{
    s_engine_t *e = s_find(self, id);
    if (e)
        s_outcome(self, e, ok);
}

void
gw_pool_pause_all(gw_pool_t *self, bool paused)
{
    self->paused_all = paused;
}

bool
gw_pool_paused(const gw_pool_t *self)
{
    return self->paused_all;
}

uint32_t
gw_pool_inflight(const gw_pool_t *self, const char *id)
{
    uint32_t n = 0;
    for (size_t i = 0; i < self->n; i++)
        if (!id || strcmp(self->e[i].id, id) == 0)
            n += self->e[i].inflight;
    return n;
}

size_t
gw_pool_size(const gw_pool_t *self)
{
    return self->n;
}

bool
gw_pool_at(const gw_pool_t *self, size_t i, const char **id, const char **url,
           bool *up, bool *paused, uint32_t *inflight)
{
    if (i >= self->n)
        return false;
    const s_engine_t *e = &self->e[i];
    if (id)
        *id = e->id;
    if (url)
        *url = e->url;
    if (up)
        *up = e->up;
    if (paused)
        *paused = e->paused || self->paused_all;
    if (inflight)
        *inflight = e->inflight;
    return true;
}

/* ---- refresh and health ------------------------------------------------- */

/* A call found no engine it may use: the engine list is asked for now (at
 * most every S_LIST_NOW_MS) rather than at the next refresh. */
#define S_LIST_NOW_MS  100
#define S_HEALTH_TO_MS 2000L

typedef struct {
    gw_pool_t *pool;
    void *handle; /* its node in pool->checks */
    char id[160];
} s_check_t;

static void
s_listed(void *arg, uint64_t request_id, lisa_rc_t rc, const Lisa__Reply *rep)
{
    (void) request_id;
    gw_pool_t *self = arg;
    self->listing = false;
    if (rc != LISA_OK || !rep || rep->code != LISA__CODE__CODE_OK ||
        rep->body_case != LISA__REPLY__BODY_ENGINE_LIST) {
        gw_metrics_add(self->io.m, "lisa_gateway_broker_errors_total",
                       "request=\"EngineList\"", 1);
        return; /* keep the engines we know */
    }
    gw_pool_sync_begin(self);
    for (size_t i = 0; i < rep->engine_list->n_engines; i++) {
        const Lisa__Engine *e = rep->engine_list->engines[i];
        if (!e->up)
            continue;
        if (gw_pool_upsert(self, e->engine_id, e->url, e->policy_version,
                           e->paused, true) != LISA_OK)
            lisa_log_warn("engine %.64s refused (bad id/url or pool full)",
                          e->engine_id);
        else
            gw_pool_set_capacity(self, e->engine_id, e->max_batch);
    }
    gw_pool_sync_end(self);
}

void
gw_pool_refresh(gw_pool_t *self)
{
    if (!self->io.rpc || self->listing)
        return;
    Lisa__EngineListReq el = LISA__ENGINE_LIST_REQ__INIT;
    Lisa__Request r = LISA__REQUEST__INIT;
    r.body_case = LISA__REQUEST__BODY_ENGINE_LIST;
    r.engine_list = &el;
    if (lisa_rpc_send(self->io.rpc, &r, self->io.rpc_timeout_ms, s_listed, self,
                      NULL) == LISA_OK)
        self->listing = true;
}

void
gw_pool_refresh_soon(gw_pool_t *self)
{
    int64_t now = zclock_mono();
    if (now - self->listed_on_demand < S_LIST_NOW_MS)
        return;
    self->listed_on_demand = now;
    gw_pool_refresh(self);
}

static int
s_on_refresh(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    gw_pool_refresh(arg);
    return 0;
}

static void
s_checked(const gw_engine_resp_t *resp, void *arg)
{
    s_check_t *c = arg;
    gw_pool_t *self = c->pool;
    zlistx_delete(self->checks, c->handle);
    gw_pool_health(self, c->id, resp->rc == LISA_OK && resp->status == 200);
    lisa_free(&c);
}

static int
s_on_health(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    gw_pool_t *self = arg;
    if (zlistx_size(self->checks))
        return 0; /* the last round is still out */
    for (size_t i = 0; i < self->n; i++) {
        char full[2048];
        snprintf(full, sizeof full, "%s/healthz", self->e[i].url);
        s_check_t *c = lisa_calloc(1, sizeof *c);
        c->pool = self;
        snprintf(c->id, sizeof c->id, "%s", self->e[i].id);
        c->handle = zlistx_add_end(self->checks, c);
        if (gw_engine_get(self->io.engine, full, S_HEALTH_TO_MS, s_checked,
                          c) != LISA_OK) {
            zlistx_delete(self->checks, c->handle);
            lisa_free(&c);
        }
    }
    return 0;
}

void
gw_pool_attach(gw_pool_t *self, const gw_pool_io_t *io)
{
    self->io = *io;
    self->checks = zlistx_new();
    if (io->rpc && io->refresh_ms) {
        self->refresh_timer =
            zloop_timer(io->loop, io->refresh_ms, 0, s_on_refresh, self);
        gw_pool_refresh(self);
    }
    if (io->health_ms)
        self->health_timer =
            zloop_timer(io->loop, io->health_ms, 0, s_on_health, self);
}
