/*
 * gw_server: the gateway service (see the header and docs/gateway.md).
 *
 * This file holds what is the service's own: the route table and the
 * dispatch in front of the modules that own the routes (gw_chat the chat
 * pipeline, gw_agent task / heartbeat / result, gw_auth tokens), the
 * operator routes, the /v1/completions passthrough, the delivery of spans
 * to the broker (gw_spanq holds them, one SpanPutReq batch in flight),
 * the broker's rollout events (fed to gw_fence, which every token route
 * passes), the timers, and the order in which everything starts and stops.
 */
#include "gw_server.h"

#include "gw_agent.h"
#include "gw_answer.h"
#include "gw_auth.h"
#include "gw_chat.h"
#include "gw_engine.h"
#include "gw_events.h"
#include "gw_fence.h"
#include "gw_metrics.h"
#include "gw_openai.h"
#include "gw_pool.h"
#include "gw_proxy.h"
#include "gw_render.h"
#include "gw_spanq.h"
#include "gw_trace.h"
#include "lisa/lisa_http_client.h"
#include "lisa/lisa_http_server.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_rpc.h"
#include "lisa/lisa_token.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define S_SPAN_BATCH 64u
#define S_TICK_MS    10

struct gw_server_t {
    gw_config_t cfg;
    zloop_t *loop;
    lisa_http_server_t *http;
    gw_engine_t *engine; /* every engine call: chat, passthrough, health */
    lisa_rpc_t *rpc;
    gw_trace_t *trace;
    gw_pool_t *pool;
    gw_spanq_t *spanq;
    gw_metrics_t *m;
    gw_render_t *render;
    gw_auth_t *auth;
    gw_chat_t *chat;
    gw_agent_t *agent;
    gw_fence_t *fence;
    gw_events_t *events; /* broker events; NULL when not subscribed */
    gw_proxy_t *proxy;   /* the package proxy; NULL when off */
    zlistx_t *passes;    /* s_pass_t in flight, answered 503 on destroy */
    uint64_t span_batch; /* batch in flight, 0 when none */
    int tick_timer, expire_timer;
};

static uint64_t
s_now_ms(void)
{
    return lisa_token_now_ms();
}

static void
s_answer_err(gw_server_t *srv, const gw_req_t *r, const gw_err_t *err)
{
    gw_answer_err(srv->m, srv->cfg.retry_after_s, r, err);
}

/* ---- spans to the broker ------------------------------------------------ */

static void
s_span_put_done(void *arg, uint64_t request_id, lisa_rc_t rc,
                const Lisa__Reply *rep)
{
    (void) request_id;
    gw_server_t *srv = arg;
    uint64_t batch = srv->span_batch;
    srv->span_batch = 0;
    if (rc == LISA_OK && rep && rep->code == LISA__CODE__CODE_OK) {
        size_t before = gw_spanq_size(srv->spanq);
        gw_spanq_acked(srv->spanq, batch);
        gw_metrics_add(srv->m, "lisa_gateway_spans_total", "outcome=\"acked\"",
                       (double) (before - gw_spanq_size(srv->spanq)));
    } else if (rc == LISA_OK && rep &&
               (rep->code == LISA__CODE__CODE_INVALID ||
                rep->code == LISA__CODE__CODE_NOT_FOUND)) {
        size_t dropped = gw_spanq_refused(srv->spanq, batch);
        lisa_log_warn("span batch %llu refused by the broker: %s%s",
                      (unsigned long long) batch, rep->error,
                      dropped ? " (span dropped)" : " (resending one by one)");
        if (dropped)
            gw_metrics_add(srv->m, "lisa_gateway_spans_total",
                           "outcome=\"refused\"", (double) dropped);
    } else {
        lisa_log_warn("span batch %llu not stored (%s%s%s); will resend",
                      (unsigned long long) batch, lisa_rc_str(rc),
                      rep ? ": " : "", rep && rep->error ? rep->error : "");
        gw_metrics_add(srv->m, "lisa_gateway_spans_total", "outcome=\"resent\"",
                       1);
        gw_spanq_failed(srv->spanq, batch, s_now_ms());
    }
    gw_agent_check(srv->agent);
}

