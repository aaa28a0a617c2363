/*
 * gw_server: the gateway service (see the header and docs/gateway.md).
 *
 * One chat completion, step by step, all on the loop's thread:
 *   token -> parse -> attempt state (first call: SpanStatusReq so seq never
 *   repeats after a restart) -> plan (extension or new segment) -> render
 *   only the new messages -> begin (prompt = stored ids + new ids) ->
 *   context check -> pick an engine (sticky, least loaded) -> POST token ids
 *   -> parse sampled ids -> decode, tool calls -> commit (span) -> queue the
 *   span for the broker -> answer (JSON or SSE).
 * A failure after begin aborts the call, leaving the attempt as it was.
 */
#include "gw_server.h"

#include "gw_client.h"
#include "gw_metrics.h"
#include "gw_openai.h"
#include "gw_pool.h"
#include "gw_render.h"
#include "gw_spanq.h"
#include "gw_trace.h"
#include "gw_upstream.h"
#include "lisa/lisa_http_client.h"
#include "lisa/lisa_http_server.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_rpc.h"
#include "lisa/lisa_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define S_SPAN_BATCH   64u
#define S_TICK_MS      10
#define S_HEALTH_TO_MS 2000L
#define S_MAX_ANSWER   (1u << 20)

/* Tokens verified lately, by a hash of their text: an agent sends the same
 * token with every call, and its signature need not be checked again. Only
 * valid tokens are kept; a hit is still checked for expiry. */
#define S_AUTH_SLOTS 256u

typedef struct {
    size_t len; /* 0: empty */
    char tok[LISA_TOKEN_MAX_LEN];
    lisa_token_claims_t who;
} s_auth_slot_t;

struct gw_server_t {
    gw_config_t cfg;
    zloop_t *loop;
    lisa_http_server_t *http;
    lisa_http_client_t *hc; /* health checks, passthrough, named hosts */
    gw_client_t *gc;        /* engine calls to literal addresses */
    lisa_rpc_t *rpc;
    gw_trace_t *trace;
    gw_pool_t *pool;
    gw_spanq_t *spanq;
    gw_metrics_t *m;
    gw_render_t *render;
    lisa_token_key_t key;
    zlistx_t *results;   /* s_result_t waiting for span acks */
    zhashx_t *done;      /* attempts whose result was accepted */
    zlistx_t *calls;     /* engine calls in flight (s_chat_t, s_pass_t,
                          * s_health_t), answered 503 and freed on destroy */
    s_auth_slot_t *auth; /* S_AUTH_SLOTS tokens verified lately */
    uint64_t span_batch; /* batch in flight, 0 when none */
    uint64_t counter;
    size_t health_pending;
    bool listing;
    int64_t listed_on_demand; /* mono ms of the last s_refresh_now */
    int tick_timer, refresh_timer, health_timer, expire_timer;
};

/* ---- small helpers ------------------------------------------------------ */

static uint64_t
s_now_ms(void)
{
    return lisa_token_now_ms();
}

static const char *
s_status_label(unsigned status)
{
    static char buf[8][8];
    static unsigned k;
    char *b = buf[k++ % 8];
    snprintf(b, 8, "%u", status);
    return b;
}

static void
s_count(gw_server_t *srv, const char *route, unsigned status, int64_t t0_us)
{
    char labels[96];
    size_t rn = strnlen(route, 60);
    /* route="R",code="NNN" and route="R", without printf (every call) */
    memcpy(labels, "route=\"", 7);
    memcpy(labels + 7, route, rn);
    size_t at = 7 + rn;
    labels[at++] = '"';
    if (status >= 100 && status < 1000) {
        memcpy(labels + at, ",code=\"", 7);
        at += 7;
        labels[at++] = (char) ('0' + status / 100);
        labels[at++] = (char) ('0' + status / 10 % 10);
        labels[at++] = (char) ('0' + status % 10);
        labels[at++] = '"';
        labels[at] = '\0';
    } else
        snprintf(labels + at, sizeof labels - at, ",code=\"%s\"",
                 s_status_label(status));
    gw_metrics_add(srv->m, "lisa_gateway_requests_total", labels, 1);
    labels[8 + rn] = '\0';
    gw_metrics_observe(srv->m, "lisa_gateway_request_seconds", labels,
                       (double) (zclock_usecs() - t0_us) / 1e6);
}

static void
s_respond_json(gw_server_t *srv, lisa_http_req_t *req, const char *route,
               int64_t t0_us, unsigned status, const char *body, size_t len)
{
    (void) lisa_http_req_respond(req, status, "application/json", body, len);
    s_count(srv, route, status, t0_us);
}

static void
s_respond_err(gw_server_t *srv, lisa_http_req_t *req, const char *route,
              int64_t t0_us, const gw_err_t *err)
{
    if (err->status == 429 || err->status == 503) {
        char ra[24];
        snprintf(ra, sizeof ra, "%llu",
                 (unsigned long long) srv->cfg.retry_after_s);
        lisa_http_req_add_header(req, "Retry-After", ra);
    }
    char *body = gw_err_body(err);
    s_respond_json(srv, req, route, t0_us, (unsigned) err->status, body,
                   strlen(body));
    free(body);
}

/* Maps a broker reply code to an HTTP status. */
static int
s_code_status(int code)
{
    switch (code) {
    case LISA__CODE__CODE_OK:
        return 200;
    case LISA__CODE__CODE_INVALID:
        return 400;
    case LISA__CODE__CODE_NOT_FOUND:
        return 404;
    case LISA__CODE__CODE_CONFLICT:
        return 409;
    case LISA__CODE__CODE_TIMEOUT:
        return 504;
    case LISA__CODE__CODE_BUSY:
        return 429;
    case LISA__CODE__CODE_UNAVAILABLE:
        return 503;
    case LISA__CODE__CODE_UNAUTHORIZED:
        return 403;
    case LISA__CODE__CODE_TOO_LARGE:
        return 413;
    default:
        return 502;
    }
}

static void
s_broker_err(gw_server_t *srv, const char *what, lisa_rc_t rc,
             const Lisa__Reply *rep, gw_err_t *err)
{
    char labels[64];
    snprintf(labels, sizeof labels, "request=\"%s\"", what);
    gw_metrics_add(srv->m, "lisa_gateway_broker_errors_total", labels, 1);
    if (rc != LISA_OK || !rep)
        gw_err_set(err, LISA_UNAVAILABLE, 503, "server_error",
                   "broker_unavailable", NULL,
                   "the broker did not answer %s (%s); retry later", what,
                   lisa_rc_str(rc));
    else
        gw_err_set(err, LISA_ERR, s_code_status(rep->code),
                   rep->code == LISA__CODE__CODE_UNAUTHORIZED
                       ? "permission_error"
                       : "invalid_request_error",
                   "broker_error", NULL, "%s: %s", what,
                   rep->error && rep->error[0] ? rep->error : "refused");
}

/* ---- per-request context ------------------------------------------------ */

typedef struct {
    gw_server_t *srv;
    lisa_http_req_t *req;
    const char *route;
    int64_t t0_us;
    lisa_token_claims_t who;
    int kind;     /* S_KIND_* while in srv->calls, else 0 */
    void *handle; /* its node in srv->calls */
} s_ctx_t;

enum { S_KIND_CHAT = 1, S_KIND_PASS = 2, S_KIND_HEALTH = 3 };

static void
s_track(gw_server_t *srv, s_ctx_t *c, int kind)
{
    c->kind = kind;
    c->handle = zlistx_add_end(srv->calls, c);
}

static void
s_untrack(gw_server_t *srv, s_ctx_t *c)
{
    if (c->handle)
        zlistx_delete(srv->calls, c->handle);
    c->handle = NULL;
    c->kind = 0;
}

static s_ctx_t *
s_ctx_new(gw_server_t *srv, lisa_http_req_t *req, const char *route,
          int64_t t0_us, const lisa_token_claims_t *who)
{
    s_ctx_t *c = lisa_calloc(1, sizeof *c);
    c->srv = srv;
    c->req = req;
    c->route = route;
    c->t0_us = t0_us;
    if (who)
        c->who = *who;
    return c;
}

/* ---- authentication ----------------------------------------------------- */

