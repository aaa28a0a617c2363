/*
 * lisa_toolcall: scan for <tool_call> ... </tool_call>, validate each body
 * with jansson, and cut the arguments' exact text out of the body with a
 * small scanner over the (already validated) JSON.
 */
#include "lisa/lisa_toolcall.h"

#include "lisa/lisa_mem.h"
#include "lisa/lisa_tojson.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define S_OPEN      "<tool_call>"
#define S_CLOSE     "</tool_call>"
#define S_OPEN_LEN  (sizeof S_OPEN - 1)
#define S_CLOSE_LEN (sizeof S_CLOSE - 1)

typedef struct {
    lisa_toolcall_t pub;
    char *id, *name, *arguments, *raw;
    json_t *value; /* the arguments parsed (owned) */
} s_call_t;

struct lisa_toolcalls_t {
    char *content;
    s_call_t *calls; /* n of cap, at most LISA_TOOLCALL_MAX_CALLS + 1 */
    size_t n, cap, errors;
};

/* Room for one more call (the array grows as blocks are found: most
 * replies have one or two). */
static s_call_t *
s_next(lisa_toolcalls_t *self)
{
    if (self->n == self->cap) {
        size_t cap = self->cap ? self->cap * 2 : 2;
        if (cap > LISA_TOOLCALL_MAX_CALLS + 1)
            cap = LISA_TOOLCALL_MAX_CALLS + 1;
        self->calls = lisa_realloc(self->calls, cap * sizeof *self->calls);
        memset(self->calls + self->cap, 0,
               (cap - self->cap) * sizeof *self->calls);
        self->cap = cap;
    }
    return &self->calls[self->n];
}

static const char *
s_find(const char *s, size_t n, const char *needle, size_t k)
{
    for (size_t i = 0; i + k <= n; i++)
        if (s[i] == needle[0] && memcmp(s + i, needle, k) == 0)
            return s + i;
    return NULL;
}

