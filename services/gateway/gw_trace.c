/*
 * gw_trace: per-attempt token chains (see the header for the contract).
 *
 * Layout of one attempt: `ids` holds the full sequence of the last
 * committed call. An extension appends to `ids` in place (rolled back on
 * abort); a new segment builds its prompt in a fresh buffer and keeps the
 * old one until commit, so an aborted call leaves the attempt as it was.
 */
#include "gw_trace.h"

#include "gw_upstream.h"
#include "lisa/lisa_mem.h"

#include <czmq.h>
#include <string.h>

struct gw_attempt_t {
    char *rollout;
    uint32_t attempt;
    char *key;
    uint32_t *ids; /* committed sequence (+ open extension) */
    size_t n_ids, cap_ids;
    uint32_t *seg_ids; /* open new-segment prompt */
    size_t n_seg;
    char *text; /* ids[0..n_text) as the engine request writes them */
    size_t n_text, text_len, text_cap;
    uint8_t (*hist)[GW_DIGEST_LEN]; /* history digests */
    size_t n_hist;
    uint8_t tools[GW_DIGEST_LEN];
    uint8_t (*cache)[2][GW_DIGEST_LEN]; /* raw hash, digest */
    size_t n_cache, cap_cache;
    /* the committed request's body through its last message */
    char *pre;
    size_t pre_len, pre_cap;
    size_t (*pre_span)[2];
    uint8_t (*pre_hash)[GW_DIGEST_LEN];
    size_t pre_n, pre_msgs, pre_tools_off, pre_tools_len;
    uint64_t pre_gen; /* bumped by every keep: a request parsed against an
                       * older prefix (another call committed meanwhile)
                       * does not take its bytes as its own */
    bool has_history;
    bool based;
    bool busy;
    bool open_extends;
    size_t open_base; /* n_ids before an open extension */
    size_t open_appended;
    uint32_t next_seq;
    uint32_t next_segment; /* segment number of the next new segment */
    uint32_t segment;      /* current segment */
    int32_t last_seq;
    uint32_t spans;
    char *engine;
    char *group;       /* the rollout's group, when the task reply named it */
    bool has_sampling; /* the run's sampling is known */
    float temperature, top_p;
    int32_t top_k;
    int64_t answer_turn;
    char *answer;
    size_t answer_len;
    bool answer_sse;
    uint64_t used_ms;
    uint32_t max_ids;
};

struct gw_trace_t {
    zhashx_t *map; /* key -> gw_attempt_t */
    size_t max_attempts;
    uint32_t max_ids;
};

static void
s_attempt_free(void **item)
{
    gw_attempt_t *a = *item;
    if (!a)
        return;
    lisa_free(&a->rollout);
    lisa_free(&a->key);
    lisa_free(&a->ids);
    lisa_free(&a->seg_ids);
    lisa_free(&a->text);
    lisa_free(&a->hist);
    lisa_free(&a->cache);
    lisa_free(&a->pre);
    lisa_free(&a->pre_span);
    lisa_free(&a->pre_hash);
    lisa_free(&a->answer);
    lisa_free(&a->engine);
    lisa_free(&a->group);
    lisa_free(&a);
    *item = NULL;
}

gw_trace_t *
gw_trace_new(size_t max_attempts, uint32_t max_ids)
{
    gw_trace_t *self = lisa_calloc(1, sizeof *self);
    self->map = zhashx_new();
    zhashx_set_destructor(self->map, s_attempt_free);
    self->max_attempts = max_attempts ? max_attempts : 1;
    self->max_ids = max_ids;
    return self;
}

void
gw_trace_destroy(gw_trace_t **self)
{
    if (!self || !*self)
        return;
    zhashx_destroy(&(*self)->map);
    lisa_free(self);
}

static void
s_key(char *buf, size_t len, const char *rollout, uint32_t attempt)
{
    /* "%s#%u", cut to len like snprintf (this runs on every call) */
    char num[12];
    size_t k = sizeof num;
    do {
        num[--k] = (char) ('0' + attempt % 10);
        attempt /= 10;
    } while (attempt);
    size_t rn = strlen(rollout), nn = sizeof num - k, at = 0;
    size_t parts[3][2] = {{0, rn}, {0, 1}, {0, nn}};
    const char *src[3] = {rollout, "#", num + k};
    for (int i = 0; i < 3 && at + 1 < len; i++) {
        size_t m = parts[i][1] < len - 1 - at ? parts[i][1] : len - 1 - at;
        memcpy(buf + at, src[i], m);
        at += m;
    }
    buf[at] = '\0';
}