static const char *
s_bearer(lisa_http_req_t *req)
{
    const char *h = lisa_http_req_header(req, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return NULL;
    h += 7;
    while (*h == ' ')
        h++;
    return h;
}

static s_auth_slot_t *
s_auth_slot(gw_server_t *srv, const char *tok, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t) tok[i]) * 0x100000001b3ull;
    return &srv->auth[(h ^ (h >> 32)) % S_AUTH_SLOTS];
}

static lisa_rc_t
s_auth(gw_server_t *srv, lisa_http_req_t *req, lisa_token_claims_t *who,
       gw_err_t *err)
{
    const char *tok = s_bearer(req);
    const char *why = "missing";
    lisa_rc_t rc = LISA_UNAUTHORIZED;
    uint64_t now = s_now_ms();
    size_t len = tok ? strnlen(tok, LISA_TOKEN_MAX_LEN + 1) : 0;
    s_auth_slot_t *slot = NULL;
    if (tok && len <= LISA_TOKEN_MAX_LEN) {
        slot = s_auth_slot(srv, tok, len);
        /* constant time over the text: the slot holds another agent's
         * valid token */
        if (slot->len == len && CRYPTO_memcmp(slot->tok, tok, len) == 0 &&
            now < slot->who.expiry_ms) {
            *who = slot->who;
            return LISA_OK;
        }
    }
    if (tok)
        rc = lisa_token_verify(srv->key.bytes, srv->key.len, tok, now, who,
                               &why);
    if (rc == LISA_OK) {
        if (slot) {
            memcpy(slot->tok, tok, len);
            slot->len = len;
            slot->who = *who;
        }
        return LISA_OK;
    }
    char labels[48];
    snprintf(labels, sizeof labels, "reason=\"%s\"", why);
    gw_metrics_add(srv->m, "lisa_gateway_auth_failures_total", labels, 1);
    return gw_err_set(
        err, LISA_UNAUTHORIZED, 401, "authentication_error",
        strcmp(why, "expired") == 0 ? "token_expired" : "invalid_api_key", NULL,
        "attempt token %s: send Authorization: Bearer "
        "<the attempt token>",
        tok ? why : "missing");
}

/* A body naming another rollout or attempt than the token is refused. */
static lisa_rc_t
s_same_attempt(const json_t *body, const lisa_token_claims_t *who,
               gw_err_t *err)
{
    const char *rid = json_string_value(json_object_get(body, "rollout_id"));
    json_t *att = json_object_get(body, "attempt");
    if ((rid && strcmp(rid, who->rollout_id) != 0) ||
        (json_is_integer(att) &&
         json_integer_value(att) != (json_int_t) who->attempt))
        return gw_err_set(err, LISA_UNAUTHORIZED, 403, "permission_error",
                          "wrong_rollout", "rollout_id",
                          "this token is not valid for that rollout or "
                          "attempt");
    return LISA_OK;
}

/* ---- spans to the broker ------------------------------------------------ */

static void s_results_check(gw_server_t *srv);

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
    s_results_check(srv);
}

