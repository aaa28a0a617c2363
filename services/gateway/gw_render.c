/*
 * gw_render: Qwen3 chat template and tool-call parsing (see the header).
 * The template's pieces are written out here in the order the Jinja
 * template emits them; tests compare the text with the template rendered
 * by transformers.
 */
#include "gw_render.h"

#include "gw_json.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <string.h>

struct gw_render_t {
    lisa_tokenizer_t *tok;
    int32_t stop[2];
    size_t n_stop;
    int32_t im_end;
};

gw_render_t *
gw_render_new(const char *dir)
{
    lisa_tokenizer_t *tok = lisa_tokenizer_new_from_dir(dir);
    if (!tok)
        return NULL;
    gw_render_t *self = lisa_calloc(1, sizeof *self);
    self->tok = tok;
    self->im_end = lisa_tokenizer_im_end_id(tok);
    if (self->im_end >= 0)
        self->stop[self->n_stop++] = self->im_end;
    int32_t eot = lisa_tokenizer_endoftext_id(tok);
    if (eot >= 0)
        self->stop[self->n_stop++] = eot;
    return self;
}

void
gw_render_destroy(gw_render_t **self)
{
    if (!self || !*self)
        return;
    lisa_tokenizer_destroy(&(*self)->tok);
    lisa_free(self);
}

lisa_tokenizer_t *
gw_render_tokenizer(gw_render_t *self)
{
    return self->tok;
}

const int32_t *
gw_render_stop_ids(const gw_render_t *self, size_t *n)
{
    *n = self->n_stop;
    return self->stop;
}

/* ---- text building ------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
} s_str_t;

static void
s_add(s_str_t *s, const char *t, size_t n)
{
    if (s->n + n + 1 > s->cap) {
        s->cap = (s->n + n + 1) * 2;
        s->p = lisa_realloc(s->p, s->cap);
    }
    memcpy(s->p + s->n, t, n);
    s->n += n;
    s->p[s->n] = '\0';
}

static void
s_cat(s_str_t *s, const char *t)
{
    if (t)
        s_add(s, t, strlen(t));
}

static const char *
s_role(const json_t *m)
{
    const char *r = json_string_value(json_object_get(m, "role"));
    if (r && strcmp(r, "developer") == 0)
        return "system";
    return r ? r : "";
}

static void
s_content(s_str_t *s, const json_t *m)
{
    char *t = gw_msg_text(m);
    s_cat(s, t);
    lisa_free(&t);
}

static void
s_tools_block(s_str_t *s, const json_t *messages, const json_t *tools)
{
    s_cat(s, "<|im_start|>system\n");
    const json_t *m0 = json_array_get(messages, 0);
    if (strcmp(s_role(m0), "system") == 0) {
        s_content(s, m0);
        s_cat(s, "\n\n");
    }
    s_cat(s, "# Tools\n\nYou may call one or more functions to assist with "
             "the user query.\n\nYou are provided with function signatures "
             "within <tools></tools> XML tags:\n<tools>");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        /* Python's json.dumps defaults: ", " and ": ", no ASCII escaping */
        char *j = gw_json_dumps(t, JSON_PRESERVE_ORDER);
        s_cat(s, "\n");
        s_cat(s, j);
        free(j);
    }
    s_cat(s, "\n</tools>\n\nFor each function call, return a json object "
             "with function name and arguments within <tool_call></tool_call> "
             "XML tags:\n<tool_call>\n{\"name\": <function-name>, "
             "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
}

static void
s_assistant(s_str_t *s, const json_t *m)
{
    s_cat(s, "<|im_start|>assistant\n");
    char *content = gw_msg_text(m);
    s_cat(s, content);
    json_t *tc = json_object_get(m, "tool_calls");
    size_t i;
    json_t *c;
    json_array_foreach(tc, i, c)
    {
        if (i > 0 || (content && content[0]))
            s_cat(s, "\n");
        json_t *f = json_object_get(c, "function");
        s_cat(s, "<tool_call>\n{\"name\": \"");
        s_cat(s, json_string_value(json_object_get(f, "name")));
        s_cat(s, "\", \"arguments\": ");
        s_cat(s, json_string_value(json_object_get(f, "arguments")));
        s_cat(s, "}\n</tool_call>");
    }
    lisa_free(&content);
    s_cat(s, "<|im_end|>\n");
}

/* Renders messages[first..n) as the template's message loop does. */
static void
s_messages(s_str_t *s, const json_t *messages, size_t first)
{
    size_t n = json_array_size(messages);
    for (size_t i = first; i < n; i++) {
        const json_t *m = json_array_get(messages, i);
        const char *role = s_role(m);
        if (strcmp(role, "user") == 0 ||
            (strcmp(role, "system") == 0 && i != 0)) {
            s_cat(s, "<|im_start|>");
            s_cat(s, role);
            s_cat(s, "\n");
            s_content(s, m);
            s_cat(s, "<|im_end|>\n");
        } else if (strcmp(role, "assistant") == 0) {
            s_assistant(s, m);
        } else if (strcmp(role, "tool") == 0) {
            bool head =
                i == 0 ||
                strcmp(s_role(json_array_get(messages, i - 1)), "tool") != 0;
            bool tail =
                i + 1 == n ||
                strcmp(s_role(json_array_get(messages, i + 1)), "tool") != 0;
            if (head)
                s_cat(s, "<|im_start|>user");
            s_cat(s, "\n<tool_response>\n");
            s_content(s, m);
            s_cat(s, "\n</tool_response>");
            if (tail)
                s_cat(s, "<|im_end|>\n");
        }
    }
}

