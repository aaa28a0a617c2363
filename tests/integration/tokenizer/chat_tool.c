/*
 * chat_tool: lisa_chat and lisa_toolcall, and the gateway's rendering
 * path over them (gw_render), over stdin/stdout in batches, for the
 * oracle tests (one process call for many cases).
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
 *   chat_tool gateway DIR   as render, through gw_render_text with the
 *                     tokenizer in DIR: the whole conversation, or with
 *                     "start" the text appended after sampled ids that
 *                     ended with <|im_end|> ("continuation": "im_end") or
 *                     not ("cut"); always with the generation prompt
 *   chat_tool reply DIR     stdin: [text, ...], each tokenized and
 *                     followed by <|im_end|> as the engine samples it,
 *                     then through gw_render_reply (the reply the agent
 *                     gets); stdout: [{"content": str|null, "calls":
 *                     [{"id", "name", "arguments"}], "finish_reason"}]
 */
#include "gw_render.h"
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
    /* "chat_template": the Jinja source whose variant renders */
    json_t *ct = json_object_get(c, "chat_template");
    const char *twhy = NULL;
    if (json_is_string(ct) &&
        lisa_chat_template_detect(json_string_value(ct), &o.tmpl, &twhy) !=
            LISA_OK)
        return json_pack("{ss}", "error", twhy);
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

static json_t *
s_gateway(gw_render_t *r, json_t *c)
{
    json_t *msgs = json_object_get(c, "messages");
    json_t *tools = json_object_get(c, "tools");
    size_t start = (size_t) json_integer_value(json_object_get(c, "start"));
    const char *cont = json_string_value(json_object_get(c, "continuation"));
    int32_t im_end = lisa_tokenizer_im_end_id(gw_render_tokenizer(r));
    int32_t last = cont && strcmp(cont, "im_end") == 0 ? im_end : -1;
    char *out = gw_render_text(r, msgs, start,
                               json_is_array(tools) ? tools : NULL, last);
    if (!out)
        return json_pack("{ss}", "error", "cannot be rendered");
    json_t *s = json_string(out);
    lisa_free(&out);
    return s;
}

static json_t *
s_reply(gw_render_t *r, json_t *t)
{
    lisa_tokenizer_t *tok = gw_render_tokenizer(r);
    lisa_ids_t *ids = lisa_ids_new(1u << 20);
    gw_reply_t rep;
    json_t *res = NULL;
    if (lisa_tokenizer_encode(tok, json_string_value(t), json_string_length(t),
                              false, ids) != LISA_OK ||
        lisa_ids_push(ids, lisa_tokenizer_im_end_id(tok)) != LISA_OK ||
        gw_render_reply(r, (const uint32_t *) lisa_ids_data(ids),
                        lisa_ids_len(ids), "stop", true, "call",
                        &rep) != LISA_OK) {
        lisa_ids_destroy(&ids);
        return json_pack("{ss}", "error", "cannot be decoded");
    }
    json_t *calls = json_array();
    for (size_t i = 0; i < rep.n_calls; i++)
        json_array_append_new(calls,
                              json_pack("{ss ss ss}", "id", rep.calls[i].id,
                                        "name", rep.calls[i].name, "arguments",
                                        rep.calls[i].arguments));
    res = json_pack("{so so ss}", "content",
                    rep.content ? json_string(rep.content) : json_null(),
                    "calls", calls, "finish_reason", rep.finish_reason);
    gw_reply_clear(&rep);
    lisa_ids_destroy(&ids);
    return res;
}

int
main(int argc, char **argv)
{
    bool gw = argc == 3 && (strcmp(argv[1], "gateway") == 0 ||
                            strcmp(argv[1], "reply") == 0);
    if (!gw && (argc != 2 || (strcmp(argv[1], "render") != 0 &&
                              strcmp(argv[1], "parse") != 0))) {
        fprintf(stderr, "usage: chat_tool render|parse < cases.json\n"
                        "       chat_tool gateway|reply TOKENIZER_DIR < "
                        "cases.json\n");
        return 2;
    }
    gw_render_t *r = gw ? gw_render_new(argv[2]) : NULL;
    if (gw && !r)
        return 1;
    json_error_t err;
    json_t *in = json_loadf(stdin, JSON_ALLOW_NUL, &err);
    if (!json_is_array(in)) {
        fprintf(stderr, "chat_tool: stdin is not a JSON array: %s\n", err.text);
        return 1;
    }
    char mode = argv[1][0]; /* r(ender), p(arse), g(ateway), r(eply) */
    if (strcmp(argv[1], "reply") == 0)
        mode = 'y';
    json_t *out = json_array();
    for (size_t i = 0; i < json_array_size(in); i++) {
        json_t *c = json_array_get(in, i);
        json_t *o = mode == 'r'   ? s_render(c)
                    : mode == 'p' ? s_parse(c)
                    : mode == 'g' ? s_gateway(r, c)
                                  : s_reply(r, c);
        json_array_append_new(out, o);
    }
    gw_render_destroy(&r);
    json_dumpf(out, stdout, JSON_COMPACT);
    json_decref(out);
    json_decref(in);
    return 0;
}