static void
s_span_flush(gw_server_t *srv)
{
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

/* ---- chat completions --------------------------------------------------- */

typedef struct {
    s_ctx_t c;
    gw_chat_req_t chat;
    uint8_t (*dig)[GW_DIGEST_LEN];
    size_t n_dig;
    uint8_t tools[GW_DIGEST_LEN];
    gw_attempt_t *a; /* valid while begun (busy attempts stay put) */
    bool begun;
    /* the engine request: pre + the attempt's id text (borrowed: it does
     * not change while the call runs) + post; `body` joins them for
     * lisa_http_client, only when an engine is called through it */
    char *pre, *post;
    size_t pre_len, post_len;
    const char *text;
    size_t text_len;
    char *body;
    size_t body_len;
    char engine[160];
    unsigned tries;
    uint64_t start_ms;
    int64_t up_t0_us;
    int64_t turn;       /* X-Lisa-Turn, 0 when absent */
    int64_t up_done_us; /* when the engine's answer arrived */
} s_chat_t;

static void
s_chat_free(s_chat_t **cp)
{
    s_chat_t *c = *cp;
    if (!c)
        return;
    if (c->begun && c->a)
        gw_attempt_abort(c->a);
    gw_chat_req_clear(&c->chat);
    lisa_free(&c->dig);
    lisa_free(&c->pre);
    lisa_free(&c->post);
    lisa_free(&c->body);
    lisa_free(cp);
}

static void
s_chat_fail(s_chat_t **cp, const gw_err_t *err)
{
    s_chat_t *c = *cp;
    s_respond_err(c->c.srv, c->c.req, c->c.route, c->c.t0_us, err);
    s_chat_free(cp);
}

static void s_chat_send(s_chat_t *c);

static void
s_chat_render(s_chat_t *c)
{
    gw_server_t *srv = c->c.srv;
    gw_err_t err;
    gw_attempt_t *a;
    if (gw_trace_open(srv->trace, c->c.who.rollout_id, c->c.who.attempt,
                      s_now_ms(), &a) != LISA_OK) {
        gw_err_set(&err, LISA_AGAIN, 503, "server_error", "overloaded", NULL,
                   "too many attempts in flight on this gateway");
        s_chat_fail(&c, &err);
        return;
    }
    if (gw_attempt_busy(a)) {
        /* 429: a retry of a turn whose first call is still running comes
         * back later and then gets the stored answer */
        gw_err_set(&err, LISA_CONFLICT, 429, "rate_limit_error",
                   "concurrent_request", NULL,
                   "another chat completion of this attempt is in progress; "
                   "retry after it finished");
        s_chat_fail(&c, &err);
        return;
    }
    if (!gw_attempt_based(a))
        gw_attempt_set_base(a, 0);
    /* digests: from the attempt's cache when the bytes are unchanged */
    c->n_dig = c->chat.n_msgs;
    c->dig = lisa_malloc(c->n_dig * GW_DIGEST_LEN);
    for (size_t i = 0; i < c->n_dig; i++) {
        if (c->chat.raw_len[i] &&
            gw_attempt_cached_digest(a, i, c->chat.raw_hash[i], c->dig[i]))
            continue;
        json_t *m = gw_chat_req_msg(&c->chat, i, &err);
        if (!m) {
            s_chat_fail(&c, &err);
            return;
        }
        gw_msg_digest(m, c->dig[i]);
    }
    size_t first = 0;
    bool ext = gw_attempt_plan(a, (const uint8_t(*)[GW_DIGEST_LEN]) c->dig,
                               c->n_dig, c->tools, &first);
    if (!ext && gw_attempt_spans(a) > 0)
        gw_metrics_add(srv->m, "lisa_gateway_segments_total", NULL, 1);
    for (size_t i = first; i < c->n_dig; i++)
        if (!gw_chat_req_msg(&c->chat, i, &err)) {
            s_chat_fail(&c, &err);
            return;
        }
    /* tools are parsed (and validated) only when they changed or the
     * whole conversation is rendered */
    if (c->chat.has_tools && (!ext || first == 0) &&
        !gw_chat_req_tools(&c->chat, &err)) {
        s_chat_fail(&c, &err);
        return;
    }
    size_t max = srv->cfg.max_context;
    lisa_ids_t *ids = lisa_ids_new(max);
    lisa_rc_t rc = gw_render_prompt(srv->render, c->chat.messages, first,
                                    c->chat.tools, gw_attempt_last_id(a), ids);
    size_t base = ext ? gw_attempt_len(a) : 0;
    if (rc == LISA_OK && base + lisa_ids_len(ids) >= max)
        rc = LISA_TOOLARGE;
    if (rc == LISA_OK)
        rc = gw_attempt_begin(a, ext, (const uint32_t *) lisa_ids_data(ids),
                              lisa_ids_len(ids), s_now_ms());
    size_t appended = lisa_ids_len(ids);
    lisa_ids_destroy(&ids);
    if (rc == LISA_TOOLARGE) {
        gw_err_set(&err, rc, 400, "invalid_request_error",
                   "context_length_exceeded", "messages",
                   "This model's maximum context length is %zu tokens. "
                   "However, your messages resulted in at least %zu tokens.",
                   max, base + appended);
        s_chat_fail(&c, &err);
        return;
    }
    if (rc != LISA_OK) {
        gw_err_set(&err, rc, 400, "invalid_request_error", NULL, "messages",
                   "the messages could not be tokenized (%s)", lisa_rc_str(rc));
        s_chat_fail(&c, &err);
        return;
    }
    c->a = a;
    c->begun = true;
    size_t plen;
    (void) gw_attempt_prompt(a, &plen);
    int64_t room = (int64_t) max - (int64_t) plen;
    int64_t want = c->chat.max_tokens ? c->chat.max_tokens
                                      : (int64_t) srv->cfg.default_max_tokens;
    size_t n_stop_ids;
    const int32_t *stop_ids = gw_render_stop_ids(srv->render, &n_stop_ids);
    gw_sampling_t s = {.model = srv->cfg.model,
                       .max_tokens = want < room ? want : room,
                       .temperature = c->chat.temperature,
                       .top_p = c->chat.top_p,
                       .stop_ids = stop_ids,
                       .n_stop_ids = n_stop_ids,
                       .stop = c->chat.stop,
                       .n_stop = c->chat.n_stop};
    size_t n_tail;
    const uint32_t *tail;
    gw_attempt_prompt_parts(a, &c->text, &c->text_len, &tail, &n_tail);
    gw_upstream_body_split(c->text_len, tail, n_tail, &s, &c->pre, &c->pre_len,
                           &c->post, &c->post_len);
    gw_metrics_add(srv->m, "lisa_gateway_tokens_in_total", NULL,
                   (double) appended);
    gw_metrics_add(srv->m, "lisa_gateway_prompt_tokens_total", NULL,
                   (double) plen);
    if (!gw_spanq_has_room(srv->spanq, 1)) {
        gw_err_set(&err, LISA_AGAIN, 503, "server_error", "span_backlog", NULL,
                   "spans are not being stored fast enough; retry");
        s_chat_fail(&c, &err);
        return;
    }
    c->start_ms = s_now_ms();
    s_chat_send(c);
}

static void
s_chat_based(void *arg, uint64_t request_id, lisa_rc_t rc,
             const Lisa__Reply *rep)
{
    (void) request_id;
    s_chat_t *c = arg;
    gw_server_t *srv = c->c.srv;
    if (rc != LISA_OK || !rep || rep->code != LISA__CODE__CODE_OK ||
        rep->body_case != LISA__REPLY__BODY_SPAN_STATUS) {
        gw_err_t err;
        s_broker_err(srv, "SpanStatus", rc, rep, &err);
        s_chat_fail(&c, &err);
        return;
    }
    gw_attempt_t *a;
    if (gw_trace_open(srv->trace, c->c.who.rollout_id, c->c.who.attempt,
                      s_now_ms(), &a) == LISA_OK) {
        int64_t next = (int64_t) rep->span_status->contiguous_seq + 1;
        if ((int64_t) rep->span_status->count > next)
            next = rep->span_status->count;
        gw_attempt_set_base(a, (uint32_t) next);
    }
    s_chat_render(c);
}

static int s_on_refresh(zloop_t *loop, int timer_id, void *arg);

/* A call found no engine it may use: ask the broker for the engine list
 * now (at most every S_LIST_NOW_MS) rather than at the next refresh, so
 * an engine that just resumed after a weight update or joined is used by
 * the caller's retry. */
#define S_LIST_NOW_MS 100

static void
s_refresh_now(gw_server_t *srv)
{
    int64_t now = zclock_mono();
    if (now - srv->listed_on_demand < S_LIST_NOW_MS)
        return;
    srv->listed_on_demand = now;
    (void) s_on_refresh(NULL, 0, srv);
}

static void s_chat_done(lisa_http_response_t *resp, void *arg);
static void s_chat_gdone(const gw_client_resp_t *resp, void *arg);

static void
s_chat_send(s_chat_t *c)
{
    gw_server_t *srv = c->c.srv;
    gw_err_t err;
    const char *id, *url;
    lisa_rc_t rc = gw_pool_pick(srv->pool, gw_attempt_engine(c->a), &id, &url);
    if (rc != LISA_OK) {
        s_refresh_now(srv);
        if (rc == LISA_AGAIN)
            gw_err_set(&err, rc, 429, "rate_limit_error", "engines_paused",
                       NULL,
                       "generation is paused for a weight update; "
                       "retry after the Retry-After delay");
        else
            gw_err_set(&err, rc, 503, "server_error", "no_engine", NULL,
                       "no generation engine is available");
        s_chat_fail(&c, &err);
        return;
    }
    snprintf(c->engine, sizeof c->engine, "%s", id);
    gw_attempt_set_engine(c->a, id);
    char full[2048];
    snprintf(full, sizeof full, "%s/v1/completions", url);
    if (gw_client_url_ok(full)) {
        gw_pool_call_started(srv->pool, id);
        c->tries++;
        c->up_t0_us = zclock_usecs();
        if (c->tries == 1)
            gw_metrics_observe(srv->m, "lisa_gateway_stage_seconds",
                               "stage=\"prepare\"",
                               (double) (c->up_t0_us - c->c.t0_us) / 1e6);
        s_track(srv, &c->c, S_KIND_CHAT);
        /* the body stays put until the call ends; the callback may run
         * before this returns (a refused connection), and nothing here
         * touches c after it */
        struct iovec parts[3] = {
            {.iov_base = c->pre, .iov_len = c->pre_len},
            {.iov_base = (void *) (uintptr_t) c->text, .iov_len = c->text_len},
            {.iov_base = c->post, .iov_len = c->post_len}};
        if (gw_client_postv(srv->gc, full, parts, 3,
                            (long) srv->cfg.upstream_timeout_ms, 2000,
                            s_chat_gdone, c, NULL) != LISA_OK) {
            s_untrack(srv, &c->c);
            gw_pool_call_ended(srv->pool, id, false);
            gw_err_set(&err, LISA_ERR, 500, "server_error", NULL, NULL,
                       "could not start the engine call");
            s_chat_fail(&c, &err);
        }
        return;
    }
    if (!c->body) {
        c->body_len = c->pre_len + c->text_len + c->post_len;
        c->body = lisa_malloc(c->body_len + 1);
        memcpy(c->body, c->pre, c->pre_len);
        memcpy(c->body + c->pre_len, c->text, c->text_len);
        memcpy(c->body + c->pre_len + c->text_len, c->post, c->post_len);
        c->body[c->body_len] = '\0';
    }
    /* no "Expect: 100-continue" round trip before the body */
    static const char *const hdrs[] = {"Content-Type: application/json",
                                       "Expect:", NULL};
    lisa_http_request_t r = {.method = "POST",
                             .url = full,
                             .headers = hdrs,
                             .body = c->body,
                             .body_len = c->body_len,
                             .timeout_ms = (long) srv->cfg.upstream_timeout_ms,
                             .connect_timeout_ms = 2000};
    gw_pool_call_started(srv->pool, id);
    c->tries++;
    c->up_t0_us = zclock_usecs();
    if (c->tries == 1)
        gw_metrics_observe(srv->m, "lisa_gateway_stage_seconds",
                           "stage=\"prepare\"",
                           (double) (c->up_t0_us - c->c.t0_us) / 1e6);
    s_track(srv, &c->c, S_KIND_CHAT);
    if (lisa_http_client_send(srv->hc, &r, s_chat_done, c, NULL) != LISA_OK) {
        s_untrack(srv, &c->c);
        gw_pool_call_ended(srv->pool, id, false);
        gw_err_set(&err, LISA_ERR, 500, "server_error", NULL, NULL,
                   "could not start the engine call");
        s_chat_fail(&c, &err);
    }
}

static void
s_upstream_err(gw_server_t *srv, const char *engine, const char *kind)
{
    char labels[256];
    snprintf(labels, sizeof labels, "engine=\"%s\",kind=\"%s\"", engine, kind);
    gw_metrics_add(srv->m, "lisa_gateway_upstream_errors_total", labels, 1);
}

static void
s_chat_answer(s_chat_t *c, gw_completion_t *comp)
{
    gw_server_t *srv = c->c.srv;
    gw_err_t err;
    char id_prefix[64], chat_id[96];
    uint64_t k = ++srv->counter;
    snprintf(id_prefix, sizeof id_prefix, "call_%s_%llu", srv->cfg.gateway_id,
             (unsigned long long) k);
    snprintf(chat_id, sizeof chat_id, "chatcmpl-%s-%llu", srv->cfg.gateway_id,
             (unsigned long long) k);
    bool tools =
        c->chat.has_tools &&
        !(c->chat.tool_choice && strcmp(c->chat.tool_choice, "none") == 0);
    gw_reply_t reply;
    if (gw_render_reply(srv->render, comp->ids, comp->n, comp->finish_reason,
                        tools, id_prefix, &reply) != LISA_OK) {
        gw_err_set(&err, LISA_INVALID, 502, "server_error", "bad_engine_reply",
                   NULL, "the engine sampled ids that do not decode");
        s_chat_fail(&c, &err);
        return;
    }
    uint8_t rdig[GW_DIGEST_LEN];
    gw_reply_digest(&reply, rdig);
    size_t plen;
    (void) gw_attempt_prompt(c->a, &plen);
    gw_sample_t s = {.ids = comp->ids,
                     .logprobs = comp->logprobs,
                     .n = comp->n,
                     .finish_reason = reply.finish_reason,
                     .policy_version = comp->policy_version,
                     .engine_id = c->engine,
                     .gateway_id = srv->cfg.gateway_id,
                     .start_ms = c->start_ms,
                     .first_token_ms = 0,
                     .end_ms = s_now_ms()};
    Lisa__Span *span = NULL;
    lisa_rc_t rc =
        gw_attempt_commit(c->a, (const uint8_t(*)[GW_DIGEST_LEN]) c->dig,
                          c->n_dig, c->tools, rdig, &s, &span);
    c->begun = false;
    if (rc == LISA_OK) {
        gw_attempt_cache(c->a,
                         (const uint8_t(*)[GW_DIGEST_LEN]) c->chat.raw_hash,
                         (const uint8_t(*)[GW_DIGEST_LEN]) c->dig, c->n_dig);
        gw_attempt_keep_prefix(c->a, &c->chat);
    }
    if (rc != LISA_OK) {
        gw_reply_clear(&reply);
        gw_err_set(&err, rc, 400, "invalid_request_error",
                   "context_length_exceeded", "max_tokens",
                   "the reply does not fit in the attempt's context of %llu "
                   "tokens",
                   (unsigned long long) srv->cfg.max_context);
        s_chat_fail(&c, &err);
        return;
    }
    if (srv->rpc) {
        if (gw_spanq_push(srv->spanq, &span) != LISA_OK)
            gw_metrics_add(srv->m, "lisa_gateway_spans_total",
                           "outcome=\"dropped\"", 1);
        s_span_flush(srv);
    } else {
        gw_span_free(&span);
        gw_metrics_add(srv->m, "lisa_gateway_spans_total",
                       "outcome=\"no_broker\"", 1);
    }
    gw_metrics_add(srv->m, "lisa_gateway_tokens_out_total", NULL,
                   (double) comp->n);
    gw_usage_t u = {plen, comp->n};
    const char *model = c->chat.model ? c->chat.model : srv->cfg.model;
    int64_t created = (int64_t) (s_now_ms() / 1000);
    char *body;
    size_t len;
    if (c->chat.stream)
        body = gw_chat_stream(chat_id, created, model, &reply, &u,
                              c->chat.include_usage, &len);
    else {
        body = gw_chat_response(chat_id, created, model, &reply, &u);
        len = strlen(body);
    }
    if (c->turn > 0)
        gw_attempt_set_answer(c->a, c->turn, body, len, c->chat.stream);
    int64_t r0 = zclock_usecs();
    (void) lisa_http_req_respond(
        c->c.req, 200,
        c->chat.stream ? "text/event-stream" : "application/json", body, len);
    gw_metrics_observe(srv->m, "lisa_gateway_stage_seconds",
                       "stage=\"respond\"",
                       (double) (zclock_usecs() - r0) / 1e6);
    s_count(srv, c->c.route, 200, c->c.t0_us);
    gw_metrics_observe(srv->m, "lisa_gateway_stage_seconds", "stage=\"finish\"",
                       (double) (zclock_usecs() - c->up_done_us) / 1e6);
    lisa_free(&body);
    gw_reply_clear(&reply);
    s_chat_free(&c);
}

/* The engine call ended: rc and status as lisa_http_client reports them,
 * the body, and the transport's error text. */
static void
s_chat_result(s_chat_t *c, lisa_rc_t rc, long status, const char *body,
              size_t len, const char *error)
{
    s_untrack(c->c.srv, &c->c);
    c->up_done_us = zclock_usecs();
    gw_server_t *srv = c->c.srv;
    gw_err_t err;
    bool conn = rc == LISA_UNAVAILABLE || rc == LISA_ERR;
    gw_pool_call_ended(srv->pool, c->engine, conn);
    char labels[200];
    snprintf(labels, sizeof labels, "engine=\"%s\"", c->engine);
    gw_metrics_observe(srv->m, "lisa_gateway_upstream_seconds", labels,
                       (double) (zclock_usecs() - c->up_t0_us) / 1e6);
    if (conn) {
        s_upstream_err(srv, c->engine, "connect");
        if (c->tries <= srv->cfg.upstream_retries) {
            gw_metrics_add(srv->m, "lisa_gateway_upstream_retries_total", NULL,
                           1);
            s_chat_send(c);
            return;
        }
        gw_err_set(&err, rc, 502, "server_error", "engine_unreachable", NULL,
                   "the generation engine could not be reached (%s)", error);
        s_chat_fail(&c, &err);
        return;
    }
    if (rc == LISA_TIMEOUT) {
        s_upstream_err(srv, c->engine, "timeout");
        gw_err_set(&err, rc, 504, "server_error", "engine_timeout", NULL,
                   "the generation engine did not answer in time");
        s_chat_fail(&c, &err);
        return;
    }
    if (rc != LISA_OK || status != 200) {
        s_upstream_err(srv, c->engine, "status");
        if (status == 429 || status == 503)
            gw_err_set(&err, LISA_AGAIN, 429, "rate_limit_error", "engine_busy",
                       NULL, "the generation engine is busy or paused; retry");
        else
            gw_err_set(&err, LISA_ERR, 502, "server_error", "engine_error",
                       NULL, "the generation engine answered %ld", status);
        s_chat_fail(&c, &err);
        return;
    }
    gw_completion_t comp;
    char why[160];
    if (gw_upstream_parse(body, len, srv->cfg.max_context, &comp, why,
                          sizeof why) != LISA_OK) {
        s_upstream_err(srv, c->engine, "malformed");
        lisa_log_warn("engine %s: %s", c->engine, why);
        gw_err_set(&err, LISA_INVALID, 502, "server_error", "bad_engine_reply",
                   NULL, "bad engine reply: %s", why);
        s_chat_fail(&c, &err);
        return;
    }
    s_chat_answer(c, &comp);
    gw_completion_clear(&comp);
}

static void
s_chat_done(lisa_http_response_t *resp, void *arg)
{
    size_t len;
    const char *body = lisa_http_response_body(resp, &len);
    s_chat_result(arg, lisa_http_response_rc(resp),
                  lisa_http_response_status(resp), body, len,
                  lisa_http_response_error(resp));
}

static void
s_chat_gdone(const gw_client_resp_t *resp, void *arg)
{
    s_chat_result(arg, resp->rc, resp->status, resp->body, resp->body_len,
                  resp->error);
}

static void
s_chat(gw_server_t *srv, lisa_http_req_t *req, const char *route, int64_t t0_us,
       const lisa_token_claims_t *who)
{
    s_chat_t *c = lisa_calloc(1, sizeof *c);
    c->c = (s_ctx_t){srv, req, route, t0_us, *who, 0, NULL};
    gw_err_t err;
    size_t len;
    const char *turn = lisa_http_req_header(req, "X-Lisa-Turn");
    if (turn) {
        char *end = NULL;
        long long t = strtoll(turn, &end, 10);
        c->turn = end && !*end && t > 0 ? t : 0;
    }
    gw_attempt_t *seen =
        gw_trace_find(srv->trace, who->rollout_id, who->attempt);
    bool sse;
    const char *again =
        seen && c->turn ? gw_attempt_answer(seen, c->turn, &len, &sse) : NULL;
    if (again) {
        /* a retried turn: the same answer, no second engine call or span */
        (void) lisa_http_req_respond(
            req, 200, sse ? "text/event-stream" : "application/json", again,
            len);
        s_count(srv, route, 200, t0_us);
        s_chat_free(&c);
        return;
    }
    const char *body = lisa_http_req_body(req, &len);
    /* the history re-sent since the attempt's last call is not scanned
     * again when its bytes are unchanged */
    gw_chat_prefix_t known;
    bool have = seen && gw_attempt_prefix(seen, &known);
    if (gw_chat_req_parse_after(body, len, have ? &known : NULL, &c->chat,
                                &err) != LISA_OK) {
        s_chat_fail(&c, &err);
        return;
    }
    memcpy(c->tools, c->chat.tools_digest, GW_DIGEST_LEN);
    gw_attempt_t *a = gw_trace_find(srv->trace, who->rollout_id, who->attempt);
    if (srv->rpc && (!a || !gw_attempt_based(a))) {
        Lisa__SpanStatusReq ss = LISA__SPAN_STATUS_REQ__INIT;
        ss.rollout_id = c->c.who.rollout_id;
        ss.attempt = who->attempt;
        Lisa__Request r = LISA__REQUEST__INIT;
        r.body_case = LISA__REQUEST__BODY_SPAN_STATUS;
        r.span_status = &ss;
        if (lisa_rpc_send(srv->rpc, &r, (int) srv->cfg.rpc_timeout_ms,
                          s_chat_based, c, NULL) != LISA_OK) {
            s_broker_err(srv, "SpanStatus", LISA_ERR, NULL, &err);
            s_chat_fail(&c, &err);
        }
        return;
    }
    s_chat_render(c);
}

/* ---- /v1/completions passthrough ---------------------------------------- */

typedef struct {
    s_ctx_t c;
    char engine[160];
} s_pass_t;

static void
s_pass_done(lisa_http_response_t *resp, void *arg)
{
    s_pass_t *p = arg;
    s_untrack(p->c.srv, &p->c);
    gw_server_t *srv = p->c.srv;
    lisa_rc_t rc = lisa_http_response_rc(resp);
    gw_pool_call_ended(srv->pool, p->engine,
                       rc == LISA_UNAVAILABLE || rc == LISA_ERR);
    if (rc != LISA_OK) {
        gw_err_t err;
        s_upstream_err(srv, p->engine, "connect");
        gw_err_set(&err, rc, rc == LISA_TIMEOUT ? 504 : 502, "server_error",
                   "engine_unreachable", NULL, "engine call failed: %s",
                   lisa_http_response_error(resp));
        s_respond_err(srv, p->c.req, p->c.route, p->c.t0_us, &err);
    } else {
        size_t len;
        const char *body = lisa_http_response_body(resp, &len);
        s_respond_json(srv, p->c.req, p->c.route, p->c.t0_us,
                       (unsigned) lisa_http_response_status(resp), body, len);
    }
    lisa_free(&p);
}

static void
s_completions(gw_server_t *srv, lisa_http_req_t *req, const char *route,
              int64_t t0_us, const lisa_token_claims_t *who)
{
    gw_err_t err;
    size_t len;
    const char *body = lisa_http_req_body(req, &len);
    json_t *j = json_loadb(body, len, 0, NULL);
    bool ok = json_is_object(j);
    json_decref(j);
    if (!ok) {
        gw_err_set(&err, LISA_INVALID, 400, "invalid_request_error", NULL, NULL,
                   "the body must be a JSON object");
        s_respond_err(srv, req, route, t0_us, &err);
        return;
    }
    gw_attempt_t *a = gw_trace_find(srv->trace, who->rollout_id, who->attempt);
    const char *id, *url;
    lisa_rc_t rc =
        gw_pool_pick(srv->pool, a ? gw_attempt_engine(a) : NULL, &id, &url);
    if (rc != LISA_OK) {
        s_refresh_now(srv);
        gw_err_set(&err, rc, rc == LISA_AGAIN ? 429 : 503,
                   rc == LISA_AGAIN ? "rate_limit_error" : "server_error", NULL,
                   NULL, "no generation engine is available now");
        s_respond_err(srv, req, route, t0_us, &err);
        return;
    }
    s_pass_t *p = lisa_calloc(1, sizeof *p);
    p->c = (s_ctx_t){srv, req, route, t0_us, *who, 0, NULL};
    snprintf(p->engine, sizeof p->engine, "%s", id);
    char full[2048];
    snprintf(full, sizeof full, "%s/v1/completions", url);
    /* no "Expect: 100-continue" round trip before the body */
    static const char *const hdrs[] = {"Content-Type: application/json",
                                       "Expect:", NULL};
    lisa_http_request_t r = {.method = "POST",
                             .url = full,
                             .headers = hdrs,
                             .body = body,
                             .body_len = len,
                             .timeout_ms = (long) srv->cfg.upstream_timeout_ms};
    gw_pool_call_started(srv->pool, id);
    s_track(srv, &p->c, S_KIND_PASS);
    if (lisa_http_client_send(srv->hc, &r, s_pass_done, p, NULL) != LISA_OK) {
        s_untrack(srv, &p->c);
        gw_pool_call_ended(srv->pool, id, false);
        gw_err_set(&err, LISA_ERR, 500, "server_error", NULL, NULL,
                   "could not start the engine call");
        s_respond_err(srv, req, route, t0_us, &err);
        lisa_free(&p);
    }
}

/* ---- task, heartbeat, result -------------------------------------------- */

static json_t *
s_limits_json(const Lisa__Limits *l)
{
    if (!l)
        return json_object();
    json_t *o =
        json_pack("{s:I,s:I,s:I}", "max_turns", (json_int_t) l->max_turns,
                  "max_context_tokens", (json_int_t) l->max_context_tokens,
                  "max_tokens_per_call", (json_int_t) l->max_tokens_per_call);
    /* sampling knobs only when set (0 means "engine default") */
    if (l->temperature > 0)
        json_object_set_new(o, "temperature",
                            json_real((double) l->temperature));
    if (l->top_p > 0)
        json_object_set_new(o, "top_p", json_real((double) l->top_p));
    return o;
}

static char *
s_b64(const uint8_t *p, size_t n)
{
    char *out = lisa_malloc(4 * ((n + 2) / 3) + 1);
    EVP_EncodeBlock((unsigned char *) out, p, (int) n);
    return out;
}

/* True when the bytes are UTF-8 text without NUL (sent as "content"). */
static bool
s_is_text(const uint8_t *p, size_t n)
{
    json_t *j = json_stringn((const char *) p, n);
    bool ok = j != NULL && memchr(p, 0, n) == NULL;
    json_decref(j);
    return ok;
}

static json_t *
s_task_json(const Lisa__TaskView *t)
{
    json_t *files = json_array();
    for (size_t i = 0; i < t->n_files; i++) {
        const ProtobufCBinaryData *c = &t->files[i]->content;
        json_t *f;
        if (s_is_text(c->data, c->len))
            f = json_pack("{s:s,s:s%}", "path", t->files[i]->path, "content",
                          (const char *) c->data, c->len);
        else {
            char *b = s_b64(c->data, c->len);
            f = json_pack("{s:s,s:s,s:s}", "path", t->files[i]->path, "content",
                          b, "encoding", "base64");
            lisa_free(&b);
        }
        json_array_append_new(files, f);
    }
    json_t *extra = t->extra_info_json && t->extra_info_json[0]
                        ? json_loads(t->extra_info_json, 0, NULL)
                        : NULL;
    if (!json_is_object(extra)) {
        json_decref(extra);
        extra = json_object();
    }
    json_t *limits = s_limits_json(t->limits);
    uint64_t now = s_now_ms();
    json_object_set_new(limits, "deadline_ms",
                        json_integer((json_int_t) t->deadline_ms));
    if (t->deadline_ms)
        json_object_set_new(
            limits, "time_left_ms",
            json_integer(t->deadline_ms > now
                             ? (json_int_t) (t->deadline_ms - now)
                             : 0));
    return json_pack("{s:s,s:I,s:s,s:s,s:s,s:o,s:o,s:o,s:I,s:I}", "rollout_id",
                     t->rollout_id, "attempt", (json_int_t) t->attempt,
                     "task_id", t->task_id, "data_source", t->data_source,
                     "problem_statement", t->problem_statement, "files", files,
                     "extra_info", extra, "limits", limits, "deadline_ms",
                     (json_int_t) t->deadline_ms, "policy_version",
                     (json_int_t) t->policy_version);
}

/* Attempts whose result was accepted: a repeated post is answered without
 * the broker (the agent retries results on transient errors). Bounded. */
#define S_MAX_DONE 65536u

static void
s_done_key(char *buf, size_t len, const lisa_token_claims_t *who)
{
    snprintf(buf, len, "%s#%u", who->rollout_id, who->attempt);
}

static void
s_done_add(gw_server_t *srv, const lisa_token_claims_t *who)
{
    char key[160];
    s_done_key(key, sizeof key, who);
    if (zhashx_size(srv->done) >= S_MAX_DONE)
        zhashx_purge(srv->done);
    zhashx_update(srv->done, key, (void *) 1);
}

static void
s_rpc_answer(void *arg, uint64_t request_id, lisa_rc_t rc,
             const Lisa__Reply *rep)
{
    (void) request_id;
    s_ctx_t *c = arg;
    gw_server_t *srv = c->srv;
    if (rc != LISA_OK || !rep || rep->code != LISA__CODE__CODE_OK) {
        gw_err_t err;
        s_broker_err(srv, c->route, rc, rep, &err);
        s_respond_err(srv, c->req, c->route, c->t0_us, &err);
        lisa_free(&c);
        return;
    }
    json_t *o = NULL;
    if (rep->body_case == LISA__REPLY__BODY_GET_TASK && rep->get_task->task)
        o = s_task_json(rep->get_task->task);
    else if (rep->body_case == LISA__REPLY__BODY_HEARTBEAT)
        o = json_pack("{s:I,s:b}", "lease_expiry_ms",
                      (json_int_t) rep->heartbeat->lease_expiry_ms, "cancel",
                      rep->heartbeat->cancel);
    else if (rep->body_case == LISA__REPLY__BODY_ATTEMPT_COMPLETE) {
        o = json_pack("{s:b}", "accepted", 1);
        gw_trace_close(srv->trace, c->who.rollout_id, c->who.attempt);
        s_done_add(srv, &c->who);
    }
    if (!o) {
        gw_err_t err;
        gw_err_set(&err, LISA_ERR, 502, "server_error", "broker_error", NULL,
                   "unexpected broker reply");
        s_respond_err(srv, c->req, c->route, c->t0_us, &err);
    } else {
        char *s = json_dumps(o, JSON_COMPACT);
        s_respond_json(srv, c->req, c->route, c->t0_us, 200, s, strlen(s));
        free(s);
        json_decref(o);
    }
    lisa_free(&c);
}

static void
s_rpc_go(gw_server_t *srv, Lisa__Request *r, s_ctx_t *c)
{
    if (lisa_rpc_send(srv->rpc, r, (int) srv->cfg.rpc_timeout_ms, s_rpc_answer,
                      c, NULL) != LISA_OK) {
        gw_err_t err;
        s_broker_err(srv, c->route, LISA_ERR, NULL, &err);
        s_respond_err(srv, c->req, c->route, c->t0_us, &err);
        lisa_free(&c);
    }
}

static bool
s_need_broker(gw_server_t *srv, lisa_http_req_t *req, const char *route,
              int64_t t0_us)
{
    if (srv->rpc)
        return true;
    gw_err_t err;
    gw_err_set(&err, LISA_UNAVAILABLE, 503, "server_error", "no_broker", NULL,
               "this gateway runs without a broker");
    s_respond_err(srv, req, route, t0_us, &err);
    return false;
}

static void
s_task(gw_server_t *srv, lisa_http_req_t *req, const char *route, int64_t t0_us,
       const lisa_token_claims_t *who)
{
    if (!s_need_broker(srv, req, route, t0_us))
        return;
    s_ctx_t *c = s_ctx_new(srv, req, route, t0_us, who);
    Lisa__GetTaskReq g = LISA__GET_TASK_REQ__INIT;
    g.rollout_id = c->who.rollout_id;
    g.attempt = who->attempt;
    Lisa__Request r = LISA__REQUEST__INIT;
    r.body_case = LISA__REQUEST__BODY_GET_TASK;
    r.get_task = &g;
    s_rpc_go(srv, &r, c);
}

/* Parses an optional JSON object body; NULL body text gives {}. */
static json_t *
s_body_object(lisa_http_req_t *req, const lisa_token_claims_t *who,
              gw_err_t *err)
{
    size_t len;
    const char *body = lisa_http_req_body(req, &len);
    if (len == 0)
        return json_object();
    json_error_t jerr;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(o)) {
        json_decref(o);
        gw_err_set(err, LISA_INVALID, 400, "invalid_request_error", NULL, NULL,
                   "the body must be a JSON object");
        return NULL;
    }
    if (s_same_attempt(o, who, err) != LISA_OK) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void
s_heartbeat(gw_server_t *srv, lisa_http_req_t *req, const char *route,
            int64_t t0_us, const lisa_token_claims_t *who)
{
    gw_err_t err;
    json_t *o = s_body_object(req, who, &err);
    if (!o) {
        s_respond_err(srv, req, route, t0_us, &err);
        return;
    }
    json_t *note = json_object_get(o, "note");
    if ((note && !json_is_string(note)) || json_string_length(note) > 1024) {
        json_decref(o);
        gw_err_set(&err, LISA_INVALID, 400, "invalid_request_error", NULL,
                   "note", "'note' must be a string of at most 1024 bytes");
        s_respond_err(srv, req, route, t0_us, &err);
        return;
    }
    if (!s_need_broker(srv, req, route, t0_us)) {
        json_decref(o);
        return;
    }
    s_ctx_t *c = s_ctx_new(srv, req, route, t0_us, who);
    char *text = lisa_strdup(note ? json_string_value(note) : "");
    Lisa__HeartbeatReq h = LISA__HEARTBEAT_REQ__INIT;
    h.rollout_id = c->who.rollout_id;
    h.attempt = who->attempt;
    h.note = text;
    Lisa__Request r = LISA__REQUEST__INIT;
    r.body_case = LISA__REQUEST__BODY_HEARTBEAT;
    r.heartbeat = &h;
    s_rpc_go(srv, &r, c);
    lisa_free(&text);
    json_decref(o);
}

typedef struct {
    s_ctx_t c;
    char *answer, *end_reason, *detail;
    uint32_t turns;
    uint64_t deadline_ms;
} s_result_t;

static void
s_result_free(s_result_t **rp)
{
    s_result_t *r = *rp;
    if (!r)
        return;
    lisa_free(&r->answer);
    lisa_free(&r->end_reason);
    lisa_free(&r->detail);
    lisa_free(rp);
}

static void
s_result_send(gw_server_t *srv, s_result_t *res)
{
    Lisa__AttemptResult ar = LISA__ATTEMPT_RESULT__INIT;
    ar.answer = res->answer;
    ar.turns = res->turns;
    ar.end_reason = res->end_reason;
    ar.detail = res->detail;
    Lisa__AttemptCompleteReq ac = LISA__ATTEMPT_COMPLETE_REQ__INIT;
    ac.rollout_id = res->c.who.rollout_id;
    ac.attempt = res->c.who.attempt;
    ac.result = &ar;
    gw_attempt_t *a =
        gw_trace_find(srv->trace, res->c.who.rollout_id, res->c.who.attempt);
    ac.expected_spans = a && gw_attempt_based(a) ? gw_attempt_next_seq(a) : 0;
    Lisa__Request r = LISA__REQUEST__INIT;
    r.body_case = LISA__REQUEST__BODY_ATTEMPT_COMPLETE;
    r.attempt_complete = &ac;
    s_ctx_t *c =
        s_ctx_new(srv, res->c.req, res->c.route, res->c.t0_us, &res->c.who);
    s_rpc_go(srv, &r, c);
    s_result_free(&res);
}

static void
s_results_check(gw_server_t *srv)
{
    uint64_t now = s_now_ms();
    s_result_t *res = zlistx_first(srv->results);
    while (res) {
        void *cursor = zlistx_cursor(srv->results);
        s_result_t *next = zlistx_next(srv->results);
        size_t pending = gw_spanq_pending_for(srv->spanq, res->c.who.rollout_id,
                                              res->c.who.attempt);
        if (pending == 0 || now >= res->deadline_ms) {
            zlistx_delete(srv->results, cursor);
            if (pending == 0)
                s_result_send(srv, res);
            else {
                gw_err_t err;
                gw_err_set(&err, LISA_TIMEOUT, 503, "server_error",
                           "spans_pending", NULL,
                           "%zu spans of this attempt are not stored yet; "
                           "post the result again",
                           pending);
                s_respond_err(srv, res->c.req, res->c.route, res->c.t0_us,
                              &err);
                s_result_free(&res);
            }
        }
        res = next;
        if (res)
            zlistx_find(srv->results, res);
    }
}

static char *
s_opt_str(json_t *o, const char *k, size_t max, bool *bad)
{
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v))
        return lisa_strdup("");
    if (!json_is_string(v) || json_string_length(v) > max) {
        *bad = true;
        return NULL;
    }
    return lisa_strndup(json_string_value(v), json_string_length(v));
}

