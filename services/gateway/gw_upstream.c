/*
 * gw_upstream: engine request/response codec (see the header). The prompt
 * array is written by hand: a 30k-id prompt as jansson integers would cost
 * more than everything else the gateway does per call.
 *
 * The response is read twice over, in the worst case. A small reader
 * validates the whole body as strict JSON in one pass without allocating
 * (strings are checked for UTF-8, numbers for the JSON grammar) and picks
 * out the few values the gateway needs; it answers only when it is sure
 * jansson would give the same answer, and says "unsupported" for anything
 * else (an error, an escape in a key, a duplicate key it needs, a number
 * that might overflow, vLLM's token strings, nesting deeper than 64). The
 * jansson reader then decides, so every refusal and its message stay those
 * of the reference reader. The fuzz target fuzz_gw_engine_reply checks
 * that the two agree whenever the small one answers.
 */
#include "gw_upstream.h"

#include "lisa/lisa_mem.h"
#include "lisa/lisa_unicode.h"

#include <jansson.h>
#include <locale.h>
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
    /* printable ASCII without quote or backslash is its own JSON text */
    size_t n = 0;
    while (s[n] >= 0x20 && s[n] < 0x7f && s[n] != '"' && s[n] != '\\')
        n++;
    if (!s[n]) {
        s_need(b, n + 2);
        b->p[b->n++] = '"';
        memcpy(b->p + b->n, s, n);
        b->n += n;
        b->p[b->n++] = '"';
        b->p[b->n] = '\0';
        return;
    }
    json_t *j = json_string(s);
    char *t = json_dumps(j, JSON_ENCODE_ANY);
    s_puts(b, t ? t : "\"\"");
    free(t);
    json_decref(j);
}

/* "00".."99": ids are written two digits at a time */
static const char s_digits2[] =
    "00010203040506070809101112131415161718192021222324"
    "25262728293031323334353637383940414243444546474849"
    "50515253545556575859606162636465666768697071727374"
    "75767778798081828384858687888990919293949596979899";

size_t
gw_upstream_write_ids(char *dst, const uint32_t *ids, size_t n)
{
    char *w = dst;
    for (size_t i = 0; i < n; i++) {
        char tmp[10];
        char *t = tmp + sizeof tmp;
        uint32_t v = ids[i];
        while (v >= 100) {
            uint32_t r = v % 100;
            v /= 100;
            t -= 2;
            memcpy(t, s_digits2 + 2 * r, 2);
        }
        if (v >= 10) {
            t -= 2;
            memcpy(t, s_digits2 + 2 * v, 2);
        } else
            *--t = (char) ('0' + v);
        size_t k = (size_t) (tmp + sizeof tmp - t);
        memcpy(w, t, k);
        w += k;
        *w++ = ',';
    }
    if (n)
        w--;
    return (size_t) (w - dst);
}

char *
gw_upstream_body(const uint32_t *ids, size_t n, const gw_sampling_t *s,
                 size_t *len)
{
    return gw_upstream_body_parts(NULL, 0, ids, n, s, len);
}

static void
s_head(s_buf_t *b, const gw_sampling_t *s)
{
    s_puts(b, "{\"model\":");
    s_json_str(b, s->model ? s->model : "");
    s_puts(b, ",\"prompt\":[");
}

/* Everything after the prompt's ids. */
static void
s_rest(s_buf_t *b, const gw_sampling_t *s)
{
    char tmp[160];
    snprintf(tmp, sizeof tmp,
             "],\"max_tokens\":%lld,\"logprobs\":1,\"return_token_ids\":true,"
             "\"skip_special_tokens\":false,\"stream\":false",
             (long long) s->max_tokens);
    s_puts(b, tmp);
    if (s->temperature >= 0) {
        snprintf(tmp, sizeof tmp, ",\"temperature\":%.17g", s->temperature);
        s_puts(b, tmp);
    }
    if (s->top_p >= 0) {
        snprintf(tmp, sizeof tmp, ",\"top_p\":%.17g", s->top_p);
        s_puts(b, tmp);
    }
    if (s->top_k > 0) {
        snprintf(tmp, sizeof tmp, ",\"top_k\":%lld", (long long) s->top_k);
        s_puts(b, tmp);
    }
    s_puts(b, ",\"stop_token_ids\":[");
    for (size_t i = 0; i < s->n_stop_ids; i++) {
        if (i)
            s_put(b, ",", 1);
        s_u32(b, (uint32_t) s->stop_ids[i]);
    }
    s_put(b, "]", 1);
    if (s->n_stop) {
        s_puts(b, ",\"stop\":[");
        for (size_t i = 0; i < s->n_stop; i++) {
            if (i)
                s_put(b, ",", 1);
            s_json_str(b, s->stop[i]);
        }
        s_put(b, "]", 1);
    }
    s_put(b, "}", 1);
}

