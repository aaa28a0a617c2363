/*
 * gw_chat: the chat pipeline (see the header and docs/gateway.md).
 */
#include "gw_chat.h"

#include "gw_openai.h"
#include "gw_upstream.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <czmq.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gw_chat_t {
    gw_chat_deps_t d;
    zlistx_t *calls; /* s_chat_t waiting for an engine */
    uint64_t counter;
    uint64_t prompt_answered, cached; /* prefix cache, since start */
    uint64_t published[2];            /* what gw_chat_publish added */
};

static uint64_t
s_now_ms(void)
{
    return lisa_token_now_ms();
}

typedef struct {
    gw_req_t r;
    gw_chat_t *self;
    void *handle; /* its node in self->calls while the engine call runs */
    gw_chat_req_t chat;
    uint8_t (*dig)[GW_DIGEST_LEN];
    size_t n_dig;
    uint8_t tools[GW_DIGEST_LEN];
    gw_attempt_t *a; /* valid while begun (busy attempts stay put) */
    bool begun;
    /* the engine request: pre + the attempt's id text (borrowed: it does
     * not change while the call runs) + post */
    char *pre, *post;
    size_t pre_len, post_len;
    const char *text;
    size_t text_len;
    char engine[160];
    unsigned tries;
    uint64_t start_ms;
    int64_t up_t0_us;
    int64_t turn;             /* X-Lisa-Turn, 0 when absent */
    float temperature, top_p; /* what the engine is told (the span's) */
    int32_t top_k;
    int64_t up_done_us; /* when the engine's answer arrived */
} s_chat_t;

static void
s_track(s_chat_t *c)
{
    c->handle = zlistx_add_end(c->self->calls, c);
}

static void
s_untrack(s_chat_t *c)
{
    if (c->handle)
        zlistx_delete(c->self->calls, c->handle);
    c->handle = NULL;
}

static void
s_answer_err(s_chat_t *c, const gw_err_t *err)
{
    gw_answer_err(c->self->d.m, c->self->d.cfg->retry_after_s, &c->r, err);
}

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
    lisa_free(cp);
}

static void
s_chat_fail(s_chat_t **cp, const gw_err_t *err)
{
    s_chat_t *c = *cp;
    s_answer_err(c, err);
    s_chat_free(cp);
}

static void s_chat_send(s_chat_t *c);

/* The call's sampling: the run's when the rollout has one (whatever the
 * agent asked, as Agent Lightning's gateway does; a differing request is
 * counted), else the agent's with OpenAI's defaults (1, 1, none). Always
 * sent to the engine, so the span records what it sampled with. */
static void
s_chat_sampling(s_chat_t *c, gw_attempt_t *a)
{
    const gw_chat_req_t *q = &c->chat;
    float t, p;
    int32_t k;
    if (gw_attempt_sampling(a, &t, &p, &k)) {
        bool differs = (q->temperature >= 0 && (float) q->temperature != t) ||
                       (q->top_p >= 0 && (float) q->top_p != p) ||
                       (q->top_k >= 0 && q->top_k != k);
        if (differs)
            gw_metrics_add(c->self->d.m,
                           "lisa_gateway_sampling_overridden_total", NULL, 1);
    } else {
        t = q->temperature >= 0 ? (float) q->temperature : 1.0f;
        p = q->top_p >= 0 ? (float) q->top_p : 1.0f;
        k = q->top_k > 0 && q->top_k < INT32_MAX ? (int32_t) q->top_k : 0;
    }
    c->temperature = t;
    c->top_p = p;
    c->top_k = k;
}

/* Parses messages[first..]: they are rendered. An assistant turn among
 * them is rendered with the conversation's last user query in view (the
 * template's think rule), so then every message is parsed. */