static void
s_result(gw_server_t *srv, lisa_http_req_t *req, const char *route,
         int64_t t0_us, const lisa_token_claims_t *who)
{
    gw_err_t err;
    json_t *o = s_body_object(req, who, &err);
    if (!o) {
        s_respond_err(srv, req, route, t0_us, &err);
        return;
    }
    bool bad = false;
    s_result_t *res = lisa_calloc(1, sizeof *res);
    res->c = (s_ctx_t){srv, req, route, t0_us, *who, 0, NULL};
    res->answer = s_opt_str(o, "answer", S_MAX_ANSWER, &bad);
    res->end_reason = s_opt_str(o, "end_reason", 64, &bad);
    res->detail = s_opt_str(o, "detail", 4096, &bad);
    json_t *turns = json_object_get(o, "turns");
    if (turns && (!json_is_integer(turns) || json_integer_value(turns) < 0 ||
                  json_integer_value(turns) > 1000000))
        bad = true;
    res->turns = turns ? (uint32_t) json_integer_value(turns) : 0;
    json_decref(o);
    if (bad) {
        s_result_free(&res);
        gw_err_set(&err, LISA_INVALID, 400, "invalid_request_error", NULL, NULL,
                   "result fields: answer (string, at most 1 MiB), "
                   "end_reason, detail (strings), turns (integer)");
        s_respond_err(srv, req, route, t0_us, &err);
        return;
    }
    char key[160];
    s_done_key(key, sizeof key, who);
    if (zhashx_lookup(srv->done, key)) {
        s_result_free(&res);
        static const char again[] = "{\"accepted\":true,\"repeat\":true}";
        s_respond_json(srv, req, route, t0_us, 200, again, sizeof again - 1);
        return;
    }
    if (!s_need_broker(srv, req, route, t0_us)) {
        s_result_free(&res);
        return;
    }
    res->deadline_ms = s_now_ms() + srv->cfg.result_wait_ms;
    zlistx_add_end(srv->results, res);
    s_span_flush(srv);
    s_results_check(srv);
}

