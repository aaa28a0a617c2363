/*
 * brk_server: the broker's sockets, its loop and its construction.
 *
 * The work is done by modules that own their state: brk_lifecycle (the
 * state machine driver and the lifecycle RPCs, leases and deadlines),
 * brk_ingest (spans in, by RPC or PUSH), brk_query (queries and export),
 * brk_engines (the engine registry), brk_waits (held waits), brk_scores
 * (reward workers and score jobs) and brk_outbox (pending effects, the
 * group commit and the syncer). This file routes each message to its
 * module, runs every module's tick, and commits once per iteration.
 *
 * Who may send what. Every socket is a CURVE server (brk_auth); a message
 * reaches this file only from a listed key, and its key's role is checked
 * here before anything else: per request type against the dispatch
 * table's roles, and per socket for span pushes (gateways) and worker
 * frames (reward workers).
 *
 * How a message becomes durable. Every handler runs inside the loop
 * iteration's store transaction, under a SAVEPOINT of its own when it may
 * fail after a first write, so that a request that fails half-way leaves
 * nothing behind. What a handler wants to send (its reply, events, newly
 * finished rollouts, score jobs) waits in the outbox; the iteration
 * COMMITs and only then flushes it. If the COMMIT fails, the outbox is
 * thrown away: nothing was acknowledged, and clients retry.
 */
#include "brk_server.h"

#include "brk_arena.h"
#include "brk_auth.h"
#include "brk_call.h"
#include "brk_engines.h"
#include "brk_ingest.h"
#include "brk_lifecycle.h"
#include "brk_outbox.h"
#include "brk_query.h"
#include "brk_scores.h"
#include "brk_store.h"
#include "brk_token.h"
#include "brk_waits.h"
#include "lisa/lisa_codec.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <czmq.h>
#include <inttypes.h>
#include <string.h>

struct brk_server_t {
    const brk_config_t *cfg;
    brk_store_t *store;
    brk_arena_t *arena;
    brk_token_t *token;
    brk_auth_t *auth;
    zsock_t *rpc, *pull, *pub, *wrk;
    char *ep_rpc, *ep_spans, *ep_events, *ep_workers;
    lisa_codec_stats_t st_rpc;
    uint64_t refused; /* span and worker frames from keys of other roles */

    brk_outbox_t *outbox;
    brk_lifecycle_t *lifecycle;
    brk_ingest_t *ingest;
    brk_query_t *query;
    brk_engines_t *engines;
    brk_waits_t *waits;
    brk_scores_t *scores;

    int64_t next_tick;
    uint64_t txn_msgs; /* messages handled in the open transaction */
    struct {
        uint64_t iterations, messages, commits, work_us, commit_us;
        uint64_t max_batch;
    } loop;
};

static char s_empty[1];

/* ------------------------------------------------------------------ */
/* RPC                                                                */

static lisa_rc_t
s_h_stats(brk_server_t *self, brk_call_t *call)
{
    Lisa__StatsRep *out = brk_arena_alloc(self->arena, sizeof *out);
    lisa__stats_rep__init(out);
    Lisa__Stats *st = brk_arena_alloc(self->arena, sizeof *st);
    lisa__stats__init(st);
    out->stats = st;
    call->rep->body_case = LISA__REPLY__BODY_STATS;
    call->rep->stats = out;
    if (brk_store_counts(self->store, call->req->stats->run_id, st) != LISA_OK)
        return brk_call_fail(call->err, LISA_ERR, "store read failed");
    st->workers = brk_scores_workers(self->scores);
    st->engines_up = brk_engines_count(self->engines);
    st->policy_version = brk_lifecycle_policy(self->lifecycle);
    st->event_seq = brk_outbox_event_seq(self->outbox);
    uint64_t push_bad = brk_ingest_stats(self->ingest, st);
    st->bad_frames = lisa_codec_stats_refused(&self->st_rpc) + push_bad +
                     brk_scores_bad_frames(self->scores) + self->refused;
    st->rpc_errors = brk_outbox_errors(self->outbox);
    st->group_commits = brk_store_commits(self->store);
    st->stale_scores = brk_scores_stale(self->scores);
    return LISA_OK;
}

/* Who answers a request body. */
typedef enum {
    S_TO_LIFECYCLE,
    S_TO_INGEST,
    S_TO_QUERY,
    S_TO_ENGINES,
    S_TO_WAITS,
    S_TO_SERVER,
} s_owner_t;

