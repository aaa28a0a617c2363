/*
 * gw_agent: task, heartbeat and result for the sandbox (see the header).
 */
#include "gw_agent.h"

#include "gw_auth.h"
#include "lisa/lisa_mem.h"

#include <czmq.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_ANSWER (1u << 20)

struct gw_agent_t {
    gw_agent_deps_t d;
    zlistx_t *results; /* s_result_t waiting for span acks */
    zhashx_t *done;    /* attempts whose result was accepted */
};

/* A broker call on behalf of one request. */
typedef struct {
    gw_agent_t *self;
    gw_req_t r;
} s_call_t;

static uint64_t
s_now_ms(void)
{
    return lisa_token_now_ms();
}

static void
s_answer_err(gw_agent_t *self, const gw_req_t *r, const gw_err_t *err)
{
    gw_answer_err(self->d.m, self->d.cfg->retry_after_s, r, err);
}

static json_t *
s_limits_json(const Lisa__Limits *l)
{
    if (!l)
        return json_object();
    json_t *o =
        json_pack("{s:I,s:I,s:I}", "max_turns", (json_int_t) l->max_turns,
                  "max_context_tokens", (json_int_t) l->max_context_tokens,
                  "max_tokens_per_call", (json_int_t) l->max_tokens_per_call);
    /* sampling knobs only when set (0 means "engine default"); the run's
     * sampling, when set, is what the gateway applies anyway */
    const Lisa__Sampling *s = l->sampling;
    if (s) {
        json_object_set_new(o, "temperature",
                            json_real((double) s->temperature));
        json_object_set_new(o, "top_p", json_real((double) s->top_p));
        if (s->top_k > 0)
            json_object_set_new(o, "top_k", json_integer(s->top_k));
        return o;
    }
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
    json_t *o = json_pack(
        "{s:s,s:I,s:s,s:s,s:s,s:o,s:o,s:o,s:I,s:I}", "rollout_id",
        t->rollout_id, "attempt", (json_int_t) t->attempt, "task_id",
        t->task_id, "data_source", t->data_source, "problem_statement",
        t->problem_statement, "files", files, "extra_info", extra, "limits",
        limits, "deadline_ms", (json_int_t) t->deadline_ms, "policy_version",
        (json_int_t) t->policy_version);
    /* the run's prompts (agent.prompts), rendered by the trainer */
    if (o && t->system_prompt && *t->system_prompt)
        json_object_set_new(
            o, "prompt",
            json_pack("{s:s,s:s}", "system", t->system_prompt, "user",
                      t->instance_prompt ? t->instance_prompt : ""));
    return o;
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
s_done_add(gw_agent_t *self, const lisa_token_claims_t *who)
{
    char key[160];
    s_done_key(key, sizeof key, who);
    if (zhashx_size(self->done) >= S_MAX_DONE)
        zhashx_purge(self->done);
    zhashx_update(self->done, key, (void *) 1);
}

/* The task reply names the rollout's group: the attempt's chat calls are
 * then placed with the group's other attempts (gw_pool); and its run's
 * sampling, which they use. */
static void
s_note_task(gw_agent_t *self, const lisa_token_claims_t *who,
            const Lisa__TaskView *t)
{
    gw_attempt_t *a;
    const Lisa__Sampling *smp = t->limits ? t->limits->sampling : NULL;
    if (((t->group_id && *t->group_id) || smp) &&
        gw_trace_open(self->d.trace, who->rollout_id, who->attempt, s_now_ms(),
                      &a) == LISA_OK) {
        if (t->group_id && *t->group_id)
            gw_attempt_set_group(a, t->group_id);
        gw_attempt_set_sampling(a, smp);
    }
}

static void
s_rpc_answer(void *arg, uint64_t request_id, lisa_rc_t rc,
             const Lisa__Reply *rep)
{
    (void) request_id;
    s_call_t *c = arg;
    gw_agent_t *self = c->self;
    if (rc != LISA_OK || !rep || rep->code != LISA__CODE__CODE_OK) {
        gw_err_t err;
        gw_answer_broker_err(self->d.m, c->r.route, rc, rep, &err);
        s_answer_err(self, &c->r, &err);
        lisa_free(&c);
        return;
    }
    json_t *o = NULL;
    if (rep->body_case == LISA__REPLY__BODY_GET_TASK && rep->get_task->task) {
        o = s_task_json(rep->get_task->task);
        s_note_task(self, &c->r.who, rep->get_task->task);
    } else if (rep->body_case == LISA__REPLY__BODY_HEARTBEAT)
        o = json_pack("{s:I,s:b}", "lease_expiry_ms",
                      (json_int_t) rep->heartbeat->lease_expiry_ms, "cancel",
                      rep->heartbeat->cancel);
    else if (rep->body_case == LISA__REPLY__BODY_ATTEMPT_COMPLETE) {
        o = json_pack("{s:b}", "accepted", 1);
        gw_trace_close(self->d.trace, c->r.who.rollout_id, c->r.who.attempt);
        s_done_add(self, &c->r.who);
    }
    if (!o) {
        gw_err_t err;
        gw_err_set(&err, LISA_ERR, 502, "server_error", "broker_error", NULL,
                   "unexpected broker reply");
        s_answer_err(self, &c->r, &err);
    } else {
        char *s = json_dumps(o, JSON_COMPACT);
        gw_answer_json(self->d.m, &c->r, 200, s, strlen(s));
        free(s);
        json_decref(o);
    }
    lisa_free(&c);
}

/* Sends r for the request c answers (c is consumed). */
static void
s_rpc_go(gw_agent_t *self, Lisa__Request *r, const gw_req_t *req)
{
    s_call_t *c = lisa_calloc(1, sizeof *c);
    c->self = self;
    c->r = *req;
    if (lisa_rpc_send(self->d.rpc, r, (int) self->d.cfg->rpc_timeout_ms,
                      s_rpc_answer, c, NULL) != LISA_OK) {
        gw_err_t err;
        gw_answer_broker_err(self->d.m, c->r.route, LISA_ERR, NULL, &err);
        s_answer_err(self, &c->r, &err);
        lisa_free(&c);
    }
}

static bool
s_need_broker(gw_agent_t *self, const gw_req_t *r)
{
    if (self->d.rpc)
        return true;
    gw_err_t err;
    gw_err_set(&err, LISA_UNAVAILABLE, 503, "server_error", "no_broker", NULL,
               "this gateway runs without a broker");
    s_answer_err(self, r, &err);
    return false;
}

void
gw_agent_task(gw_agent_t *self, const gw_req_t *r)
{
    if (!s_need_broker(self, r))
        return;
    Lisa__GetTaskReq g = LISA__GET_TASK_REQ__INIT;
    g.rollout_id = (char *) (uintptr_t) r->who.rollout_id;
    g.attempt = r->who.attempt;
    Lisa__Request rq = LISA__REQUEST__INIT;
    rq.body_case = LISA__REQUEST__BODY_GET_TASK;
    rq.get_task = &g;
    s_rpc_go(self, &rq, r);
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
    if (gw_auth_same_attempt(o, who, err) != LISA_OK) {
        json_decref(o);
        return NULL;
    }
    return o;
}

void
gw_agent_heartbeat(gw_agent_t *self, const gw_req_t *r)
{
    gw_err_t err;
    json_t *o = s_body_object(r->req, &r->who, &err);
    if (!o) {
        s_answer_err(self, r, &err);
        return;
    }
    json_t *note = json_object_get(o, "note");
    if ((note && !json_is_string(note)) || json_string_length(note) > 1024) {
        json_decref(o);
        gw_err_set(&err, LISA_INVALID, 400, "invalid_request_error", NULL,
                   "note", "'note' must be a string of at most 1024 bytes");
        s_answer_err(self, r, &err);
        return;
    }
    if (!s_need_broker(self, r)) {
        json_decref(o);
        return;
    }
    char *text = lisa_strdup(note ? json_string_value(note) : "");
    Lisa__HeartbeatReq h = LISA__HEARTBEAT_REQ__INIT;
    h.rollout_id = (char *) (uintptr_t) r->who.rollout_id;
    h.attempt = r->who.attempt;
    h.note = text;
    Lisa__Request rq = LISA__REQUEST__INIT;
    rq.body_case = LISA__REQUEST__BODY_HEARTBEAT;
    rq.heartbeat = &h;
    s_rpc_go(self, &rq, r);
    lisa_free(&text);
    json_decref(o);
}

typedef struct {
    gw_req_t r;
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
s_result_send(gw_agent_t *self, s_result_t *res)
{
    Lisa__AttemptResult ar = LISA__ATTEMPT_RESULT__INIT;
    ar.answer = res->answer;
    ar.turns = res->turns;
    ar.end_reason = res->end_reason;
    ar.detail = res->detail;
    Lisa__AttemptCompleteReq ac = LISA__ATTEMPT_COMPLETE_REQ__INIT;
    ac.rollout_id = res->r.who.rollout_id;
    ac.attempt = res->r.who.attempt;
    ac.result = &ar;
    gw_attempt_t *a =
        gw_trace_find(self->d.trace, res->r.who.rollout_id, res->r.who.attempt);
    ac.expected_spans = a && gw_attempt_based(a) ? gw_attempt_next_seq(a) : 0;
    Lisa__Request rq = LISA__REQUEST__INIT;
    rq.body_case = LISA__REQUEST__BODY_ATTEMPT_COMPLETE;
    rq.attempt_complete = &ac;
    s_rpc_go(self, &rq, &res->r);
    s_result_free(&res);
}

void
gw_agent_check(gw_agent_t *self)
{
    uint64_t now = s_now_ms();
    s_result_t *res = zlistx_first(self->results);
    while (res) {
        void *cursor = zlistx_cursor(self->results);
        s_result_t *next = zlistx_next(self->results);
        size_t pending = gw_spanq_pending_for(
            self->d.spanq, res->r.who.rollout_id, res->r.who.attempt);
        if (pending == 0 || now >= res->deadline_ms) {
            zlistx_delete(self->results, cursor);
            if (pending == 0)
                s_result_send(self, res);
            else {
                gw_err_t err;
                gw_err_set(&err, LISA_TIMEOUT, 503, "server_error",
                           "spans_pending", NULL,
                           "%zu spans of this attempt are not stored yet; "
                           "post the result again",
                           pending);
                s_answer_err(self, &res->r, &err);
                s_result_free(&res);
            }
        }
        res = next;
        if (res)
            zlistx_find(self->results, res);
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

void
gw_agent_result(gw_agent_t *self, const gw_req_t *r)
{
    gw_err_t err;
    json_t *o = s_body_object(r->req, &r->who, &err);
    if (!o) {
        s_answer_err(self, r, &err);
        return;
    }
    bool bad = false;
    s_result_t *res = lisa_calloc(1, sizeof *res);
    res->r = *r;
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
        s_answer_err(self, r, &err);
        return;
    }
    char key[160];
    s_done_key(key, sizeof key, &r->who);
    if (zhashx_lookup(self->done, key)) {
        s_result_free(&res);
        static const char again[] = "{\"accepted\":true,\"repeat\":true}";
        gw_answer_json(self->d.m, r, 200, again, sizeof again - 1);
        return;
    }
    if (!s_need_broker(self, r)) {
        s_result_free(&res);
        return;
    }
    res->deadline_ms = s_now_ms() + self->d.cfg->result_wait_ms;
    zlistx_add_end(self->results, res);
    self->d.spans_due(self->d.arg);
    gw_agent_check(self);
}

gw_agent_t *
gw_agent_new(const gw_agent_deps_t *deps)
{
    gw_agent_t *self = lisa_calloc(1, sizeof *self);
    self->d = *deps;
    self->results = zlistx_new();
    self->done = zhashx_new();
    return self;
}

void
gw_agent_destroy(gw_agent_t **self)
{
    if (!self || !*self)
        return;
    gw_agent_t *a = *self;
    /* kept requests were answered 503 by the HTTP layer; each still gets
     * its one respond call (which releases it) before its context goes */
    for (s_result_t *r = zlistx_first(a->results); r;
         r = zlistx_next(a->results)) {
        (void) lisa_http_req_respond(r->r.req, 503, NULL, "", 0);
        s_result_free(&r);
    }
    zlistx_destroy(&a->results);
    zhashx_destroy(&a->done);
    lisa_free(self);
}

size_t
gw_agent_held(const gw_agent_t *self)
{
    return zlistx_size(self->results);
}