/* ---- operator routes ---------------------------------------------------- */

static void
s_models(gw_server_t *srv, lisa_http_req_t *req, const char *route,
         int64_t t0_us, const lisa_token_claims_t *who)
{
    (void) who;
    json_t *o = json_pack("{s:s,s:[{s:s,s:s,s:i,s:s}]}", "object", "list",
                          "data", "id", srv->cfg.model, "object", "model",
                          "created", 0, "owned_by", "lisa");
    char *s = json_dumps(o, JSON_COMPACT);
    s_respond_json(srv, req, route, t0_us, 200, s, strlen(s));
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
s_metrics(gw_server_t *srv, lisa_http_req_t *req, const char *route,
          int64_t t0_us, const lisa_token_claims_t *who)
{
    (void) who;
    s_update_gauges(srv);
    size_t len;
    char *txt = gw_metrics_render(srv->m, &len);
    (void) lisa_http_req_respond(req, 200, "text/plain; version=0.0.4", txt,
                                 len);
    s_count(srv, route, 200, t0_us);
    lisa_free(&txt);
}

static void
s_healthz(gw_server_t *srv, lisa_http_req_t *req, const char *route,
          int64_t t0_us, const lisa_token_claims_t *who)
{
    (void) who;
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
    s_respond_json(srv, req, route, t0_us, 200, s, strlen(s));
    free(s);
    json_decref(o);
}

static void
s_admin(gw_server_t *srv, lisa_http_req_t *req, const char *route,
        int64_t t0_us, const lisa_token_claims_t *who)
{
    (void) who;
    const char *path = lisa_http_req_path(req);
    if (strcmp(path, "/admin/pause") == 0)
        gw_pool_pause_all(srv->pool, true);
    else if (strcmp(path, "/admin/resume") == 0)
        gw_pool_pause_all(srv->pool, false);
    json_t *o =
        json_pack("{s:b,s:I}", "paused", gw_pool_paused(srv->pool), "inflight",
                  (json_int_t) gw_pool_inflight(srv->pool, NULL));
    char *s = json_dumps(o, JSON_COMPACT);
    s_respond_json(srv, req, route, t0_us, 200, s, strlen(s));
    free(s);
    json_decref(o);
}

/* ---- routing ------------------------------------------------------------ */

typedef enum { S_OPEN, S_TOKEN, S_ADMIN } s_auth_t;

typedef void(s_route_fn)(gw_server_t *, lisa_http_req_t *, const char *,
                         int64_t, const lisa_token_claims_t *);

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

static bool
s_admin_ok(gw_server_t *srv, lisa_http_req_t *req)
{
    const char *key = srv->cfg.admin_key;
    const char *tok = s_bearer(req);
    if (!key || !key[0] || !tok || strlen(tok) != strlen(key))
        return false;
    return CRYPTO_memcmp(tok, key, strlen(key)) == 0;
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
        s_respond_err(srv, req, "other", t0, &err);
        return;
    }
    lisa_token_claims_t who;
    memset(&who, 0, sizeof who);
    if (hit->auth == S_TOKEN && s_auth(srv, req, &who, &err) != LISA_OK) {
        s_respond_err(srv, req, hit->label, t0, &err);
        return;
    }
    if (hit->auth == S_ADMIN && !s_admin_ok(srv, req)) {
        gw_err_set(&err, LISA_UNAUTHORIZED, 401, "authentication_error",
                   "invalid_api_key", NULL, "admin routes need the admin key");
        s_respond_err(srv, req, hit->label, t0, &err);
        return;
    }
    hit->fn(srv, req, hit->label, t0, &who);
}