static bool
s_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static void
s_trim(const char **s, size_t *n)
{
    while (*n > 0 && s_space(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && s_space((*s)[*n - 1]))
        (*n)--;
}

/* Skips one JSON value starting at s[i] (valid JSON); returns the index
 * just past it. */
static size_t
s_skip_value(const char *s, size_t n, size_t i)
{
    if (i >= n)
        return n;
    if (s[i] == '"') {
        for (i++; i < n; i++) {
            if (s[i] == '\\')
                i++;
            else if (s[i] == '"')
                return i + 1;
        }
        return n;
    }
    if (s[i] == '{' || s[i] == '[') {
        int depth = 0;
        for (; i < n; i++) {
            if (s[i] == '"') {
                i = s_skip_value(s, n, i) - 1;
            } else if (s[i] == '{' || s[i] == '[') {
                depth++;
            } else if (s[i] == '}' || s[i] == ']') {
                if (--depth == 0)
                    return i + 1;
            }
        }
        return n;
    }
    while (i < n && !s_space(s[i]) && s[i] != ',' && s[i] != '}' && s[i] != ']')
        i++;
    return i;
}

/* Finds the raw text of the top-level key "arguments" in a validated
 * JSON object; false when the key is not written plainly. */
static bool
s_raw_arguments(const char *s, size_t n, const char **v, size_t *vn)
{
    size_t i = 0;
    while (i < n && s[i] != '{')
        i++;
    i++;
    while (i < n) {
        while (i < n && (s_space(s[i]) || s[i] == ','))
            i++;
        if (i >= n || s[i] != '"')
            return false;
        size_t ks = i;
        i = s_skip_value(s, n, i);
        bool is_args = i - ks == 11 && memcmp(s + ks, "\"arguments\"", 11) == 0;
        while (i < n && (s_space(s[i]) || s[i] == ':'))
            i++;
        size_t vs = i;
        i = s_skip_value(s, n, i);
        if (is_args) {
            *v = s + vs;
            *vn = i - vs;
            return true;
        }
    }
    return false;
}

static void
s_fail(lisa_toolcalls_t *self, s_call_t *c, const char *why)
{
    c->pub.error = why;
    lisa_free(&c->name);
    lisa_free(&c->arguments);
    json_decref(c->value);
    c->value = NULL;
    self->errors++;
}

static void
s_parse_body(lisa_toolcalls_t *self, s_call_t *c, const char *body, size_t n,
             lisa_toolcall_load_fn *load)
{
    s_trim(&body, &n);
    json_error_t jerr;
    json_t *o = load(body, n, 0, &jerr);
    if (!o) {
        s_fail(self, c, "tool call is not valid JSON");
        return;
    }
    json_t *name = json_object_get(o, "name");
    json_t *args = json_object_get(o, "arguments");
    if (!json_is_object(o)) {
        s_fail(self, c, "tool call is not a JSON object");
    } else if (!json_is_string(name) || json_string_length(name) == 0) {
        s_fail(self, c, "tool call has no name");
    } else if (!args || json_is_null(args)) {
        c->name = lisa_strdup(json_string_value(name));
        c->arguments = lisa_strdup("{}");
        c->value = json_object();
    } else if (json_is_object(args)) {
        const char *v;
        size_t vn;
        c->name = lisa_strdup(json_string_value(name));
        c->value = json_incref(args);
        if (s_raw_arguments(body, n, &v, &vn)) {
            c->arguments = lisa_strndup(v, vn);
        } else if (lisa_tojson(args, LISA_TOOLCALL_MAX_TEXT, &c->arguments,
                               NULL) != LISA_OK) {
            s_fail(self, c, "tool call arguments too deep");
        }
    } else if (json_is_string(args)) {
        json_t *inner =
            load(json_string_value(args), json_string_length(args), 0, &jerr);
        if (json_is_object(inner)) {
            c->name = lisa_strdup(json_string_value(name));
            c->arguments = lisa_strdup(json_string_value(args));
            c->value = inner;
        } else {
            json_decref(inner);
            s_fail(self, c, "tool call arguments are not an object");
        }
    } else {
        s_fail(self, c, "tool call arguments are not an object");
    }
    json_decref(o);
}

static void
s_add_content(char **content, size_t *clen, const char *s, size_t n, bool first)
{
    if (first) {
        while (n > 0 && s_space(s[n - 1]))
            n--;
    } else {
        s_trim(&s, &n);
    }
    if (n == 0)
        return;
    *content = lisa_realloc(*content, *clen + n + 2);
    if (*clen > 0)
        (*content)[(*clen)++] = '\n';
    memcpy(*content + *clen, s, n);
    *clen += n;
    (*content)[*clen] = '\0';
}

char *
lisa_toolcall_id(const char *prefix, const char *sep, size_t i)
{
    size_t pn = strnlen(prefix, LISA_TOOLCALL_MAX_PREFIX);
    size_t sn = sep ? strnlen(sep, LISA_TOOLCALL_MAX_PREFIX) : 0;
    char digits[24];
    size_t nd = 0;
    do {
        digits[nd++] = (char) ('0' + i % 10);
        i /= 10;
    } while (i);
    char *id = lisa_malloc(pn + sn + nd + 1);
    memcpy(id, prefix, pn);
    if (sn)
        memcpy(id + pn, sep, sn);
    for (size_t k = 0; k < nd; k++)
        id[pn + sn + k] = digits[nd - 1 - k];
    id[pn + sn + nd] = '\0';
    return id;
}

/* A block counts as one for the content rule (see the header). */
static bool
s_is_block(const s_call_t *c, unsigned flags)
{
    return !(flags & LISA_TOOLCALL_KEEP_MALFORMED) || !c->pub.error;
}

/* The content: the pieces of text between the blocks. */
static char *
s_content(const lisa_toolcalls_t *self, const char *text, size_t len,
          unsigned flags)
{
    size_t at = 0, clen = 0;
    bool first = true, any = false;
    char *content = NULL;
    for (size_t i = 0; i < self->n; i++) {
        const s_call_t *c = &self->calls[i];
        if (!s_is_block(c, flags))
            continue;
        s_add_content(&content, &clen, text + at, c->pub.start - at, first);
        first = false;
        any = true;
        at = c->pub.end;
    }
    if (!any)
        return lisa_strndup(text, len);
    s_add_content(&content, &clen, text + at, len - at, false);
    return content ? content : lisa_strdup("");
}

lisa_toolcalls_t *
lisa_toolcalls_parse_opts(const char *text, size_t len, const char *id_prefix,
                          unsigned flags, lisa_toolcall_load_fn *load)
{
    if (len > LISA_TOOLCALL_MAX_TEXT)
        return NULL;
    if (!id_prefix)
        id_prefix = "call_";
    if (!load)
        load = json_loadb;
    lisa_toolcalls_t *self = lisa_calloc(1, sizeof *self);
    const char *end = text + len;
    const char *open = s_find(text, len, S_OPEN, S_OPEN_LEN);
    while (open) {
        const char *body = open + S_OPEN_LEN;
        const char *close =
            s_find(body, (size_t) (end - body), S_CLOSE, S_CLOSE_LEN);
        s_call_t *c = s_next(self);
        c->id = lisa_toolcall_id(id_prefix, NULL, self->n);
        c->pub.start = (size_t) (open - text);
        c->pub.end = len;
        self->n++;
        if (self->n > LISA_TOOLCALL_MAX_CALLS) {
            c->raw = lisa_strndup(open, (size_t) (end - open));
            s_fail(self, c, "too many tool calls");
            break;
        }
        if (!close) {
            c->raw = lisa_strndup(body, (size_t) (end - body));
            s_fail(self, c, "unterminated <tool_call> block");
            break;
        }
        c->raw = lisa_strndup(body, (size_t) (close - body));
        s_parse_body(self, c, body, (size_t) (close - body), load);
        const char *after = close + S_CLOSE_LEN;
        c->pub.end = (size_t) (after - text);
        open = s_find(after, (size_t) (end - after), S_OPEN, S_OPEN_LEN);
    }
    self->content = s_content(self, text, len, flags);
    for (size_t i = 0; i < self->n; i++) {
        s_call_t *c = &self->calls[i];
        c->pub.id = c->id;
        c->pub.name = c->name;
        c->pub.arguments = c->arguments;
        c->pub.raw = c->raw;
        c->pub.value = c->value;
    }
    return self;
}

lisa_toolcalls_t *
lisa_toolcalls_parse(const char *text, size_t len, const char *id_prefix)
{
    return lisa_toolcalls_parse_opts(text, len, id_prefix, 0, NULL);
}

void
lisa_toolcalls_destroy(lisa_toolcalls_t **p)
{
    if (!p || !*p)
        return;
    lisa_toolcalls_t *self = *p;
    for (size_t i = 0; i < self->n; i++) {
        lisa_free(&self->calls[i].id);
        lisa_free(&self->calls[i].name);
        lisa_free(&self->calls[i].arguments);
        lisa_free(&self->calls[i].raw);
        json_decref(self->calls[i].value);
    }
    lisa_free(&self->calls);
    lisa_free(&self->content);
    lisa_free(p);
}

const char *
lisa_toolcalls_content(const lisa_toolcalls_t *self)
{
    return self->content;
}

size_t
lisa_toolcalls_count(const lisa_toolcalls_t *self)
{
    return self->n;
}

size_t
lisa_toolcalls_errors(const lisa_toolcalls_t *self)
{
    return self->errors;
}

const lisa_toolcall_t *
lisa_toolcalls_get(const lisa_toolcalls_t *self, size_t i)
{
    return i < self->n ? &self->calls[i].pub : NULL;
}

json_t *
lisa_toolcalls_message(const lisa_toolcalls_t *self)
{
    json_t *msg = json_object();
    json_object_set_new(msg, "role", json_string("assistant"));
    json_t *calls = json_array();
    for (size_t i = 0; i < self->n; i++) {
        const lisa_toolcall_t *c = &self->calls[i].pub;
        if (c->error)
            continue;
        json_t *fn = json_object();
        json_object_set_new(fn, "name", json_string(c->name));
        json_object_set_new(fn, "arguments", json_string(c->arguments));
        json_t *call = json_object();
        json_object_set_new(call, "id", json_string(c->id));
        json_object_set_new(call, "type", json_string("function"));
        json_object_set_new(call, "function", fn);
        json_array_append_new(calls, call);
    }
    bool empty = self->content[0] == '\0';
    json_object_set_new(msg, "content",
                        empty && json_array_size(calls) > 0
                            ? json_null()
                            : json_string(self->content));
    if (json_array_size(calls) > 0)
        json_object_set_new(msg, "tool_calls", calls);
    else
        json_decref(calls);
    return msg;
}