char *
gw_upstream_body_parts(const char *text, size_t text_len, const uint32_t *ids,
                       size_t n, const gw_sampling_t *s, size_t *len)
{
    size_t room = 256 + text_len + GW_UPSTREAM_ID_TEXT_MAX(n);
    s_buf_t b = {lisa_malloc(room), 0, room};
    b.p[0] = '\0';
    s_head(&b, s);
    s_need(&b, text_len + 1 + GW_UPSTREAM_ID_TEXT_MAX(n));
    if (text_len) {
        memcpy(b.p + b.n, text, text_len);
        b.n += text_len;
        if (n)
            b.p[b.n++] = ',';
    }
    b.n += gw_upstream_write_ids(b.p + b.n, ids, n);
    b.p[b.n] = '\0';
    s_rest(&b, s);
    *len = b.n;
    return b.p;
}

void
gw_upstream_body_split(size_t text_len, const uint32_t *ids, size_t n,
                       const gw_sampling_t *s, char **pre, size_t *pre_len,
                       char **post, size_t *post_len)
{
    s_buf_t b = {lisa_malloc(64), 0, 64};
    b.p[0] = '\0';
    s_head(&b, s);
    *pre = b.p;
    *pre_len = b.n;
    size_t room = 256 + GW_UPSTREAM_ID_TEXT_MAX(n);
    b = (s_buf_t){lisa_malloc(room), 0, room};
    b.p[0] = '\0';
    if (text_len && n)
        b.p[b.n++] = ',';
    b.n += gw_upstream_write_ids(b.p + b.n, ids, n);
    b.p[b.n] = '\0';
    s_rest(&b, s);
    *post = b.p;
    *post_len = b.n;
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
    /* usage.prompt_tokens_details.cached_tokens (OpenAI / vLLM): prompt
     * ids the engine found in its prefix cache; 0 unless a non-negative
     * integer */
    json_t *ct = json_object_get(json_object_get(json_object_get(root, "usage"),
                                                 "prompt_tokens_details"),
                                 "cached_tokens");
    out->cached_tokens = json_is_integer(ct) && json_integer_value(ct) >= 0
                             ? (uint64_t) json_integer_value(ct)
                             : 0;
    return LISA_OK;
}

lisa_rc_t
gw_upstream_parse_json(const char *body, size_t len, size_t max_ids,
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

/* Copies n bytes of s as printable ASCII, cut with "..." to fit cap. */
static void
s_printable(const char *s, size_t n, char *out, size_t cap)
{
    size_t room = cap - 1, k = 0;
    bool cut = n > room;
    size_t take = cut ? (room > 3 ? room - 3 : 0) : n;
    for (size_t i = 0; i < take; i++) {
        unsigned char c = (unsigned char) s[i];
        out[k++] = c >= 0x20 && c < 0x7f ? (char) c : '?';
    }
    if (cut)
        for (size_t i = 0; i < 3 && k < room; i++)
            out[k++] = '.';
    out[k] = '\0';
}

/* The first string among an error object's usual fields. */
static const char *
s_error_field(json_t *root, size_t *n)
{
    json_t *e = json_object_get(root, "error");
    json_t *cand[] = {json_object_get(e, "message"), e,
                      json_object_get(root, "message"),
                      json_object_get(root, "detail")};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
        if (json_is_string(cand[i])) {
            *n = json_string_length(cand[i]);
            return json_string_value(cand[i]);
        }
    return NULL;
}

char *
gw_upstream_error_text(const char *body, size_t len, char *out, size_t cap)
{
    if (!cap)
        return out;
    out[0] = '\0';
    if (!body || !len)
        return out;
    /* an error body worth reading is small; a big one is not parsed */
    json_t *root = len <= 65536 ? json_loadb(body, len, 0, NULL) : NULL;
    if (root) {
        size_t n = 0;
        const char *s = s_error_field(root, &n);
        if (s)
            s_printable(s, n, out, cap);
        json_decref(root);
        return out;
    }
    size_t n = len;
    while (n &&
           (body[n - 1] == '\n' || body[n - 1] == '\r' || body[n - 1] == ' '))
        n--;
    if (n && n < cap && body[0] != '{' && body[0] != '[')
        s_printable(body, n, out, cap);
    return out;
}

/* ---- the small reader --------------------------------------------------- */

#define S_RD_DEPTH 64u

typedef struct {
    const char *p, *end;
} s_rd_t;

static void
s_rd_ws(s_rd_t *r)
{
    while (r->p < r->end &&
           (*r->p == ' ' || *r->p == '\n' || *r->p == '\t' || *r->p == '\r'))
        r->p++;
}

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), 0 if it is
 * not one: no overlong forms, no surrogates, nothing past U+10FFFF. */