static lisa_rc_t
s_chat_parse_new(s_chat_t *c, size_t first, gw_err_t *err)
{
    bool assistant = false;
    for (size_t i = first; i < c->n_dig; i++) {
        json_t *m = gw_chat_req_msg(&c->chat, i, err);
        if (!m)
            return LISA_INVALID;
        const char *role = json_string_value(json_object_get(m, "role"));
        assistant = assistant || (role && strcmp(role, "assistant") == 0);
    }
    for (size_t i = 0; assistant && i < first; i++)
        if (!gw_chat_req_msg(&c->chat, i, err))
            return LISA_INVALID;
    return LISA_OK;
}

/* Digests of the request's messages, and the plan: an extension of the
 * attempt's history from message *first on (*ext), or a new segment. */
static lisa_rc_t
s_chat_plan(s_chat_t *c, gw_attempt_t *a, size_t *first, bool *ext,
            gw_err_t *err)
{
    gw_chat_t *self = c->self;
    /* digests: from the attempt's cache when the bytes are unchanged */
    c->n_dig = c->chat.n_msgs;
    c->dig = lisa_malloc(c->n_dig * GW_DIGEST_LEN);
    for (size_t i = 0; i < c->n_dig; i++) {
        if (c->chat.raw_len[i] &&
            gw_attempt_cached_digest(a, i, c->chat.raw_hash[i], c->dig[i]))
            continue;
        json_t *m = gw_chat_req_msg(&c->chat, i, err);
        if (!m) {
            return LISA_INVALID;
        }
        gw_msg_digest(m, c->dig[i]);
    }
    *ext = gw_attempt_plan(a, (const uint8_t(*)[GW_DIGEST_LEN]) c->dig,
                           c->n_dig, c->tools, first);
    if (!*ext && gw_attempt_spans(a) > 0)
        gw_metrics_add(self->d.m, "lisa_gateway_segments_total", NULL, 1);
    if (s_chat_parse_new(c, *first, err) != LISA_OK)
        return LISA_INVALID;
    /* tools are parsed (and validated) only when they changed or the
     * whole conversation is rendered */
    if (c->chat.has_tools && (!*ext || *first == 0) &&
        !gw_chat_req_tools(&c->chat, err)) {
        return LISA_INVALID;
    }
    return LISA_OK;
}

