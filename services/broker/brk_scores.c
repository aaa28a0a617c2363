/*
 * brk_scores: reward workers and score jobs (see brk_scores.h).
 */
#include "brk_scores.h"

#include "lisa/lisa_codec.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <stdio.h>
#include <string.h>

#define S_MAX_WORKERS 4096u
/* repeat of the "no reward worker connected" warning */
#define S_NO_WORKER_WARN_MS 60000

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

struct brk_scores_t {
    brk_env_t env;
    brk_lifecycle_t *lc;
    zsock_t *wrk;
    lisa_codec_stats_t st_wrk;
    uint64_t stale_scores;
    uint64_t next_job_id;
    s_job_t **jobs;
    size_t n_jobs, cap_jobs;
    zhashx_t *workers;       /* key -> s_worker_t */
    int64_t no_worker_since; /* mono ms since scores wait with no reward
                                worker connected; 0: not so */
    int64_t no_worker_warn;  /* mono ms of the next such warning */
};

static char s_empty[1];

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
s_worker_send(brk_scores_t *self, zframe_t *identity, bool delim,
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
s_worker_disconnect(brk_scores_t *self, zframe_t *identity, bool delim,
                    const char *reason)
{
    Lisa__WorkerMsg wm = LISA__WORKER_MSG__INIT;
    Lisa__WorkerDisconnect d = LISA__WORKER_DISCONNECT__INIT;
    char text[BRK_ERR_LEN];
    snprintf(text, sizeof text, "%s", reason);
    d.reason = text;
    wm.body_case = LISA__WORKER_MSG__BODY_DISCONNECT;
    wm.disconnect = &d;
    s_worker_send(self, identity, delim, &wm);
}

/* Forgets a worker; its jobs go back to the queue. */
static void
s_worker_remove(brk_scores_t *self, s_worker_t *w, const char *why)
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
s_job_index(brk_scores_t *self, uint64_t job_id)
{
    for (size_t i = 0; i < self->n_jobs; i++)
        if (self->jobs[i]->job_id == job_id)
            return i;
    return SIZE_MAX;
}

static void
s_job_remove(brk_scores_t *self, size_t i)
{
    s_job_free(&self->jobs[i]);
    self->jobs[i] = self->jobs[--self->n_jobs];
}

/* Ends a scoring rollout with FAILURE_REWARD (in the transaction). */
static void
s_score_failed(brk_scores_t *self, s_job_t *j, const char *why)
{
    Lisa__Rollout *r = NULL;
    char err[BRK_ERR_LEN] = "";
    if (brk_store_begin(self->env.store) == LISA_OK &&
        brk_store_rollout_get(self->env.store, self->env.arena, j->rollout_id,
                              &r) == LISA_OK &&
        r->attempts == j->attempt) {
        brk_lifecycle_ctx_t c = {.kind = LISA__FAILURE_KIND__FAILURE_REWARD,
                                 .reason = why};
        if (brk_lifecycle_apply(self->lc, r, BRK_EV_REWARD_INVALID, &c, err) !=
            LISA_OK)
            lisa_log_warn("score of %s: %s", j->rollout_id, err);
    }
    brk_arena_reset(self->env.arena);
}

static void
s_on_score(brk_scores_t *self, s_worker_t *w, const Lisa__ScoreReply *sr)
{
    size_t i = s_job_index(self, sr->job_id);
    if (i == SIZE_MAX || !self->jobs[i]->worker ||
        strcmp(self->jobs[i]->worker, w->key) != 0) {
        self->stale_scores++;
        return;
    }
    s_job_t *j = self->jobs[i];
    if (w->inflight)
        w->inflight--;
    char why[BRK_ERR_LEN];
    if (sr->code == LISA__CODE__CODE_OK && sr->reward) {
        Lisa__Rollout *r = NULL;
        char err[BRK_ERR_LEN] = "";
        if (brk_store_begin(self->env.store) == LISA_OK &&
            brk_store_rollout_get(self->env.store, self->env.arena,
                                  j->rollout_id, &r) == LISA_OK &&
            r->attempts == j->attempt) {
            Lisa__Reward rw = *sr->reward;
            if (!rw.worker_id || !*rw.worker_id)
                rw.worker_id = w->worker_id;
            if (!rw.scored_ms)
                rw.scored_ms = brk_call_now_ms();
            brk_lifecycle_ctx_t c = {.reward = &rw, .reason = "scored"};
            if (brk_lifecycle_apply(self->lc, r, BRK_EV_SCORED, &c, err) !=
                LISA_OK)
                lisa_log_warn("score of %s: %s", j->rollout_id, err);
        }
        brk_arena_reset(self->env.arena);
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
    if (j->tries >= self->env.cfg->score_tries) {
        snprintf(why, sizeof why, "reward failed %u times: %s", j->tries,
                 sr->error && *sr->error ? sr->error : "worker error");
        s_score_failed(self, j, why);
        s_job_remove(self, i);
    }
}

static void
s_on_worker(brk_scores_t *self, zmsg_t *m)
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
                                self->env.cfg->max_worker_frame, &self->st_wrk,
                                &msg, &why) != LISA_OK) {
        lisa_log_warn("workers: refused a frame: %s", why);
        return;
    }
    Lisa__WorkerMsg *wm = (Lisa__WorkerMsg *) msg;
    char *key = zframe_strhex(identity);
    s_worker_t *w = zhashx_lookup(self->workers, key);
    int64_t now = zclock_mono();
    int64_t live = (int64_t) (self->env.cfg->worker_heartbeat_ms *
                              self->env.cfg->worker_liveness);
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
            wm->ready->worker_id ? wm->ready->worker_id : "", BRK_MAX_ID);
        w->capacity = wm->ready->capacity ? wm->ready->capacity : 1;
        if (w->capacity > 1024)
            w->capacity = 1024;
        w->n_prefixes = wm->ready->n_data_sources;
        w->prefixes = lisa_calloc(w->n_prefixes + 1, sizeof(char *));
        for (size_t i = 0; i < w->n_prefixes; i++)
            w->prefixes[i] = lisa_strndup(wm->ready->data_sources[i], 256);
        w->expiry = now + live;
        w->next_hb = now + (int64_t) self->env.cfg->worker_heartbeat_ms;
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
            self->stale_scores++;
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
s_unroutable(brk_scores_t *self, const char *data_source)
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
s_served_prefixes(brk_scores_t *self, char *list, size_t n)
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
s_dispatch(brk_scores_t *self)
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
        if (brk_store_rollout_get(self->env.store, self->env.arena,
                                  j->rollout_id, &r) != LISA_OK ||
            r->state != LISA__ROLLOUT_STATE__ROLLOUT_SCORING ||
            r->attempts != j->attempt ||
            brk_store_attempt_get(self->env.store, self->env.arena,
                                  j->rollout_id, j->attempt, &a) != LISA_OK ||
            brk_store_group_task(self->env.store, self->env.arena, r->group_id,
                                 &t) != LISA_OK) {
            brk_arena_reset(self->env.arena);
            s_job_remove(self, i--);
            continue;
        }
        uint64_t now = brk_call_now_ms();
        uint64_t budget = self->env.cfg->score_budget_ms;
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
        brk_arena_reset(self->env.arena);
        j->worker = lisa_strdup(best->key);
        j->due = zclock_mono() + (int64_t) budget +
                 (int64_t) (self->env.cfg->worker_heartbeat_ms *
                            self->env.cfg->worker_liveness);
        best->inflight++;
    }
}