static size_t
s_utf8(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    uint32_t v;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        v = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        v = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        v = c & 0x07;
    } else
        return 0;
    if ((size_t) (end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (p[i] & 0x3f);
    }
    if ((n == 3 && v < 0x800) || (n == 4 && v < 0x10000) || v > 0x10ffff ||
        (v >= 0xd800 && v <= 0xdfff))
        return 0;
    return n;
}

/* A string at r->p ('"'); s and n get its raw bytes between the quotes and
 * *esc whether it holds an escape. \u escapes of NUL or of a surrogate are
 * left to jansson (false). */
static bool
s_rd_string(s_rd_t *r, const char **s, size_t *n, bool *esc)
{
    const unsigned char *p = (const unsigned char *) r->p + 1;
    const unsigned char *end = (const unsigned char *) r->end;
    *s = (const char *) p;
    *esc = false;
    while (p < end) {
        unsigned c = *p;
        if (c == '"') {
            *n = (size_t) ((const char *) p - *s);
            r->p = (const char *) p + 1;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c < 0x80 && c != '\\') {
            p++;
            continue;
        }
        if (c >= 0x80) {
            size_t k = s_utf8(p, end);
            if (!k)
                return false;
            p += k;
            continue;
        }
        *esc = true;
        if (end - p < 2)
            return false;
        c = p[1];
        if (c == 'u') {
            if (end - p < 6)
                return false;
            int v = 0;
            for (int i = 2; i < 6; i++) {
                int h = lisa_hex_digit((char) p[i]);
                if (h < 0)
                    return false;
                v = v * 16 + h;
            }
            if (v == 0 || (v >= 0xd800 && v <= 0xdfff))
                return false;
            p += 6;
        } else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' ||
                   c == 'n' || c == 'r' || c == 't')
            p += 2;
        else
            return false;
    }
    return false;
}

/* A number at r->p in JSON's grammar; *is_int when it has no fraction or
 * exponent. Numbers jansson might refuse as out of range (integers of more
 * than 18 digits, reals of more than 200 digits or a 3-digit exponent) are
 * left to jansson. */
