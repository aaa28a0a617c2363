/*
 * lisa_chat: the Qwen3 chat template as straight-line C, and SmolLM2's
 * ChatML as a variant of it.
 *
 * Each branch below mirrors one branch of the Jinja template (quoted in
 * the header comment); Python string methods the template calls
 * (split, lstrip, rstrip, strip, startswith, endswith) are done on UTF-8
 * bytes, which is equivalent because every delimiter is ASCII. SmolLM2's
 * template is Qwen3's without the <think> handling and with a default
 * system turn; its tools follow Qwen3's branches (the header's hermes
 * rule), so the variant is a few conditions here, not a second renderer.
 */
#include "lisa/lisa_chat.h"

#include "lisa/lisa_buf.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_str.h"
#include "lisa/lisa_tojson.h"

#include <stdint.h>
#include <string.h>

/* A borrowed or owned byte string. */
typedef struct {
    const char *s;
    size_t n;
    char *owned;
} s_str_t;

static void
s_str_free(s_str_t *x)
{
    lisa_free(&x->owned);
}

/* The role; "developer" is "system" when `dev` is set. */
static const char *
s_role(const json_t *msg, bool dev)
{
    const json_t *r = json_object_get(msg, "role");
    const char *s = json_is_string(r) ? json_string_value(r) : "";
    return dev && strcmp(s, "developer") == 0 ? "system" : s;
}

static bool
s_role_is(const json_t *msg, const char *role, bool dev)
{
    return strcmp(s_role(msg, dev), role) == 0;
}

/* The message's content as text (see the header for the liberties). */
static lisa_rc_t
s_content(const json_t *msg, s_str_t *out, const char **why)
{
    *out = (s_str_t){.s = "", .n = 0};
    const json_t *c = json_object_get(msg, "content");
    if (!c || json_is_null(c))
        return LISA_OK;
    if (json_is_string(c)) {
        out->s = json_string_value(c);
        out->n = json_string_length(c);
        return LISA_OK;
    }
    if (json_is_array(c)) {
        lisa_buf_t b = {.max = LISA_CHAT_MAX_OUTPUT};
        size_t i;
        const json_t *part;
        bool first = true;
        json_array_foreach(c, i, part)
        {
            const json_t *t = json_object_get(part, "text");
            if (!json_is_string(t))
                continue;
            if (!first)
                lisa_buf_put(&b, "\n", 1);
            first = false;
            lisa_buf_put(&b, json_string_value(t), json_string_length(t));
        }
        if (b.full) {
            lisa_free(&b.p);
            *why = "content too large";
            return LISA_TOOLARGE;
        }
        if (!b.p)
            return LISA_OK;
        out->owned = b.p;
        out->s = b.p;
        out->n = b.len;
        return LISA_OK;
    }
    *why = "message content is neither a string nor an array of parts";
    return LISA_INVALID;
}

static const char *
s_find(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, needle, k) == 0)
            return s + i;
    return NULL;
}

static const char *
s_rfind(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    if (n < k)
        return NULL;
    for (size_t i = n - k + 1; i-- > 0;)
        if (memcmp(s + i, needle, k) == 0)
            return s + i;
    return NULL;
}

static void
s_lstrip_nl(const char **s, size_t *n)
{
    while (*n > 0 && **s == '\n') {
        (*s)++;
        (*n)--;
    }
}

static void
s_rstrip_nl(const char *s, size_t *n)
{
    while (*n > 0 && s[*n - 1] == '\n')
        (*n)--;
}

/* Index of the last user message that is a real query (not a wrapped
 * tool response), or n - 1 when there is none: ns.last_query_index. */
static lisa_rc_t
s_last_query(const json_t *messages, size_t n, size_t *idx, const char **why)
{
    *idx = n ? n - 1 : 0;
    for (size_t k = n; k-- > 0;) {
        const json_t *m = json_array_get(messages, k);
        if (!s_role_is(m, "user", false))
            continue;
        s_str_t c;
        lisa_rc_t rc = s_content(m, &c, why);
        if (rc != LISA_OK)
            return rc;
        bool wrapped = lisa_str_starts(c.s, c.n, "<tool_response>") &&
                       lisa_str_ends(c.s, c.n, "</tool_response>");
        s_str_free(&c);
        if (!wrapped) {
            *idx = k;
            break;
        }
    }
    return LISA_OK;
}

static const char s_smollm_system[] =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