/* ---- timers ------------------------------------------------------------- */

static int
s_on_tick(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    gw_server_t *srv = arg;
    s_span_flush(srv);
    if (zlistx_size(srv->results))
        s_results_check(srv);
    return 0;
}

static void
s_engines_listed(void *arg, uint64_t request_id, lisa_rc_t rc,
                 const Lisa__Reply *rep)
{
    (void) request_id;
    gw_server_t *srv = arg;
    srv->listing = false;
    if (rc != LISA_OK || !rep || rep->code != LISA__CODE__CODE_OK ||
        rep->body_case != LISA__REPLY__BODY_ENGINE_LIST) {
        gw_metrics_add(srv->m, "lisa_gateway_broker_errors_total",
                       "request=\"EngineList\"", 1);
        return; /* keep the engines we know */
    }
    gw_pool_sync_begin(srv->pool);
    for (size_t i = 0; i < rep->engine_list->n_engines; i++) {
        const Lisa__Engine *e = rep->engine_list->engines[i];
        if (!e->up)
            continue;
        if (gw_pool_upsert(srv->pool, e->engine_id, e->url, e->policy_version,
                           e->paused, true) != LISA_OK)
            lisa_log_warn("engine %.64s refused (bad id/url or pool full)",
                          e->engine_id);
    }
    gw_pool_sync_end(srv->pool);
}