gw_attempt_t *
gw_trace_find(gw_trace_t *self, const char *rollout, uint32_t attempt)
{
    char key[160];
    s_key(key, sizeof key, rollout, attempt);
    return zhashx_lookup(self->map, key);
}

static bool
s_evict_one(gw_trace_t *self)
{
    gw_attempt_t *victim = NULL;
    for (gw_attempt_t *a = zhashx_first(self->map); a;
         a = zhashx_next(self->map))
        if (!a->busy && (!victim || a->used_ms < victim->used_ms))
            victim = a;
    if (!victim)
        return false;
    zhashx_delete(self->map, victim->key);
    return true;
}

lisa_rc_t
gw_trace_open(gw_trace_t *self, const char *rollout, uint32_t attempt,
              uint64_t now_ms, gw_attempt_t **out)
{
    gw_attempt_t *a = gw_trace_find(self, rollout, attempt);
    if (!a) {
        if (zhashx_size(self->map) >= self->max_attempts && !s_evict_one(self))
            return LISA_AGAIN;
        char key[160];
        s_key(key, sizeof key, rollout, attempt);
        a = lisa_calloc(1, sizeof *a);
        a->rollout = lisa_strdup(rollout);
        a->attempt = attempt;
        a->key = lisa_strdup(key);
        a->last_seq = -1;
        a->max_ids = self->max_ids;
        zhashx_insert(self->map, key, a);
    }
    a->used_ms = now_ms;
    *out = a;
    return LISA_OK;
}

void
gw_trace_close(gw_trace_t *self, const char *rollout, uint32_t attempt)
{
    gw_attempt_t *a = gw_trace_find(self, rollout, attempt);
    if (a && !a->busy)
        zhashx_delete(self->map, a->key);
}

size_t
gw_trace_expire(gw_trace_t *self, uint64_t older_than_ms)
{
    zlist_t *dead = zlist_new();
    for (gw_attempt_t *a = zhashx_first(self->map); a;
         a = zhashx_next(self->map))
        if (!a->busy && a->used_ms < older_than_ms)
            zlist_append(dead, a->key);
    size_t n = zlist_size(dead);
    for (char *k = zlist_first(dead); k; k = zlist_next(dead))
        zhashx_delete(self->map, k);
    zlist_destroy(&dead);
    return n;
}

size_t
gw_trace_size(const gw_trace_t *self)
{
    return zhashx_size(self->map);
}

bool
gw_attempt_busy(const gw_attempt_t *a)
{
    return a->busy;
}

bool
gw_attempt_based(const gw_attempt_t *a)
{
    return a->based;
}

void
gw_attempt_set_base(gw_attempt_t *a, uint32_t next_seq)
{
    a->based = true;
    if (next_seq > a->next_seq)
        a->next_seq = next_seq;
    if (a->next_seq > a->next_segment)
        a->next_segment = a->next_seq;
}

uint32_t
gw_attempt_spans(const gw_attempt_t *a)
{
    return a->spans;
}

uint32_t
gw_attempt_next_seq(const gw_attempt_t *a)
{
    return a->next_seq;
}

bool
gw_attempt_sampling(const gw_attempt_t *a, float *temperature, float *top_p,
                    int32_t *top_k)
{
    *temperature = a->temperature;
    *top_p = a->top_p;
    *top_k = a->top_k;
    return a->has_sampling;
}

void
gw_attempt_set_sampling(gw_attempt_t *a, const Lisa__Sampling *s)
{
    if (!s)
        return;
    a->has_sampling = true;
    a->temperature = s->temperature;
    a->top_p = s->top_p;
    a->top_k = s->top_k > 0 ? s->top_k : 0;
}

const char *
gw_attempt_group(const gw_attempt_t *a)
{
    return a->group;
}

void
gw_attempt_set_group(gw_attempt_t *a, const char *group_id)
{
    lisa_free(&a->group);
    a->group = group_id && *group_id ? lisa_strndup(group_id, 128) : NULL;
}

const char *
gw_attempt_engine(const gw_attempt_t *a)
{
    return a->engine;
}