static lisa_rc_t
s_header(lisa_buf_t *b, const json_t *messages, const json_t *tools,
         lisa_chat_template_t tmpl, bool dev, const char **why)
{
    const json_t *first = json_array_get(messages, 0);
    bool first_system = first && s_role_is(first, "system", dev);
    s_str_t c = {.s = "", .n = 0};
    if (first_system) {
        lisa_rc_t rc = s_content(first, &c, why);
        if (rc != LISA_OK)
            return rc;
    }
    /* SmolLM2: the default system turn when the first message is not a
     * system message (none for an empty conversation: loop.first never
     * holds). */
    bool smol_default = tmpl == LISA_CHAT_SMOLLM2 && first && !first_system;
    if (tools && json_array_size(tools) > 0) {
        lisa_buf_puts(b, "<|im_start|>system\n");
        if (first_system || smol_default) {
            if (smol_default)
                lisa_buf_puts(b, s_smollm_system);
            else
                lisa_buf_put(b, c.s, c.n);
            lisa_buf_puts(b, "\n\n");
        }
        lisa_buf_puts(b,
                      "# Tools\n\nYou may call one or more functions to assist "
                      "with the user query.\n\nYou are provided with function "
                      "signatures within <tools></tools> XML tags:\n<tools>");
        for (size_t i = 0; i < json_array_size(tools); i++) {
            char *j = NULL;
            size_t jl = 0;
            lisa_rc_t rc = lisa_tojson(json_array_get(tools, i),
                                       LISA_CHAT_MAX_OUTPUT, &j, &jl);
            if (rc != LISA_OK) {
                s_str_free(&c);
                *why = "a tool cannot be serialized";
                return rc;
            }
            lisa_buf_puts(b, "\n");
            lisa_buf_put(b, j, jl);
            lisa_free(&j);
        }
        lisa_buf_puts(b, "\n</tools>\n\nFor each function call, return a json "
                         "object with function name and arguments within "
                         "<tool_call></tool_call> XML tags:\n<tool_call>\n"
                         "{\"name\": <function-name>, \"arguments\": "
                         "<args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (first_system) {
        lisa_buf_puts(b, "<|im_start|>system\n");
        lisa_buf_put(b, c.s, c.n);
        lisa_buf_puts(b, "<|im_end|>\n");
    } else if (smol_default) {
        lisa_buf_puts(b, "<|im_start|>system\n");
        lisa_buf_puts(b, s_smollm_system);
        lisa_buf_puts(b, "<|im_end|>\n");
    }
    s_str_free(&c);
    return LISA_OK;
}

static lisa_rc_t
s_tool_calls(lisa_buf_t *b, const json_t *calls, bool content_nonempty,
             const char **why)
{
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *tc = json_array_get(calls, i);
        if (!json_is_object(tc)) {
            *why = "a tool call is not an object";
            return LISA_INVALID;
        }
        if ((i == 0 && content_nonempty) || i > 0)
            lisa_buf_puts(b, "\n");
        const json_t *fn = json_object_get(tc, "function");
        if (json_is_object(fn) && json_object_size(fn) > 0)
            tc = fn;
        const json_t *name = json_object_get(tc, "name");
        const json_t *args = json_object_get(tc, "arguments");
        if (name && !json_is_string(name)) {
            *why = "a tool call name is not a string";
            return LISA_INVALID;
        }
        if (!args || json_is_null(args)) {
            *why = "a tool call has no arguments";
            return LISA_INVALID;
        }
        lisa_buf_puts(b, "<tool_call>\n{\"name\": \"");
        if (name)
            lisa_buf_put(b, json_string_value(name), json_string_length(name));
        lisa_buf_puts(b, "\", \"arguments\": ");
        if (json_is_string(args)) {
            lisa_buf_put(b, json_string_value(args), json_string_length(args));
        } else {
            char *j = NULL;
            size_t jl = 0;
            lisa_rc_t rc = lisa_tojson(args, LISA_CHAT_MAX_OUTPUT, &j, &jl);
            if (rc != LISA_OK) {
                *why = "tool call arguments cannot be serialized";
                return rc;
            }
            lisa_buf_put(b, j, jl);
            lisa_free(&j);
        }
        lisa_buf_puts(b, "}\n</tool_call>");
    }
    return LISA_OK;
}

static lisa_rc_t
s_reasoning(const json_t *msg, const json_t **out, const char **why)
{
    static const char *const keys[] = {"reasoning_content", "thinking",
                                       "reasoning"};
    *out = NULL;
    for (size_t i = 0; i < 3; i++) {
        const json_t *v = json_object_get(msg, keys[i]);
        if (v && !json_is_null(v)) {
            if (!json_is_string(v)) {
                *why = "reasoning is not a string";
                return LISA_INVALID;
            }
            *out = v;
            return LISA_OK;
        }
    }
    return LISA_OK;
}