static void
s_span_flush(void *arg)
{
    gw_server_t *srv = arg;
    if (!srv->rpc || srv->span_batch)
        return;
    Lisa__Span *spans[S_SPAN_BATCH];
    uint64_t batch;
    size_t n =
        gw_spanq_take(srv->spanq, s_now_ms(), S_SPAN_BATCH, spans, &batch);
    if (!n)
        return;
    Lisa__SpanPutReq put = LISA__SPAN_PUT_REQ__INIT;
    put.n_spans = n;
    put.spans = spans;
    Lisa__Request req = LISA__REQUEST__INIT;
    req.body_case = LISA__REQUEST__BODY_SPAN_PUT;
    req.span_put = &put;
    srv->span_batch = batch;
    if (lisa_rpc_send(srv->rpc, &req, (int) srv->cfg.rpc_timeout_ms,
                      s_span_put_done, srv, NULL) != LISA_OK) {
        srv->span_batch = 0;
        gw_spanq_failed(srv->spanq, batch, s_now_ms());
    }
}

/* ---- /v1/completions passthrough ---------------------------------------- */

typedef struct {
    gw_server_t *srv;
    gw_req_t r;
    void *handle; /* its node in srv->passes */
    char engine[160];
} s_pass_t;

static void
s_pass_done(const gw_engine_resp_t *resp, void *arg)
{
    s_pass_t *p = arg;
    gw_server_t *srv = p->srv;
    zlistx_delete(srv->passes, p->handle);
    lisa_rc_t rc = resp->rc;
    gw_pool_call_ended(srv->pool, p->engine,
                       rc == LISA_UNAVAILABLE || rc == LISA_ERR);
    if (rc != LISA_OK) {
        gw_err_t err;
        char labels[256];
        snprintf(labels, sizeof labels, "engine=\"%s\",kind=\"connect\"",
                 p->engine);
        gw_metrics_add(srv->m, "lisa_gateway_upstream_errors_total", labels, 1);
        gw_err_set(&err, rc, rc == LISA_TIMEOUT ? 504 : 502, "server_error",
                   "engine_unreachable", NULL, "engine call failed: %s",
                   resp->error);
        s_answer_err(srv, &p->r, &err);
    } else
        gw_answer_json(srv->m, &p->r, (unsigned) resp->status, resp->body,
                       resp->len);
    lisa_free(&p);
}

static void
s_completions(gw_server_t *srv, const gw_req_t *r)
{
    gw_err_t err;
    size_t len;
    const char *body = lisa_http_req_body(r->req, &len);
    json_t *j = json_loadb(body, len, 0, NULL);
    bool ok = json_is_object(j);
    json_decref(j);
    if (!ok) {
        gw_err_set(&err, LISA_INVALID, 400, "invalid_request_error", NULL, NULL,
                   "the body must be a JSON object");
        s_answer_err(srv, r, &err);
        return;
    }
    gw_attempt_t *a =
        gw_trace_find(srv->trace, r->who.rollout_id, r->who.attempt);
    const char *id, *url;
    lisa_rc_t rc =
        gw_pool_pick(srv->pool, a ? gw_attempt_engine(a) : NULL, &id, &url);
    if (rc != LISA_OK) {
        gw_pool_refresh_soon(srv->pool);
        gw_err_set(&err, rc, rc == LISA_AGAIN ? 429 : 503,
                   rc == LISA_AGAIN ? "rate_limit_error" : "server_error", NULL,
                   NULL, "no generation engine is available now");
        s_answer_err(srv, r, &err);
        return;
    }
    s_pass_t *p = lisa_calloc(1, sizeof *p);
    p->srv = srv;
    p->r = *r;
    snprintf(p->engine, sizeof p->engine, "%s", id);
    char full[2048];
    snprintf(full, sizeof full, "%s/v1/completions", url);
    gw_pool_call_started(srv->pool, id);
    p->handle = zlistx_add_end(srv->passes, p);
    /* the body is the request's, kept until it is answered */
    struct iovec part = {.iov_base = (void *) (uintptr_t) body, .iov_len = len};
    if (gw_engine_post(srv->engine, full, &part, 1,
                       (long) srv->cfg.upstream_timeout_ms, 0, s_pass_done,
                       p) != LISA_OK) {
        zlistx_delete(srv->passes, p->handle);
        gw_pool_call_ended(srv->pool, id, false);
        gw_err_set(&err, LISA_ERR, 500, "server_error", NULL, NULL,
                   "could not start the engine call");
        s_answer_err(srv, r, &err);
        lisa_free(&p);
    }
}

