/*
 * gw_json: quick JSON reader into jansson values (see the header).
 *
 * Recursive descent over the bytes; strings are scanned 16 bytes at a
 * time (SSE2) for the bytes that end a plain run ('"', '\\', controls)
 * and for non-ASCII bytes, which are then checked as UTF-8 over the whole
 * string. Strings without escapes are copied once into their jansson
 * value; escapes are decoded into a scratch buffer first. Whatever the
 * reader does not take on (see the header) makes it give up with NULL.
 */
#include "gw_json.h"

#include "lisa/lisa_buf.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_unicode.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_JMAX_DEPTH 64u
#define S_JMAX_NUM   64u

typedef struct {
    const char *p, *end;
    size_t flags;
    char *scratch; /* decoded strings with escapes */
    size_t cap;
} s_jrd_t;

static void
s_jws(s_jrd_t *r)
{
    while (r->p < r->end &&
           (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t'))
        r->p++;
}

const char *
gw_json_scan_plain(const char *p, const char *end, bool *high)
{
    bool dummy = false;
    if (!high)
        high = &dummy;
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'),
                  ctl = _mm_set1_epi8(0x1f);
    while (end - p >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *) (const void *) p);
        __m128i hit = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bs)),
            _mm_cmpeq_epi8(_mm_max_epu8(v, ctl), ctl));
        int m = _mm_movemask_epi8(hit);
        int h = _mm_movemask_epi8(v);
        if (m) {
            unsigned k = (unsigned) __builtin_ctz((unsigned) m);
            if ((unsigned) h & ((1u << k) - 1u))
                *high = true;
            return p + k;
        }
        if (h)
            *high = true;
        p += 16;
    }
#endif
    while (p < end) {
        unsigned char c = (unsigned char) *p;
        if (c == '"' || c == '\\' || c < 0x20)
            break;
        if (c >= 0x80)
            *high = true;
        p++;
    }
    return p;
}

static int
s_jhex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Reads a string at r->p ('"'); *s and *n get its decoded bytes (in the
 * input, or in r->scratch when it has escapes). False: give up. */
static bool
s_jstring(s_jrd_t *r, const char **s, size_t *n)
{
    const char *b = r->p + 1, *p = b;
    bool high = false, esc = false;
    for (;;) {
        p = gw_json_scan_plain(p, r->end, &high);
        if (p >= r->end)
            return false;
        if (*p == '"')
            break;
        if (*p != '\\')
            return false; /* a control character */
        esc = true;
        if (r->end - p < 2)
            return false;
        p += p[1] == 'u' ? 6 : 2;
        if (p > r->end)
            return false;
    }
    size_t raw = (size_t) (p - b);
    r->p = p + 1;
    if (high && !lisa_utf8_valid(b, raw))
        return false;
    if (!esc) {
        *s = b;
        *n = raw;
        return true;
    }
    if (raw + 1 > r->cap) {
        r->cap = raw + 1 > 256 ? raw + 1 : 256;
        lisa_free(&r->scratch);
        r->scratch = lisa_malloc(r->cap);
    }
    char *w = r->scratch;
    for (const char *q = b; q < p;) {
        if (*q != '\\') {
            *w++ = *q++;
            continue;
        }
        char c = q[1];
        q += 2;
        switch (c) {
        case '"':
        case '\\':
        case '/':
            *w++ = c;
            break;
        case 'b':
            *w++ = '\b';
            break;
        case 'f':
            *w++ = '\f';
            break;
        case 'n':
            *w++ = '\n';
            break;
        case 'r':
            *w++ = '\r';
            break;
        case 't':
            *w++ = '\t';
            break;
        case 'u': {
            int v = s_jhex4(q);
            q += 4;
            if (v <= 0 || (v >= 0xDC00 && v <= 0xDFFF))
                return false; /* NUL, or a lone low surrogate */
            uint32_t cp = (uint32_t) v;
            if (v >= 0xD800 && v <= 0xDBFF) {
                if (p - q < 6 || q[0] != '\\' || q[1] != 'u')
                    return false;
                int lo = s_jhex4(q + 2);
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return false;
                q += 6;
                cp = 0x10000u + (((uint32_t) v - 0xD800u) << 10) +
                     ((uint32_t) lo - 0xDC00u);
            }
            w += lisa_utf8_put(cp, w);
            break;
        }
        default:
            return false;
        }
    }
    *s = r->scratch;
    *n = (size_t) (w - r->scratch);
    return true;
}