void
brk_scores_adopt(brk_scores_t *self, const char *rollout_id, uint32_t attempt,
                 const char *data_source)
{
    s_job_t *j = lisa_calloc(1, sizeof *j);
    j->job_id = ++self->next_job_id;
    j->rollout_id = lisa_strdup(rollout_id);
    j->attempt = attempt;
    j->data_source = lisa_strdup(data_source ? data_source : "");
    if (self->n_jobs == self->cap_jobs) {
        self->cap_jobs = self->cap_jobs ? self->cap_jobs * 2 : 16;
        self->jobs =
            lisa_realloc(self->jobs, self->cap_jobs * sizeof *self->jobs);
    }
    self->jobs[self->n_jobs++] = j;
}

void
brk_scores_drop(brk_scores_t *self, const char *rollout_id)
{
    for (size_t i = 0; i < self->n_jobs; i++)
        if (strcmp(self->jobs[i]->rollout_id, rollout_id) == 0) {
            s_worker_t *w =
                self->jobs[i]->worker
                    ? zhashx_lookup(self->workers, self->jobs[i]->worker)
                    : NULL;
            if (w && w->inflight)
                w->inflight--;
            s_job_remove(self, i);
            return;
        }
}

void
brk_scores_on_msg(brk_scores_t *self, zmsg_t *m)
{
    s_on_worker(self, m);
}

void
brk_scores_dispatch(brk_scores_t *self)
{
    s_dispatch(self);
}