static lisa_rc_t
s_assistant(lisa_buf_t *b, const json_t *msg, size_t idx, size_t n,
            size_t last_query, lisa_chat_template_t tmpl, const char **why)
{
    s_str_t full;
    lisa_rc_t rc = s_content(msg, &full, why);
    if (rc != LISA_OK)
        return rc;
    const char *content = full.s, *reason = "";
    size_t content_n = full.n, reason_n = 0;
    const json_t *rv = NULL;
    /* SmolLM2's ChatML: the content verbatim, no reasoning */
    bool qwen = tmpl == LISA_CHAT_QWEN3;
    if (qwen) {
        rc = s_reasoning(msg, &rv, why);
        if (rc != LISA_OK)
            goto out;
    }
    if (rv) {
        reason = json_string_value(rv);
        reason_n = json_string_length(rv);
    } else if (qwen && s_find(full.s, full.n, "</think>")) {
        /* content.split('</think>')[-1].lstrip('\n') */
        const char *last = s_rfind(full.s, full.n, "</think>") + 8;
        content = last;
        content_n = full.n - (size_t) (last - full.s);
        s_lstrip_nl(&content, &content_n);
        /* content.split('</think>')[0].rstrip('\n')
         *        .split('<think>')[-1].lstrip('\n') */
        const char *end = s_find(full.s, full.n, "</think>");
        size_t head_n = (size_t) (end - full.s);
        s_rstrip_nl(full.s, &head_n);
        const char *open = s_rfind(full.s, head_n, "<think>");
        reason = open ? open + 7 : full.s;
        reason_n = head_n - (size_t) (reason - full.s);
        s_lstrip_nl(&reason, &reason_n);
    }
    bool is_last = idx + 1 == n;
    if (qwen && idx > last_query && (is_last || reason_n > 0)) {
        const char *r = reason;
        size_t rn = reason_n;
        s_lstrip_nl(&r, &rn);
        s_rstrip_nl(r, &rn);
        const char *c = content;
        size_t cn = content_n;
        s_lstrip_nl(&c, &cn);
        lisa_buf_puts(b, "<|im_start|>assistant\n<think>\n");
        lisa_buf_put(b, r, rn);
        lisa_buf_puts(b, "\n</think>\n\n");
        lisa_buf_put(b, c, cn);
    } else {
        lisa_buf_puts(b, "<|im_start|>assistant\n");
        lisa_buf_put(b, content, content_n);
    }
    const json_t *calls = json_object_get(msg, "tool_calls");
    if (calls && !json_is_null(calls) && !json_is_array(calls)) {
        *why = "tool_calls is not an array";
        rc = LISA_INVALID;
        goto out;
    }
    if (json_is_array(calls)) {
        rc = s_tool_calls(b, calls, content_n > 0, why);
        if (rc != LISA_OK)
            goto out;
    }
    lisa_buf_puts(b, "<|im_end|>\n");
out:
    s_str_free(&full);
    return rc;
}

/* last_query is computed on the first assistant turn that needs it
 * (SIZE_MAX until then): an appended tool result or user turn does not
 * scan the conversation. */
static lisa_rc_t
s_message(lisa_buf_t *b, const json_t *messages, size_t i, size_t n,
          lisa_chat_template_t tmpl, bool dev, size_t *last_query,
          const char **why)
{
    const json_t *msg = json_array_get(messages, i);
    if (!json_is_object(msg)) {
        *why = "a message is not an object";
        return LISA_INVALID;
    }
    const char *role = s_role(msg, dev);
    lisa_rc_t rc = LISA_OK;
    s_str_t c = {0};
    if (strcmp(role, "user") == 0 || (strcmp(role, "system") == 0 && i > 0)) {
        rc = s_content(msg, &c, why);
        if (rc != LISA_OK)
            return rc;
        lisa_buf_puts(b, "<|im_start|>");
        lisa_buf_puts(b, role);
        lisa_buf_puts(b, "\n");
        lisa_buf_put(b, c.s, c.n);
        lisa_buf_puts(b, "<|im_end|>\n");
    } else if (strcmp(role, "assistant") == 0) {
        if (*last_query == SIZE_MAX && tmpl == LISA_CHAT_QWEN3)
            rc = s_last_query(messages, n, last_query, why);
        if (rc == LISA_OK)
            rc = s_assistant(b, msg, i, n, *last_query, tmpl, why);
    } else if (strcmp(role, "tool") == 0) {
        rc = s_content(msg, &c, why);
        if (rc != LISA_OK)
            return rc;
        if (i == 0 || !s_role_is(json_array_get(messages, i - 1), "tool", dev))
            lisa_buf_puts(b, "<|im_start|>user");
        lisa_buf_puts(b, "\n<tool_response>\n");
        lisa_buf_put(b, c.s, c.n);
        lisa_buf_puts(b, "\n</tool_response>");
        if (i + 1 == n ||
            !s_role_is(json_array_get(messages, i + 1), "tool", dev))
            lisa_buf_puts(b, "<|im_end|>\n");
    }
    s_str_free(&c);
    return rc;
}