void
gw_attempt_set_engine(gw_attempt_t *a, const char *engine_id)
{
    if (a->engine && engine_id && strcmp(a->engine, engine_id) == 0)
        return;
    lisa_free(&a->engine);
    a->engine = engine_id ? lisa_strdup(engine_id) : NULL;
}

void
gw_attempt_set_answer(gw_attempt_t *a, int64_t turn, const char *body,
                      size_t len, bool sse)
{
    lisa_free(&a->answer);
    a->answer = lisa_memdup(body, len);
    a->answer_len = len;
    a->answer_turn = turn;
    a->answer_sse = sse;
}

const char *
gw_attempt_answer(const gw_attempt_t *a, int64_t turn, size_t *len, bool *sse)
{
    if (!a->answer || a->answer_turn != turn)
        return NULL;
    *len = a->answer_len;
    *sse = a->answer_sse;
    return a->answer;
}

bool
gw_attempt_cached_digest(const gw_attempt_t *a, size_t i,
                         const uint8_t raw[GW_DIGEST_LEN],
                         uint8_t out[GW_DIGEST_LEN])
{
    if (i >= a->n_cache || memcmp(a->cache[i][0], raw, GW_DIGEST_LEN) != 0)
        return false;
    memcpy(out, a->cache[i][1], GW_DIGEST_LEN);
    return true;
}

#define S_MAX_PREFIX (4u << 20)

void
gw_attempt_keep_prefix(gw_attempt_t *a, const gw_chat_req_t *req)
{
    size_t n = req->n_msgs;
    size_t len = n && req->raw_len && req->raw_len[n - 1]
                     ? req->raw_off[n - 1] + req->raw_len[n - 1]
                     : 0;
    uint64_t gen = a->pre_gen++;
    if (!len || len > S_MAX_PREFIX || !req->body) {
        a->pre_n = a->pre_len = 0;
        return;
    }
    /* the part known from the previous call is already here */
    size_t have =
        a->pre_n && req->known_len == a->pre_len && req->known_gen == gen
            ? a->pre_len
            : 0;
    if (len > a->pre_cap) {
        size_t c = a->pre_cap ? a->pre_cap : 16384;
        while (c < len)
            c *= 2;
        a->pre = lisa_realloc(a->pre, c);
        a->pre_cap = c;
    }
    memcpy(a->pre + have, req->body + have, len - have);
    a->pre_len = len;
    if (n > a->pre_n || !a->pre_span) {
        a->pre_span = lisa_realloc(a->pre_span, n * sizeof *a->pre_span);
        a->pre_hash = lisa_realloc(a->pre_hash, n * sizeof *a->pre_hash);
    }
    for (size_t i = 0; i < n; i++) {
        a->pre_span[i][0] = req->raw_off[i];
        a->pre_span[i][1] = req->raw_len[i];
    }
    memcpy(a->pre_hash, req->raw_hash, n * sizeof *a->pre_hash);
    a->pre_n = n;
    a->pre_msgs = req->msgs_off;
    bool tools_before = req->tools_len && req->tools_off < req->msgs_off;
    a->pre_tools_off = tools_before ? req->tools_off : 0;
    a->pre_tools_len = tools_before ? req->tools_len : 0;
}

bool
gw_attempt_prefix(const gw_attempt_t *a, gw_chat_prefix_t *out)
{
    if (!a->pre_n)
        return false;
    *out = (gw_chat_prefix_t){.bytes = a->pre,
                              .len = a->pre_len,
                              .n = a->pre_n,
                              .span = (const size_t(*)[2]) a->pre_span,
                              .hash =
                                  (const uint8_t(*)[GW_DIGEST_LEN]) a->pre_hash,
                              .msgs_off = a->pre_msgs,
                              .tools_off = a->pre_tools_off,
                              .tools_len = a->pre_tools_len,
                              .gen = a->pre_gen};
    return true;
}

void
gw_attempt_cache(gw_attempt_t *a, const uint8_t (*raw)[GW_DIGEST_LEN],
                 const uint8_t (*digests)[GW_DIGEST_LEN], size_t n)
{
    if (n > a->cap_cache || !a->cache) {
        size_t c = a->cap_cache ? a->cap_cache : 16;
        while (c < n)
            c *= 2;
        a->cache = lisa_realloc(a->cache, c * sizeof *a->cache);
        a->cap_cache = c;
    }
    for (size_t i = 0; i < n; i++) {
        memcpy(a->cache[i][0], raw[i], GW_DIGEST_LEN);
        memcpy(a->cache[i][1], digests[i], GW_DIGEST_LEN);
    }
    a->n_cache = n;
}