/* ---- operator routes ---------------------------------------------------- */

static void
s_models(gw_server_t *srv, const gw_req_t *r)
{
    json_t *o = json_pack("{s:s,s:[{s:s,s:s,s:i,s:s}]}", "object", "list",
                          "data", "id", srv->cfg.model, "object", "model",
                          "created", 0, "owned_by", "lisa");
    char *s = json_dumps(o, JSON_COMPACT);
    gw_answer_json(srv->m, r, 200, s, strlen(s));
    free(s);
    json_decref(o);
}

static void
s_update_gauges(gw_server_t *srv)
{
    gw_metrics_set(srv->m, "lisa_gateway_active_attempts", NULL,
                   (double) gw_trace_size(srv->trace));
    gw_metrics_set(srv->m, "lisa_gateway_spans_pending", NULL,
                   (double) gw_spanq_size(srv->spanq));
    lisa_http_server_stats_t st = lisa_http_server_stats(srv->http);
    gw_metrics_set(srv->m, "lisa_gateway_inflight_requests", NULL,
                   (double) st.kept);
    gw_metrics_set(srv->m, "lisa_gateway_http_connections_open", NULL,
                   (double) st.connections_open);
    const struct {
        const char *labels;
        uint64_t n;
    } refusals[] = {
        {"reason=\"evicted\"", st.evicted_connections},
        {"reason=\"refused\"", st.refused_connections},
        {"reason=\"framing\"", st.bad_framing},
        {"reason=\"too_large\"", st.body_too_large},
        {"reason=\"timeout\"", st.request_timeouts},
    };
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++)
        gw_metrics_set(srv->m, "lisa_gateway_http_refusals", refusals[i].labels,
                       (double) refusals[i].n);
    gw_chat_publish(srv->chat);
    for (size_t i = 0; i < gw_pool_size(srv->pool); i++) {
        const char *id;
        bool up, paused;
        uint32_t inflight;
        gw_pool_at(srv->pool, i, &id, NULL, &up, &paused, &inflight);
        char labels[200];
        snprintf(labels, sizeof labels, "engine=\"%s\"", id);
        gw_metrics_set(srv->m, "lisa_gateway_engine_inflight", labels,
                       inflight);
        gw_metrics_set(srv->m, "lisa_gateway_engine_up", labels,
                       up && !paused ? 1 : 0);
    }
}

static void
s_metrics(gw_server_t *srv, const gw_req_t *r)
{
    s_update_gauges(srv);
    size_t len;
    char *txt = gw_metrics_render(srv->m, &len);
    (void) lisa_http_req_respond(r->req, 200, "text/plain; version=0.0.4", txt,
                                 len);
    gw_answer_count(srv->m, r->route, 200, r->t0_us);
    lisa_free(&txt);
}

static void
s_healthz(gw_server_t *srv, const gw_req_t *r)
{
    size_t up = 0;
    for (size_t i = 0; i < gw_pool_size(srv->pool); i++) {
        bool u;
        gw_pool_at(srv->pool, i, NULL, NULL, &u, NULL, NULL);
        up += u;
    }
    json_t *o =
        json_pack("{s:s,s:I,s:I,s:b,s:I,s:I}", "status", "ok", "engines",
                  (json_int_t) gw_pool_size(srv->pool), "engines_up",
                  (json_int_t) up, "paused", gw_pool_paused(srv->pool),
                  "attempts", (json_int_t) gw_trace_size(srv->trace),
                  "spans_pending", (json_int_t) gw_spanq_size(srv->spanq));
    char *s = json_dumps(o, JSON_COMPACT);
    gw_answer_json(srv->m, r, 200, s, strlen(s));
    free(s);
    json_decref(o);
}

static void
s_admin(gw_server_t *srv, const gw_req_t *r)
{
    const char *path = lisa_http_req_path(r->req);
    if (strcmp(path, "/admin/pause") == 0)
        gw_pool_pause_all(srv->pool, true);
    else if (strcmp(path, "/admin/resume") == 0)
        gw_pool_pause_all(srv->pool, false);
    json_t *o =
        json_pack("{s:b,s:I}", "paused", gw_pool_paused(srv->pool), "inflight",
                  (json_int_t) gw_pool_inflight(srv->pool, NULL));
    char *s = json_dumps(o, JSON_COMPACT);
    gw_answer_json(srv->m, r, 200, s, strlen(s));
    free(s);
    json_decref(o);
}