/* Who may make a request (CURVE on): masks of lisa_role_t. */
#define R_CTL LISA_ROLE_CONTROLLER
#define R_GW  LISA_ROLE_GATEWAY
#define R_TRN LISA_ROLE_TRAINER
#define R_OP  LISA_ROLE_OPERATOR
#define R_ANY LISA_ROLE_ALL

/* The dispatch table: one row per Request body. `roles` are the roles
 * whose keys may make the request (docs/deploy.md has the reasons);
 * `savepoint` marks the handlers that may fail after a first write and so
 * run under a SAVEPOINT of their own; the others check everything before
 * writing (a savepoint costs a copy of every page the request touches).
 * Setting the policy version is the trainer's alone (see s_allowed). */
static const struct {
    Lisa__Request__BodyCase body;
    s_owner_t owner;
    const char *name;
    unsigned roles;
    bool savepoint;
} s_routes[] = {
    {LISA__REQUEST__BODY_ENQUEUE, S_TO_LIFECYCLE, "enqueue", R_TRN | R_OP,
     true},
    {LISA__REQUEST__BODY_CLAIM, S_TO_LIFECYCLE, "claim", R_CTL, true},
    {LISA__REQUEST__BODY_ATTEMPT_START, S_TO_LIFECYCLE, "attempt_start", R_CTL,
     true},
    {LISA__REQUEST__BODY_HEARTBEAT, S_TO_LIFECYCLE, "heartbeat", R_CTL | R_GW,
     true},
    {LISA__REQUEST__BODY_ATTEMPT_COMPLETE, S_TO_LIFECYCLE, "attempt_complete",
     R_GW, true},
    {LISA__REQUEST__BODY_ATTEMPT_FAIL, S_TO_LIFECYCLE, "attempt_fail", R_CTL,
     true},
    {LISA__REQUEST__BODY_GET_TASK, S_TO_LIFECYCLE, "get_task", R_GW, true},
    {LISA__REQUEST__BODY_WAIT, S_TO_WAITS, "wait", R_TRN | R_OP, false},
    /* the gateway asks for an attempt's state before its first call when
     * it may have missed the event that ended it (gw_fence) */
    {LISA__REQUEST__BODY_QUERY, S_TO_QUERY, "query",
     R_CTL | R_GW | R_TRN | R_OP, false},
    {LISA__REQUEST__BODY_CANCEL, S_TO_LIFECYCLE, "cancel", R_TRN | R_OP, true},
    {LISA__REQUEST__BODY_STATS, S_TO_SERVER, "stats", R_ANY, false},
    {LISA__REQUEST__BODY_POLICY, S_TO_LIFECYCLE, "policy", R_ANY, true},
    {LISA__REQUEST__BODY_SPAN_PUT, S_TO_INGEST, "span_put", R_GW, false},
    {LISA__REQUEST__BODY_SPAN_STATUS, S_TO_INGEST, "span_status", R_GW, false},
    {LISA__REQUEST__BODY_ENGINE_REGISTER, S_TO_ENGINES, "engine_register",
     R_TRN, false},
    {LISA__REQUEST__BODY_ENGINE_LIST, S_TO_ENGINES, "engine_list",
     R_GW | R_TRN | R_OP, false},
    {LISA__REQUEST__BODY_EXPORT, S_TO_QUERY, "export", R_OP, true},
};

/* True when a sender of `role` may make request `req` of route `route`. */
static bool
s_allowed(size_t route, const Lisa__Request *req, lisa_role_t role)
{
    if (!(s_routes[route].roles & (unsigned) role))
        return false;
    if (req->body_case == LISA__REQUEST__BODY_POLICY && req->policy &&
        req->policy->set)
        return (role & LISA_ROLE_TRAINER) != 0;
    return true;
}

static lisa_rc_t
s_route(brk_server_t *self, s_owner_t owner, brk_call_t *call)
{
    switch (owner) {
    case S_TO_LIFECYCLE:
        return brk_lifecycle_handle(self->lifecycle, call);
    case S_TO_INGEST:
        return brk_ingest_handle(self->ingest, call);
    case S_TO_QUERY:
        return brk_query_handle(self->query, call);
    case S_TO_ENGINES:
        return brk_engines_handle(self->engines, call);
    case S_TO_WAITS:
        return brk_waits_handle(self->waits, call);
    case S_TO_SERVER:
        return s_h_stats(self, call);
    }
    return brk_call_fail(call->err, LISA_UNSUPPORTED, "no handler");
}