bool
gw_attempt_plan(const gw_attempt_t *a, const uint8_t (*digests)[GW_DIGEST_LEN],
                size_t n, const uint8_t tools[GW_DIGEST_LEN], size_t *first_new)
{
    *first_new = 0;
    if (!a->has_history || n < a->n_hist ||
        memcmp(tools, a->tools, GW_DIGEST_LEN) != 0)
        return false;
    if (a->n_hist && memcmp(digests, a->hist, a->n_hist * GW_DIGEST_LEN) != 0)
        return false;
    *first_new = a->n_hist;
    return true;
}

static void
s_reserve(uint32_t **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    *buf = lisa_realloc(*buf, c * sizeof **buf);
    *cap = c;
}

lisa_rc_t
gw_attempt_begin(gw_attempt_t *a, bool extends, const uint32_t *appended,
                 size_t n, uint64_t now_ms)
{
    if (a->busy)
        return LISA_CONFLICT;
    if (extends && !a->has_history)
        return LISA_INVALID;
    size_t total = (extends ? a->n_ids : 0) + n;
    if (total > a->max_ids)
        return LISA_TOOLARGE;
    a->used_ms = now_ms;
    a->busy = true;
    a->open_extends = extends;
    a->open_appended = n;
    if (extends) {
        a->open_base = a->n_ids;
        s_reserve(&a->ids, &a->cap_ids, total);
        if (n)
            memcpy(a->ids + a->n_ids, appended, n * sizeof *appended);
        a->n_ids = total;
    } else {
        a->seg_ids = lisa_malloc((n ? n : 1) * sizeof *appended);
        if (n)
            memcpy(a->seg_ids, appended, n * sizeof *appended);
        a->n_seg = n;
    }
    return LISA_OK;
}

const uint32_t *
gw_attempt_prompt(const gw_attempt_t *a, size_t *n)
{
    if (!a->busy) {
        *n = 0;
        return NULL;
    }
    if (a->open_extends) {
        *n = a->n_ids;
        return a->ids;
    }
    *n = a->n_seg;
    return a->seg_ids;
}

void
gw_attempt_prompt_parts(gw_attempt_t *a, const char **text, size_t *text_len,
                        const uint32_t **tail, size_t *n_tail)
{
    *text = "";
    *text_len = 0;
    *tail = NULL;
    *n_tail = 0;
    if (!a->busy)
        return;
    if (!a->open_extends) {
        *tail = a->seg_ids;
        *n_tail = a->n_seg;
        return;
    }
    /* the committed ids the call extends never change until a new segment
     * (which empties the text): only ids not written yet are formatted */
    size_t stable = a->open_base;
    if (a->n_text < stable) {
        size_t more = stable - a->n_text;
        size_t need = a->text_len + 1 + GW_UPSTREAM_ID_TEXT_MAX(more);
        if (need > a->text_cap) {
            size_t c = a->text_cap ? a->text_cap : 4096;
            while (c < need)
                c *= 2;
            a->text = lisa_realloc(a->text, c);
            a->text_cap = c;
        }
        if (a->text_len)
            a->text[a->text_len++] = ',';
        a->text_len += gw_upstream_write_ids(a->text + a->text_len,
                                             a->ids + a->n_text, more);
        a->n_text = stable;
    }
    *text = a->text ? a->text : "";
    *text_len = a->text_len;
    *tail = a->ids + stable;
    *n_tail = a->n_ids - stable;
}

int32_t
gw_attempt_last_id(const gw_attempt_t *a)
{
    size_t n = gw_attempt_len(a);
    return n ? (int32_t) a->ids[n - 1] : -1;
}

size_t
gw_attempt_len(const gw_attempt_t *a)
{
    return a->busy && a->open_extends ? a->open_base : a->n_ids;
}

void
gw_attempt_abort(gw_attempt_t *a)
{
    if (!a->busy)
        return;
    if (a->open_extends)
        a->n_ids = a->open_base;
    else
        lisa_free(&a->seg_ids);
    a->n_seg = 0;
    a->busy = false;
}