/* ---- routing ------------------------------------------------------------ */

typedef enum { S_OPEN, S_TOKEN, S_ADMIN } s_auth_t;

typedef void(s_route_fn)(gw_server_t *, const gw_req_t *);

static void
s_chat(gw_server_t *srv, const gw_req_t *r)
{
    gw_chat_handle(srv->chat, r);
}

static void
s_task(gw_server_t *srv, const gw_req_t *r)
{
    gw_agent_task(srv->agent, r);
}

static void
s_heartbeat(gw_server_t *srv, const gw_req_t *r)
{
    gw_agent_heartbeat(srv->agent, r);
}

static void
s_result(gw_server_t *srv, const gw_req_t *r)
{
    gw_agent_result(srv->agent, r);
}

typedef struct {
    const char *method;
    const char *path;
    const char *label;
    s_auth_t auth;
    s_route_fn *fn;
} s_route_t;

static const s_route_t s_routes[] = {
    {"POST", "/v1/chat/completions", "chat", S_TOKEN, s_chat},
    {"POST", "/v1/completions", "completions", S_TOKEN, s_completions},
    {"GET", "/v1/models", "models", S_TOKEN, s_models},
    {"GET", "/lisa/v1/task", "task", S_TOKEN, s_task},
    {"POST", "/lisa/v1/heartbeat", "heartbeat", S_TOKEN, s_heartbeat},
    {"POST", "/lisa/v1/result", "result", S_TOKEN, s_result},
    {"GET", "/metrics", "metrics", S_OPEN, s_metrics},
    {"GET", "/healthz", "healthz", S_OPEN, s_healthz},
    {"POST", "/admin/pause", "admin", S_ADMIN, s_admin},
    {"POST", "/admin/resume", "admin", S_ADMIN, s_admin},
    {"GET", "/admin/drain", "admin", S_ADMIN, s_admin},
};

#define S_NROUTES (sizeof s_routes / sizeof s_routes[0])

/* Every token route: the attempt must still run, and have a call free. */
static lisa_rc_t
s_fence(gw_server_t *srv, const gw_req_t *r, gw_err_t *err)
{
    lisa_rc_t rc = gw_fence_enter(srv->fence, r->req, &r->who, err);
    if (rc != LISA_OK)
        gw_metrics_add(srv->m, "lisa_gateway_attempt_refusals_total",
                       rc == LISA_CONFLICT ? "reason=\"ended\""
                                           : "reason=\"inflight\"",
                       1);
    return rc;
}

/* Past the token: the fence, then the route. */
static void
s_admit(gw_server_t *srv, const gw_req_t *r, const s_route_t *hit)
{
    gw_err_t err;
    if (s_fence(srv, r, &err) != LISA_OK) {
        s_answer_err(srv, r, &err);
        return;
    }
    hit->fn(srv, r);
}

/* A token call of an attempt not checked against the broker since the
 * last missed event (or since start), held while the broker is asked. */
typedef struct {
    gw_server_t *srv;
    gw_req_t r;
    const s_route_t *hit;
} s_check_t;

static void
s_checked(void *arg, uint64_t request_id, lisa_rc_t rc, const Lisa__Reply *rep)
{
    (void) request_id;
    s_check_t *c = arg;
    gw_server_t *srv = c->srv;
    if (rc == LISA_OK && rep && rep->code == LISA__CODE__CODE_OK &&
        rep->body_case == LISA__REPLY__BODY_QUERY && rep->query &&
        rep->query->n_rollouts == 1)
        gw_fence_rollout(srv->fence, &c->r.who, rep->query->rollouts[0]->state,
                         rep->query->rollouts[0]->attempts);
    else if (rc == LISA_ERR) { /* the gateway is stopping */
        (void) lisa_http_req_respond(c->r.req, 503, NULL, "", 0);
        lisa_free(&c);
        return;
    } else /* the broker is the authority downstream: go on unchecked */
        lisa_log_debug("gateway: rollout %s not checked (%s)",
                       c->r.who.rollout_id,
                       rep && rep->error ? rep->error : lisa_rc_str(rc));
    s_admit(srv, &c->r, c->hit);
    lisa_free(&c);
}

