/*
 * rwd_ifeval: ground-truth parsing, kwargs validation and the strict and
 * loose verdicts. See rwd_ifeval.h; the checks are in rwd_ifcheck_*.c.
 */
#include "rwd_ifeval.h"

#include "lisa/lisa_mem.h"
#include "rwd_ifcheck.h"
#include "rwd_iftext.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define S_MAX_LIST    64u  /* strings in a list kwarg */
#define S_MAX_NUMBER  1e12 /* magnitude of a numeric kwarg */
#define S_MAX_INDEX   1e9  /* integer kwargs (positions, counts) */
#define S_MAX_ARGSPEC 32u  /* bytes of one "name:type" */

typedef struct {
    const rwd_ifcheck_t *row;
    json_t *kw; /* kwargs without nulls */
} s_instr_t;

struct rwd_ifeval {
    size_t count;
    s_instr_t in[RWD_IF_MAX_INSTRUCTIONS];
};

static const rwd_ifcheck_t *
s_row(const char *id)
{
    size_t n;
    const rwd_ifcheck_t *t = rwd_ifcheck_classic(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].id, id) == 0)
            return &t[i];
    t = rwd_ifcheck_bench(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].id, id) == 0)
            return &t[i];
    t = rwd_ifcheck_custom(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].id, id) == 0)
            return &t[i];
    return NULL;
}

bool
rwd_ifeval_supported(const char *id, const char **why)
{
    const rwd_ifcheck_t *r = id ? s_row(id) : NULL;
    *why = r ? r->refused : NULL;
    return r && rwd_ifcheck_checked(r);
}

static void s_err(char *err, size_t errlen, const char *fmt, ...)
    LISA_PRINTF(3, 4);

static void
s_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static bool
s_integral(const json_t *v, double lo)
{
    double d = json_number_value(v);
    return json_is_number(v) && d >= lo && d <= S_MAX_INDEX && floor(d) == d;
}

/* Whether value v fits type t; *why says what it should be. */
static bool
s_type_ok(char t, const json_t *v, const char **why)
{
    double d = json_number_value(v);
    switch (t) {
    case 'n':
        *why = "a number";
        return json_is_number(v) && isfinite(d) && fabs(d) <= S_MAX_NUMBER;
    case 'p':
        *why = "a positive integer";
        return s_integral(v, 1);
    case 'i':
        *why = "a non-negative integer";
        return s_integral(v, 0);
    case 's':
        *why = "a string";
        return json_is_string(v);
    case 'c': {
        *why = "one ASCII letter";
        const char *s = json_string_value(v);
        return s && json_string_length(v) == 1 &&
               ((s[0] | 0x20) >= 'a' && (s[0] | 0x20) <= 'z');
    }
    case 'l': {
        *why = "a list of at most 64 strings";
        if (!json_is_array(v) || json_array_size(v) > S_MAX_LIST)
            return false;
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e) if (!json_is_string(e)) return false;
        return true;
    }
    case 'r': {
        *why = "\"less than\" or \"at least\"";
        const char *s = json_string_value(v);
        return s && (strcmp(s, "less than") == 0 || strcmp(s, "at least") == 0);
    }
    default:
        *why = "a known type";
        return false;
    }
}

/* Checks kw against the row's argument spec. */
static lisa_rc_t
s_validate(const rwd_ifcheck_t *row, const json_t *kw, char *err, size_t errlen)
{
    const char *p = row->args;
    while (p && *p) {
        while (*p == ' ')
            p++;
        size_t l = strcspn(p, " ");
        if (l == 0)
            break;
        char spec[S_MAX_ARGSPEC];
        snprintf(spec, sizeof spec, "%.*s", (int) l, p);
        p += l;
        bool optional = spec[0] == '?';
        char *colon = strchr(spec, ':');
        if (!colon)
            continue;
        *colon = '\0';
        const char *name = spec + optional;
        const json_t *v = json_object_get(kw, name);
        const char *why;
        if (!v) {
            if (optional)
                continue;
            s_err(err, errlen, "instruction '%s' needs kwarg '%s'", row->id,
                  name);
            return LISA_INVALID;
        }
        if (!s_type_ok(colon[1], v, &why)) {
            s_err(err, errlen, "instruction '%s': kwarg '%s' must be %s",
                  row->id, name, why);
            return LISA_INVALID;
        }
    }
    return LISA_OK;
}