static void
s_chat_render(s_chat_t *c)
{
    gw_chat_t *self = c->self;
    gw_err_t err;
    gw_attempt_t *a;
    if (gw_trace_open(self->d.trace, c->r.who.rollout_id, c->r.who.attempt,
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
    size_t first = 0;
    bool ext = false;
    if (s_chat_plan(c, a, &first, &ext, &err) != LISA_OK) {
        s_chat_fail(&c, &err);
        return;
    }
    size_t max = self->d.cfg->max_context;
    lisa_ids_t *ids = lisa_ids_new(max);
    lisa_rc_t rc = gw_render_prompt(self->d.render, c->chat.messages, first,
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
    s_chat_sampling(c, a);
    size_t plen;
    (void) gw_attempt_prompt(a, &plen);
    int64_t room = (int64_t) max - (int64_t) plen;
    int64_t want = c->chat.max_tokens
                       ? c->chat.max_tokens
                       : (int64_t) self->d.cfg->default_max_tokens;
    size_t n_stop_ids;
    const int32_t *stop_ids = gw_render_stop_ids(self->d.render, &n_stop_ids);
    gw_sampling_t s = {.model = self->d.cfg->model,
                       .max_tokens = want < room ? want : room,
                       .temperature = (double) c->temperature,
                       .top_p = (double) c->top_p,
                       .top_k = c->top_k,
                       .stop_ids = stop_ids,
                       .n_stop_ids = n_stop_ids,
                       .stop = c->chat.stop,
                       .n_stop = c->chat.n_stop};
    size_t n_tail;
    const uint32_t *tail;
    gw_attempt_prompt_parts(a, &c->text, &c->text_len, &tail, &n_tail);
    gw_upstream_body_split(c->text_len, tail, n_tail, &s, &c->pre, &c->pre_len,
                           &c->post, &c->post_len);
    gw_metrics_add(self->d.m, "lisa_gateway_tokens_in_total", NULL,
                   (double) appended);
    gw_metrics_add(self->d.m, "lisa_gateway_prompt_tokens_total", NULL,
                   (double) plen);
    if (!gw_spanq_has_room(self->d.spanq, 1)) {
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
    gw_chat_t *self = c->self;
    if (rc != LISA_OK || !rep || rep->code != LISA__CODE__CODE_OK ||
        rep->body_case != LISA__REPLY__BODY_SPAN_STATUS) {
        gw_err_t err;
        gw_answer_broker_err(self->d.m, "SpanStatus", rc, rep, &err);
        s_chat_fail(&c, &err);
        return;
    }
    gw_attempt_t *a;
    if (gw_trace_open(self->d.trace, c->r.who.rollout_id, c->r.who.attempt,
                      s_now_ms(), &a) == LISA_OK) {
        int64_t next = (int64_t) rep->span_status->contiguous_seq + 1;
        if ((int64_t) rep->span_status->count > next)
            next = rep->span_status->count;
        gw_attempt_set_base(a, (uint32_t) next);
        gw_attempt_set_sampling(a, rep->span_status->sampling);
    }
    s_chat_render(c);
}

static void s_chat_ended(const gw_engine_resp_t *resp, void *arg);

static void
s_chat_send(s_chat_t *c)
{
    gw_chat_t *self = c->self;
    gw_err_t err;
    const char *id, *url;
    lisa_rc_t rc = gw_pool_pick_group(self->d.pool, gw_attempt_engine(c->a),
                                      gw_attempt_group(c->a), &id, &url);
    if (rc != LISA_OK) {
        gw_pool_refresh_soon(self->d.pool);
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
    gw_pool_call_started(self->d.pool, id);
    c->tries++;
    c->up_t0_us = zclock_usecs();
    if (c->tries == 1)
        gw_metrics_observe(self->d.m, "lisa_gateway_stage_seconds",
                           "stage=\"prepare\"",
                           (double) (c->up_t0_us - c->r.t0_us) / 1e6);
    s_track(c);
    /* the parts stay put until the call ends; the callback may run before
     * this returns (a refused connection), and nothing here touches c
     * after it */
    struct iovec parts[3] = {
        {.iov_base = c->pre, .iov_len = c->pre_len},
        {.iov_base = (void *) (uintptr_t) c->text, .iov_len = c->text_len},
        {.iov_base = c->post, .iov_len = c->post_len}};
    if (gw_engine_post(self->d.engine, full, parts, 3,
                       (long) self->d.cfg->upstream_timeout_ms, 2000,
                       s_chat_ended, c) != LISA_OK) {
        s_untrack(c);
        gw_pool_call_ended(self->d.pool, id, false);
        gw_err_set(&err, LISA_ERR, 500, "server_error", NULL, NULL,
                   "could not start the engine call");
        s_chat_fail(&c, &err);
    }
}

static void
s_upstream_err(gw_metrics_t *m, const char *engine, const char *kind)
{
    char labels[256];
    snprintf(labels, sizeof labels, "engine=\"%s\",kind=\"%s\"", engine, kind);
    gw_metrics_add(m, "lisa_gateway_upstream_errors_total", labels, 1);
}

/* Prefix-cache accounting: the engine's cached prompt tokens against the
 * prompt tokens of the calls it answered, kept here and published when
 * /metrics is read (gw_chat_publish), so a call costs two additions. */
static void
s_count_cache(gw_chat_t *self, size_t prompt, uint64_t cached)
{
    self->prompt_answered += prompt;
    self->cached += cached;
}

void
gw_chat_publish(gw_chat_t *self)
{
    gw_metrics_add(self->d.m, "lisa_gateway_answered_prompt_tokens_total", NULL,
                   (double) (self->prompt_answered - self->published[0]));
    gw_metrics_add(self->d.m, "lisa_gateway_cached_tokens_total", NULL,
                   (double) (self->cached - self->published[1]));
    self->published[0] = self->prompt_answered;
    self->published[1] = self->cached;
    gw_metrics_set(self->d.m, "lisa_gateway_prefix_cache_hit_rate", NULL,
                   self->prompt_answered
                       ? (double) self->cached / (double) self->prompt_answered
                       : 0);
}

static void
s_chat_answer(s_chat_t *c, gw_completion_t *comp)
{
    gw_chat_t *self = c->self;
    gw_err_t err;
    char id_prefix[64], chat_id[96];
    uint64_t k = ++self->counter;
    snprintf(id_prefix, sizeof id_prefix, "call_%s_%llu",
             self->d.cfg->gateway_id, (unsigned long long) k);
    snprintf(chat_id, sizeof chat_id, "chatcmpl-%s-%llu",
             self->d.cfg->gateway_id, (unsigned long long) k);
    bool tools =
        c->chat.has_tools &&
        !(c->chat.tool_choice && strcmp(c->chat.tool_choice, "none") == 0);
    gw_reply_t reply;
    if (gw_render_reply(self->d.render, comp->ids, comp->n, comp->finish_reason,
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
                     .gateway_id = self->d.cfg->gateway_id,
                     .start_ms = c->start_ms,
                     .first_token_ms = 0,
                     .end_ms = s_now_ms(),
                     .temperature = c->temperature,
                     .top_p = c->top_p,
                     .top_k = c->top_k};
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
                   (unsigned long long) self->d.cfg->max_context);
        s_chat_fail(&c, &err);
        return;
    }
    if (self->d.rpc) {
        if (gw_spanq_push(self->d.spanq, &span) != LISA_OK)
            gw_metrics_add(self->d.m, "lisa_gateway_spans_total",
                           "outcome=\"dropped\"", 1);
        self->d.spans_added(self->d.arg);
    } else {
        gw_span_free(&span);
        gw_metrics_add(self->d.m, "lisa_gateway_spans_total",
                       "outcome=\"no_broker\"", 1);
    }
    gw_metrics_add(self->d.m, "lisa_gateway_tokens_out_total", NULL,
                   (double) comp->n);
    /* an engine cannot have cached more than the prompt */
    uint64_t cached = comp->cached_tokens < plen ? comp->cached_tokens : plen;
    s_count_cache(self, plen, cached);
    gw_usage_t u = {plen, comp->n, cached};
    const char *model = c->chat.model ? c->chat.model : self->d.cfg->model;
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
        c->r.req, 200,
        c->chat.stream ? "text/event-stream" : "application/json", body, len);
    gw_metrics_observe(self->d.m, "lisa_gateway_stage_seconds",
                       "stage=\"respond\"",
                       (double) (zclock_usecs() - r0) / 1e6);
    gw_answer_count(self->d.m, c->r.route, 200, c->r.t0_us);
    gw_metrics_observe(self->d.m, "lisa_gateway_stage_seconds",
                       "stage=\"finish\"",
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
    s_untrack(c);
    c->up_done_us = zclock_usecs();
    gw_chat_t *self = c->self;
    gw_err_t err;
    bool conn = rc == LISA_UNAVAILABLE || rc == LISA_ERR;
    gw_pool_call_ended(self->d.pool, c->engine, conn);
    char labels[200];
    snprintf(labels, sizeof labels, "engine=\"%s\"", c->engine);
    gw_metrics_observe(self->d.m, "lisa_gateway_upstream_seconds", labels,
                       (double) (zclock_usecs() - c->up_t0_us) / 1e6);
    if (conn) {
        s_upstream_err(self->d.m, c->engine, "connect");
        if (c->tries <= self->d.cfg->upstream_retries) {
            gw_metrics_add(self->d.m, "lisa_gateway_upstream_retries_total",
                           NULL, 1);
            s_chat_send(c);
            return;
        }
        gw_err_set(&err, rc, 502, "server_error", "engine_unreachable", NULL,
                   "the generation engine could not be reached (%s)", error);
        s_chat_fail(&c, &err);
        return;
    }
    if (rc == LISA_TIMEOUT) {
        s_upstream_err(self->d.m, c->engine, "timeout");
        gw_err_set(&err, rc, 504, "server_error", "engine_timeout", NULL,
                   "the generation engine did not answer in time");
        s_chat_fail(&c, &err);
        return;
    }
    if (rc != LISA_OK || status != 200) {
        s_upstream_err(self->d.m, c->engine, "status");
        if (status == 429 || status == 503)
            gw_err_set(&err, LISA_AGAIN, 429, "rate_limit_error", "engine_busy",
                       NULL, "the generation engine is busy or paused; retry");
        else {
            char said[160];
            gw_upstream_error_text(body, len, said, sizeof said);
            gw_err_set(&err, LISA_ERR, 502, "server_error", "engine_error",
                       NULL, "the generation engine answered %ld%s%s", status,
                       said[0] ? ": " : "", said);
        }
        s_chat_fail(&c, &err);
        return;
    }
    gw_completion_t comp;
    char why[160];
    if (gw_upstream_parse(body, len, self->d.cfg->max_context, &comp, why,
                          sizeof why) != LISA_OK) {
        s_upstream_err(self->d.m, c->engine, "malformed");
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
s_chat_ended(const gw_engine_resp_t *resp, void *arg)
{
    s_chat_result(arg, resp->rc, resp->status, resp->body, resp->len,
                  resp->error);
}

void
gw_chat_handle(gw_chat_t *self, const gw_req_t *r)
{
    s_chat_t *c = lisa_calloc(1, sizeof *c);
    c->r = *r;
    c->self = self;
    lisa_http_req_t *req = r->req;
    const lisa_token_claims_t *who = &c->r.who;
    gw_err_t err;
    size_t len;
    const char *turn = lisa_http_req_header(req, "X-Lisa-Turn");
    if (turn) {
        char *end = NULL;
        long long t = strtoll(turn, &end, 10);
        c->turn = end && !*end && t > 0 ? t : 0;
    }
    gw_attempt_t *seen =
        gw_trace_find(self->d.trace, who->rollout_id, who->attempt);
    bool sse;
    const char *again =
        seen && c->turn ? gw_attempt_answer(seen, c->turn, &len, &sse) : NULL;
    if (again) {
        /* a retried turn: the same answer, no second engine call or span */
        (void) lisa_http_req_respond(
            req, 200, sse ? "text/event-stream" : "application/json", again,
            len);
        gw_answer_count(self->d.m, r->route, 200, r->t0_us);
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
    gw_attempt_t *a =
        gw_trace_find(self->d.trace, who->rollout_id, who->attempt);
    if (self->d.rpc && (!a || !gw_attempt_based(a))) {
        Lisa__SpanStatusReq ss = LISA__SPAN_STATUS_REQ__INIT;
        ss.rollout_id = c->r.who.rollout_id;
        ss.attempt = who->attempt;
        Lisa__Request rq = LISA__REQUEST__INIT;
        rq.body_case = LISA__REQUEST__BODY_SPAN_STATUS;
        rq.span_status = &ss;
        if (lisa_rpc_send(self->d.rpc, &rq, (int) self->d.cfg->rpc_timeout_ms,
                          s_chat_based, c, NULL) != LISA_OK) {
            gw_answer_broker_err(self->d.m, "SpanStatus", LISA_ERR, NULL, &err);
            s_chat_fail(&c, &err);
        }
        return;
    }
    s_chat_render(c);
}

gw_chat_t *
gw_chat_new(const gw_chat_deps_t *deps)
{
    gw_chat_t *self = lisa_calloc(1, sizeof *self);
    self->d = *deps;
    self->calls = zlistx_new();
    return self;
}

void
gw_chat_destroy(gw_chat_t **self)
{
    if (!self || !*self)
        return;
    gw_chat_t *g = *self;
    s_chat_t *c;
    while ((c = zlistx_first(g->calls))) {
        zlistx_delete(g->calls, zlistx_cursor(g->calls));
        c->handle = NULL;
        (void) lisa_http_req_respond(c->r.req, 503, NULL, "", 0);
        s_chat_free(&c);
    }
    zlistx_destroy(&g->calls);
    lisa_free(self);
}

size_t
gw_chat_inflight(const gw_chat_t *self)
{
    return zlistx_size(self->calls);
}