/* Asks the broker for the state of r's rollout, then admits r; false when
 * no check is needed or possible (then the caller admits r at once). */
static bool
s_check(gw_server_t *srv, const gw_req_t *r, const s_route_t *hit)
{
    if (!srv->events || !srv->rpc || gw_fence_known(srv->fence, &r->who))
        return false;
    s_check_t *c = lisa_calloc(1, sizeof *c);
    c->srv = srv;
    c->r = *r;
    c->hit = hit;
    char *ids[] = {c->r.who.rollout_id};
    Lisa__QueryReq q = LISA__QUERY_REQ__INIT;
    q.n_rollout_ids = 1;
    q.rollout_ids = ids;
    Lisa__Request req = LISA__REQUEST__INIT;
    req.body_case = LISA__REQUEST__BODY_QUERY;
    req.query = &q;
    if (lisa_rpc_send(srv->rpc, &req, (int) srv->cfg.rpc_timeout_ms, s_checked,
                      c, NULL) != LISA_OK) {
        lisa_free(&c);
        return false;
    }
    return true;
}

static void
s_on_request(lisa_http_req_t *req, void *arg)
{
    gw_server_t *srv = arg;
    int64_t t0 = zclock_usecs();
    const char *method = lisa_http_req_method(req);
    const char *path = lisa_http_req_path(req);
    const s_route_t *hit = NULL;
    bool path_known = false;
    for (size_t i = 0; i < S_NROUTES && !hit; i++) {
        if (strcmp(path, s_routes[i].path) != 0)
            continue;
        path_known = true;
        if (strcmp(method, s_routes[i].method) == 0)
            hit = &s_routes[i];
    }
    gw_err_t err;
    if (!hit) {
        gw_err_set(&err, LISA_NOTFOUND, path_known ? 405 : 404,
                   "invalid_request_error", NULL, NULL,
                   path_known ? "method %.8s not allowed on %.200s"
                              : "%.8s %.200s: no such route",
                   method, path);
        gw_req_t other = {.req = req, .route = "other", .t0_us = t0};
        s_answer_err(srv, &other, &err);
        return;
    }
    gw_req_t r = {.req = req, .route = hit->label, .t0_us = t0};
    if (hit->auth == S_TOKEN) {
        if (gw_auth_check(srv->auth, req, &r.who, &err) != LISA_OK) {
            s_answer_err(srv, &r, &err);
            return;
        }
        if (!s_check(srv, &r, hit))
            s_admit(srv, &r, hit);
        return;
    }
    if (hit->auth == S_ADMIN && !gw_auth_admin(srv->auth, req)) {
        gw_err_set(&err, LISA_UNAUTHORIZED, 401, "authentication_error",
                   "invalid_api_key", NULL, "admin routes need the admin key");
        s_answer_err(srv, &r, &err);
        return;
    }
    hit->fn(srv, &r);
}

/* The broker's rollout events, when an endpoint is set. */
static lisa_rc_t
s_subscribe(gw_server_t *srv)
{
    const char *ep = srv->cfg.events;
    if (!srv->rpc || !ep || !ep[0])
        return LISA_OK;
    srv->events = gw_events_new(ep, srv->loop, srv->fence, srv->m);
    return srv->events ? LISA_OK : LISA_ERR;
}

/* ---- timers ------------------------------------------------------------- */

static int
s_on_tick(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    gw_server_t *srv = arg;
    s_span_flush(srv);
    if (gw_agent_held(srv->agent))
        gw_agent_check(srv->agent);
    return 0;
}

static int
s_on_expire(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    gw_server_t *srv = arg;
    uint64_t now = s_now_ms();
    if (now > srv->cfg.attempt_idle_ms)
        gw_trace_expire(srv->trace, now - srv->cfg.attempt_idle_ms);
    return 0;
}

/* ---- life cycle --------------------------------------------------------- */

/* The server's own copy of the settings (every string its own, so the
 * caller frees theirs), with the model's and gateway's names defaulted. */
static void
s_copy_cfg(gw_config_t *dst, const gw_config_t *src)
{
    lisa_config_copy(gw_config_table, gw_config_table_len, dst, src,
                     sizeof *dst);
    if (!dst->model)
        dst->model = lisa_strdup("lisa");
    if (!dst->gateway_id)
        dst->gateway_id = lisa_strdup("gw");
}