/* Runs a decoded request through its handler, inside the transaction and
 * (when its route says so) a savepoint, and queues its reply. */
static void
s_handle(brk_server_t *self, const Lisa__Request *req, zframe_t *identity,
         bool delim, zframe_t *body, lisa_role_t role)
{
    size_t route = SIZE_MAX;
    for (size_t i = 0; i < sizeof s_routes / sizeof s_routes[0]; i++)
        if (s_routes[i].body == req->body_case)
            route = i;
    if (route == SIZE_MAX) {
        brk_outbox_error(self->outbox, identity, delim, req->request_id, 0,
                         LISA_UNSUPPORTED, "unknown request type");
        return;
    }
    if (!s_allowed(route, req, role)) {
        lisa_log_info("rpc %s from '%s' refused: the key's role is %s",
                      s_routes[route].name, req->caller ? req->caller : "",
                      lisa_curve_role_name(role));
        char why[128];
        if (role == LISA_ROLE_NONE)
            snprintf(why, sizeof why, "this key has no role");
        else
            snprintf(why, sizeof why, "a %s key may not make %s requests",
                     lisa_curve_role_name(role), s_routes[route].name);
        brk_outbox_error(self->outbox, identity, delim, req->request_id,
                         (uint32_t) req->body_case, LISA_UNAUTHORIZED, why);
        return;
    }
    bool savepoint = s_routes[route].savepoint;
    /* A savepoint per request: a failed request leaves nothing behind. */
    brk_outbox_mark_t mark = brk_outbox_mark(self->outbox);
    if (brk_store_begin(self->store) != LISA_OK ||
        (savepoint && brk_store_savepoint(self->store) != LISA_OK)) {
        brk_outbox_error(self->outbox, identity, delim, req->request_id, 0,
                         LISA_UNAVAILABLE, "store unavailable");
        return;
    }
    char err[BRK_ERR_LEN] = "";
    Lisa__Reply rep = LISA__REPLY__INIT;
    rep.request_id = req->request_id;
    brk_call_t call = {req,
                       &rep,
                       err,
                       false,
                       identity,
                       delim,
                       zframe_data(body),
                       zframe_size(body)};
    lisa_rc_t rc = s_route(self, s_routes[route].owner, &call);
    if (rc != LISA_OK) {
        if (savepoint)
            brk_store_savepoint_undo(self->store);
        brk_outbox_undo(self->outbox, &mark);
        lisa_log_info("rpc %s from '%s' (req %" PRIu64 "): %s: %s",
                      s_routes[route].name, req->caller ? req->caller : "",
                      req->request_id, lisa_rc_str(rc), err);
        brk_outbox_error(self->outbox, identity, delim, req->request_id,
                         (uint32_t) req->body_case, rc, err);
        return;
    }
    if (savepoint)
        brk_store_savepoint_keep(self->store);
    if (!call.held) {
        rep.code = LISA__CODE__CODE_OK;
        rep.error = s_empty;
        brk_outbox_reply(self->outbox, identity, delim, &rep);
    }
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
            brk_outbox_error(self->outbox, identity, frames >= 3, 0, 0,
                             LISA_INVALID, "expected frames [empty] Request");
        return;
    }
    lisa_role_t role = brk_auth_role(self->auth, body);
    if ((role & LISA_ROLE_GATEWAY) &&
        brk_ingest_rpc_fast(self->ingest, identity, delim, body)) {
        self->st_rpc.ok++;
        return;
    }
    ProtobufCMessage *msg = NULL;
    const char *why = NULL;
    lisa_rc_t rc = lisa_codec_decode_frame(&lisa__request__descriptor, body,
                                           self->cfg->max_rpc_frame,
                                           &self->st_rpc, &msg, &why);
    if (rc != LISA_OK) {
        lisa_log_warn("rpc: refused a frame of %zu bytes: %s",
                      zframe_size(body), why);
        brk_outbox_error(self->outbox, identity, delim, 0, 0, rc, why);
        return;
    }
    s_handle(self, (Lisa__Request *) msg, identity, delim, body, role);
    brk_arena_reset(self->arena);
    lisa_codec_free(&msg);
}

/* ------------------------------------------------------------------ */
/* what the outbox hands on                                           */

static void
s_sink_adopt(void *arg, const char *rollout_id, uint32_t attempt,
             const char *data_source)
{
    brk_server_t *self = arg;
    brk_scores_adopt(self->scores, rollout_id, attempt, data_source);
}