/* Heartbeats out, the dead out. */
static void
s_tick_workers(brk_scores_t *self, int64_t mono)
{
    s_worker_t *w = zhashx_first(self->workers);
    while (w) {
        s_worker_t *next = zhashx_next(self->workers);
        if (w->expiry <= mono) {
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
            w->next_hb = mono + (int64_t) self->env.cfg->worker_heartbeat_ms;
        }
        w = next;
    }
}

/* Scores waiting with no reward worker connected: they wait (one may
 * still come), but say so now and then. */
static void
s_tick_warn(brk_scores_t *self, int64_t mono)
{
    if (!self->n_jobs || zhashx_size(self->workers) != 0) {
        self->no_worker_since = 0;
        return;
    }
    if (!self->no_worker_since) {
        self->no_worker_since = mono;
        self->no_worker_warn =
            mono + (int64_t) self->env.cfg->score_unroutable_ms;
    }
    if (mono >= self->no_worker_warn) {
        lisa_log_warn("no reward worker is connected: score jobs "
                      "waiting: %zu, for %lld s (start one: lisa-reward "
                      "worker --broker <this broker's --workers>)",
                      self->n_jobs,
                      (long long) (mono - self->no_worker_since) / 1000);
        self->no_worker_warn = mono + S_NO_WORKER_WARN_MS;
    }
}

/* Whether job j ends now: a queued job no connected worker can score
 * for too long, or one whose worker sat on it past the last try. */
static bool
s_tick_job(brk_scores_t *self, s_job_t *j, int64_t mono)
{
    const brk_config_t *cfg = self->env.cfg;
    if (!j->worker && s_unroutable(self, j->data_source)) {
        if (!j->unroutable_since)
            j->unroutable_since = mono;
        if (mono - j->unroutable_since >= (int64_t) cfg->score_unroutable_ms) {
            char serve[256], why[BRK_ERR_LEN];
            s_served_prefixes(self, serve, sizeof serve);
            snprintf(why, sizeof why,
                     "no reward worker scores data source '%.64s' "
                     "(connected workers serve: %s)",
                     j->data_source ? j->data_source : "", serve);
            lisa_log_warn("rollout %s: %s", j->rollout_id, why);
            s_score_failed(self, j, why);
            return true;
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
        if (j->tries >= cfg->score_tries) {
            s_score_failed(self, j, "reward workers did not answer in time");
            return true;
        }
    }
    return false;
}

void
brk_scores_tick(brk_scores_t *self, int64_t mono)
{
    s_tick_workers(self, mono);
    s_tick_warn(self, mono);
    for (size_t i = 0; i < self->n_jobs;)
        if (s_tick_job(self, self->jobs[i], mono))
            s_job_remove(self, i);
        else
            i++;
}

lisa_rc_t
brk_scores_recover(brk_scores_t *self)
{
    char **ids = NULL;
    size_t n = 0;
    brk_arena_t *arena = self->env.arena;
    if (brk_store_in_state(self->env.store, arena,
                           LISA__ROLLOUT_STATE__ROLLOUT_SCORING, NULL, &ids,
                           &n) != LISA_OK)
        return LISA_ERR;
    for (size_t i = 0; i < n; i++) {
        Lisa__Rollout *r = NULL;
        if (brk_store_rollout_get(self->env.store, arena, ids[i], &r) ==
            LISA_OK)
            brk_scores_adopt(self, r->rollout_id, r->attempts, r->data_source);
    }
    brk_arena_reset(arena);
    return LISA_OK;
}

brk_scores_t *
brk_scores_new(const brk_env_t *env, brk_lifecycle_t *lc, zsock_t *wrk)
{
    brk_scores_t *self = lisa_calloc(1, sizeof *self);
    self->env = *env;
    self->lc = lc;
    self->wrk = wrk;
    self->workers = zhashx_new();
    zhashx_set_destructor(self->workers, s_worker_free);
    return self;
}

void
brk_scores_destroy(brk_scores_t **pself)
{
    if (!pself || !*pself)
        return;
    brk_scores_t *self = *pself;
    for (size_t i = 0; i < self->n_jobs; i++)
        s_job_free(&self->jobs[i]);
    lisa_free(&self->jobs);
    zhashx_destroy(&self->workers);
    lisa_free(pself);
}

size_t
brk_scores_workers(const brk_scores_t *self)
{
    return zhashx_size(self->workers);
}

size_t
brk_scores_jobs(const brk_scores_t *self)
{
    return self->n_jobs;
}

uint64_t
brk_scores_stale(const brk_scores_t *self)
{
    return self->stale_scores;
}

uint64_t
brk_scores_bad_frames(const brk_scores_t *self)
{
    return lisa_codec_stats_refused(&self->st_wrk);
}
