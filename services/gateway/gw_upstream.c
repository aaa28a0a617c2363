/*
 * gw_upstream: engine request/response codec (see the header). The prompt
 * array is written by hand: a 30k-id prompt as jansson integers would cost
 * more than everything else the gateway does per call.
 */
#include "gw_upstream.h"

#include "lisa/lisa_mem.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char *p;
    size_t n, cap;
} s_buf_t;

static void
s_need(s_buf_t *b, size_t more)
{
    if (b->n + more + 1 <= b->cap)
        return;
    while (b->n + more + 1 > b->cap)
        b->cap *= 2;
    b->p = lisa_realloc(b->p, b->cap);
}

static void
s_put(s_buf_t *b, const char *s, size_t n)
{
    s_need(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void
s_puts(s_buf_t *b, const char *s)
{
    s_put(b, s, strlen(s));
}

static void
s_u32(s_buf_t *b, uint32_t v)
{
    char tmp[12];
    int k = 0;
    do {
        tmp[k++] = (char) ('0' + v % 10);
        v /= 10;
    } while (v);
    s_need(b, (size_t) k);
    while (k)
        b->p[b->n++] = tmp[--k];
    b->p[b->n] = '\0';
}

static void
s_json_str(s_buf_t *b, const char *s)
{
    json_t *j = json_string(s);
    char *t = json_dumps(j, JSON_ENCODE_ANY);
    s_puts(b, t ? t : "\"\"");
    free(t);
    json_decref(j);
}

char *
gw_upstream_body(const uint32_t *ids, size_t n, const gw_sampling_t *s,
                 size_t *len)
{
    s_buf_t b = {lisa_malloc(256 + n * 7), 0, 256 + n * 7};
    b.p[0] = '\0';
    s_puts(&b, "{\"model\":");
    s_json_str(&b, s->model ? s->model : "");
    s_puts(&b, ",\"prompt\":[");
    s_need(&b, n * 11);
    char *w = b.p + b.n;
    for (size_t i = 0; i < n; i++) {
        char tmp[10];
        int k = 0;
        uint32_t v = ids[i];
        do {
            tmp[k++] = (char) ('0' + v % 10);
            v /= 10;
        } while (v);
        while (k)
            *w++ = tmp[--k];
        *w++ = ',';
    }
    if (n)
        w--;
    b.n = (size_t) (w - b.p);
    b.p[b.n] = '\0';
    char tmp[160];
    snprintf(tmp, sizeof tmp,
             "],\"max_tokens\":%lld,\"logprobs\":1,\"return_token_ids\":true,"
             "\"skip_special_tokens\":false,\"stream\":false",
             (long long) s->max_tokens);
    s_puts(&b, tmp);
    if (s->temperature >= 0) {
        snprintf(tmp, sizeof tmp, ",\"temperature\":%.17g", s->temperature);
        s_puts(&b, tmp);
    }
    if (s->top_p >= 0) {
        snprintf(tmp, sizeof tmp, ",\"top_p\":%.17g", s->top_p);
        s_puts(&b, tmp);
    }
    s_puts(&b, ",\"stop_token_ids\":[");
    for (size_t i = 0; i < s->n_stop_ids; i++) {
        if (i)
            s_put(&b, ",", 1);
        s_u32(&b, (uint32_t) s->stop_ids[i]);
    }
    s_put(&b, "]", 1);
    if (s->n_stop) {
        s_puts(&b, ",\"stop\":[");
        for (size_t i = 0; i < s->n_stop; i++) {
            if (i)
                s_put(&b, ",", 1);
            s_json_str(&b, s->stop[i]);
        }
        s_put(&b, "]", 1);
    }
    s_put(&b, "}", 1);
    *len = b.n;
    return b.p;
}

void
gw_completion_clear(gw_completion_t *c)
{
    if (!c)
        return;
    lisa_free(&c->ids);
    lisa_free(&c->logprobs);
    c->n = 0;
}

#define S_WHY(...) (snprintf(why, whylen, __VA_ARGS__), LISA_INVALID)

static lisa_rc_t
s_parse_choice(json_t *root, json_t *ch, size_t max_ids, gw_completion_t *out,
               char *why, size_t whylen)
{
    json_t *ids = json_object_get(ch, "token_ids");
    json_t *lp = json_object_get(ch, "logprobs");
    json_t *tl = json_object_get(lp, "token_logprobs");
    json_t *toks = json_object_get(lp, "tokens");
    bool from_tokens = !json_is_array(ids);
    json_t *src = from_tokens ? toks : ids;
    if (!json_is_array(src))
        return S_WHY("choices[0] has no token_ids");
    size_t n = json_array_size(src);
    if (n > max_ids)
        return S_WHY("%zu ids exceed the bound %zu", n, max_ids);
    if (!json_is_array(tl) || json_array_size(tl) != n)
        return S_WHY("logprobs.token_logprobs must have one entry per id");
    out->ids = lisa_malloc((n ? n : 1) * sizeof *out->ids);
    out->logprobs = lisa_malloc((n ? n : 1) * sizeof *out->logprobs);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(src, i);
        json_int_t id = -1;
        if (!from_tokens && json_is_integer(v))
            id = json_integer_value(v);
        else if (from_tokens && json_is_string(v) &&
                 strncmp(json_string_value(v), "token_id:", 9) == 0) {
            char *end = NULL;
            id = (json_int_t) strtoll(json_string_value(v) + 9, &end, 10);
            if (!end || *end)
                id = -1;
        }
        if (id < 0 || id > (json_int_t) INT32_MAX)
            return S_WHY("token id %zu is not a valid id", i);
        out->ids[i] = (uint32_t) id;
        json_t *l = json_array_get(tl, i);
        if (!json_is_number(l) || !isfinite(json_number_value(l)) ||
            json_number_value(l) > 0)
            return S_WHY("logprob %zu is not a finite log probability", i);
        out->logprobs[i] = (float) json_number_value(l);
    }
    out->n = n;
    const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
    if (!fr || (strcmp(fr, "stop") != 0 && strcmp(fr, "length") != 0))
        return S_WHY("finish_reason must be stop or length, got %.32s",
                     fr ? fr : "null");
    snprintf(out->finish_reason, sizeof out->finish_reason, "%s", fr);
    json_t *pv = json_object_get(root, "policy_version");
    if (!pv)
        pv = json_object_get(ch, "policy_version");
    if (pv && (!json_is_integer(pv) || json_integer_value(pv) < 0))
        return S_WHY("policy_version must be a non-negative integer");
    out->policy_version = pv ? (uint64_t) json_integer_value(pv) : 0;
    return LISA_OK;
}

lisa_rc_t
gw_upstream_parse(const char *body, size_t len, size_t max_ids,
                  gw_completion_t *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = json_loadb(body, len, 0, &jerr);
    if (!root)
        return S_WHY("engine response is not JSON: %s", jerr.text);
    lisa_rc_t rc = LISA_INVALID;
    json_t *ch = json_array_get(json_object_get(root, "choices"), 0);
    if (!json_is_object(ch))
        snprintf(why, whylen, "engine response has no choices[0]");
    else
        rc = s_parse_choice(root, ch, max_ids, out, why, whylen);
    json_decref(root);
    if (rc != LISA_OK)
        gw_completion_clear(out);
    return rc;
}
