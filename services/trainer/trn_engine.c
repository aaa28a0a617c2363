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
#include "lisa/lisa_tokenizer.h"
#include "trn_blocks.h"
#include "trn_sampler.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define S_MAX_STOP     64u
#define S_MAX_PROMPT   (1u << 20)
#define S_MAX_STOP_STR 16u                  /* stop strings a request */
#define S_STOP_STR_LEN 256u                 /* bytes a stop string */
#define S_TAIL         (2 * S_STOP_STR_LEN) /* decoded bytes kept */
/* a sequence's released blocks are kept from recomputing sequences this
 * long (ms) */
#define S_KEEP_MS 1000u
#define S_MAX_N   64u /* choices a request (`n`) */
/* the longest a new request waits for the callers answered with it, in
 * engine.batch_wait's */
#define S_HOLD_MAX 4u
/* the share of max_tokens a sequence is expected to sample before any
 * has finished */
#define S_OUT_SHARE0 0.5

/* One completion request: its n choices, each a sequence (job), answered
 * together once all are done. Choice 0 computes the prompt; when it has
 * sampled its first token the others are forked from it (engine thread
 * only, lock held). */
typedef struct {
    lisa_http_req_t *req; /* NULL once answered (or failed) */
    size_t n;             /* choices */
    size_t live;          /* its jobs not yet freed */
    bool forked;          /* choices 1 .. n-1 made */
    json_t *choices;      /* the finished ones, by index (null: not yet) */
    size_t completion_tokens;
} s_req_t;

typedef struct s_job {
    struct s_job *next; /* waiting queue */
    s_req_t *rq;        /* the request it is a choice of */
    size_t idx;         /* its choice index */
    int32_t *tok;       /* the prompt, then the sampled tokens */
    size_t n_prompt, max_tokens;
    trn_sampling_t samp;
    uint64_t rng;
    uint64_t seed; /* for backends that sample on the device */
    int32_t stop[S_MAX_STOP];
    size_t n_stop;
    char *stop_str[S_MAX_STOP_STR]; /* stop strings */
    size_t n_stop_str;
    char tail[S_TAIL]; /* the last decoded bytes of the output */
    size_t n_tail;
    uint64_t enq_ms;
    /* generation state */
    float *out_lp;
    size_t n_out;
    uint64_t version;
    bool started; /* admitted once (counts as in flight from then on) */
    /* paged cache state (engine thread only) */
    size_t slot;          /* row of the block table while running */
    int32_t *blocks;      /* block table, max_blocks entries */
    size_t n_blocks;      /* entries held */
    size_t n_cached;      /* positions whose keys and values are in blocks */
    size_t n_commit;      /* leading blocks committed to the prefix cache */
    uint64_t chain;       /* hash of the last committed block */
    size_t cached_tokens; /* prompt positions found in the cache at first
                             admission */
    size_t n_step;        /* tokens fed in the step being built */
    bool shed;            /* queued without holding its cached prefix */
    size_t passed;        /* admissions that passed it at the queue's head */
    size_t n_high;        /* positions it had computed when last preempted */
    uint64_t n_preempt;   /* times it was preempted */
} s_job_t;

struct trn_engine {
    trn_backend_t *b;
    trn_engine_cfg_t cfg;
    trn_kv_geom_t geom;
    trn_blocks_t *bm; /* NULL while the cache is closed (time-sharing) */
    size_t max_blocks;
    size_t cap_tokens; /* longest sequence: context and whole cache */
    char url[256];
    char id[128];
    char *broker;
    lisa_tokenizer_t *tok; /* stop strings (may be NULL) */
    lisa_http_server_t *http;
    pthread_t thread, reg_thread;
    bool reg_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work arrived / stop */
    pthread_cond_t idle;    /* no in-flight while paused */
    s_job_t *qhead, *qtail; /* waiting, first come first served; preempted
                               sequences go back to the front */
    size_t qlen;
    size_t n_preempted; /* queued sequences that already sampled tokens */
    s_job_t **run;      /* running, in admission order */
    size_t n_run;
    size_t *free_slots;
    size_t n_free_slots;
    bool paused, stop, flush;
    uint64_t version;
    uint64_t state_seq; /* bumped by pause / resume; the registration
                           thread re-registers when it moved */
    uint64_t seed_ctr;
    double out_share;  /* the share of max_tokens finished sequences
                          sampled, a moving average over about the last
                          ten: what admission expects a sequence to grow */
    size_t run_future; /* blocks the running sequences are expected to
                          take before they end (s_future_blocks), summed
                          while a step's admissions are planned */
    double hit_share;  /* the cached share of admitted sequences, a moving
                          average over about the last ten */
    size_t wave_left;  /* callers answered 200 lately that no new request
                          has followed yet (s_hold_new) */
    uint64_t wave_ms;  /* the last answer or new request (ms) */
    bool holding;      /* new prompts are held (counted once a hold) */
    uint64_t hold_end; /* when the hold the last plan made runs out (ms;
                          0: that plan held nothing) */
    trn_engine_stats_t st;
};

static uint64_t
s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}

/* The CLOCK_REALTIME time `ms` from now, as pthread_cond_timedwait takes
 * it. */
static struct timespec
s_deadline(uint64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t) ts.tv_nsec + (ms % 1000) * 1000000ull;
    ts.tv_sec += (time_t) (ms / 1000 + ns / 1000000000ull);
    ts.tv_nsec = (long) (ns % 1000000000ull);
    return ts;
}

/* A per-choice seed: choice 0 keeps the request's (n = 1 samples what it
 * always did), the others a mix of it and their index. */
static uint64_t
s_choice_seed(uint64_t seed, size_t idx)
{
    if (idx == 0)
        return seed;
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t) idx;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void
s_req_free(s_req_t **rq)
{
    if (!*rq)
        return;
    json_decref((*rq)->choices);
    lisa_free(rq);
}