static bool
s_rd_number(s_rd_t *r, bool *is_int)
{
    const char *p = r->p, *end = r->end;
    size_t digits = 0, edigits = 0;
    *is_int = true;
    if (p < end && *p == '-')
        p++;
    if (p < end && *p == '0') {
        p++;
        digits++;
    } else if (p < end && *p >= '1' && *p <= '9')
        while (p < end && *p >= '0' && *p <= '9') {
            p++;
            digits++;
        }
    else
        return false;
    if (p < end && *p == '.') {
        *is_int = false;
        p++;
        if (p >= end || *p < '0' || *p > '9')
            return false;
        while (p < end && *p >= '0' && *p <= '9') {
            p++;
            digits++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = false;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            return false;
        while (p < end && *p >= '0' && *p <= '9') {
            p++;
            edigits++;
        }
    }
    if (*is_int ? digits > 18 : (digits > 200 || edigits > 2))
        return false;
    r->p = p;
    return true;
}

static bool s_rd_value(s_rd_t *r, unsigned depth);

/* Calls on_key for each member of the object at r->p ('{'); on_key reads
 * the value. */
typedef bool(s_rd_key_fn)(s_rd_t *r, const char *k, size_t kn, bool kesc,
                          unsigned depth, void *arg);

static bool
s_rd_object(s_rd_t *r, unsigned depth, s_rd_key_fn *on_key, void *arg)
{
    if (depth > S_RD_DEPTH)
        return false;
    r->p++;
    s_rd_ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return true;
    }
    for (;;) {
        const char *k;
        size_t kn;
        bool kesc;
        if (r->p >= r->end || *r->p != '"' || !s_rd_string(r, &k, &kn, &kesc))
            return false;
        s_rd_ws(r);
        if (r->p >= r->end || *r->p != ':')
            return false;
        r->p++;
        s_rd_ws(r);
        if (!on_key(r, k, kn, kesc, depth, arg))
            return false;
        s_rd_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            s_rd_ws(r);
            continue;
        }
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            return true;
        }
        return false;
    }
}

static bool
s_rd_skip_member(s_rd_t *r, const char *k, size_t kn, bool kesc, unsigned depth,
                 void *arg)
{
    (void) k;
    (void) kn;
    (void) kesc;
    (void) arg;
    return s_rd_value(r, depth + 1);
}

/* Calls on_elem for each element of the array at r->p ('['); on_elem reads
 * the element (index i). */
typedef bool(s_rd_elem_fn)(s_rd_t *r, size_t i, unsigned depth, void *arg);

static bool
s_rd_array(s_rd_t *r, unsigned depth, s_rd_elem_fn *on_elem, void *arg)
{
    if (depth > S_RD_DEPTH)
        return false;
    r->p++;
    s_rd_ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        return true;
    }
    for (size_t i = 0;; i++) {
        if (!on_elem(r, i, depth, arg))
            return false;
        s_rd_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            s_rd_ws(r);
            continue;
        }
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            return true;
        }
        return false;
    }
}

static bool
s_rd_skip_elem(s_rd_t *r, size_t i, unsigned depth, void *arg)
{
    (void) i;
    (void) arg;
    return s_rd_value(r, depth + 1);
}

static bool
s_rd_lit(s_rd_t *r, const char *lit, size_t n)
{
    if ((size_t) (r->end - r->p) < n || memcmp(r->p, lit, n) != 0)
        return false;
    r->p += n;
    return true;
}

/* Validates and skips one value at r->p. */
static bool
s_rd_value(s_rd_t *r, unsigned depth)
{
    if (r->p >= r->end)
        return false;
    const char *s;
    size_t n;
    bool b;
    switch (*r->p) {
    case '{':
        return s_rd_object(r, depth, s_rd_skip_member, NULL);
    case '[':
        return s_rd_array(r, depth, s_rd_skip_elem, NULL);
    case '"':
        return s_rd_string(r, &s, &n, &b);
    case 't':
        return s_rd_lit(r, "true", 4);
    case 'f':
        return s_rd_lit(r, "false", 5);
    case 'n':
        return s_rd_lit(r, "null", 4);
    default:
        return s_rd_number(r, &b);
    }
}

/* Where the values the gateway needs start (NULL: absent). */
typedef struct {
    const char *choices_pv; /* root.policy_version */
    const char *choice0;    /* choices[0] seen */
    const char *ids;        /* choices[0].token_ids */
    const char *logprobs;   /* choices[0].logprobs */
    const char *tl;         /* choices[0].logprobs.token_logprobs */
    const char *tokens;     /* choices[0].logprobs.tokens */
    const char *finish;     /* choices[0].finish_reason */
    const char *pv;         /* choices[0].policy_version */
    const char *usage;      /* root.usage */
    const char *details;    /* usage.prompt_tokens_details */
    const char *cached;     /* prompt_tokens_details.cached_tokens */
    bool choices;           /* root.choices seen */
} s_rd_found_t;

static bool
s_key_is(const char *k, size_t kn, const char *name)
{
    size_t n = strlen(name);
    return kn == n && memcmp(k, name, n) == 0;
}