static void
s_sink_drop(void *arg, const char *rollout_id)
{
    brk_server_t *self = arg;
    brk_scores_drop(self->scores, rollout_id);
}

static void
s_sink_finished(void *arg, char *const *ids, size_t n)
{
    brk_server_t *self = arg;
    brk_waits_finished(self->waits, ids, n);
}

static void
s_sink_flushed(void *arg)
{
    brk_server_t *self = arg;
    brk_scores_dispatch(self->scores);
}

static void
s_attempt_ended(void *arg, const char *rollout_id, uint32_t attempt)
{
    brk_server_t *self = arg;
    brk_ingest_forget(self->ingest, rollout_id, attempt);
}

/* ------------------------------------------------------------------ */
/* the loop                                                           */

/* The timers of every module, inside the loop's transaction. */
static void
s_tick(brk_server_t *self)
{
    if (brk_store_begin(self->store) != LISA_OK)
        return;
    int64_t mono = zclock_mono();
    brk_lifecycle_tick(self->lifecycle, brk_call_now_ms());
    brk_waits_tick(self->waits, mono);
    brk_scores_tick(self->scores, mono);
    brk_engines_tick(self->engines, mono);
}

/* COMMITs the iteration. After a failed commit what the modules
 * remember of the rolled-back transaction is read again. */
static lisa_rc_t
s_commit(brk_server_t *self)
{
    int64_t t0 = zclock_usecs();
    lisa_rc_t rc = brk_outbox_commit(self->outbox);
    if (rc != LISA_OK) {
        brk_lifecycle_reload(self->lifecycle);
        brk_ingest_reset(self->ingest);
    }
    self->loop.commit_us += (uint64_t) (zclock_usecs() - t0);
    self->loop.commits++;
    if (self->txn_msgs > self->loop.max_batch)
        self->loop.max_batch = self->txn_msgs;
    self->txn_msgs = 0;
    return rc;
}

/* Reads up to group_max messages from the three input sockets, round
 * robin; returns how many. */
static size_t
s_read(brk_server_t *self)
{
    zsock_t *socks[3] = {self->rpc, self->pull, self->wrk};
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
            /* spans come from gateways only, worker frames from reward
             * workers only; RPC is checked per request type */
            lisa_role_t need = s == 1 ? LISA_ROLE_GATEWAY : LISA_ROLE_REWARD;
            if (s != 0 && !(brk_auth_role(self->auth, zmsg_last(m)) & need)) {
                if (self->refused++ % 1000 == 0)
                    lisa_log_warn("refused a %s frame from a key of another "
                                  "role (%" PRIu64 " so far)",
                                  s == 1 ? "span" : "worker", self->refused);
                zmsg_destroy(&m);
                handled++;
                any = true;
                continue;
            }
            if (s == 0)
                s_on_rpc(self, m);
            else if (s == 1)
                brk_ingest_push(self->ingest, m);
            else
                brk_scores_on_msg(self->scores, m);
            zmsg_destroy(&m);
            handled++;
            any = true;
        }
    }
    return handled;
}