static void
s_job_free(s_job_t **j)
{
    if (!*j)
        return;
    for (size_t i = 0; i < (*j)->n_stop_str; i++)
        lisa_free(&(*j)->stop_str[i]);
    lisa_free(&(*j)->tok);
    lisa_free(&(*j)->out_lp);
    lisa_free(&(*j)->blocks);
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

/* `stop`: a string or an array of strings, each ended on once the
 * decoded output contains it (needs the tokenizer). */
static lisa_rc_t
s_stop_strings(trn_engine_t *e, s_job_t *j, const json_t *v, char *why,
               size_t wl)
{
    if (!v || json_is_null(v))
        return LISA_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_string(v) && !json_is_array(v)) {
        snprintf(why, wl, "stop must be a string or an array of strings");
        return LISA_INVALID;
    }
    if (n > S_MAX_STOP_STR) {
        snprintf(why, wl, "stop has more than %u strings", S_MAX_STOP_STR);
        return LISA_TOOLARGE;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        size_t len = json_is_string(s) ? json_string_length(s) : 0;
        if (len == 0 || len > S_STOP_STR_LEN) {
            snprintf(why, wl,
                     "stop strings must be non-empty strings of at most %u "
                     "bytes",
                     S_STOP_STR_LEN);
            return LISA_INVALID;
        }
        j->stop_str[j->n_stop_str++] = lisa_strdup(json_string_value(s));
    }
    if (n > 0 && !e->tok) {
        snprintf(why, wl,
                 "stop strings need the model's tokenizer, which "
                 "this engine has not loaded; use stop_token_ids");
        return LISA_UNSUPPORTED;
    }
    return LISA_OK;
}

/* Whether the output, with token t just appended, now contains a stop
 * string: the token's bytes join the kept tail, which is searched. */