/* Records where a needed value starts; a second one (a duplicate key) is
 * left to jansson. */
static bool
s_rd_mark(const char **slot, const char *at)
{
    if (*slot)
        return false;
    *slot = at;
    return true;
}

static bool
s_rd_logprobs_member(s_rd_t *r, const char *k, size_t kn, bool kesc,
                     unsigned depth, void *arg)
{
    s_rd_found_t *f = arg;
    if (kesc)
        return false;
    if (s_key_is(k, kn, "token_logprobs") && !s_rd_mark(&f->tl, r->p))
        return false;
    if (s_key_is(k, kn, "tokens") && !s_rd_mark(&f->tokens, r->p))
        return false;
    return s_rd_value(r, depth + 1);
}

static bool
s_rd_choice_member(s_rd_t *r, const char *k, size_t kn, bool kesc,
                   unsigned depth, void *arg)
{
    s_rd_found_t *f = arg;
    if (kesc)
        return false;
    if (s_key_is(k, kn, "logprobs")) {
        if (!s_rd_mark(&f->logprobs, r->p))
            return false;
        if (r->p < r->end && *r->p == '{')
            return s_rd_object(r, depth + 1, s_rd_logprobs_member, f);
    } else if ((s_key_is(k, kn, "token_ids") && !s_rd_mark(&f->ids, r->p)) ||
               (s_key_is(k, kn, "finish_reason") &&
                !s_rd_mark(&f->finish, r->p)) ||
               (s_key_is(k, kn, "policy_version") && !s_rd_mark(&f->pv, r->p)))
        return false;
    return s_rd_value(r, depth + 1);
}

static bool
s_rd_details_member(s_rd_t *r, const char *k, size_t kn, bool kesc,
                    unsigned depth, void *arg)
{
    s_rd_found_t *f = arg;
    if (kesc)
        return false;
    if (s_key_is(k, kn, "cached_tokens") && !s_rd_mark(&f->cached, r->p))
        return false;
    return s_rd_value(r, depth + 1);
}

static bool
s_rd_usage_member(s_rd_t *r, const char *k, size_t kn, bool kesc,
                  unsigned depth, void *arg)
{
    s_rd_found_t *f = arg;
    if (kesc)
        return false;
    if (s_key_is(k, kn, "prompt_tokens_details")) {
        if (!s_rd_mark(&f->details, r->p))
            return false;
        if (r->p < r->end && *r->p == '{')
            return s_rd_object(r, depth + 1, s_rd_details_member, f);
    }
    return s_rd_value(r, depth + 1);
}

static bool
s_rd_choices_elem(s_rd_t *r, size_t i, unsigned depth, void *arg)
{
    s_rd_found_t *f = arg;
    if (i == 0 && r->p < r->end && *r->p == '{') {
        f->choice0 = r->p;
        return s_rd_object(r, depth + 1, s_rd_choice_member, f);
    }
    return s_rd_value(r, depth + 1);
}

static bool
s_rd_root_member(s_rd_t *r, const char *k, size_t kn, bool kesc, unsigned depth,
                 void *arg)
{
    s_rd_found_t *f = arg;
    if (kesc)
        return false;
    if (s_key_is(k, kn, "choices")) {
        if (f->choices)
            return false;
        f->choices = true;
        if (r->p < r->end && *r->p == '[')
            return s_rd_array(r, depth + 1, s_rd_choices_elem, f);
    } else if (s_key_is(k, kn, "usage")) {
        if (!s_rd_mark(&f->usage, r->p))
            return false;
        if (r->p < r->end && *r->p == '{')
            return s_rd_object(r, depth + 1, s_rd_usage_member, f);
    } else if (s_key_is(k, kn, "policy_version") &&
               !s_rd_mark(&f->choices_pv, r->p))
        return false;
    return s_rd_value(r, depth + 1);
}

/* An integer value at p (already validated): true with *v when it is one
 * (no fraction or exponent). */
static bool
s_rd_int_at(const char *p, const char *end, int64_t *v)
{
    s_rd_t r = {p, end};
    bool is_int;
    if (!s_rd_number(&r, &is_int) || !is_int)
        return false;
    bool neg = *p == '-';
    int64_t x = 0;
    for (const char *q = p + neg; q < r.p; q++)
        x = x * 10 + (*q - '0');
    *v = neg ? -x : x;
    return true;
}