/* The package proxy, when a listener for it is configured. */
static lisa_rc_t
s_start_proxy(gw_server_t *srv)
{
    const gw_config_t *cfg = &srv->cfg;
    bool on = (cfg->proxy_unix && cfg->proxy_unix[0]) ||
              (cfg->proxy_address && cfg->proxy_address[0]);
    if (!on)
        return LISA_OK;
    if (cfg->proxy_port > 65535) {
        lisa_log_error("gateway: gateway.proxy_port passes 65535");
        return LISA_INVALID;
    }
    gw_proxy_cfg_t pc = {.unix_path = cfg->proxy_unix,
                         .address = cfg->proxy_address,
                         .port = (uint16_t) cfg->proxy_port,
                         .allow = cfg->proxy_allow,
                         .max_requests = cfg->proxy_max_requests,
                         .max_bytes = cfg->proxy_max_bytes,
                         .idle_ms = cfg->proxy_idle_ms,
                         .max_conns = cfg->max_connections};
    srv->proxy = gw_proxy_new(&pc, srv->loop, srv->auth, srv->m);
    return srv->proxy ? LISA_OK : LISA_ERR;
}

/* The modules over the shared state, once it exists. */
static lisa_rc_t
s_start_modules(gw_server_t *srv)
{
    const gw_config_t *cfg = &srv->cfg;
    srv->engine =
        gw_engine_new(srv->loop, LISA_HTTP_CLIENT_DEFAULT_MAX_RESPONSE);
    if (!srv->engine)
        return LISA_ERR;
    gw_pool_io_t io = {.loop = srv->loop,
                       .rpc = srv->rpc,
                       .engine = srv->engine,
                       .m = srv->m,
                       .rpc_timeout_ms = (int) cfg->rpc_timeout_ms,
                       .refresh_ms = cfg->engine_refresh_ms,
                       .health_ms = cfg->health_interval_ms};
    gw_pool_attach(srv->pool, &io);
    gw_chat_deps_t cd = {.cfg = cfg,
                         .trace = srv->trace,
                         .pool = srv->pool,
                         .spanq = srv->spanq,
                         .render = srv->render,
                         .m = srv->m,
                         .engine = srv->engine,
                         .rpc = srv->rpc,
                         .spans_added = s_span_flush,
                         .arg = srv};
    srv->chat = gw_chat_new(&cd);
    gw_agent_deps_t ad = {.cfg = cfg,
                          .trace = srv->trace,
                          .spanq = srv->spanq,
                          .m = srv->m,
                          .rpc = srv->rpc,
                          .spans_due = s_span_flush,
                          .arg = srv};
    srv->agent = gw_agent_new(&ad);
    return LISA_OK;
}

static lisa_rc_t
s_listen(gw_server_t *srv)
{
    const gw_config_t *cfg = &srv->cfg;
    lisa_http_server_config_t hs = {
        .address = cfg->address && cfg->address[0] ? cfg->address : NULL,
        .port = (uint16_t) cfg->port,
        .unix_path =
            cfg->unix_path && cfg->unix_path[0] ? cfg->unix_path : NULL,
        .handler = s_on_request,
        .handler_arg = srv,
        .loop = srv->loop,
        .max_body = cfg->max_body,
        .max_connections = (unsigned) cfg->max_connections,
        .request_timeout_ms = (unsigned) cfg->request_timeout_ms,
        .loop_driven = cfg->http_threads == 0,
        .threads = (unsigned) cfg->http_threads};
    srv->http = lisa_http_server_new(&hs);
    if (!srv->http)
        return LISA_ERR;
    if (cfg->port_file && cfg->port_file[0]) {
        FILE *f = fopen(cfg->port_file, "w");
        if (f) {
            fprintf(f, "%u\n", lisa_http_server_port(srv->http));
            fclose(f);
        }
    }
    return LISA_OK;
}