lisa_chat_opts_t
lisa_chat_opts_default(void)
{
    return (lisa_chat_opts_t){.tmpl = LISA_CHAT_QWEN3,
                              .add_generation_prompt = true,
                              .enable_thinking = -1,
                              .developer_as_system = false};
}

static lisa_rc_t
s_render(const json_t *messages, const json_t *tools, size_t start,
         const char *prefix, const lisa_chat_opts_t *opts, char **out,
         size_t *len, const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    *why = NULL;
    *out = NULL;
    if (len)
        *len = 0;
    lisa_chat_opts_t dflt = lisa_chat_opts_default();
    if (!opts)
        opts = &dflt;
    if (!json_is_array(messages)) {
        *why = "messages is not an array";
        return LISA_INVALID;
    }
    if (tools && !json_is_null(tools) && !json_is_array(tools)) {
        *why = "tools is not an array";
        return LISA_INVALID;
    }
    if (json_is_null(tools))
        tools = NULL;
    size_t n = json_array_size(messages);
    if (n > LISA_CHAT_MAX_MESSAGES) {
        *why = "too many messages";
        return LISA_TOOLARGE;
    }
    if (start > n) {
        *why = "start is past the last message";
        return LISA_INVALID;
    }
    lisa_buf_t b = {.max = LISA_CHAT_MAX_OUTPUT};
    size_t last_query = SIZE_MAX;
    lisa_rc_t rc = LISA_OK;
    bool dev = opts->developer_as_system;
    if (prefix)
        lisa_buf_puts(&b, prefix);
    if (start == 0) {
        rc = s_header(&b, messages, tools, opts->tmpl, dev, why);
        if (rc != LISA_OK)
            goto out;
    }
    for (size_t i = start; i < n; i++) {
        rc = s_message(&b, messages, i, n, opts->tmpl, dev, &last_query, why);
        if (rc != LISA_OK)
            goto out;
    }
    if (opts->add_generation_prompt) {
        lisa_buf_puts(&b, "<|im_start|>assistant\n");
        if (opts->enable_thinking == 0 && opts->tmpl == LISA_CHAT_QWEN3)
            lisa_buf_puts(&b, "<think>\n\n</think>\n\n");
    }
    if (b.full) {
        *why = "rendered conversation too large";
        rc = LISA_TOOLARGE;
    }
out:
    if (rc != LISA_OK) {
        lisa_free(&b.p);
        return rc;
    }
    if (!b.p)
        b.p = lisa_strdup("");
    *out = b.p;
    if (len)
        *len = b.len;
    return LISA_OK;
}

lisa_rc_t
lisa_chat_render(const json_t *messages, const json_t *tools,
                 const lisa_chat_opts_t *opts, char **out, size_t *len,
                 const char **why)
{
    return s_render(messages, tools, 0, NULL, opts, out, len, why);
}

lisa_rc_t
lisa_chat_render_from(const json_t *messages, const json_t *tools, size_t start,
                      const lisa_chat_opts_t *opts, char **out, size_t *len,
                      const char **why)
{
    return s_render(messages, tools, start, NULL, opts, out, len, why);
}

lisa_rc_t
lisa_chat_render_continuation(const json_t *messages, const json_t *tools,
                              size_t start, bool ended_with_im_end,
                              const lisa_chat_opts_t *opts, char **out,
                              size_t *len, const char **why)
{
    return s_render(messages, tools, start,
                    ended_with_im_end ? "\n" : "<|im_end|>\n", opts, out, len,
                    why);
}

const char *
lisa_chat_template_name(lisa_chat_template_t t)
{
    return t == LISA_CHAT_SMOLLM2 ? "smollm2" : "qwen3";
}

lisa_rc_t
lisa_chat_template_detect(const char *jinja, lisa_chat_template_t *out,
                          const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    *why = NULL;
    *out = LISA_CHAT_QWEN3;
    if (!jinja) {
        *why = "no chat_template: Qwen3's assumed";
        return LISA_NOTFOUND;
    }
    bool chatml = strstr(jinja, "<|im_start|>") && strstr(jinja, "<|im_end|>");
    if (chatml && strstr(jinja, "<tool_call>") &&
        strstr(jinja, "<tool_response>") && strstr(jinja, "<think>"))
        return LISA_OK;
    if (chatml && strstr(jinja, s_smollm_system) && !strstr(jinja, "tool")) {
        *out = LISA_CHAT_SMOLLM2;
        return LISA_OK;
    }
    *why = "unknown chat template (lisa renders Qwen3's and SmolLM2's)";
    return LISA_INVALID;
}
