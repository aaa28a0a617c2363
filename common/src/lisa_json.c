/*
 * lisa_json: size bounds, error messages and typed paths over jansson.
 *
 * jansson already bounds nesting depth; what it leaves to the caller is the
 * input size (we check it before parsing, or while reading lines), the
 * wording of errors (we prefix file, line and column), and type checks on
 * every field read (the getters below). Dumping goes through a callback
 * that stops at the bound, so a huge value never gets fully serialised.
 */
#include "lisa/lisa_json.h"

#include "lisa/lisa_mem.h"

#include <errno.h>
#include <math.h>
#include <string.h>

lisa_rc_t
lisa_json_load_buf(const char *buf, size_t len, size_t max_bytes,
                   const char *name, json_t **out, char *err, size_t errlen)
{
    json_error_t je;
    *out = NULL;
    if (!name)
        name = "<buffer>";
    if (len > max_bytes) {
        lisa_errf(err, errlen, "%s: %zu bytes, more than the limit %zu", name,
                  len, max_bytes);
        return LISA_TOOLARGE;
    }
    if (!buf && len) {
        lisa_errf(err, errlen, "%s: no data", name);
        return LISA_INVALID;
    }
    *out = json_loadb(buf ? buf : "", len, JSON_DECODE_ANY, &je);
    if (!*out) {
        lisa_errf(err, errlen, "%s:%d:%d: %s", name, je.line, je.column,
                  je.text);
        return LISA_INVALID;
    }
    return LISA_OK;
}

/* Reads at most max_bytes of f into a new buffer; LISA_TOOLARGE beyond. */
static lisa_rc_t
s_slurp(FILE *f, size_t max_bytes, char **out, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *buf = lisa_malloc(cap);
    for (;;) {
        if (n == cap) {
            if (cap > max_bytes) {
                lisa_free(&buf);
                return LISA_TOOLARGE;
            }
            cap = cap * 2;
            buf = lisa_realloc(buf, cap);
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    if (ferror(f) || n > max_bytes) {
        lisa_free(&buf);
        return ferror(f) ? LISA_ERR : LISA_TOOLARGE;
    }
    *out = buf;
    *len = n;
    return LISA_OK;
}

lisa_rc_t
lisa_json_load_file(const char *path, size_t max_bytes, json_t **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        lisa_errf(err, errlen, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? LISA_NOTFOUND : LISA_ERR;
    }
    char *buf = NULL;
    size_t len = 0;
    lisa_rc_t rc = s_slurp(f, max_bytes, &buf, &len);
    fclose(f);
    if (rc == LISA_TOOLARGE)
        lisa_errf(err, errlen, "%s: more than the limit of %zu bytes", path,
                  max_bytes);
    else if (rc != LISA_OK)
        lisa_errf(err, errlen, "%s: read error", path);
    else
        rc = lisa_json_load_buf(buf, len, max_bytes, path, out, err, errlen);
    lisa_free(&buf);
    return rc;
}

/* Parses an array index segment (digits only); false otherwise. */
static bool
s_index(const char *s, size_t len, size_t *idx)
{
    size_t v = 0;
    if (len == 0 || len > 18)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (size_t) (s[i] - '0');
    }
    *idx = v;
    return true;
}

json_t *
lisa_json_path(const json_t *root, const char *path)
{
    json_t *cur = (json_t *) (uintptr_t) root;
    if (!root || !path || strlen(path) > LISA_JSON_MAX_PATH)
        return NULL;
    const char *p = path;
    while (cur) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t) (dot - p) : strlen(p);
        size_t idx;
        if (json_is_object(cur))
            cur = json_object_getn(cur, p, len);
        else if (json_is_array(cur) && s_index(p, len, &idx))
            cur = json_array_get(cur, idx);
        else
            cur = NULL;
        if (!dot)
            break;
        p = dot + 1;
    }
    return cur;
}

