/*
 * trn_engine: batched generation over HTTP (see trn_engine.h).
 */
#include "trn_engine.h"

#include "lisa.pb-c.h"
#include "lisa/lisa_codec.h"
#include "lisa/lisa_http_server.h"
#include "lisa/lisa_json.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_rpc.h"
#include "trn_sampler.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define S_MAX_STOP   64u
#define S_MAX_PROMPT (1u << 20)

typedef struct s_job {
    struct s_job *next;
    lisa_http_req_t *req;
    int32_t *prompt;
    size_t n_prompt;
    size_t max_tokens;
    trn_sampling_t samp;
    uint64_t rng;
    uint64_t seed; /* for backends that sample on the device */
    int32_t stop[S_MAX_STOP];
    size_t n_stop;
    uint64_t enq_ms;
    /* generation state */
    int32_t *out;
    float *out_lp;
    size_t n_out;
    size_t slot;
    bool prefilled;
    uint64_t version;
} s_job_t;

struct trn_engine {
    trn_backend_t *b;
    trn_engine_cfg_t cfg;
    char url[256];
    char id[128];
    char *broker;
    lisa_http_server_t *http;
    pthread_t thread, reg_thread;
    bool reg_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* work arrived / stop */
    pthread_cond_t idle; /* no in-flight while paused */
    s_job_t *qhead, *qtail;
    size_t qlen;
    s_job_t **active; /* by slot */
    size_t n_active;
    bool paused, stop;
    uint64_t version;
    uint64_t state_seq; /* bumped by pause / resume; the registration
                           thread re-registers when it moved */
    uint64_t seed_ctr;
    trn_engine_stats_t st;
};

static uint64_t
s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}

static void
s_job_free(s_job_t **j)
{
    if (!*j)
        return;
    lisa_free(&(*j)->prompt);
    lisa_free(&(*j)->out);
    lisa_free(&(*j)->out_lp);
    lisa_free(j);
}

/* ---- HTTP side --------------------------------------------------------- */

static lisa_rc_t
s_ids(const json_t *a, int32_t *ids, size_t max, size_t vocab, size_t *n,
      const char *what, char *why, size_t wl)
{
    if (!json_is_array(a)) {
        snprintf(why, wl, "%s must be an array of token ids", what);
        return LISA_INVALID;
    }
    if (json_array_size(a) > max) {
        snprintf(why, wl, "%s has more than %zu ids", what, max);
        return LISA_TOOLARGE;
    }
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            (size_t) json_integer_value(v) >= vocab) {
            snprintf(why, wl, "%s[%zu] is not a token id below %zu", what, i,
                     vocab);
            return LISA_INVALID;
        }
        ids[i] = (int32_t) json_integer_value(v);
    }
    *n = json_array_size(a);
    return LISA_OK;
}