lisa_rc_t
brk_server_run(brk_server_t *self, volatile sig_atomic_t *stop)
{
    void *syncer = brk_outbox_syncer_handle(self->outbox);
    zmq_pollitem_t items[4] = {
        {zsock_resolve(self->rpc), 0, ZMQ_POLLIN, 0},
        {zsock_resolve(self->pull), 0, ZMQ_POLLIN, 0},
        {zsock_resolve(self->wrk), 0, ZMQ_POLLIN, 0},
        {syncer, 0, ZMQ_POLLIN, 0},
    };
    int n_items = syncer ? 4 : 3;
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
        if (syncer && brk_outbox_on_syncer(self->outbox) != LISA_OK)
            return LISA_ERR;
        int64_t t_start = zclock_usecs();
        size_t handled = s_read(self);
        if (zclock_mono() >= self->next_tick) {
            s_tick(self);
            self->next_tick = zclock_mono() + (int64_t) self->cfg->tick_ms;
        }
        self->txn_msgs += handled;
        self->loop.iterations++;
        self->loop.messages += handled;
        self->loop.work_us += (uint64_t) (zclock_usecs() - t_start);
        /* While the syncer runs, what arrives joins the open transaction
         * and is committed when the sync ends: its replies would wait for
         * the next sync anyway, and one COMMIT per sync writes each
         * touched page to the WAL once instead of once per iteration. */
        if (brk_outbox_syncing(self->outbox) &&
            self->txn_msgs < self->cfg->group_max)
            continue;
        if (s_commit(self) != LISA_OK) {
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
    brk_outbox_drain(self->outbox);
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
s_bind(const brk_auth_t *auth, int type, const char *endpoint, char **bound,
       uint64_t maxmsg)
{
    zsock_t *s = zsock_new(type);
    if (!s)
        return NULL;
    brk_auth_server(auth, s);
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

/* Creates the modules over the open store and bound sockets. */
static lisa_rc_t
s_modules(brk_server_t *self)
{
    const brk_outbox_sink_t sink = {self, s_sink_adopt, s_sink_drop,
                                    s_sink_finished, s_sink_flushed};
    self->outbox = brk_outbox_new(self->store, self->rpc, self->pub,
                                  strcmp(self->cfg->sync, "full") == 0, &sink);
    if (!self->outbox)
        return LISA_ERR;
    const brk_env_t env = {self->cfg, self->store, self->arena, self->outbox};
    self->lifecycle = brk_lifecycle_new(&env, self->token);
    self->ingest = brk_ingest_new(&env);
    self->query = brk_query_new(&env);
    self->engines = brk_engines_new(&env);
    self->waits = brk_waits_new(&env);
    self->scores = brk_scores_new(&env, self->lifecycle, self->wrk);
    brk_lifecycle_on_end(self->lifecycle, s_attempt_ended, self);
    return LISA_OK;
}

/* Recovery: leases get a fresh period (the broker's downtime is not the
 * agents' fault), rollouts left in SCORING get a score job, and segments
 * a prune freed before a stop go (the store is synced first, so the
 * deletions that freed them are durable). */
static lisa_rc_t
s_recover(brk_server_t *self)
{
    size_t dropped = 0;
    if (brk_store_begin(self->store) != LISA_OK ||
        brk_store_extend_leases(
            self->store, brk_call_now_ms() + self->cfg->lease_ms) != LISA_OK ||
        brk_store_commit(self->store) != LISA_OK ||
        brk_scores_recover(self->scores) != LISA_OK ||
        brk_store_sync(self->store) != LISA_OK ||
        brk_store_span_gc(self->store, &dropped) != LISA_OK)
        return LISA_ERR;
    return LISA_OK;
}

brk_server_t *
brk_server_new(const brk_config_t *cfg)
{
    brk_server_t *self = lisa_calloc(1, sizeof *self);
    self->cfg = cfg;
    self->arena = brk_arena_new();
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
    self->auth = brk_auth_new(cfg);
    if (!self->auth)
        goto fail;
    self->rpc = s_bind(self->auth, ZMQ_ROUTER, cfg->rpc_endpoint, &self->ep_rpc,
                       cfg->max_rpc_frame);
    self->pull = s_bind(self->auth, ZMQ_PULL, cfg->span_endpoint,
                        &self->ep_spans, cfg->max_span_frame);
    self->pub =
        s_bind(self->auth, ZMQ_PUB, cfg->event_endpoint, &self->ep_events, 0);
    self->wrk = s_bind(self->auth, ZMQ_ROUTER, cfg->worker_endpoint,
                       &self->ep_workers, cfg->max_worker_frame);
    if (!self->rpc || !self->pull || !self->pub || !self->wrk ||
        s_modules(self) != LISA_OK || s_recover(self) != LISA_OK)
        goto fail;
    self->next_tick = zclock_mono();
    lisa_log_info(
        "broker up: rpc %s, spans %s, events %s, workers %s (curve %s, "
        "%zu client keys); store %s/broker.db (schema %d, sync %s), "
        "policy %" PRIu64 ", %zu score jobs recovered",
        self->ep_rpc, self->ep_spans, self->ep_events, self->ep_workers,
        cfg->curve, brk_auth_keys(self->auth), cfg->data_dir,
        brk_store_schema(self->store), cfg->sync,
        brk_lifecycle_policy(self->lifecycle), brk_scores_jobs(self->scores));
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
    brk_outbox_destroy(&self->outbox);
    brk_scores_destroy(&self->scores);
    brk_waits_destroy(&self->waits);
    brk_engines_destroy(&self->engines);
    brk_query_destroy(&self->query);
    brk_ingest_destroy(&self->ingest);
    brk_lifecycle_destroy(&self->lifecycle);
    zsock_destroy(&self->rpc);
    zsock_destroy(&self->pull);
    zsock_destroy(&self->pub);
    zsock_destroy(&self->wrk);
    brk_auth_destroy(&self->auth);
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