static json_t *
s_without_nulls(json_t *kw)
{
    json_t *o = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(kw, k, v) if (!json_is_null(v))
        json_object_set(o, k, v);
    return o;
}

static lisa_rc_t
s_add(rwd_ifeval_t *e, const json_t *idv, json_t *kw, char *err, size_t errlen)
{
    const char *id = json_string_value(idv);
    if (!id) {
        s_err(err, errlen, "instruction_id_list holds a non-string");
        return LISA_INVALID;
    }
    const rwd_ifcheck_t *row = s_row(id);
    if (!row) {
        s_err(err, errlen, "unknown instruction id '%.64s'", id);
        return LISA_INVALID;
    }
    if (!rwd_ifcheck_checked(row)) {
        s_err(err, errlen, "instruction '%s' is not checked: %s", row->id,
              row->refused);
        return LISA_UNSUPPORTED;
    }
    if (kw && !json_is_object(kw) && !json_is_null(kw)) {
        s_err(err, errlen, "kwargs of '%s' is not an object", row->id);
        return LISA_INVALID;
    }
    json_t *clean =
        kw && json_is_object(kw) ? s_without_nulls(kw) : json_object();
    lisa_rc_t rc = s_validate(row, clean, err, errlen);
    if (rc != LISA_OK) {
        json_decref(clean);
        return rc;
    }
    e->in[e->count].row = row;
    e->in[e->count].kw = clean;
    e->count++;
    return LISA_OK;
}

static lisa_rc_t
s_parse(rwd_ifeval_t *e, json_t *root, char *err, size_t errlen)
{
    if (!json_is_object(root)) {
        s_err(err, errlen, "ground truth is not a JSON object");
        return LISA_INVALID;
    }
    const json_t *ids = json_object_get(root, "instruction_id_list");
    json_t *kws = json_object_get(root, "kwargs");
    size_t n = json_array_size(ids);
    if (!json_is_array(ids) || n == 0) {
        s_err(err, errlen, "ground truth has no instruction_id_list");
        return LISA_INVALID;
    }
    if (n > RWD_IF_MAX_INSTRUCTIONS) {
        s_err(err, errlen, "%zu instructions (at most %u)", n,
              RWD_IF_MAX_INSTRUCTIONS);
        return LISA_TOOLARGE;
    }
    if (kws && !json_is_null(kws) &&
        (!json_is_array(kws) || json_array_size(kws) != n)) {
        s_err(err, errlen, "kwargs is not a list of %zu objects", n);
        return LISA_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        lisa_rc_t rc = s_add(e, json_array_get(ids, i), json_array_get(kws, i),
                             err, errlen);
        if (rc != LISA_OK)
            return rc;
    }
    return LISA_OK;
}