/* Parses a completion request into a job; why says what is wrong. */
static s_job_t *
s_parse(trn_engine_t *e, const char *body, size_t len, char *why, size_t wl)
{
    char jerr[200];
    json_t *r = NULL;
    s_job_t *j = NULL;
    size_t vocab = (size_t) e->b->ops->config(e->b)->vocab_size;
    if (lisa_json_load_buf(body, len, LISA_HTTP_DEFAULT_MAX_BODY, "body", &r,
                           jerr, sizeof jerr) != LISA_OK) {
        snprintf(why, wl, "%s", jerr);
        return NULL;
    }
    if (!json_is_object(r)) {
        snprintf(why, wl, "body must be a JSON object");
        goto fail;
    }
    j = lisa_calloc(1, sizeof *j);
    json_t *p = json_object_get(r, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 &&
        json_is_array(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (!json_is_array(p) || json_array_size(p) == 0) {
        snprintf(why, wl, "prompt must be a non-empty array of token ids");
        goto fail;
    }
    if (json_array_size(p) >= e->cfg.max_len) {
        snprintf(why, wl, "prompt of %zu tokens exceeds the context of %zu",
                 json_array_size(p), e->cfg.max_len);
        goto fail;
    }
    j->prompt = lisa_malloc(json_array_size(p) * sizeof *j->prompt);
    if (s_ids(p, j->prompt, S_MAX_PROMPT, vocab, &j->n_prompt, "prompt", why,
              wl) != LISA_OK)
        goto fail;
    json_t *st = json_object_get(r, "stop_token_ids");
    if (st && !json_is_null(st) &&
        s_ids(st, j->stop, S_MAX_STOP, vocab, &j->n_stop, "stop_token_ids", why,
              wl) != LISA_OK)
        goto fail;
    int64_t max_tokens = 0, top_k = 0, seed = -1, n = 1;
    double temp = 1.0, top_p = 1.0;
    if (lisa_json_get_int(r, "max_tokens", 16, &max_tokens, why, wl) ||
        lisa_json_get_int(r, "top_k", -1, &top_k, why, wl) ||
        lisa_json_get_int(r, "seed", -1, &seed, why, wl) ||
        lisa_json_get_int(r, "n", 1, &n, why, wl) ||
        lisa_json_get_double(r, "temperature", 1.0, &temp, why, wl) ||
        lisa_json_get_double(r, "top_p", 1.0, &top_p, why, wl))
        goto fail;
    if (n != 1) {
        snprintf(why, wl, "n must be 1");
        goto fail;
    }
    bool stream = false;
    if (lisa_json_get_bool(r, "stream", false, &stream, why, wl))
        goto fail;
    if (stream) {
        snprintf(why, wl, "stream is not supported");
        goto fail;
    }
    if (max_tokens < 1) {
        snprintf(why, wl, "max_tokens must be >= 1");
        goto fail;
    }
    if (!(temp >= 0 && temp <= 100) || !(top_p > 0 && top_p <= 1)) {
        snprintf(why, wl, "temperature must be in [0, 100], top_p in (0, 1]");
        goto fail;
    }
    size_t room = e->cfg.max_len - j->n_prompt;
    j->max_tokens = (size_t) max_tokens < room ? (size_t) max_tokens : room;
    j->samp.temperature = (float) temp;
    j->samp.top_p = (float) top_p;
    j->samp.top_k = (int32_t) (top_k > 0 && top_k < INT32_MAX ? top_k : 0);
    j->out = lisa_malloc(j->max_tokens * sizeof *j->out);
    j->out_lp = lisa_malloc(j->max_tokens * sizeof *j->out_lp);
    pthread_mutex_lock(&e->mu);
    uint64_t s = seed >= 0 ? (uint64_t) seed : e->cfg.seed + (e->seed_ctr++);
    pthread_mutex_unlock(&e->mu);
    j->rng = trn_rng_seed(s);
    j->seed = s;
    json_decref(r);
    return j;
fail:
    json_decref(r);
    s_job_free(&j);
    return NULL;
}

static void
s_handler(lisa_http_req_t *req, void *arg)
{
    trn_engine_t *e = arg;
    const char *m = lisa_http_req_method(req), *path = lisa_http_req_path(req);
    if (strcmp(path, "/healthz") == 0 && strcmp(m, "GET") == 0) {
        char b[256];
        pthread_mutex_lock(&e->mu);
        int l = snprintf(b, sizeof b,
                         "{\"status\":\"ok\",\"policy_version\":%llu,"
                         "\"paused\":%s,\"inflight\":%zu,\"queued\":%zu}",
                         (unsigned long long) e->version,
                         e->paused ? "true" : "false", e->n_active, e->qlen);
        pthread_mutex_unlock(&e->mu);
        (void) lisa_http_req_respond(req, 200, "application/json", b,
                                     (size_t) l);
        return;
    }
    if (strcmp(path, "/v1/completions") != 0) {
        (void) lisa_http_req_respond_error(req, 404, "not_found", NULL,
                                           "no route %s", path);
        return;
    }
    if (strcmp(m, "POST") != 0) {
        (void) lisa_http_req_respond_error(req, 405, "invalid_request_error",
                                           NULL, "use POST");
        return;
    }
    size_t len = 0;
    const char *body = lisa_http_req_body(req, &len);
    char why[300] = "";
    s_job_t *j = s_parse(e, body ? body : "", len, why, sizeof why);
    pthread_mutex_lock(&e->mu);
    e->st.requests++;
    if (!j) {
        e->st.rejected_bad++;
        pthread_mutex_unlock(&e->mu);
        (void) lisa_http_req_respond_error(req, 400, "invalid_request_error",
                                           NULL, "%s", why);
        return;
    }
    if (e->qlen >= e->cfg.queue_max || e->stop) {
        e->st.rejected_full++;
        pthread_mutex_unlock(&e->mu);
        s_job_free(&j);
        lisa_http_req_add_header(req, "Retry-After", "1");
        (void) lisa_http_req_respond_error(req, 429, "rate_limit_error",
                                           "queue_full", "engine queue full");
        return;
    }
    j->req = req;
    j->enq_ms = s_now_ms();
    if (e->qtail)
        e->qtail->next = j;
    else
        e->qhead = j;
    e->qtail = j;
    e->qlen++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* ---- engine thread ----------------------------------------------------- */

static void
s_answer(trn_engine_t *e, s_job_t *j, const char *finish)
{
    json_t *ids = json_array(), *lps = json_array();
    for (size_t i = 0; i < j->n_out; i++) {
        json_array_append_new(ids, json_integer(j->out[i]));
        json_array_append_new(lps, json_real(j->out_lp[i]));
    }
    json_t *lp = json_pack("{s:o}", "token_logprobs", lps);
    json_t *choice =
        json_pack("{s:i,s:s,s:o,s:o,s:s}", "index", 0, "text", "", "token_ids",
                  ids, "logprobs", lp, "finish_reason", finish);
    json_t *r = json_pack("{s:s,s:s,s:[o],s:{s:I,s:I},s:I}", "object",
                          "text_completion", "model", e->id, "choices", choice,
                          "usage", "prompt_tokens", (json_int_t) j->n_prompt,
                          "completion_tokens", (json_int_t) j->n_out,
                          "policy_version", (json_int_t) j->version);
    char *txt = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    if (txt) {
        (void) lisa_http_req_respond(j->req, 200, "application/json", txt,
                                     strlen(txt));
        free(txt);
    } else {
        (void) lisa_http_req_respond_error(j->req, 500, "server_error", NULL,
                                           "cannot encode");
    }
    j->req = NULL;
}

static bool
s_is_stop(const s_job_t *j, int32_t t)
{
    for (size_t i = 0; i < j->n_stop; i++)
        if (j->stop[i] == t)
            return true;
    return false;
}

/* Admits queued jobs into free slots (lock held). */
static void
s_admit(trn_engine_t *e)
{
    uint64_t now = s_now_ms();
    while (e->qhead && !e->paused && e->n_active < e->cfg.max_batch) {
        s_job_t *j = e->qhead;
        e->qhead = j->next;
        if (!e->qhead)
            e->qtail = NULL;
        e->qlen--;
        j->next = NULL;
        size_t slot = 0;
        while (e->active[slot])
            slot++;
        j->slot = slot;
        j->version = e->version;
        e->active[slot] = j;
        e->n_active++;
    }
    /* expire waiting ones */
    s_job_t **pp = &e->qhead, *last = NULL;
    while (*pp) {
        s_job_t *j = *pp;
        if (e->cfg.queue_timeout_ms &&
            now - j->enq_ms > e->cfg.queue_timeout_ms) {
            *pp = j->next;
            e->qlen--;
            e->st.timed_out++;
            (void) lisa_http_req_respond_error(j->req, 503, "server_error",
                                               "engine_busy",
                                               "waited too long for a slot");
            s_job_free(&j);
            continue;
        }
        last = j;
        pp = &j->next;
    }
    e->qtail = last;
}

static void *
s_run(void *arg)
{
    trn_engine_t *e = arg;
    size_t B = e->cfg.max_batch, V = 0;
    V = (size_t) e->b->ops->config(e->b)->vocab_size;
    /* a backend with gen_sample draws on the device: no logits come back */
    bool dev = e->b->ops->gen_sample != NULL;
    float *logits = dev ? NULL : lisa_malloc(B * V * sizeof *logits);
    trn_sampling_t *samp = lisa_calloc(B, sizeof *samp);
    uint64_t *seeds = lisa_calloc(B, sizeof *seeds);
    int32_t *otok = lisa_calloc(B, sizeof *otok);
    float *olp = lisa_calloc(B, sizeof *olp);
    size_t *slots = lisa_malloc(B * sizeof *slots);
    const int32_t **toks = lisa_malloc(B * sizeof *toks);
    size_t *n_new = lisa_malloc(B * sizeof *n_new);
    s_job_t **batch = lisa_malloc(B * sizeof *batch);
    trn_err_t err;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        s_admit(e);
        while (!e->stop && e->n_active == 0) {
            if (e->paused)
                pthread_cond_broadcast(&e->idle);
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
            s_admit(e);
        }
        if (e->stop) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        size_t n = 0;
        for (size_t s = 0; s < B; s++)
            if (e->active[s])
                batch[n++] = e->active[s];
        pthread_mutex_unlock(&e->mu);
        uint64_t pre = 0;
        for (size_t i = 0; i < n; i++) {
            s_job_t *j = batch[i];
            slots[i] = j->slot;
            if (!j->prefilled) {
                e->b->ops->gen_reset(e->b, j->slot);
                toks[i] = j->prompt;
                n_new[i] = j->n_prompt;
                pre += j->n_prompt;
            } else {
                toks[i] = &j->out[j->n_out - 1];
                n_new[i] = 1;
            }
        }
        lisa_rc_t rc;
        if (dev) {
            for (size_t i = 0; i < n; i++) {
                samp[i] = batch[i]->samp;
                seeds[i] = batch[i]->seed;
            }
            rc = e->b->ops->gen_sample(e->b, n, slots, toks, n_new, samp, seeds,
                                       otok, olp, &err);
        } else {
            rc = e->b->ops->gen_step(e->b, n, slots, toks, n_new, logits, &err);
        }
        pthread_mutex_lock(&e->mu);
        e->st.steps++;
        e->st.tokens_prefilled += pre;
        for (size_t i = 0; i < n; i++) {
            s_job_t *j = batch[i];
            const char *fin = NULL;
            if (rc != LISA_OK) {
                (void) lisa_http_req_respond_error(j->req, 500, "server_error",
                                                   NULL, "generation: %s",
                                                   err.msg);
                fin = "error";
            } else {
                j->prefilled = true;
                int32_t t = otok[i];
                float lp = olp[i];
                trn_err_t se = {{0}};
                if (!dev && trn_sample(logits + i * V, V, &j->samp, &j->rng, &t,
                                       &lp, &se) != LISA_OK) {
                    (void) lisa_http_req_respond_error(j->req, 500,
                                                       "server_error", NULL,
                                                       "sampling: %s", se.msg);
                    fin = "error";
                } else {
                    j->out[j->n_out] = t;
                    j->out_lp[j->n_out] = isfinite(lp) ? lp : -1e30f;
                    j->n_out++;
                    e->st.tokens_generated++;
                    if (s_is_stop(j, t))
                        fin = "stop";
                    else if (j->n_out >= j->max_tokens)
                        fin = "length";
                }
            }
            if (fin) {
                if (strcmp(fin, "error") != 0) {
                    s_answer(e, j, fin);
                    e->st.completed++;
                }
                e->active[j->slot] = NULL;
                e->n_active--;
                s_job_free(&j);
            }
        }
        if (e->paused && e->n_active == 0)
            pthread_cond_broadcast(&e->idle);
        pthread_mutex_unlock(&e->mu);
    }
    lisa_free(&logits);
    lisa_free(&samp);
    lisa_free(&seeds);
    lisa_free(&otok);
    lisa_free(&olp);
    lisa_free(&slots);
    lisa_free(&toks);
    lisa_free(&n_new);
    lisa_free(&batch);
    return NULL;
}

/* ---- broker registration ----------------------------------------------- */

/* Registers the engine's state with the broker; returns the state_seq
 * that state belongs to. */
static uint64_t
s_register(trn_engine_t *e, lisa_rpc_t *rpc, bool final)
{
    Lisa__Engine eng = LISA__ENGINE__INIT;
    Lisa__EngineRegisterReq er = LISA__ENGINE_REGISTER_REQ__INIT;
    Lisa__Request req = LISA__REQUEST__INIT;
    pthread_mutex_lock(&e->mu);
    eng.policy_version = e->version;
    eng.paused = e->paused;
    uint64_t seq = e->state_seq;
    pthread_mutex_unlock(&e->mu);
    eng.engine_id = e->id;
    eng.url = e->url;
    eng.up = true;
    eng.max_batch = (uint32_t) e->cfg.max_batch;
    er.engine = &eng;
    er.ttl_ms = e->cfg.register_ttl_ms;
    if (final) {
        /* leaving: no new calls, and gone from the registry at once */
        eng.paused = true;
        er.ttl_ms = 1;
    }
    req.version = LISA_PROTOCOL_VERSION;
    req.body_case = LISA__REQUEST__BODY_ENGINE_REGISTER;
    req.engine_register = &er;
    Lisa__Reply *rep = NULL;
    lisa_rc_t rc = lisa_rpc_call(rpc, &req, final ? 500 : 2000, &rep);
    if (rc == LISA_OK)
        rc = lisa_rpc_reply_rc(rep);
    if (rc != LISA_OK)
        lisa_log_warn("engine: register with %s failed: %s", e->broker,
                      lisa_rc_str(rc));
    lisa_rpc_reply_free(&rep);
    return seq;
}

static void *
s_reg_run(void *arg)
{
    trn_engine_t *e = arg;
    lisa_rpc_t *rpc = lisa_rpc_new(e->broker, e->id);
    if (!rpc)
        return NULL;
    lisa_rpc_set_tries(rpc, 1);
    uint64_t every = e->cfg.register_ttl_ms / 3;
    if (every < 100)
        every = 100;
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        pthread_mutex_unlock(&e->mu);
        uint64_t seq = s_register(e, rpc, false);
        pthread_mutex_lock(&e->mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t) ts.tv_nsec + (every % 1000) * 1000000ull;
        ts.tv_sec += (time_t) (every / 1000 + ns / 1000000000ull);
        ts.tv_nsec = (long) (ns % 1000000000ull);
        /* a pause or resume during the call above is registered at once
         * (its wake-up came while no one waited), else the next renewal */
        int w = 0;
        while (!e->stop && e->state_seq == seq && w == 0)
            w = pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
    s_register(e, rpc, true);
    lisa_rpc_destroy(&rpc);
    return NULL;
}

/* ---- API --------------------------------------------------------------- */

trn_engine_t *
trn_engine_new(trn_backend_t *b, const trn_engine_cfg_t *cfg)
{
    trn_err_t err;
    trn_engine_t *e = lisa_calloc(1, sizeof *e);
    e->b = b;
    e->cfg = *cfg;
    if (!e->cfg.max_batch)
        e->cfg.max_batch = 16;
    if (!e->cfg.queue_max)
        e->cfg.queue_max = 256;
    size_t maxpos = (size_t) b->ops->config(b)->max_position_embeddings;
    if (!e->cfg.max_len)
        e->cfg.max_len = maxpos < TRN_ENGINE_DEFAULT_MAX_LEN
                             ? maxpos
                             : TRN_ENGINE_DEFAULT_MAX_LEN;
    if (e->cfg.max_len > maxpos)
        e->cfg.max_len = maxpos;
    if (!e->cfg.register_ttl_ms)
        e->cfg.register_ttl_ms = 10000;
    e->version = cfg->policy_version;
    snprintf(e->id, sizeof e->id, "%s",
             cfg->engine_id ? cfg->engine_id : "trainer");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->idle, NULL);
    e->active = lisa_calloc(e->cfg.max_batch, sizeof *e->active);
    if (b->ops->gen_open(b, e->cfg.max_batch, e->cfg.max_len, &err) !=
        LISA_OK) {
        lisa_log_error("engine: KV cache: %s", err.msg);
        goto fail;
    }
    lisa_http_server_config_t hc = {0};
    hc.address = cfg->address ? cfg->address : "127.0.0.1";
    hc.port = cfg->port;
    hc.handler = s_handler;
    hc.handler_arg = e;
    e->http = lisa_http_server_new(&hc);
    if (!e->http)
        goto fail;
    if (cfg->url && *cfg->url)
        snprintf(e->url, sizeof e->url, "%s", cfg->url);
    else
        snprintf(e->url, sizeof e->url, "http://%s:%u", hc.address,
                 (unsigned) lisa_http_server_port(e->http));
    if (pthread_create(&e->thread, NULL, s_run, e) != 0)
        goto fail;
    if (cfg->broker && *cfg->broker) {
        e->broker = lisa_strdup(cfg->broker);
        e->reg_started =
            pthread_create(&e->reg_thread, NULL, s_reg_run, e) == 0;
    }
    lisa_log_info("engine: %s serving at %s (slots %zu, context %zu)", e->id,
                  e->url, e->cfg.max_batch, e->cfg.max_len);
    return e;
fail:
    lisa_http_server_destroy(&e->http);
    lisa_free(&e->active);
    lisa_free(&e);
    return NULL;
}

void
trn_engine_destroy(trn_engine_t **ep)
{
    if (!ep || !*ep)
        return;
    trn_engine_t *e = *ep;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    if (e->reg_started)
        pthread_join(e->reg_thread, NULL);
    lisa_http_server_destroy(&e->http);
    /* the server answered kept requests 503; release our handles */
    for (size_t s = 0; s < e->cfg.max_batch; s++)
        if (e->active[s]) {
            (void) lisa_http_req_respond_error(
                e->active[s]->req, 503, "server_error", NULL, "shutting down");
            s_job_free(&e->active[s]);
        }
    while (e->qhead) {
        s_job_t *j = e->qhead;
        e->qhead = j->next;
        (void) lisa_http_req_respond_error(j->req, 503, "server_error", NULL,
                                           "shutting down");
        s_job_free(&j);
    }
    lisa_log_info("engine: %s stopped after %llu requests, %llu tokens "
                  "generated",
                  e->id, (unsigned long long) e->st.requests,
                  (unsigned long long) e->st.tokens_generated);
    lisa_free(&e->active);
    lisa_free(&e->broker);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->idle);
    lisa_free(ep);
}