gw_server_t *
gw_server_new(const gw_config_t *cfg, zloop_t *loop)
{
    gw_server_t *srv = lisa_calloc(1, sizeof *srv);
    s_copy_cfg(&srv->cfg, cfg);
    srv->loop = loop;
    srv->m = gw_metrics_new();
    char err[256];
    srv->auth =
        gw_auth_new(cfg->token_key, cfg->admin_key, srv->m, err, sizeof err);
    if (!srv->auth) {
        lisa_log_error("gateway: token key: %s", err);
        goto fail;
    }
    srv->render = gw_render_new(cfg->tokenizer ? cfg->tokenizer : "");
    if (!srv->render) {
        lisa_log_error("gateway: cannot load the tokenizer from %s",
                       cfg->tokenizer ? cfg->tokenizer : "(unset)");
        goto fail;
    }
    srv->pool = gw_pool_new((uint32_t) cfg->engine_max_inflight,
                            (uint32_t) cfg->fail_limit);
    if (gw_pool_add_static(srv->pool, cfg->engines) != LISA_OK) {
        lisa_log_error("gateway: bad engine list '%s'", cfg->engines);
        goto fail;
    }
    srv->trace = gw_trace_new(cfg->max_attempts, (uint32_t) cfg->max_context);
    srv->spanq = gw_spanq_new(cfg->span_queue);
    srv->fence = gw_fence_new((uint32_t) cfg->attempt_max_inflight);
    srv->passes = zlistx_new();
    if (cfg->broker && cfg->broker[0]) {
        srv->rpc = lisa_rpc_new(cfg->broker, cfg->gateway_id);
        if (!srv->rpc ||
            lisa_rpc_attach(srv->rpc, loop, S_TICK_MS) != LISA_OK) {
            lisa_log_error("gateway: cannot use broker %s", cfg->broker);
            goto fail;
        }
    }
    if (s_subscribe(srv) != LISA_OK || s_start_modules(srv) != LISA_OK ||
        s_listen(srv) != LISA_OK || s_start_proxy(srv) != LISA_OK)
        goto fail;
    srv->tick_timer = zloop_timer(loop, S_TICK_MS, 0, s_on_tick, srv);
    srv->expire_timer = zloop_timer(loop, 60000, 0, s_on_expire, srv);
    lisa_log_info("gateway %s listening on %s:%u, broker %s, %zu engines",
                  srv->cfg.gateway_id, cfg->address ? cfg->address : "-",
                  lisa_http_server_port(srv->http),
                  srv->rpc ? cfg->broker : "(none)", gw_pool_size(srv->pool));
    return srv;
fail:
    gw_server_destroy(&srv);
    return NULL;
}

void
gw_server_destroy(gw_server_t **self)
{
    if (!self || !*self)
        return;
    gw_server_t *srv = *self;
    if (srv->loop && srv->tick_timer)
        zloop_timer_end(srv->loop, srv->tick_timer);
    if (srv->loop && srv->expire_timer)
        zloop_timer_end(srv->loop, srv->expire_timer);
    gw_events_destroy(&srv->events);
    /* kept requests were answered 503 by the HTTP layer; each still gets
     * its one respond call (which releases it) before its context goes */
    lisa_http_server_destroy(&srv->http);
    /* broker calls still open end here, each callback answering its request
     * 503 (or leaving its span batch unsent), while the modules they call
     * back into (agent API, chat, fence, span queue) are still there */
    if (srv->rpc) {
        lisa_rpc_detach(srv->rpc);
        lisa_rpc_destroy(&srv->rpc);
    }
    gw_proxy_destroy(&srv->proxy);
    gw_agent_destroy(&srv->agent);
    gw_engine_destroy(&srv->engine); /* drops engine calls, no callbacks */
    gw_chat_destroy(&srv->chat);
    if (srv->passes) {
        s_pass_t *p;
        while ((p = zlistx_first(srv->passes))) {
            zlistx_delete(srv->passes, zlistx_cursor(srv->passes));
            (void) lisa_http_req_respond(p->r.req, 503, NULL, "", 0);
            lisa_free(&p);
        }
        zlistx_destroy(&srv->passes);
    }
    if (srv->spanq && gw_spanq_size(srv->spanq))
        lisa_log_warn("gateway: %zu spans were never acknowledged",
                      gw_spanq_size(srv->spanq));
    gw_spanq_destroy(&srv->spanq);
    gw_trace_destroy(&srv->trace);
    gw_pool_destroy(&srv->pool);
    gw_render_destroy(&srv->render);
    gw_fence_destroy(&srv->fence); /* every call was answered above */
    gw_auth_destroy(&srv->auth);
    gw_metrics_destroy(&srv->m);
    gw_config_free(&srv->cfg);
    lisa_free(self);
}

uint16_t
gw_server_port(const gw_server_t *self)
{
    return lisa_http_server_port(self->http);
}