/* Short decimals (at most 19 significant digits, a power of ten within
 * 10^22) straight to the float they round to: m / 10^k in double is within
 * 2^-52 of the value, and when every double within 2^-50 of it rounds to
 * the same float, so does strtod's correctly rounded double. False (use
 * strtod) otherwise. */
static bool
s_rd_float_fast(const char *p, const char *end, float *out)
{
    static const double pow10[] = {
        1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
        1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    bool neg = p < end && *p == '-';
    p += neg;
    uint64_t m = 0;
    int digits = 0, e10 = 0;
    for (; p < end && *p >= '0' && *p <= '9'; p++) {
        if (m || *p != '0')
            digits++;
        m = m * 10 + (uint64_t) (*p - '0');
        if (digits > 19)
            return false;
    }
    if (p < end && *p == '.')
        for (p++; p < end && *p >= '0' && *p <= '9'; p++) {
            if (m || *p != '0')
                digits++;
            if (digits > 19)
                return false;
            m = m * 10 + (uint64_t) (*p - '0');
            e10--;
        }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        bool eneg = p < end && *p == '-';
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        int x = 0;
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            x = x * 10 + (*p - '0');
            if (x > 400)
                return false;
        }
        e10 += eneg ? -x : x;
    }
    if (e10 < -22 || e10 > 22)
        return false;
    double d = (double) m;
    d = e10 < 0 ? d / pow10[-e10] : d * pow10[e10];
    float f = (float) d;
    if ((float) (d * (1 - 0x1p-50)) != f || (float) (d * (1 + 0x1p-50)) != f)
        return false;
    *out = neg ? -f : f;
    return true;
}

/* A number value at p (already validated) as a double, the way strtod
 * reads it. */
static bool
s_rd_double_at(const char *p, const char *end, double *v, const char **next)
{
    s_rd_t r = {p, end};
    bool is_int;
    if (!s_rd_number(&r, &is_int))
        return false;
    *next = r.p;
    char tmp[256];
    size_t n = (size_t) (r.p - p);
    if (n >= sizeof tmp)
        return false;
    memcpy(tmp, p, n);
    tmp[n] = '\0';
    char *e = NULL;
    *v = strtod(tmp, &e);
    return e == tmp + n;
}

/* The elements of a validated array of numbers at p ('['), stored as
 * ids (*idsp) or as logprobs (*lpsp), in an array grown as they come
 * (the caller frees it, also on failure). */
static bool
s_rd_numbers(const char *p, const char *end, size_t max, size_t *count,
             uint32_t **idsp, float **lpsp)
{
    s_rd_t r = {p + 1, end};
    size_t n = 0, cap = 0;
    uint32_t *ids = NULL;
    float *lps = NULL;
    s_rd_ws(&r);
    if (r.p < end && *r.p == ']') {
        *count = 0;
        return true;
    }
    for (;;) {
        if (n >= max || r.p >= end ||
            (*r.p != '-' && (*r.p < '0' || *r.p > '9')))
            return false;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            if (cap > max)
                cap = max;
            if (idsp)
                *idsp = ids = lisa_realloc(*idsp, cap * sizeof *ids);
            else
                *lpsp = lps = lisa_realloc(*lpsp, cap * sizeof *lps);
        }
        if (ids) {
            /* the usual id: up to 10 digits, no sign, no leading zero,
             * read in one scan; anything else the long way */
            const char *q = r.p;
            uint64_t x = 0;
            while (q < end && *q >= '0' && *q <= '9' && q - r.p < 11)
                x = x * 10 + (uint64_t) (*q++ - '0');
            if (q > r.p && q - r.p <= 10 && (*r.p != '0' || q - r.p == 1) &&
                (q == end || (*q != '.' && *q != 'e' && *q != 'E' &&
                              (*q < '0' || *q > '9')))) {
                if (x > INT32_MAX)
                    return false;
                ids[n] = (uint32_t) x;
                r.p = q;
            } else {
                int64_t v;
                if (!s_rd_int_at(r.p, end, &v) || v < 0 || v > INT32_MAX)
                    return false;
                ids[n] = (uint32_t) v;
                bool is_int;
                (void) s_rd_number(&r, &is_int);
            }
        } else if (lps) {
            const char *q = r.p;
            bool is_int;
            if (!s_rd_number(&r, &is_int))
                return false;
            float f;
            int64_t iv;
            if (is_int && s_rd_int_at(q, end, &iv)) {
                /* jansson holds an integer ("-0" is 0, not -0.0) */
                if (iv > 0)
                    return false;
                lps[n] = (float) (double) iv;
            } else if (s_rd_float_fast(q, r.p, &f)) {
                if (f > 0)
                    return false;
                lps[n] = f;
            } else {
                double d;
                const char *next;
                if (!s_rd_double_at(q, end, &d, &next) || !isfinite(d) || d > 0)
                    return false;
                lps[n] = (float) d;
            }
        }
        n++;
        s_rd_ws(&r);
        if (r.p < end && *r.p == ',') {
            r.p++;
            s_rd_ws(&r);
            continue;
        }
        if (r.p < end && *r.p == ']')
            break;
        return false;
    }
    *count = n;
    return true;
}