static bool
s_hits_stop_string(const trn_engine_t *e, s_job_t *j, int32_t t)
{
    if (j->n_stop_str == 0)
        return false;
    size_t len = 0;
    const uint8_t *b = lisa_tokenizer_token_bytes(e->tok, t, &len);
    if (!b)
        return false;
    if (len > S_TAIL)
        b += len - S_TAIL, len = S_TAIL;
    if (j->n_tail + len > S_TAIL) { /* keep the last bytes */
        size_t drop = j->n_tail + len - S_TAIL;
        memmove(j->tail, j->tail + drop, j->n_tail - drop);
        j->n_tail -= drop;
    }
    memcpy(j->tail + j->n_tail, b, len);
    j->n_tail += len;
    for (size_t i = 0; i < j->n_stop_str; i++) {
        size_t sl = strlen(j->stop_str[i]);
        /* only matches that end inside the new bytes are new */
        size_t from = j->n_tail > len + sl - 1 ? j->n_tail - len - sl + 1 : 0;
        for (size_t at = from; at + sl <= j->n_tail; at++)
            if (memcmp(j->tail + at, j->stop_str[i], sl) == 0)
                return true;
    }
    return false;
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
    /* a prompt must leave room for one sampled token within the context
     * and within the whole cache */
    pthread_mutex_lock(&e->mu);
    size_t cap = e->cap_tokens;
    pthread_mutex_unlock(&e->mu);
    if (json_array_size(p) >= cap) {
        snprintf(why, wl,
                 "prompt of %zu tokens exceeds the context of %zu tokens "
                 "(prompt + completion)",
                 json_array_size(p), cap);
        goto fail;
    }
    j->tok = lisa_malloc(json_array_size(p) * sizeof *j->tok);
    if (s_ids(p, j->tok, S_MAX_PROMPT, vocab, &j->n_prompt, "prompt", why,
              wl) != LISA_OK)
        goto fail;
    json_t *st = json_object_get(r, "stop_token_ids");
    if (st && !json_is_null(st) &&
        s_ids(st, j->stop, S_MAX_STOP, vocab, &j->n_stop, "stop_token_ids", why,
              wl) != LISA_OK)
        goto fail;
    if (s_stop_strings(e, j, json_object_get(r, "stop"), why, wl) != LISA_OK)
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
    if (n < 1 || n > (int64_t) S_MAX_N) {
        snprintf(why, wl, "n must be in [1, %u] (choices a request)", S_MAX_N);
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
    size_t room = cap - j->n_prompt;
    j->max_tokens = (size_t) max_tokens < room ? (size_t) max_tokens : room;
    j->samp.temperature = (float) temp;
    j->samp.top_p = (float) top_p;
    j->samp.top_k = (int32_t) (top_k > 0 && top_k < INT32_MAX ? top_k : 0);
    j->tok =
        lisa_realloc(j->tok, (j->n_prompt + j->max_tokens) * sizeof *j->tok);
    size_t bs = e->geom.block_size;
    j->blocks = lisa_malloc((j->n_prompt + j->max_tokens + bs - 1) / bs *
                            sizeof *j->blocks);
    j->out_lp = lisa_malloc(j->max_tokens * sizeof *j->out_lp);
    pthread_mutex_lock(&e->mu);
    uint64_t s = seed >= 0 ? (uint64_t) seed : e->cfg.seed + (e->seed_ctr++);
    pthread_mutex_unlock(&e->mu);
    j->rng = trn_rng_seed(s);
    j->seed = s;
    j->rq = lisa_calloc(1, sizeof *j->rq);
    j->rq->n = (size_t) n;
    j->rq->live = 1;
    j->rq->choices = json_array();
    for (int64_t i = 0; i < n; i++)
        json_array_append_new(j->rq->choices, json_null());
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
        char b[2048];
        trn_engine_stats_t st = trn_engine_stats(e);
        pthread_mutex_lock(&e->mu);
        bool paused = e->paused;
        uint64_t v = e->version;
        pthread_mutex_unlock(&e->mu);
        int l = snprintf(
            b, sizeof b,
            "{\"status\":\"ok\",\"policy_version\":%llu,\"paused\":%s,"
            "\"inflight\":%llu,\"queued\":%llu,\"kv_blocks\":%llu,"
            "\"kv_blocks_used\":%llu,\"kv_blocks_cached\":%llu,"
            "\"block_size\":%llu,\"prompt_tokens\":%llu,"
            "\"cached_tokens\":%llu,\"preemptions\":%llu,"
            "\"steps\":%llu,\"step_tokens_max\":%llu,"
            "\"memory_serve\":%llu,\"memory_train\":%llu,"
            "\"decode_steps\":%llu,\"decode_s\":%.3f,"
            "\"mixed_steps\":%llu,\"mixed_s\":%.3f,"
            "\"tokens_prefilled\":%llu,\"tokens_generated\":%llu,"
            "\"shared_tokens\":%llu,\"completed\":%llu,"
            "\"computed\":%llu,\"recomputed\":%llu,"
            "\"preempted_max\":%llu,\"shed\":%llu,\"evictions\":%llu,"
            "\"holds\":%llu}",
            (unsigned long long) v, paused ? "true" : "false",
            (unsigned long long) st.inflight, (unsigned long long) st.queued,
            (unsigned long long) st.kv_blocks,
            (unsigned long long) st.kv_blocks_used,
            (unsigned long long) st.kv_blocks_cached,
            (unsigned long long) st.block_size,
            (unsigned long long) st.prompt_tokens,
            (unsigned long long) st.cached_tokens,
            (unsigned long long) st.preemptions, (unsigned long long) st.steps,
            (unsigned long long) st.step_tokens_max,
            (unsigned long long) st.mem_serve,
            (unsigned long long) st.mem_train,
            (unsigned long long) st.decode_steps, st.decode_s,
            (unsigned long long) st.mixed_steps, st.mixed_s,
            (unsigned long long) st.tokens_prefilled,
            (unsigned long long) st.tokens_generated,
            (unsigned long long) st.shared_tokens,
            (unsigned long long) st.completed, (unsigned long long) st.computed,
            (unsigned long long) st.recomputed,
            (unsigned long long) st.preempted_max, (unsigned long long) st.shed,
            (unsigned long long) st.evictions, (unsigned long long) st.holds);
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
        s_req_free(&j->rq);
        s_job_free(&j);
        lisa_http_req_add_header(req, "Retry-After", "1");
        (void) lisa_http_req_respond_error(req, 429, "rate_limit_error",
                                           "queue_full", "engine queue full");
        return;
    }
    j->rq->req = req;
    j->enq_ms = s_now_ms();
    if (e->qtail)
        e->qtail->next = j;
    else
        e->qhead = j;
    e->qtail = j;
    e->qlen++;
    if (e->wave_left > 0) /* one of the callers expected back */
        e->wave_left--;
    e->wave_ms = j->enq_ms;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* ---- engine thread ----------------------------------------------------- */

static void s_fail(s_job_t *j, unsigned status, const char *code,
                   const char *fmt, ...) LISA_PRINTF(4, 5);

/* Answers the request of choice j with an error, once; its other choices
 * are dropped as the engine comes to them (lock held). */
static void
s_fail(s_job_t *j, unsigned status, const char *code, const char *fmt, ...)
{
    s_req_t *rq = j->rq;
    if (!rq->req)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    (void) lisa_http_req_respond_error(rq->req, status,
                                       status == 400 ? "invalid_request_error"
                                                     : "server_error",
                                       code, "%s", msg);
    rq->req = NULL;
}

/* Answers the request: every choice is done; true when it got its 200
 * (lock held). */
static bool
s_answer(trn_engine_t *e, s_req_t *rq, s_job_t *j)
{
    for (size_t i = 0; i < rq->n; i++)
        if (json_is_null(json_array_get(rq->choices, i))) {
            s_fail(j, 500, NULL, "choice %zu was lost", i);
            return false;
        }
    json_t *r = json_pack(
        "{s:s,s:s,s:O,s:{s:I,s:I,s:I,s:{s:I}},s:I}", "object",
        "text_completion", "model", e->id, "choices", rq->choices, "usage",
        "prompt_tokens", (json_int_t) j->n_prompt, "completion_tokens",
        (json_int_t) rq->completion_tokens, "total_tokens",
        (json_int_t) (j->n_prompt + rq->completion_tokens),
        "prompt_tokens_details", "cached_tokens", (json_int_t) j->cached_tokens,
        "policy_version", (json_int_t) j->version);
    char *txt = r ? json_dumps(r, JSON_COMPACT) : NULL;
    json_decref(r);
    if (txt) {
        (void) lisa_http_req_respond(rq->req, 200, "application/json", txt,
                                     strlen(txt));
        free(txt);
        rq->req = NULL;
        e->wave_left++; /* its caller may be back soon (s_hold_new) */
        e->wave_ms = s_now_ms();
        return true;
    }
    s_fail(j, 500, NULL, "cannot encode");
    return false;
}

/* A sequence is over: with `finish` (NULL: failed or dropped) its choice
 * is recorded; the last of a request's sequences answers it. Frees j and,
 * with the last, the request (lock held; j holds no blocks and is neither
 * running nor queued). */
static void
s_job_done(trn_engine_t *e, s_job_t **jp, const char *finish)
{
    s_job_t *j = *jp;
    s_req_t *rq = j->rq;
    if (finish && j->max_tokens > 0)
        e->out_share +=
            0.1 * ((double) j->n_out / (double) j->max_tokens - e->out_share);
    if (finish && rq->req) {
        json_t *ids = json_array(), *lps = json_array();
        for (size_t i = 0; i < j->n_out; i++) {
            json_array_append_new(ids, json_integer(j->tok[j->n_prompt + i]));
            json_array_append_new(lps, json_real(j->out_lp[i]));
        }
        json_t *choice =
            json_pack("{s:I,s:s,s:o,s:{s:o},s:s}", "index", (json_int_t) j->idx,
                      "text", "", "token_ids", ids, "logprobs",
                      "token_logprobs", lps, "finish_reason", finish);
        json_array_set_new(rq->choices, j->idx, choice ? choice : json_null());
        rq->completion_tokens += j->n_out;
    }
    if (--rq->live == 0) {
        if (rq->req && s_answer(e, rq, j))
            e->st.completed++;
        s_req_free(&rq);
    }
    s_job_free(jp);
}

static bool
s_is_stop(const s_job_t *j, int32_t t)
{
    for (size_t i = 0; i < j->n_stop; i++)
        if (j->stop[i] == t)
            return true;
    return false;
}

static size_t
s_len(const s_job_t *j)
{
    return j->n_prompt + j->n_out;
}

/* Releases a sequence's blocks, last first (its tail goes cold before the
 * prefix others may share). */
static void
s_release_blocks(trn_engine_t *e, s_job_t *j)
{
    while (j->n_blocks > 0)
        trn_blocks_release(e->bm, j->blocks[--j->n_blocks]);
    j->n_cached = j->n_commit = 0;
    j->chain = 0;
}

/* Makes the table hold positions [0, upto); false when blocks ran out
 * (what it took stays). */
static bool
s_grow(trn_engine_t *e, s_job_t *j, size_t upto)
{
    size_t bs = e->geom.block_size, need = (upto + bs - 1) / bs;
    while (j->n_blocks < need) {
        int32_t id = trn_blocks_alloc(e->bm);
        if (id < 0)
            return false;
        j->blocks[j->n_blocks++] = id;
    }
    return true;
}

/* Commits the blocks the step filled, so later requests find them. */
static void
s_commit(trn_engine_t *e, s_job_t *j)
{
    size_t bs = e->geom.block_size;
    if (e->cfg.no_prefix_cache)
        return;
    while ((j->n_commit + 1) * bs <= j->n_cached) {
        j->chain = trn_blocks_commit(e->bm, j->blocks[j->n_commit], j->chain,
                                     j->tok + j->n_commit * bs);
        j->n_commit++;
    }
}

/* Removes running sequence i and gives its slot back (lock held). */
static void
s_unrun(trn_engine_t *e, size_t i)
{
    s_job_t *j = e->run[i];
    memmove(&e->run[i], &e->run[i + 1], (e->n_run - i - 1) * sizeof *e->run);
    e->n_run--;
    e->free_slots[e->n_free_slots++] = j->slot;
}

/* Preempts the youngest running sequence: its blocks are released (full
 * ones stay cached) and it waits at the front of the queue to be
 * recomputed (lock held). */
static void
s_preempt_youngest(trn_engine_t *e)
{
    s_job_t *j = e->run[e->n_run - 1];
    s_commit(e, j);
    if (j->n_cached > j->n_high)
        j->n_high = j->n_cached;
    if (++j->n_preempt > e->st.preempted_max)
        e->st.preempted_max = j->n_preempt;
    s_release_blocks(e, j);
    j->shed = true; /* its blocks are what the preemption frees */
    s_unrun(e, e->n_run - 1);
    j->next = e->qhead;
    e->qhead = j;
    if (!e->qtail)
        e->qtail = j;
    e->qlen++;
    e->n_preempted++;
    e->st.preemptions++;
}

/* Expires requests that waited too long, and drops sequences of requests
 * another choice of which failed (lock held). */
static void
s_expire(trn_engine_t *e)
{
    uint64_t now = s_now_ms();
    s_job_t **pp = &e->qhead, *last = NULL;
    while (*pp) {
        s_job_t *j = *pp;
        bool gone = !j->rq->req; /* another choice of its request failed */
        bool late = !gone && !j->started && e->cfg.queue_timeout_ms &&
                    now - j->enq_ms > e->cfg.queue_timeout_ms;
        if (!gone && !late) {
            last = j;
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        e->qlen--;
        if (j->started)
            e->n_preempted--;
        if (e->bm) /* a queued sequence may hold its prefix */
            s_release_blocks(e, j);
        if (late) {
            e->st.timed_out++;
            lisa_http_req_add_header(j->rq->req, "Retry-After", "5");
            s_fail(j, 503, "engine_busy",
                   "waited %llu ms for room in the engine",
                   (unsigned long long) (now - j->enq_ms));
        }
        s_job_done(e, &j, NULL);
    }
    e->qtail = last;
}

/* Queued sequences hold their cached prefix (a reference on each block)
 * so that running sequences' allocations cannot evict it while they wait:
 * under a plain LRU, a load whose histories together exceed the cache
 * (conversations re-sending their history each turn) evicts each waiting
 * history just before it is served, and every turn recomputes all of it.
 * When blocks run short, the prefixes held by the sequences served last
 * (the back of the queue) are released first (lock held). */
static void
s_pin_queued(trn_engine_t *e)
{
    size_t bs = e->geom.block_size;
    if (e->cfg.no_prefix_cache || e->flush)
        return;
    for (s_job_t *j = e->qhead; j; j = j->next) {
        if (j->shed || j->n_blocks > 0)
            continue;
        size_t len = s_len(j); /* at least one position left to compute */
        size_t hit = trn_blocks_match(
            e->bm, j->tok, len - 1, (len + bs - 1) / bs, j->blocks, &j->chain);
        j->n_blocks = j->n_commit = hit;
        j->n_cached = hit * bs;
        /* nothing to keep, or less than half of itself: its history was
         * mostly evicted and it recomputes it anyway; holding the rest
         * would only take blocks from the sequences that run (not looked
         * up again: admitted, it finds what is left) */
        if (2 * j->n_cached < len) {
            s_release_blocks(e, j);
            j->shed = true;
        }
    }
}

/* Releases the held prefix of the queued sequence nearest the back, other
 * than `keep`; false when none holds one (lock held). */
static bool
s_shed_queued(trn_engine_t *e, const s_job_t *keep)
{
    s_job_t *last = NULL;
    for (s_job_t *j = e->qhead; j; j = j->next)
        if (j != keep && j->n_blocks > 0)
            last = j;
    if (!last)
        return false;
    s_release_blocks(e, last);
    last->shed = true;
    e->st.shed++;
    return true;
}

/* Releases every queued sequence's held prefix (lock held). */
static void
s_unpin_queued(trn_engine_t *e)
{
    for (s_job_t *j = e->qhead; j; j = j->next)
        s_release_blocks(e, j);
}

/* Tokens a running sequence feeds this step, within the budget; takes the
 * blocks they need, preempting younger sequences when none are free. 0:
 * nothing this step (or the sequence itself was preempted: *gone). */
static size_t
s_plan_running(trn_engine_t *e, size_t i, size_t budget, bool *gone)
{
    s_job_t *j = e->run[i];
    size_t want = s_len(j) - j->n_cached;
    size_t n = want < budget ? want : budget;
    *gone = false;
    if (n == 0)
        return 0;
    while (!s_grow(e, j, j->n_cached + n)) {
        size_t room = j->n_blocks * e->geom.block_size - j->n_cached;
        if (s_shed_queued(e, NULL))
            continue;
        if (want > 1 && room > 0) /* a chunk that fits what it holds */
            return room < n ? room : n;
        if (e->n_run - 1 == i) { /* it is the youngest: it waits */
            s_preempt_youngest(e);
            *gone = true;
            return 0;
        }
        s_preempt_youngest(e);
    }
    return n;
}

/* Takes queued j (after prev; NULL: the head) out of the queue. */
static void
s_dequeue(trn_engine_t *e, s_job_t *prev, s_job_t *j)
{
    if (prev)
        prev->next = j->next;
    else
        e->qhead = j->next;
    if (e->qtail == j)
        e->qtail = prev;
    j->next = NULL;
    e->qlen--;
}

/* Blocks sequence j is expected to take beyond those it holds before it
 * ends: the rest of what it was sent, and the expected share of what it
 * may still sample (lock held). */
static size_t
s_future_blocks(const trn_engine_t *e, const s_job_t *j)
{
    size_t bs = e->geom.block_size;
    double more = e->out_share * (double) (j->max_tokens - j->n_out);
    size_t end = s_len(j) + (size_t) more;
    if (end > e->cap_tokens)
        end = e->cap_tokens;
    size_t blocks = (end + bs - 1) / bs;
    return blocks > j->n_blocks ? blocks - j->n_blocks : 0;
}

/* Admits queued j (after prev) if its first chunk fits: the longest cached
 * prefix, then fresh blocks for the chunk; with `shed`, the prefixes held
 * by the sequences behind it give way. Returns the tokens it feeds this
 * step (0: not admitted) (lock held). */
static size_t
s_admit(trn_engine_t *e, s_job_t *prev, s_job_t *j, size_t budget, bool shed)
{
    size_t bs = e->geom.block_size;
    if (!j || budget == 0 || e->n_free_slots == 0)
        return 0;
    if (e->paused && !j->started)
        return 0;
    size_t len = s_len(j);
    if (len > e->cap_tokens) { /* the cache shrank below it */
        s_dequeue(e, prev, j);
        if (j->started)
            e->n_preempted--;
        s_release_blocks(e, j);
        s_fail(j, 400, "context_length_exceeded",
               "sequence of %zu tokens exceeds the engine's %zu", len,
               e->cap_tokens);
        s_job_done(e, &j, NULL);
        return 0;
    }
    if (j->n_blocks == 0 && !e->cfg.no_prefix_cache && !e->flush) {
        /* at least one position left to compute */
        size_t hit = trn_blocks_match(
            e->bm, j->tok, len - 1, (len + bs - 1) / bs, j->blocks, &j->chain);
        j->n_blocks = j->n_commit = hit;
        j->n_cached = hit * bs;
    }
    size_t hit = j->n_blocks;
    size_t n = len - j->n_cached < budget ? len - j->n_cached : budget;
    size_t need = (j->n_cached + n + bs - 1) / bs - hit;
    /* while others run, keep blocks for what they and j are expected to
     * take before they end (their prompts' rest, out_share of what they
     * may still sample), at least 1% of the cache: admitted on their
     * first chunk alone, sequences whose decodes then outgrow the cache
     * were preempted one after the other, again and again */
    size_t reserve = e->n_run > 0 ? 1 + trn_blocks_total(e->bm) / 100 : 0;
    if (e->n_run > 0) {
        size_t later = s_future_blocks(e, j) + e->run_future;
        later = later > need ? later - need : 0;
        if (reserve < later)
            reserve = later;
    }
    while (shed && trn_blocks_available(e->bm) < need + reserve &&
           s_shed_queued(e, j))
        ;
    /* where requests mostly find themselves cached (conversations), one
     * that found less than half of itself, passing the head or while
     * others run, does not evict what finished sequences released in the
     * last S_KEEP_MS: their next turns are on their way */
    size_t avail = trn_blocks_available(e->bm);
    if (!shed && 2 * j->n_cached < len && e->hit_share >= 0.5) {
        uint64_t now = s_now_ms();
        avail = trn_blocks_available_before(
            e->bm, now > S_KEEP_MS ? now - S_KEEP_MS : 0, need + reserve);
    }
    if (avail < need + reserve || !s_grow(e, j, j->n_cached + n)) {
        while (j->n_blocks > hit) /* it keeps holding its prefix */
            trn_blocks_release(e->bm, j->blocks[--j->n_blocks]);
        return 0;
    }
    j->shed = false;
    s_dequeue(e, prev, j);
    e->hit_share += 0.1 * ((double) j->n_cached / (double) len - e->hit_share);
    if (j->started) {
        e->n_preempted--;
    } else {
        j->started = true;
        j->version = e->version;
        j->cached_tokens = j->n_cached;
        e->st.prompt_tokens += j->n_prompt;
        e->st.cached_tokens += j->n_cached;
    }
    j->slot = e->free_slots[--e->n_free_slots];
    e->run[e->n_run++] = j;
    e->run_future += s_future_blocks(e, j);
    return n;
}

/* Admits one queued sequence (lock held): the head when its first chunk
 * fits. When it does not, a later sequence that holds its cached prefix
 * and fits without taking anyone's may pass it, up to max_seqs times;
 * then, or when nothing runs, the head goes first and the prefixes held
 * behind it give way. Returns the tokens the admitted one feeds. */
static size_t
s_admit_next(trn_engine_t *e, size_t budget)
{
    s_job_t *h = e->qhead;
    if (!h || budget == 0 || e->n_free_slots == 0)
        return 0;
    bool first = e->n_run == 0 || h->passed >= e->geom.max_seqs;
    size_t k = s_admit(e, NULL, h, budget, first);
    if (k > 0 || first || e->qhead != h)
        return k;
    for (s_job_t *p = h; p->next; p = p->next)
        if (p->next->n_blocks > 0 &&
            (k = s_admit(e, p, p->next, budget, false)) > 0) {
            for (s_job_t *q = h;; q = q->next) { /* everyone it passed */
                q->passed++;
                if (q == p)
                    break;
            }
            return k;
        }
    return 0;
}

/* Whether the new request at the head of the queue waits for the callers
 * answered lately (cfg.batch_wait_ms, w): a batch of agents answered in
 * the same step or two sends its next prompts a few ms apart, and taken
 * as they come they would be computed over several steps, each reading
 * every weight for a part of the tokens. A new prompt waits while some
 * caller answered lately has not sent a new request since and the last
 * answer or new request came less than w ago (a wave's requests come
 * closer together than that; a caller whose tool takes longer is not
 * waited for), and at most S_HOLD_MAX x w from its own arrival; the
 * running sequences go on decoding meanwhile. Preempted sequences and
 * forked choices never wait (lock held). */
static bool
s_hold_new(trn_engine_t *e)
{
    uint64_t w = e->cfg.batch_wait_ms, now = s_now_ms();
    const s_job_t *h = e->qhead;
    if (w > 0 && now >= e->wave_ms + w)
        e->wave_left = 0; /* the wave is over: nobody expected any more */
    if (w == 0 || !h || h->started || h->idx != 0 || e->paused || e->flush ||
        e->wave_left == 0 || now >= h->enq_ms + S_HOLD_MAX * w) {
        e->holding = false;
        return false;
    }
    if (!e->holding)
        e->st.holds++;
    e->holding = true;
    uint64_t gap_end = e->wave_ms + w, cap = h->enq_ms + S_HOLD_MAX * w;
    e->hold_end = gap_end < cap ? gap_end : cap;
    return true;
}

/* Builds the next step into seqs (lock held): decodes and chunks of the
 * running sequences, then admissions, within the token budget. */
static size_t
s_plan(trn_engine_t *e, trn_gen_seq_t *seqs, s_job_t **batch)
{
    size_t budget = e->geom.max_tokens, n = 0;
    e->hold_end = 0;
    if (e->flush && e->n_run == 0) {
        s_unpin_queued(e); /* they hold the old weights' keys */
        trn_blocks_flush(e->bm);
        e->flush = false;
    }
    trn_blocks_set_now(e->bm, s_now_ms());
    s_pin_queued(e);
    uint64_t pre = e->st.preemptions;
    for (size_t i = 0; i < e->n_run;) {
        bool gone = false;
        size_t k = s_plan_running(e, i, budget, &gone);
        if (gone)
            continue; /* run[i] is now the next one, or none */
        e->run[i]->n_step = k;
        budget -= k;
        i++;
    }
    /* a step that had to preempt admits nothing: the blocks are short
     * for the sequences already running (what was preempted waits at the
     * front and comes back once they are not) */
    bool preempted = e->st.preemptions != pre;
    e->run_future = 0;
    for (size_t i = 0; i < e->n_run; i++)
        e->run_future += s_future_blocks(e, e->run[i]);
    while (!preempted && !e->flush && e->n_run < e->geom.max_seqs &&
           !s_hold_new(e)) {
        size_t k = s_admit_next(e, budget);
        if (k == 0)
            break;
        e->run[e->n_run - 1]->n_step = k;
        budget -= k;
    }
    /* decodes first, then the chunks (the backends' order) */
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < e->n_run; i++) {
            s_job_t *j = e->run[i];
            bool one = s_len(j) - j->n_cached == 1;
            if (j->n_step == 0 || one != (pass == 0))
                continue;
            seqs[n] = (trn_gen_seq_t){.slot = j->slot,
                                      .blocks = j->blocks,
                                      .n_blocks = j->n_blocks,
                                      .start = j->n_cached,
                                      .tokens = j->tok + j->n_cached,
                                      .n_new = j->n_step};
            batch[n++] = j;
        }
    return n;
}

/* Choice idx of j's request: j's prompt, settings and stops, its own
 * seed, nothing sampled, no blocks. */
static s_job_t *
s_job_clone(const trn_engine_t *e, const s_job_t *j, size_t idx)
{
    s_job_t *c = lisa_calloc(1, sizeof *c);
    size_t bs = e->geom.block_size, len = j->n_prompt + j->max_tokens;
    c->rq = j->rq;
    c->idx = idx;
    c->tok = lisa_malloc(len * sizeof *c->tok);
    memcpy(c->tok, j->tok, j->n_prompt * sizeof *c->tok);
    c->n_prompt = j->n_prompt;
    c->max_tokens = j->max_tokens;
    c->samp = j->samp;
    c->seed = s_choice_seed(j->seed, idx);
    c->rng = trn_rng_seed(c->seed);
    memcpy(c->stop, j->stop, j->n_stop * sizeof *c->stop);
    c->n_stop = j->n_stop;
    for (size_t i = 0; i < j->n_stop_str; i++)
        c->stop_str[c->n_stop_str++] = lisa_strdup(j->stop_str[i]);
    c->enq_ms = j->enq_ms;
    c->out_lp = lisa_malloc(j->max_tokens * sizeof *c->out_lp);
    c->version = j->version;
    c->started = true;
    c->cached_tokens = j->cached_tokens;
    c->blocks = lisa_malloc((len + bs - 1) / bs * sizeof *c->blocks);
    return c;
}

/* Forks choices 1 .. n-1 of j's request from choice j, which has just
 * computed the whole prompt (and sampled its first token). Each shares
 * the prompt's full blocks by reference, all but the last block that
 * holds the prompt's last position: that one is j's own (its sampled
 * tokens go on in it), so a fork recomputes those positions, at most a
 * block, into a block of its own, which gives it the logits of the last
 * position to draw its own first token from. A fork goes into the batch
 * while sequence slots are free, else to the front of the queue without
 * blocks, like a preempted sequence: admitted later, it finds the prompt
 * in the prefix cache (or recomputes it without one) (lock held). */
static void
s_fork(trn_engine_t *e, s_job_t *j)
{
    s_req_t *rq = j->rq;
    size_t bs = e->geom.block_size, full = (j->n_prompt - 1) / bs;
    s_job_t *qh = NULL, *ql = NULL; /* the queued forks, in order */
    size_t nq = 0;
    rq->forked = true;
    for (size_t i = 1; i < rq->n; i++) {
        s_job_t *c = s_job_clone(e, j, i);
        rq->live++;
        if (e->n_free_slots > 0 && e->n_run < e->geom.max_seqs) {
            for (size_t k = 0; k < full; k++) {
                trn_blocks_ref(e->bm, j->blocks[k]);
                c->blocks[k] = j->blocks[k];
            }
            /* n_commit 0: its first commits walk the shared blocks (a
             * no-op on them) to the chain hash of its own */
            c->n_blocks = full;
            c->n_cached = full * bs;
            c->slot = e->free_slots[--e->n_free_slots];
            e->run[e->n_run++] = c;
            e->st.shared_tokens += full * bs;
        } else {
            if (ql)
                ql->next = c;
            else
                qh = c;
            ql = c;
            nq++;
        }
    }
    if (nq > 0) {
        ql->next = e->qhead;
        if (!e->qhead)
            e->qtail = ql;
        e->qhead = qh;
        e->qlen += nq;
        e->n_preempted += nq;
    }
}

/* After a step: positions cached, blocks committed, and for each
 * sequence that reached its end a sampled token; finished requests are
 * answered (lock held). */
static void
s_finish_step(trn_engine_t *e, size_t n, s_job_t **batch, const int32_t *otok,
              const float *olp, const float *logits, lisa_rc_t rc,
              const trn_err_t *err)
{
    size_t V = (size_t) e->b->ops->config(e->b)->vocab_size;
    for (size_t i = 0; i < n; i++) {
        s_job_t *j = batch[i];
        const char *fin = NULL;
        e->st.tokens_prefilled += j->n_step > 1 ? j->n_step : 0;
        if (rc != LISA_OK) {
            s_fail(j, 500, NULL, "generation: %s", err->msg);
            fin = "error";
        } else {
            e->st.computed += j->n_step;
            if (j->n_high > j->n_cached) { /* done before its preemption */
                size_t to = j->n_cached + j->n_step;
                e->st.recomputed +=
                    (to < j->n_high ? to : j->n_high) - j->n_cached;
            }
            j->n_cached += j->n_step;
            s_commit(e, j);
        }
        if (!fin && j->n_cached == s_len(j)) { /* its next token */
            int32_t t = otok ? otok[i] : 0;
            float lp = olp ? olp[i] : 0.0f;
            trn_err_t se = {{0}};
            if (logits && trn_sample(logits + i * V, V, &j->samp, &j->rng, &t,
                                     &lp, &se) != LISA_OK) {
                s_fail(j, 500, NULL, "sampling: %s", se.msg);
                fin = "error";
            } else {
                j->tok[s_len(j)] = t;
                j->out_lp[j->n_out] = isfinite(lp) ? lp : -1e30f;
                j->n_out++;
                e->st.tokens_generated++;
                if (j->rq->n > 1 && !j->rq->forked)
                    s_fork(e, j);
                if (s_is_stop(j, t) || s_hits_stop_string(e, j, t))
                    fin = "stop";
                else if (j->n_out >= j->max_tokens)
                    fin = "length";
            }
        }
        j->n_step = 0;
        if (!fin && !j->rq->req) /* another choice failed */
            fin = "error";
        if (!fin)
            continue;
        s_release_blocks(e, j);
        for (size_t r = 0; r < e->n_run; r++)
            if (e->run[r] == j) {
                s_unrun(e, r);
                break;
            }
        s_job_done(e, &j, strcmp(fin, "error") != 0 ? fin : NULL);
    }
}

/* Whether generations are in flight: running, or preempted with sampled
 * tokens (a pause waits for both) (lock held). */
static bool
s_busy(const trn_engine_t *e)
{
    return e->n_run > 0 || e->n_preempted > 0;
}

static void *
s_run(void *arg)
{
    trn_engine_t *e = arg;
    size_t S = e->geom.max_seqs;
    size_t V = (size_t) e->b->ops->config(e->b)->vocab_size;
    /* a backend with gen_sample draws on the device: no logits come back */
    bool dev = e->b->ops->gen_sample != NULL;
    float *logits = dev ? NULL : lisa_malloc(S * V * sizeof *logits);
    trn_sampling_t *samp = lisa_calloc(S, sizeof *samp);
    uint64_t *seeds = lisa_calloc(S, sizeof *seeds);
    int32_t *otok = lisa_calloc(S, sizeof *otok);
    float *olp = lisa_calloc(S, sizeof *olp);
    trn_gen_seq_t *seqs = lisa_calloc(S, sizeof *seqs);
    s_job_t **batch = lisa_calloc(S, sizeof *batch);
    trn_err_t err;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        s_expire(e);
        size_t n = 0;
        if (!e->stop && e->bm)
            n = s_plan(e, seqs, batch);
        if (e->stop)
            break;
        if (n == 0) {
            if (e->paused && !s_busy(e))
                pthread_cond_broadcast(&e->idle);
            uint64_t now = s_now_ms(), ms = 20;
            if (e->hold_end && e->bm && !e->paused && e->hold_end < now + ms)
                ms = e->hold_end > now ? e->hold_end - now : 1; /* its end */
            struct timespec ts = s_deadline(ms);
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
            continue;
        }
        uint64_t toks = 0;
        for (size_t i = 0; i < n; i++)
            toks += seqs[i].n_new;
        pthread_mutex_unlock(&e->mu);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        lisa_rc_t rc;
        memset(&err, 0, sizeof err);
        if (dev) {
            for (size_t i = 0; i < n; i++) {
                samp[i] = batch[i]->samp;
                seeds[i] = batch[i]->seed;
            }
            rc = e->b->ops->gen_sample(e->b, n, seqs, samp, seeds, otok, olp,
                                       &err);
        } else {
            rc = e->b->ops->gen_step(e->b, n, seqs, logits, &err);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double dt = (double) (t1.tv_sec - t0.tv_sec) +
                    (double) (t1.tv_nsec - t0.tv_nsec) * 1e-9;
        pthread_mutex_lock(&e->mu);
        e->st.steps++;
        if (toks == n) {
            e->st.decode_steps++;
            e->st.decode_s += dt;
        } else {
            e->st.mixed_steps++;
            e->st.mixed_s += dt;
        }
        if (toks > e->st.step_tokens_max)
            e->st.step_tokens_max = toks;
        s_finish_step(e, n, batch, dev ? otok : NULL, dev ? olp : NULL,
                      dev ? NULL : logits, rc, &err);
        if (e->paused && !s_busy(e))
            pthread_cond_broadcast(&e->idle);
    }
    pthread_mutex_unlock(&e->mu);
    lisa_free(&logits);
    lisa_free(&samp);
    lisa_free(&seeds);
    lisa_free(&otok);
    lisa_free(&olp);
    lisa_free(&seqs);
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
    eng.max_batch = (uint32_t) e->geom.max_seqs;
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
        struct timespec ts = s_deadline(every);
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

/* Device memory in use now, or 0 without a device. */
static size_t
s_mem_used(trn_engine_t *e)
{
    size_t used = 0, total = 0;
    if (e->b->ops->mem_info)
        e->b->ops->mem_info(e->b, &used, &total);
    e->st.mem_total = total;
    return used;
}

/* Opens the KV cache and its block manager (the caller owns the backend).
 */
static lisa_rc_t
s_open_cache(trn_engine_t *e)
{
    trn_err_t err = {{0}};
    trn_kv_geom_t g = e->geom;
    g.n_blocks = 0;
    g.kv_bytes = e->cfg.kv_bytes;
    g.kv_fraction = e->cfg.kv_fraction;
    if (e->cfg.offload_train &&
        e->b->ops->train_state(e->b, 0, &err) != LISA_OK) {
        lisa_log_error("engine: training state off the device: %s", err.msg);
        return LISA_ERR;
    }
    if (e->b->ops->gen_open(e->b, &g, &err) != LISA_OK) {
        lisa_log_error("engine: KV cache: %s", err.msg);
        return LISA_ERR;
    }
    trn_blocks_t *bm = trn_blocks_new(g.n_blocks, g.block_size);
    if (!bm) {
        lisa_log_error("engine: KV cache of %zu blocks", g.n_blocks);
        if (e->b->ops->gen_close)
            e->b->ops->gen_close(e->b);
        return LISA_ERR;
    }
    size_t whole = g.n_blocks * g.block_size;
    pthread_mutex_lock(&e->mu);
    e->geom = g;
    e->bm = bm;
    e->cap_tokens = whole < e->cfg.max_len ? whole : e->cfg.max_len;
    e->st.kv_blocks = g.n_blocks;
    e->st.block_size = g.block_size;
    e->st.mem_serve = s_mem_used(e);
    pthread_mutex_unlock(&e->mu);
    return LISA_OK;
}

/* Gives the KV cache's memory back and brings the training state onto the
 * device (engine idle and paused; the caller owns the backend). */
static void
s_close_cache(trn_engine_t *e)
{
    trn_err_t err = {{0}};
    pthread_mutex_lock(&e->mu);
    s_unpin_queued(e);
    trn_blocks_t *bm = e->bm;
    e->bm = NULL;
    pthread_mutex_unlock(&e->mu);
    trn_blocks_destroy(&bm);
    if (e->b->ops->gen_close)
        e->b->ops->gen_close(e->b);
    if (e->b->ops->train_state &&
        e->b->ops->train_state(e->b, 1, &err) != LISA_OK)
        lisa_log_error("engine: training state onto the device: %s", err.msg);
    pthread_mutex_lock(&e->mu);
    e->st.mem_train = s_mem_used(e);
    pthread_mutex_unlock(&e->mu);
}

static void
s_defaults(trn_engine_t *e, const trn_engine_cfg_t *cfg)
{
    e->cfg = *cfg;
    if (!e->cfg.max_batch)
        e->cfg.max_batch = TRN_ENGINE_DEFAULT_MAX_SEQS;
    if (!e->cfg.queue_max)
        e->cfg.queue_max = 1024;
    size_t maxpos = (size_t) e->b->ops->config(e->b)->max_position_embeddings;
    if (!e->cfg.max_len || e->cfg.max_len > maxpos)
        e->cfg.max_len = maxpos;
    if (!e->cfg.block_size)
        e->cfg.block_size = TRN_ENGINE_DEFAULT_BLOCK;
    if (!e->cfg.max_step_tokens)
        e->cfg.max_step_tokens = TRN_ENGINE_DEFAULT_STEP_TOKENS;
    /* every running sequence's decode fits a step */
    if (e->cfg.max_step_tokens < e->cfg.max_batch)
        e->cfg.max_step_tokens = e->cfg.max_batch;
    if (!e->cfg.register_ttl_ms)
        e->cfg.register_ttl_ms = 10000;
    if (!e->b->ops->train_state)
        e->cfg.offload_train = false;
    if (!e->cfg.offload_train)
        e->cfg.time_share = false;
    size_t bs = e->cfg.block_size;
    e->max_blocks = (e->cfg.max_len + bs - 1) / bs;
    e->geom = (trn_kv_geom_t){.block_size = bs,
                              .max_seqs = e->cfg.max_batch,
                              .max_blocks = e->max_blocks,
                              .max_tokens = e->cfg.max_step_tokens};
}

trn_engine_t *
trn_engine_new(trn_backend_t *b, const trn_engine_cfg_t *cfg)
{
    trn_engine_t *e = lisa_calloc(1, sizeof *e);
    e->b = b;
    size_t bs = cfg->block_size ? cfg->block_size : TRN_ENGINE_DEFAULT_BLOCK;
    if ((bs & (bs - 1)) != 0 || bs > 1024) {
        lisa_log_error("engine: block size %zu is not a power of two up to "
                       "1024",
                       bs);
        lisa_free(&e);
        return NULL;
    }
    s_defaults(e, cfg);
    if (cfg->tokenizer_dir && *cfg->tokenizer_dir) {
        e->tok = lisa_tokenizer_new_from_dir(cfg->tokenizer_dir);
        if (!e->tok)
            lisa_log_warn("engine: no tokenizer in %s: requests with stop "
                          "strings get 400",
                          cfg->tokenizer_dir);
    }
    e->version = cfg->policy_version;
    e->out_share = S_OUT_SHARE0;
    snprintf(e->id, sizeof e->id, "%s",
             cfg->engine_id ? cfg->engine_id : "trainer");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->idle, NULL);
    size_t S = e->geom.max_seqs;
    e->run = lisa_calloc(S, sizeof *e->run);
    e->free_slots = lisa_calloc(S, sizeof *e->free_slots);
    for (size_t i = 0; i < S; i++)
        e->free_slots[e->n_free_slots++] = S - 1 - i;
    if (s_open_cache(e) != LISA_OK)
        goto fail;
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
    lisa_log_info("engine: %s serving at %s (sequences %zu, context %zu, KV "
                  "%zu blocks of %zu, step %zu tokens, prefix cache %s)",
                  e->id, e->url, e->geom.max_seqs, e->cfg.max_len,
                  e->geom.n_blocks, e->geom.block_size, e->geom.max_tokens,
                  e->cfg.no_prefix_cache ? "off" : "on");
    return e;
fail:
    lisa_http_server_destroy(&e->http);
    lisa_tokenizer_destroy(&e->tok);
    trn_blocks_destroy(&e->bm);
    lisa_free(&e->run);
    lisa_free(&e->free_slots);
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
    while (e->n_run > 0) {
        s_job_t *j = e->run[e->n_run - 1];
        s_fail(j, 503, NULL, "shutting down");
        if (e->bm)
            s_release_blocks(e, j);
        s_unrun(e, e->n_run - 1);
        s_job_done(e, &j, NULL);
    }
    while (e->qhead) {
        s_job_t *j = e->qhead;
        e->qhead = j->next;
        s_fail(j, 503, NULL, "shutting down");
        s_job_done(e, &j, NULL);
    }
    lisa_log_info("engine: %s stopped after %llu requests, %llu tokens "
                  "generated, %llu of %llu prompt tokens from the cache",
                  e->id, (unsigned long long) e->st.requests,
                  (unsigned long long) e->st.tokens_generated,
                  (unsigned long long) e->st.cached_tokens,
                  (unsigned long long) e->st.prompt_tokens);
    trn_blocks_destroy(&e->bm);
    lisa_tokenizer_destroy(&e->tok);
    lisa_free(&e->run);
    lisa_free(&e->free_slots);
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
    struct timespec ts = s_deadline(timeout_ms);
    int w = 0;
    while (s_busy(e) && w == 0)
        w = pthread_cond_timedwait(&e->idle, &e->mu, &ts);
    lisa_rc_t rc = s_busy(e) ? LISA_TIMEOUT : LISA_OK;
    bool close = rc == LISA_OK && e->cfg.time_share && e->bm;
    pthread_mutex_unlock(&e->mu);
    if (close)
        s_close_cache(e);
    return rc;
}

void
trn_engine_resume(trn_engine_t *e, uint64_t policy_version)
{
    pthread_mutex_lock(&e->mu);
    bool reopen = !e->bm;
    pthread_mutex_unlock(&e->mu);
    if (reopen && s_open_cache(e) != LISA_OK)
        lisa_log_error("engine: cannot reopen the KV cache; requests wait");
    pthread_mutex_lock(&e->mu);
    if (policy_version != e->version)
        e->flush = true; /* cached blocks hold the old weights' keys */
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
    s.inflight = e->n_run + e->n_preempted;
    s.queued = e->qlen;
    if (e->bm) {
        trn_blocks_stats_t bs = trn_blocks_stats(e->bm);
        s.kv_blocks_used = bs.used;
        s.kv_blocks_cached = bs.cached;
        s.evictions = bs.evictions;
    }
    pthread_mutex_unlock(&e->mu);
    return s;
}