static int
s_on_refresh(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    gw_server_t *srv = arg;
    if (!srv->rpc || srv->listing)
        return 0;
    Lisa__EngineListReq el = LISA__ENGINE_LIST_REQ__INIT;
    Lisa__Request r = LISA__REQUEST__INIT;
    r.body_case = LISA__REQUEST__BODY_ENGINE_LIST;
    r.engine_list = &el;
    if (lisa_rpc_send(srv->rpc, &r, (int) srv->cfg.rpc_timeout_ms,
                      s_engines_listed, srv, NULL) == LISA_OK)
        srv->listing = true;
    return 0;
}

typedef struct {
    s_ctx_t c; /* only srv, kind and handle are used */
    char id[160];
} s_health_t;

static void
s_health_done(lisa_http_response_t *resp, void *arg)
{
    s_health_t *h = arg;
    s_untrack(h->c.srv, &h->c);
    h->c.srv->health_pending--;
    gw_pool_health(h->c.srv->pool, h->id,
                   lisa_http_response_rc(resp) == LISA_OK &&
                       lisa_http_response_status(resp) == 200);
    lisa_free(&h);
}

static int
s_on_health(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    gw_server_t *srv = arg;
    if (srv->health_pending)
        return 0;
    for (size_t i = 0; i < gw_pool_size(srv->pool); i++) {
        const char *id, *url;
        gw_pool_at(srv->pool, i, &id, &url, NULL, NULL, NULL);
        char full[2048];
        snprintf(full, sizeof full, "%s/healthz", url);
        s_health_t *h = lisa_calloc(1, sizeof *h);
        h->c.srv = srv;
        snprintf(h->id, sizeof h->id, "%s", id);
        lisa_http_request_t r = {.url = full,
                                 .timeout_ms = S_HEALTH_TO_MS,
                                 .connect_timeout_ms = S_HEALTH_TO_MS};
        s_track(srv, &h->c, S_KIND_HEALTH);
        if (lisa_http_client_send(srv->hc, &r, s_health_done, h, NULL) ==
            LISA_OK)
            srv->health_pending++;
        else {
            s_untrack(srv, &h->c);
            lisa_free(&h);
        }
    }
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

static char *
s_dup(const char *s)
{
    return s ? lisa_strdup(s) : NULL;
}

static void
s_copy_cfg(gw_config_t *dst, const gw_config_t *src)
{
    *dst = *src;
    dst->address = s_dup(src->address);
    dst->unix_path = s_dup(src->unix_path);
    dst->port_file = s_dup(src->port_file);
    dst->broker = s_dup(src->broker);
    dst->token_key = s_dup(src->token_key);
    dst->admin_key = s_dup(src->admin_key);
    dst->tokenizer = s_dup(src->tokenizer);
    dst->engines = s_dup(src->engines);
    dst->model = s_dup(src->model ? src->model : "lisa");
    dst->gateway_id = s_dup(src->gateway_id ? src->gateway_id : "gw");
}

gw_server_t *
gw_server_new(const gw_config_t *cfg, zloop_t *loop)
{
    gw_server_t *srv = lisa_calloc(1, sizeof *srv);
    s_copy_cfg(&srv->cfg, cfg);
    srv->auth = lisa_calloc(S_AUTH_SLOTS, sizeof *srv->auth);
    srv->loop = loop;
    char err[256];
    if (!cfg->token_key ||
        lisa_token_key_from_spec(cfg->token_key, &srv->key, err, sizeof err) !=
            LISA_OK) {
        lisa_log_error("gateway: token key: %s",
                       cfg->token_key ? err : "not set");
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
    srv->m = gw_metrics_new();
    srv->results = zlistx_new();
    srv->done = zhashx_new();
    srv->calls = zlistx_new();
    if (cfg->broker && cfg->broker[0]) {
        srv->rpc = lisa_rpc_new(cfg->broker, cfg->gateway_id);
        if (!srv->rpc ||
            lisa_rpc_attach(srv->rpc, loop, S_TICK_MS) != LISA_OK) {
            lisa_log_error("gateway: cannot use broker %s", cfg->broker);
            goto fail;
        }
    }
    lisa_http_client_config_t hcc = {0};
    srv->hc = lisa_http_client_new(loop, &hcc);
    srv->gc = gw_client_new(loop, LISA_HTTP_CLIENT_DEFAULT_MAX_RESPONSE);
    if (!srv->hc || !srv->gc)
        goto fail;
    lisa_http_server_config_t hs = {
        .address = cfg->address && cfg->address[0] ? cfg->address : NULL,
        .port = (uint16_t) cfg->port,
        .unix_path =
            cfg->unix_path && cfg->unix_path[0] ? cfg->unix_path : NULL,
        .handler = s_on_request,
        .handler_arg = srv,
        .loop = loop,
        .max_body = cfg->max_body,
        .max_connections = (unsigned) cfg->max_connections,
        .request_timeout_ms = (unsigned) cfg->request_timeout_ms,
        .loop_driven = cfg->http_threads == 0,
        .threads = (unsigned) cfg->http_threads};
    srv->http = lisa_http_server_new(&hs);
    if (!srv->http)
        goto fail;
    srv->tick_timer = zloop_timer(loop, S_TICK_MS, 0, s_on_tick, srv);
    if (srv->rpc && cfg->engine_refresh_ms) {
        srv->refresh_timer =
            zloop_timer(loop, cfg->engine_refresh_ms, 0, s_on_refresh, srv);
        s_on_refresh(loop, 0, srv);
    }
    if (cfg->health_interval_ms)
        srv->health_timer =
            zloop_timer(loop, cfg->health_interval_ms, 0, s_on_health, srv);
    srv->expire_timer = zloop_timer(loop, 60000, 0, s_on_expire, srv);
    if (cfg->port_file && cfg->port_file[0]) {
        FILE *f = fopen(cfg->port_file, "w");
        if (f) {
            fprintf(f, "%u\n", lisa_http_server_port(srv->http));
            fclose(f);
        }
    }
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
    if (srv->loop) {
        if (srv->tick_timer)
            zloop_timer_end(srv->loop, srv->tick_timer);
        if (srv->refresh_timer)
            zloop_timer_end(srv->loop, srv->refresh_timer);
        if (srv->health_timer)
            zloop_timer_end(srv->loop, srv->health_timer);
        if (srv->expire_timer)
            zloop_timer_end(srv->loop, srv->expire_timer);
    }
    lisa_http_server_destroy(&srv->http);
    /* kept requests were answered 503 by the HTTP layer; each still gets
     * its one respond call (which releases it) before its context goes */
    if (srv->results) {
        for (s_result_t *r = zlistx_first(srv->results); r;
             r = zlistx_next(srv->results)) {
            (void) lisa_http_req_respond(r->c.req, 503, NULL, "", 0);
            s_result_free(&r);
        }
        zlistx_destroy(&srv->results);
    }
    zhashx_destroy(&srv->done);
    lisa_http_client_destroy(&srv->hc); /* drops engine calls, no callbacks */
    gw_client_destroy(&srv->gc);
    if (srv->calls) {
        s_ctx_t *c;
        while ((c = zlistx_first(srv->calls))) {
            zlistx_delete(srv->calls, zlistx_cursor(srv->calls));
            if (c->kind == S_KIND_HEALTH) {
                lisa_free(&c);
                continue;
            }
            (void) lisa_http_req_respond(c->req, 503, NULL, "", 0);
            if (c->kind == S_KIND_CHAT) {
                s_chat_t *chat = (s_chat_t *) (void *) c;
                s_chat_free(&chat);
            } else
                lisa_free(&c);
        }
        zlistx_destroy(&srv->calls);
    }
    if (srv->rpc) {
        lisa_rpc_detach(srv->rpc);
        lisa_rpc_destroy(&srv->rpc);
    }
    if (srv->spanq && gw_spanq_size(srv->spanq))
        lisa_log_warn("gateway: %zu spans were never acknowledged",
                      gw_spanq_size(srv->spanq));
    gw_spanq_destroy(&srv->spanq);
    gw_trace_destroy(&srv->trace);
    gw_pool_destroy(&srv->pool);
    gw_metrics_destroy(&srv->m);
    gw_render_destroy(&srv->render);
    lisa_token_key_wipe(&srv->key);
    if (srv->auth)
        OPENSSL_cleanse(srv->auth, S_AUTH_SLOTS * sizeof *srv->auth);
    lisa_free(&srv->auth);
    gw_config_free(&srv->cfg);
    lisa_free(self);
}

uint16_t
gw_server_port(const gw_server_t *self)
{
    return lisa_http_server_port(self->http);
}