static Lisa__Span *
s_span_new(void)
{
    Lisa__Span *sp = lisa_malloc(sizeof *sp);
    lisa__span__init(sp);
    return sp;
}

lisa_rc_t
gw_attempt_commit(gw_attempt_t *a, const uint8_t (*digests)[GW_DIGEST_LEN],
                  size_t n, const uint8_t tools[GW_DIGEST_LEN],
                  const uint8_t reply[GW_DIGEST_LEN], const gw_sample_t *s,
                  Lisa__Span **span)
{
    *span = NULL;
    if (!a->busy)
        return LISA_CONFLICT;
    size_t prompt_len;
    const uint32_t *prompt = gw_attempt_prompt(a, &prompt_len);
    if (prompt_len + s->n > a->max_ids) {
        gw_attempt_abort(a);
        return LISA_TOOLARGE;
    }
    Lisa__Span *sp = s_span_new();
    sp->rollout_id = lisa_strdup(a->rollout);
    sp->attempt = a->attempt;
    sp->seq = a->next_seq;
    sp->n_appended_ids = a->open_appended;
    sp->appended_ids = lisa_memdup(prompt + (prompt_len - a->open_appended),
                                   a->open_appended * sizeof(uint32_t));
    sp->n_response_ids = s->n;
    sp->response_ids = lisa_memdup(s->ids, s->n * sizeof(uint32_t));
    sp->n_response_logprobs = s->logprobs ? s->n : 0;
    sp->response_logprobs =
        s->logprobs ? lisa_memdup(s->logprobs, s->n * sizeof(float)) : NULL;
    sp->finish_reason = lisa_strdup(s->finish_reason ? s->finish_reason : "");
    sp->policy_version = s->policy_version;
    sp->engine_id = lisa_strdup(s->engine_id ? s->engine_id : "");
    sp->gateway_id = lisa_strdup(s->gateway_id ? s->gateway_id : "");
    sp->start_ms = s->start_ms;
    sp->first_token_ms = s->first_token_ms;
    sp->end_ms = s->end_ms;
    sp->prompt_len = (uint32_t) prompt_len;
    sp->sampling = lisa_malloc(sizeof *sp->sampling);
    lisa__sampling__init(sp->sampling);
    sp->sampling->temperature = s->temperature;
    sp->sampling->top_p = s->top_p;
    sp->sampling->top_k = s->top_k;
    if (a->open_extends) {
        sp->prev_seq = a->last_seq;
        sp->segment = a->segment;
    } else {
        sp->prev_seq = -1;
        a->segment = a->next_segment;
        sp->segment = a->segment;
        a->next_segment = a->segment + 1;
        /* the new segment's prompt becomes the stored sequence */
        a->n_text = a->text_len = 0;
        lisa_free(&a->ids);
        a->ids = a->seg_ids;
        a->seg_ids = NULL;
        a->n_ids = a->cap_ids = a->n_seg;
        a->n_seg = 0;
    }
    s_reserve(&a->ids, &a->cap_ids, a->n_ids + s->n);
    if (s->n)
        memcpy(a->ids + a->n_ids, s->ids, s->n * sizeof *s->ids);
    a->n_ids += s->n;
    a->hist = lisa_realloc(a->hist, (n + 1) * GW_DIGEST_LEN);
    if (n)
        memcpy(a->hist, digests, n * GW_DIGEST_LEN);
    memcpy(a->hist[n], reply, GW_DIGEST_LEN);
    a->n_hist = n + 1;
    memcpy(a->tools, tools, GW_DIGEST_LEN);
    a->has_history = true;
    a->last_seq = (int32_t) a->next_seq;
    a->next_seq++;
    a->spans++;
    a->busy = false;
    *span = sp;
    return LISA_OK;
}

void
gw_span_free(Lisa__Span **span)
{
    if (!span || !*span)
        return;
    Lisa__Span *sp = *span;
    lisa_free(&sp->rollout_id);
    lisa_free(&sp->appended_ids);
    lisa_free(&sp->response_ids);
    lisa_free(&sp->response_logprobs);
    lisa_free(&sp->finish_reason);
    lisa_free(&sp->engine_id);
    lisa_free(&sp->gateway_id);
    lisa_free(&sp->sampling);
    lisa_free(span);
}