static json_t *
s_jnumber(s_jrd_t *r)
{
    const char *b = r->p, *p = b;
    if (p < r->end && *p == '-')
        p++;
    if (p >= r->end || *p < '0' || *p > '9')
        return NULL;
    if (*p == '0')
        p++;
    else
        while (p < r->end && *p >= '0' && *p <= '9')
            p++;
    bool real = false;
    if (p < r->end && *p == '.') {
        real = true;
        p++;
        if (p >= r->end || *p < '0' || *p > '9')
            return NULL;
        while (p < r->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < r->end && (*p == 'e' || *p == 'E')) {
        real = true;
        p++;
        if (p < r->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= r->end || *p < '0' || *p > '9')
            return NULL;
        while (p < r->end && *p >= '0' && *p <= '9')
            p++;
    }
    size_t n = (size_t) (p - b);
    r->p = p;
    if (!real) {
        size_t digits = n - (*b == '-');
        if (digits > 18)
            return NULL; /* might not fit: jansson decides */
        long long v = 0;
        for (const char *q = b + (*b == '-'); q < p; q++)
            v = v * 10 + (*q - '0');
        return json_integer(*b == '-' ? -v : v);
    }
    if (n >= S_JMAX_NUM)
        return NULL;
    const struct lconv *lc = localeconv();
    if (!lc || !lc->decimal_point || strcmp(lc->decimal_point, ".") != 0)
        return NULL;
    char tmp[S_JMAX_NUM];
    memcpy(tmp, b, n);
    tmp[n] = '\0';
    errno = 0;
    double d = strtod(tmp, NULL);
    if (!isfinite(d))
        return NULL; /* jansson refuses an overflow */
    return json_real(d);
}

static json_t *s_jvalue(s_jrd_t *r, unsigned depth);

static json_t *
s_jobject(s_jrd_t *r, unsigned depth)
{
    json_t *o = json_object();
    r->p++;
    s_jws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return o;
    }
    for (;;) {
        const char *k;
        size_t kn;
        if (r->p >= r->end || *r->p != '"' || !s_jstring(r, &k, &kn))
            goto fail;
        if (json_object_getn(o, k, kn))
            goto fail; /* a duplicate: jansson refuses or keeps the last */
        /* the key may sit in the scratch buffer, which the value's strings
         * reuse: keep a copy when it does */
        char small[128], *kc = NULL;
        if (k == r->scratch) {
            kc = kn < sizeof small ? small : lisa_malloc(kn + 1);
            memcpy(kc, k, kn);
            k = kc;
        }
        s_jws(r);
        json_t *v = NULL;
        if (r->p < r->end && *r->p == ':') {
            r->p++;
            v = s_jvalue(r, depth + 1);
        }
        if (v && json_object_setn_new_nocheck(o, k, kn, v) != 0)
            v = NULL;
        if (kc && kc != small)
            lisa_free(&kc);
        if (!v)
            goto fail;
        s_jws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            s_jws(r);
            continue;
        }
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            return o;
        }
        goto fail;
    }
fail:
    json_decref(o);
    return NULL;
}

static json_t *
s_jarray(s_jrd_t *r, unsigned depth)
{
    json_t *a = json_array();
    r->p++;
    s_jws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        return a;
    }
    for (;;) {
        json_t *v = s_jvalue(r, depth + 1);
        if (!v || json_array_append_new(a, v) != 0)
            goto fail;
        s_jws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            return a;
        }
        goto fail;
    }
fail:
    json_decref(a);
    return NULL;
}

static bool
s_jword(s_jrd_t *r, const char *w, size_t n)
{
    if ((size_t) (r->end - r->p) < n || memcmp(r->p, w, n) != 0)
        return false;
    r->p += n;
    return true;
}

static json_t *
s_jvalue(s_jrd_t *r, unsigned depth)
{
    s_jws(r);
    if (r->p >= r->end || depth > S_JMAX_DEPTH)
        return NULL;
    switch (*r->p) {
    case '{':
        return s_jobject(r, depth);
    case '[':
        return s_jarray(r, depth);
    case '"': {
        const char *s;
        size_t n;
        if (!s_jstring(r, &s, &n))
            return NULL;
        return json_stringn_nocheck(s, n);
    }
    case 't':
        return s_jword(r, "true", 4) ? json_true() : NULL;
    case 'f':
        return s_jword(r, "false", 5) ? json_false() : NULL;
    case 'n':
        return s_jword(r, "null", 4) ? json_null() : NULL;
    default:
        return s_jnumber(r);
    }
}

json_t *
gw_json_load(const char *p, size_t len, size_t flags)
{
    if (!p || (flags & ~(size_t) (JSON_REJECT_DUPLICATES | JSON_DECODE_ANY)))
        return NULL;
    s_jrd_t r = {.p = p, .end = p + len, .flags = flags};
    s_jws(&r);
    if (r.p >= r.end ||
        (!(flags & JSON_DECODE_ANY) && *r.p != '{' && *r.p != '['))
        return NULL;
    json_t *v = s_jvalue(&r, 1);
    lisa_free(&r.scratch);
    if (!v)
        return NULL;
    s_jws(&r);
    if (r.p != r.end) {
        json_decref(v);
        return NULL;
    }
    return v;
}