const char *
lisa_json_type_str(const json_t *v)
{
    if (!v)
        return "absent";
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "real";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

/* Looks up path; *v is NULL when absent or null. */
static json_t *
s_lookup(const json_t *root, const char *path)
{
    json_t *v = lisa_json_path(root, path);
    return json_is_null(v) ? NULL : v;
}

static lisa_rc_t
s_type_err(const char *path, const char *want, const json_t *v, char *err,
           size_t errlen)
{
    lisa_errf(err, errlen, "%s: expected %s, got %s", path, want,
              lisa_json_type_str(v));
    return LISA_INVALID;
}

lisa_rc_t
lisa_json_get_string(const json_t *root, const char *path, const char *def,
                     const char **out, char *err, size_t errlen)
{
    json_t *v = s_lookup(root, path);
    *out = def;
    if (!v)
        return LISA_OK;
    if (!json_is_string(v))
        return s_type_err(path, "string", v, err, errlen);
    *out = json_string_value(v);
    return LISA_OK;
}

lisa_rc_t
lisa_json_get_int(const json_t *root, const char *path, int64_t def,
                  int64_t *out, char *err, size_t errlen)
{
    json_t *v = s_lookup(root, path);
    *out = def;
    if (!v)
        return LISA_OK;
    if (!json_is_integer(v))
        return s_type_err(path, "integer", v, err, errlen);
    *out = (int64_t) json_integer_value(v);
    return LISA_OK;
}

lisa_rc_t
lisa_json_get_uint(const json_t *root, const char *path, uint64_t def,
                   uint64_t *out, char *err, size_t errlen)
{
    json_t *v = s_lookup(root, path);
    *out = def;
    if (!v)
        return LISA_OK;
    if (!json_is_integer(v))
        return s_type_err(path, "non-negative integer", v, err, errlen);
    json_int_t i = json_integer_value(v);
    if (i < 0) {
        lisa_errf(err, errlen, "%s: expected non-negative integer, got %lld",
                  path, (long long) i);
        return LISA_INVALID;
    }
    *out = (uint64_t) i;
    return LISA_OK;
}

lisa_rc_t
lisa_json_get_double(const json_t *root, const char *path, double def,
                     double *out, char *err, size_t errlen)
{
    json_t *v = s_lookup(root, path);
    *out = def;
    if (!v)
        return LISA_OK;
    if (!json_is_number(v))
        return s_type_err(path, "number", v, err, errlen);
    *out = json_number_value(v);
    return LISA_OK;
}

lisa_rc_t
lisa_json_get_bool(const json_t *root, const char *path, bool def, bool *out,
                   char *err, size_t errlen)
{
    json_t *v = s_lookup(root, path);
    *out = def;
    if (!v)
        return LISA_OK;
    if (!json_is_boolean(v))
        return s_type_err(path, "boolean", v, err, errlen);
    *out = json_is_true(v);
    return LISA_OK;
}

lisa_rc_t
lisa_json_get_object(const json_t *root, const char *path, json_t **out,
                     char *err, size_t errlen)
{
    json_t *v = s_lookup(root, path);
    *out = NULL;
    if (!v)
        return LISA_OK;
    if (!json_is_object(v))
        return s_type_err(path, "object", v, err, errlen);
    *out = v;
    return LISA_OK;
}

lisa_rc_t
lisa_json_get_array(const json_t *root, const char *path, json_t **out,
                    char *err, size_t errlen)
{
    json_t *v = s_lookup(root, path);
    *out = NULL;
    if (!v)
        return LISA_OK;
    if (!json_is_array(v))
        return s_type_err(path, "array", v, err, errlen);
    *out = v;
    return LISA_OK;
}

lisa_rc_t
lisa_json_require(const json_t *root, const char *path, char *err,
                  size_t errlen)
{
    if (s_lookup(root, path))
        return LISA_OK;
    lisa_errf(err, errlen, "%s: required", path ? path : "(null)");
    return LISA_NOTFOUND;
}

/* ---- bounded dump ---------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len, cap, max;
    bool over;
} s_sink_t;

static int
s_sink(const char *data, size_t size, void *arg)
{
    s_sink_t *s = arg;
    if (size > s->max - s->len) {
        s->over = true;
        return -1;
    }
    if (s->len + size + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + size + 1)
            cap *= 2;
        s->buf = lisa_realloc(s->buf, cap);
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, size);
    s->len += size;
    return 0;
}

lisa_rc_t
lisa_json_dump(const json_t *v, size_t flags, size_t max_bytes, char **out)
{
    s_sink_t s = {NULL, 0, 0, max_bytes, false};
    *out = NULL;
    if (!v)
        return LISA_INVALID;
    int r = json_dump_callback(v, s_sink, &s, flags | JSON_ENCODE_ANY);
    if (r != 0) {
        lisa_free(&s.buf);
        return s.over ? LISA_TOOLARGE : LISA_INVALID;
    }
    if (!s.buf)
        s.buf = lisa_malloc(1);
    s.buf[s.len] = 0;
    *out = s.buf;
    return LISA_OK;
}

/* ---- JSON Lines ------------------------------------------------------ */

struct lisa_jsonl {
    FILE *f;
    bool own;
    char *name;
    char *buf; /* max_line + 1 bytes */
    size_t max_line;
    uint64_t line, good, bad;
};

lisa_jsonl_t *
lisa_jsonl_from_stream(FILE *f, const char *name, size_t max_line)
{
    lisa_jsonl_t *r = lisa_calloc(1, sizeof *r);
    r->f = f;
    r->name = lisa_strdup(name ? name : "<stream>");
    r->max_line = max_line ? max_line : 1;
    r->buf = lisa_malloc(r->max_line + 1);
    return r;
}

lisa_rc_t
lisa_jsonl_open(const char *path, size_t max_line, lisa_jsonl_t **out,
                char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        lisa_errf(err, errlen, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? LISA_NOTFOUND : LISA_ERR;
    }
    *out = lisa_jsonl_from_stream(f, path, max_line);
    (*out)->own = true;
    return LISA_OK;
}

/* Reads one line (without its "\n" / "\r\n") into r->buf. Returns 1 for a
 * line, 0 at end of input, -1 on an I/O error; *long_line when it had more
 * than max_line bytes (the rest is consumed and dropped). */
static int
s_read_line(lisa_jsonl_t *r, size_t *len, bool *long_line)
{
    size_t n = 0;
    int c = EOF;
    bool any = false;
    *long_line = false;
    while ((c = getc_unlocked(r->f)) != EOF) {
        any = true;
        if (c == '\n')
            break;
        if (n < r->max_line)
            r->buf[n++] = (char) c;
        else
            *long_line = true;
    }
    if (ferror(r->f))
        return -1;
    if (!any)
        return 0;
    if (!*long_line && n > 0 && r->buf[n - 1] == '\r')
        n--;
    r->buf[n] = 0;
    *len = n;
    return 1;
}

static bool
s_is_blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

lisa_rc_t
lisa_jsonl_next(lisa_jsonl_t *r, json_t **out, char *err, size_t errlen)
{
    *out = NULL;
    for (;;) {
        size_t len = 0;
        bool long_line;
        int got = s_read_line(r, &len, &long_line);
        if (got < 0) {
            lisa_errf(err, errlen, "%s: read error", r->name);
            return LISA_ERR;
        }
        if (got == 0)
            return LISA_NOTFOUND;
        r->line++;
        if (long_line) {
            r->bad++;
            lisa_errf(err, errlen, "%s:%llu:1: line longer than %zu bytes",
                      r->name, (unsigned long long) r->line, r->max_line);
            return LISA_TOOLARGE;
        }
        if (s_is_blank(r->buf, len))
            continue;
        json_error_t je;
        *out = json_loadb(r->buf, len, JSON_DECODE_ANY, &je);
        if (*out) {
            r->good++;
            return LISA_OK;
        }
        r->bad++;
        lisa_errf(err, errlen, "%s:%llu:%d: %s", r->name,
                  (unsigned long long) r->line, je.column, je.text);
        return LISA_INVALID;
    }
}

uint64_t
lisa_jsonl_line(const lisa_jsonl_t *r)
{
    return r->line;
}

uint64_t
lisa_jsonl_good(const lisa_jsonl_t *r)
{
    return r->good;
}

uint64_t
lisa_jsonl_bad(const lisa_jsonl_t *r)
{
    return r->bad;
}

void
lisa_jsonl_destroy(lisa_jsonl_t **rp)
{
    if (!rp || !*rp)
        return;
    lisa_jsonl_t *r = *rp;
    if (r->own && r->f)
        fclose(r->f);
    lisa_free(&r->name);
    lisa_free(&r->buf);
    lisa_free(rp);
}