lisa_rc_t
gw_upstream_parse_fast(const char *body, size_t len, size_t max_ids,
                       gw_completion_t *out)
{
    memset(out, 0, sizeof *out);
    const struct lconv *lc = localeconv();
    if (!lc || strcmp(lc->decimal_point, ".") != 0)
        return LISA_UNSUPPORTED; /* strtod would not read JSON's '.' */
    s_rd_t r = {body, body + len};
    s_rd_found_t f = {0};
    s_rd_ws(&r);
    if (r.p >= r.end || *r.p != '{' ||
        !s_rd_object(&r, 1, s_rd_root_member, &f))
        return LISA_UNSUPPORTED;
    s_rd_ws(&r);
    if (r.p != r.end || !f.choice0 || !f.ids || *f.ids != '[' || !f.logprobs ||
        *f.logprobs != '{' || !f.tl || *f.tl != '[' || !f.finish ||
        *f.finish != '"')
        return LISA_UNSUPPORTED;
    const char *end = body + len;
    size_t n, n_lp;
    if (!s_rd_numbers(f.ids, end, max_ids, &n, &out->ids, NULL) ||
        !s_rd_numbers(f.tl, end, max_ids, &n_lp, NULL, &out->logprobs) ||
        n != n_lp) {
        gw_completion_clear(out);
        return LISA_UNSUPPORTED;
    }
    /* finish_reason: "stop" or "length", without escapes */
    s_rd_t fr = {f.finish, end};
    const char *s;
    size_t sn;
    bool esc;
    if (!s_rd_string(&fr, &s, &sn, &esc) || esc ||
        !(s_key_is(s, sn, "stop") || s_key_is(s, sn, "length"))) {
        gw_completion_clear(out);
        return LISA_UNSUPPORTED;
    }
    int64_t pv = 0;
    const char *pvat = f.choices_pv ? f.choices_pv : f.pv;
    if (pvat && (!s_rd_int_at(pvat, end, &pv) || pv < 0)) {
        gw_completion_clear(out);
        return LISA_UNSUPPORTED;
    }
    if (!out->ids)
        out->ids = lisa_malloc(sizeof *out->ids);
    if (!out->logprobs)
        out->logprobs = lisa_malloc(sizeof *out->logprobs);
    int64_t cached = 0;
    if (f.cached && (!s_rd_int_at(f.cached, end, &cached) || cached < 0))
        cached = 0; /* not a count: as if not reported (jansson's rule) */
    out->n = n;
    memcpy(out->finish_reason, s, sn);
    out->finish_reason[sn] = '\0';
    out->policy_version = (uint64_t) pv;
    out->cached_tokens = (uint64_t) cached;
    return LISA_OK;
}

lisa_rc_t
gw_upstream_parse(const char *body, size_t len, size_t max_ids,
                  gw_completion_t *out, char *why, size_t whylen)
{
    if (gw_upstream_parse_fast(body, len, max_ids, out) == LISA_OK)
        return LISA_OK;
    return gw_upstream_parse_json(body, len, max_ids, out, why, whylen);
}