json_t *
gw_json_loadb(const char *p, size_t len, size_t flags, json_error_t *err)
{
    json_t *v = gw_json_load(p, len, flags);
    return v ? v : json_loadb(p, len, flags, err);
}

/* ---- the writer --------------------------------------------------------- */

void
gw_json_put_str(lisa_buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    lisa_buf_put(b, "\"", 1);
    const char *run = s, *end = s + n;
    for (const char *p = s; p < end; p++) {
        unsigned char c = (unsigned char) *p;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        lisa_buf_put(b, run, (size_t) (p - run));
        run = p + 1;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t k = 2;
        switch (c) {
        case '"':
        case '\\':
            esc[1] = (char) c;
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            k = 6;
        }
        lisa_buf_put(b, esc, k);
    }
    lisa_buf_put(b, run, (size_t) (end - run));
    lisa_buf_put(b, "\"", 1);
}

typedef struct {
    const char *k;
    size_t n;
    json_t *v;
} s_jkv_t;

static int
s_jkv_cmp(const void *x, const void *y)
{
    const s_jkv_t *a = x, *b = y;
    size_t m = a->n < b->n ? a->n : b->n;
    int r = memcmp(a->k, b->k, m);
    if (r)
        return r;
    return a->n < b->n ? -1 : a->n > b->n;
}

static bool
s_jdump(lisa_buf_t *b, const json_t *v, size_t flags, unsigned depth)
{
    if (depth > S_JMAX_DEPTH)
        return false;
    bool compact = flags & JSON_COMPACT;
    switch (json_typeof(v)) {
    case JSON_NULL:
        lisa_buf_put(b, "null", 4);
        return true;
    case JSON_TRUE:
        lisa_buf_put(b, "true", 4);
        return true;
    case JSON_FALSE:
        lisa_buf_put(b, "false", 5);
        return true;
    case JSON_INTEGER: {
        char tmp[32];
        int n = snprintf(tmp, sizeof tmp, "%" JSON_INTEGER_FORMAT,
                         json_integer_value(v));
        lisa_buf_put(b, tmp, (size_t) n);
        return true;
    }
    case JSON_REAL:
        return false; /* jansson's own formatting decides */
    case JSON_STRING: {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (!lisa_utf8_valid(s, n))
            return false;
        gw_json_put_str(b, s, n);
        return true;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        lisa_buf_put(b, "[", 1);
        for (size_t i = 0; i < n; i++) {
            if (i)
                lisa_buf_put(b, compact ? "," : ", ", compact ? 1 : 2);
            if (!s_jdump(b, json_array_get(v, i), flags, depth + 1))
                return false;
        }
        lisa_buf_put(b, "]", 1);
        return true;
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(v);
        s_jkv_t small[16], *kv = n <= 16 ? small : NULL;
        if (!kv)
            kv = lisa_malloc(n * sizeof *kv);
        size_t i = 0;
        const char *k;
        size_t kn;
        json_t *x;
        bool ok = true;
        json_object_keylen_foreach((json_t *) (uintptr_t) v, k, kn, x)
        {
            if (i < n) {
                kv[i].k = k;
                kv[i].n = kn;
                kv[i++].v = x;
            }
            if (memchr(k, 0, kn))
                ok = false;
        }
        if (ok && (flags & JSON_SORT_KEYS))
            qsort(kv, i, sizeof *kv, s_jkv_cmp);
        lisa_buf_put(b, "{", 1);
        for (size_t j = 0; ok && j < i; j++) {
            if (j)
                lisa_buf_put(b, compact ? "," : ", ", compact ? 1 : 2);
            if (!lisa_utf8_valid(kv[j].k, kv[j].n)) {
                ok = false;
                break;
            }
            gw_json_put_str(b, kv[j].k, kv[j].n);
            lisa_buf_put(b, compact ? ":" : ": ", compact ? 1 : 2);
            ok = s_jdump(b, kv[j].v, flags, depth + 1);
        }
        lisa_buf_put(b, "}", 1);
        if (kv != small)
            lisa_free(&kv);
        return ok && i == n;
    }
    }
    return false;
}

char *
gw_json_dump(const json_t *v, size_t flags)
{
    size_t ok =
        JSON_COMPACT | JSON_SORT_KEYS | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY;
    if (!v || (flags & ~ok) ||
        (!(flags & JSON_ENCODE_ANY) && !json_is_object(v) && !json_is_array(v)))
        return NULL;
    lisa_buf_t b = LISA_BUF(SIZE_MAX);
    if (!s_jdump(&b, v, flags, 1) || b.full) {
        lisa_buf_free(&b);
        return NULL;
    }
    if (!b.p) /* never: every value writes something */
        return NULL;
    /* the caller frees with free(), as json_dumps's text */
    return b.p;
}

char *
gw_json_dumps(const json_t *v, size_t flags)
{
    char *s = gw_json_dump(v, flags);
    return s ? s : json_dumps(v, flags);
}
