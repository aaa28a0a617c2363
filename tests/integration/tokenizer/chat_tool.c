/*
 * chat_tool: lisa_chat and lisa_toolcall over stdin/stdout in batches, for
 * the oracle tests (one process call for many cases).
 *
 *   chat_tool render  stdin: [{"messages": [...], "tools": [...]|null,
 *                              "add_generation_prompt": bool,
 *                              "enable_thinking": bool (optional),
 *                              "start": n (optional),
 *                              "continuation": "im_end"|"cut" (optional)}]
 *                     stdout: [text | {"error": reason}, ...]
 *   chat_tool parse   stdin: [text, ...]
 *                     stdout: [{"content": ..., "calls": [{"id", "name",
 *                              "arguments", "error"}]}, ...]
 */
#include "lisa/lisa_chat.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_toolcall.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static json_t *
s_render(json_t *c)
{
    lisa_chat_opts_t o = lisa_chat_opts_default();
    o.add_generation_prompt =
        json_is_true(json_object_get(c, "add_generation_prompt"));
    json_t *et = json_object_get(c, "enable_thinking");
    if (json_is_boolean(et))
        o.enable_thinking = json_is_true(et) ? 1 : 0;
    json_t *msgs = json_object_get(c, "messages");
    json_t *tools = json_object_get(c, "tools");
    size_t start = (size_t) json_integer_value(json_object_get(c, "start"));
    json_t *cont = json_object_get(c, "continuation");
    char *out = NULL;
    size_t len = 0;
    const char *why = NULL;
    lisa_rc_t rc;
    if (json_is_string(cont))
        rc = lisa_chat_render_continuation(
            msgs, tools, start, strcmp(json_string_value(cont), "im_end") == 0,
            &o, &out, &len, &why);
    else
        rc = lisa_chat_render_from(msgs, tools, start, &o, &out, &len, &why);
    if (rc != LISA_OK)
        return json_pack("{ss}", "error", why ? why : lisa_rc_str(rc));
    json_t *s = json_stringn(out, len);
    lisa_free(&out);
    return s;
}

static json_t *
s_parse(json_t *t)
{
    lisa_toolcalls_t *tc = lisa_toolcalls_parse(json_string_value(t),
                                                json_string_length(t), "call_");
    if (!tc)
        return json_pack("{ss}", "error", "too large");
    json_t *calls = json_array();
    for (size_t i = 0; i < lisa_toolcalls_count(tc); i++) {
        const lisa_toolcall_t *c = lisa_toolcalls_get(tc, i);
        json_array_append_new(
            calls,
            json_pack("{ss so so so}", "id", c->id, "name",
                      c->name ? json_string(c->name) : json_null(), "arguments",
                      c->arguments ? json_string(c->arguments) : json_null(),
                      "error", c->error ? json_string(c->error) : json_null()));
    }
    json_t *r = json_pack("{ss so}", "content", lisa_toolcalls_content(tc),
                          "calls", calls);
    lisa_toolcalls_destroy(&tc);
    return r;
}

int
main(int argc, char **argv)
{
    if (argc != 2 ||
        (strcmp(argv[1], "render") != 0 && strcmp(argv[1], "parse") != 0)) {
        fprintf(stderr, "usage: chat_tool render|parse < cases.json\n");
        return 2;
    }
    json_error_t err;
    json_t *in = json_loadf(stdin, JSON_ALLOW_NUL, &err);
    if (!json_is_array(in)) {
        fprintf(stderr, "chat_tool: stdin is not a JSON array: %s\n", err.text);
        return 1;
    }
    bool render = strcmp(argv[1], "render") == 0;
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(in); i++) {
        json_t *c = json_array_get(in, i);
        json_array_append_new(out, render ? s_render(c) : s_parse(c));
    }
    json_dumpf(out, stdout, JSON_COMPACT);
    json_decref(out);
    json_decref(in);
    return 0;
}