char *
gw_render_text(gw_render_t *self, const json_t *messages, size_t first,
               const json_t *tools, int32_t prev_last)
{
    s_str_t s = {lisa_malloc(1024), 0, 1024};
    s.p[0] = '\0';
    if (first == 0) {
        const json_t *m0 = json_array_get(messages, 0);
        bool sys0 = strcmp(s_role(m0), "system") == 0;
        if (tools && json_array_size(tools) > 0)
            s_tools_block(&s, messages, tools);
        else if (sys0) {
            s_cat(&s, "<|im_start|>system\n");
            s_content(&s, m0);
            s_cat(&s, "<|im_end|>\n");
        }
    } else {
        if (prev_last != self->im_end)
            s_cat(&s, "<|im_end|>");
        s_cat(&s, "\n");
    }
    s_messages(&s, messages, first);
    s_cat(&s, "<|im_start|>assistant\n");
    return s.p;
}

lisa_rc_t
gw_render_prompt(gw_render_t *self, const json_t *messages, size_t first,
                 const json_t *tools, int32_t prev_last, lisa_ids_t *out)
{
    char *text = gw_render_text(self, messages, first, tools, prev_last);
    lisa_rc_t rc =
        lisa_tokenizer_encode(self->tok, text, strlen(text), true, out);
    lisa_free(&text);
    return rc;
}

/* ---- replies ------------------------------------------------------------ */

static const char *
s_skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

/* Parses one block body; fills *call on success. */
static bool
s_parse_call(const char *p, size_t n, const char *id, gw_tool_call_t *call)
{
    json_t *o = gw_json_loadb(p, n, 0, NULL);
    const char *name = json_string_value(json_object_get(o, "name"));
    json_t *args = json_object_get(o, "arguments");
    if (!json_is_object(o) || !name ||
        (!json_is_object(args) && !json_is_string(args))) {
        json_decref(o);
        return false;
    }
    call->id = lisa_strdup(id);
    call->name = lisa_strdup(name);
    call->canonical = NULL;
    if (json_is_string(args))
        call->arguments = lisa_strdup(json_string_value(args));
    else {
        char *a = gw_json_dumps(args, JSON_PRESERVE_ORDER);
        call->arguments = lisa_strdup(a);
        free(a);
        /* the digest's form, from the tree already here (reading the
         * arguments text back gives the same tree) */
        a = gw_json_dumps(args,
                          JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        call->canonical = a ? lisa_strdup(a) : NULL;
        free(a);
    }
    json_decref(o);
    return true;
}

lisa_rc_t
gw_render_reply(gw_render_t *self, const uint32_t *ids, size_t n,
                const char *finish, bool parse_tools, const char *id_prefix,
                gw_reply_t *out)
{
    memset(out, 0, sizeof *out);
    while (n > 0) {
        bool stop = false;
        for (size_t k = 0; k < self->n_stop; k++)
            stop = stop || ids[n - 1] == (uint32_t) self->stop[k];
        if (!stop)
            break;
        n--;
    }
    char *text = NULL;
    size_t len = 0;
    lisa_rc_t rc = lisa_tokenizer_decode(self->tok, (const int32_t *) ids, n, 0,
                                         &text, &len);
    if (rc != LISA_OK)
        return rc;
    s_str_t content = {lisa_malloc(len + 1), 0, len + 1};
    content.p[0] = '\0';
    const char *p = text, *end = text + len;
    size_t cap = 0;
    while (p < end) {
        const char *open = parse_tools ? strstr(p, "<tool_call>") : NULL;
        const char *close = open ? strstr(open, "</tool_call>") : NULL;
        if (!open || !close || out->n_calls >= GW_MAX_TOOL_CALLS) {
            s_add(&content, p, (size_t) (end - p));
            break;
        }
        char cid[96];
        snprintf(cid, sizeof cid, "%s_%zu", id_prefix, out->n_calls);
        if (out->n_calls == cap) {
            cap = cap ? cap * 2 : 4;
            out->calls = lisa_realloc(out->calls, cap * sizeof *out->calls);
        }
        const char *body = open + 11;
        const char *after = close + 12;
        if (s_parse_call(body, (size_t) (close - body), cid,
                         &out->calls[out->n_calls])) {
            s_add(&content, p, (size_t) (open - p));
            out->n_calls++;
        } else
            s_add(&content, p, (size_t) (after - p));
        p = after;
    }
    lisa_free(&text);
    if (out->n_calls) {
        /* content around tool calls is trimmed; empty becomes null */
        const char *b = s_skip_ws(content.p, content.p + content.n);
        const char *e = content.p + content.n;
        while (e > b && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\t' ||
                         e[-1] == '\r'))
            e--;
        out->content = e > b ? lisa_strndup(b, (size_t) (e - b)) : NULL;
        lisa_free(&content.p);
        out->finish_reason = "tool_calls";
    } else {
        out->content = content.p;
        out->finish_reason = strcmp(finish, "length") == 0 ? "length" : "stop";
    }
    return LISA_OK;
}