uint16_t
trn_engine_port(const trn_engine_t *e)
{
    return lisa_http_server_port(e->http);
}

const char *
trn_engine_url(const trn_engine_t *e)
{
    return e->url;
}

lisa_rc_t
trn_engine_pause(trn_engine_t *e, uint64_t timeout_ms)
{
    pthread_mutex_lock(&e->mu);
    e->paused = true;
    e->state_seq++;
    pthread_cond_broadcast(&e->cv);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t) ts.tv_nsec + (timeout_ms % 1000) * 1000000ull;
    ts.tv_sec += (time_t) (timeout_ms / 1000 + ns / 1000000000ull);
    ts.tv_nsec = (long) (ns % 1000000000ull);
    int w = 0;
    while (e->n_active > 0 && w == 0)
        w = pthread_cond_timedwait(&e->idle, &e->mu, &ts);
    lisa_rc_t rc = e->n_active == 0 ? LISA_OK : LISA_TIMEOUT;
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void
trn_engine_resume(trn_engine_t *e, uint64_t policy_version)
{
    pthread_mutex_lock(&e->mu);
    e->version = policy_version;
    e->paused = false;
    e->state_seq++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

uint64_t
trn_engine_policy_version(trn_engine_t *e)
{
    pthread_mutex_lock(&e->mu);
    uint64_t v = e->version;
    pthread_mutex_unlock(&e->mu);
    return v;
}

trn_engine_stats_t
trn_engine_stats(trn_engine_t *e)
{
    pthread_mutex_lock(&e->mu);
    trn_engine_stats_t s = e->st;
    s.inflight = e->n_active;
    s.queued = e->qlen;
    pthread_mutex_unlock(&e->mu);
    return s;
}