rwd_ifeval_t *
rwd_ifeval_new(const char *truth, size_t len, lisa_rc_t *rc, char *err,
               size_t errlen)
{
    lisa_rc_t dummy;
    if (!rc)
        rc = &dummy;
    if (err && errlen)
        err[0] = '\0';
    json_error_t jerr;
    json_t *root =
        truth ? json_loadb(truth, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    if (!root) {
        s_err(err, errlen, "ground truth is not JSON");
        *rc = LISA_INVALID;
        return NULL;
    }
    rwd_ifeval_t *e = lisa_calloc(1, sizeof *e);
    *rc = s_parse(e, root, err, errlen);
    json_decref(root);
    if (*rc != LISA_OK)
        rwd_ifeval_destroy(&e);
    return e;
}

void
rwd_ifeval_destroy(rwd_ifeval_t **e)
{
    if (!e || !*e)
        return;
    for (size_t i = 0; i < (*e)->count; i++)
        json_decref((*e)->in[i].kw);
    lisa_free(e);
}

size_t
rwd_ifeval_count(const rwd_ifeval_t *e)
{
    return e->count;
}

const char *
rwd_ifeval_id(const rwd_ifeval_t *e, size_t i)
{
    return i < e->count ? e->in[i].row->id : NULL;
}

bool
rwd_ifeval_check(const rwd_ifeval_t *e, size_t i, const char *resp, size_t n)
{
    if (i >= e->count || !resp)
        return false;
    rwd_span_t sp = {0, n};
    rwd_iftext_strip(resp, &sp);
    if (sp.len == 0)
        return false;
    return rwd_ifcheck_run(e->in[i].row, e->in[i].kw, resp, n);
}

/* Loose variant k (1..7) of resp into *out (owned). */
static char *
s_variant(const char *resp, size_t n, int k, size_t *out_n)
{
    const char *nl1 = memchr(resp, '\n', n);
    size_t first = nl1 ? (size_t) (nl1 - resp) : n;
    size_t last = n;
    while (last > 0 && resp[last - 1] != '\n')
        last--;
    last = last > 0 ? last - 1 : n; /* index of the last newline, or n */
    bool drop_first = k == 2 || k == 4 || k == 5 || k == 7;
    bool drop_last = k == 3 || k == 4 || k == 6 || k == 7;
    rwd_span_t sp = {0, n};
    if (drop_first)
        sp = nl1 ? (rwd_span_t){first + 1, n - first - 1} : (rwd_span_t){n, 0};
    if (drop_last) {
        size_t end = nl1 ? last : 0;
        sp.len = end > sp.off ? end - sp.off : 0;
    }
    if (drop_first || drop_last)
        rwd_iftext_strip(resp, &sp);
    bool nostar = k == 1 || k >= 5;
    char *o = lisa_malloc(sp.len + 1);
    size_t w = 0;
    for (size_t i = sp.off; i < sp.off + sp.len; i++)
        if (!nostar || resp[i] != '*')
            o[w++] = resp[i];
    o[w] = '\0';
    *out_n = w;
    return o;
}

lisa_rc_t
rwd_ifeval_judge(const rwd_ifeval_t *e, const char *resp, size_t n,
                 rwd_ifeval_verdict_t *v)
{
    memset(v, 0, sizeof *v);
    if (n > RWD_IF_MAX_RESPONSE)
        return LISA_TOOLARGE;
    if (!resp)
        resp = "";
    v->count = e->count;
    for (size_t i = 0; i < e->count; i++) {
        v->strict[i] = rwd_ifeval_check(e, i, resp, n);
        v->loose[i] = v->strict[i];
    }
    for (int k = 1; k <= 7; k++) {
        bool open = false;
        for (size_t i = 0; i < e->count; i++)
            open |= !v->loose[i];
        if (!open)
            break;
        size_t vn;
        char *var = s_variant(resp, n, k, &vn);
        for (size_t i = 0; i < e->count; i++)
            if (!v->loose[i])
                v->loose[i] = rwd_ifeval_check(e, i, var, vn);
        lisa_free(&var);
    }
    for (size_t i = 0; i < e->count; i++) {
        v->strict_passed += v->strict[i];
        v->loose_passed += v->loose[i];
    }
    return LISA_OK;
}

double
rwd_ifarg_num(const json_t *kw, const char *key)
{
    return json_number_value(json_object_get(kw, key));
}

const char *
rwd_ifarg_str(const json_t *kw, const char *key, size_t *len)
{
    const json_t *v = json_object_get(kw, key);
    if (len)
        *len = json_string_length(v);
    const char *s = json_string_value(v);
    return s ? s : "";
}

const json_t *
rwd_ifarg_list(const json_t *kw, const char *key)
{
    return json_object_get(kw, key);
}

bool
rwd_ifarg_less(const json_t *kw, const char *key)
{
    const char *s = json_string_value(json_object_get(kw, key));
    return s && strcmp(s, "less than") == 0;
}

bool
rwd_ifcheck_checked(const rwd_ifcheck_t *row)
{
    return row->fn || (row->count && row->count->counter);
}

bool
rwd_ifcheck_run(const rwd_ifcheck_t *row, const json_t *kw, const char *s,
                size_t n)
{
    if (row->fn)
        return row->fn(kw, s, n);
    const rwd_ifcount_t *c = row->count;
    double v = c->counter(kw, s, n), want = rwd_ifarg_num(kw, c->key);
    if (isnan(v))
        return false;
    switch (c->rel) {
    case RWD_IFREL_AT_LEAST:
        return v >= want;
    case RWD_IFREL_AT_MOST:
        return v <= want;
    case RWD_IFREL_EQUAL:
        return v == want;
    case RWD_IFREL_RANGE:
        return want <= v && v <= rwd_ifarg_num(kw, c->key2);
    case RWD_IFREL_NEAR:
        return want - 2 <= v && v <= want + 2;
    case RWD_IFREL_NAMED:
        return rwd_ifarg_less(kw, c->key2) ? v < want : v >= want;
    }
    return false;
}
