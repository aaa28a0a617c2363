/*
 * gw_render: the gateway's side of the chat template and the tool-call
 * parser (see the header). The template is lisa_chat's and the parser
 * lisa_toolcall's, the two the transformers oracle tests check; this file
 * adds the gateway's choices: which rendering (whole, or continued after
 * the sampled ids), the developer role as system, malformed blocks kept
 * as text, call ids, and each call's arguments in the digest's form.
 */
#include "gw_render.h"

#include "gw_json.h"
#include "lisa/lisa_chat.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_toolcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gw_render_t {
    lisa_tokenizer_t *tok;
    lisa_chat_template_t tmpl; /* from the model's chat_template */
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
    /* The served model's chat template picks the renderer: the gateway
     * reads the model's own directory (--tokenizer), the one the trainer
     * loads. An unknown template stops the gateway; none at all is
     * rendered as Qwen3's, said once in the log. */
    lisa_chat_template_t tmpl;
    const char *why = NULL;
    lisa_rc_t rc = lisa_chat_template_detect(lisa_tokenizer_chat_template(tok),
                                             &tmpl, &why);
    if (rc == LISA_INVALID) {
        lisa_log_error("gateway: the chat template of %s: %s", dir, why);
        lisa_tokenizer_destroy(&tok);
        return NULL;
    }
    if (rc == LISA_NOTFOUND)
        lisa_log_warn("gateway: the chat template of %s: %s", dir, why);
    lisa_log_info("gateway: chat template %s", lisa_chat_template_name(tmpl));
    gw_render_t *self = lisa_calloc(1, sizeof *self);
    self->tok = tok;
    self->tmpl = tmpl;
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

/* ---- prompts ------------------------------------------------------------ */

char *
gw_render_text(gw_render_t *self, const json_t *messages, size_t first,
               const json_t *tools, int32_t prev_last)
{
    lisa_chat_opts_t o = lisa_chat_opts_default();
    o.tmpl = self->tmpl;
    o.developer_as_system = true;
    char *text = NULL;
    const char *why = NULL;
    lisa_rc_t rc;
    if (first == 0)
        rc = lisa_chat_render(messages, tools, &o, &text, NULL, &why);
    else
        rc = lisa_chat_render_continuation(messages, tools, first,
                                           prev_last == self->im_end, &o, &text,
                                           NULL, &why);
    if (rc != LISA_OK) {
        lisa_log_debug("render: %s", why ? why : lisa_rc_str(rc));
        return NULL;
    }
    return text;
}

lisa_rc_t
gw_render_prompt(gw_render_t *self, const json_t *messages, size_t first,
                 const json_t *tools, int32_t prev_last, lisa_ids_t *out)
{
    char *text = gw_render_text(self, messages, first, tools, prev_last);
    if (!text)
        return LISA_INVALID;
    lisa_rc_t rc =
        lisa_tokenizer_encode(self->tok, text, strlen(text), true, out);
    lisa_free(&text);
    return rc;
}

/* ---- replies ------------------------------------------------------------ */

/* One well-formed call as the agent gets it: the arguments exactly as the
 * model wrote them, and their digest form from the value already parsed
 * (reading the text back gives the same value). */
static void
s_call(const lisa_toolcall_t *tc, const char *id_prefix, size_t i,
       gw_tool_call_t *call)
{
    call->id = lisa_toolcall_id(id_prefix, "_", i); /* "<id_prefix>_<i>" */
    call->name = lisa_strdup(tc->name);
    call->arguments = lisa_strdup(tc->arguments);
    char *a = gw_json_dumps(tc->value,
                            JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    call->canonical = a ? lisa_strdup(a) : NULL;
    free(a);
}

/* Fills out's content and calls from the decoded text. */
static void
s_tool_calls(const char *text, size_t len, const char *id_prefix,
             gw_reply_t *out)
{
    /* gw_json's reader: jansson's values, without its byte-at-a-time
     * stream (fuzz_gw_json checks that they agree) */
    lisa_toolcalls_t *tc = lisa_toolcalls_parse_opts(
        text, len, NULL, LISA_TOOLCALL_KEEP_MALFORMED, gw_json_loadb);
    size_t n = tc ? lisa_toolcalls_count(tc) : 0;
    size_t ok = n - (tc ? lisa_toolcalls_errors(tc) : 0);
    if (ok == 0) {
        out->content = lisa_strndup(text, len);
        lisa_toolcalls_destroy(&tc);
        return;
    }
    out->calls = lisa_calloc(ok, sizeof *out->calls);
    for (size_t i = 0; i < n && out->n_calls < GW_MAX_TOOL_CALLS; i++) {
        const lisa_toolcall_t *c = lisa_toolcalls_get(tc, i);
        if (c->error)
            continue;
        s_call(c, id_prefix, out->n_calls, &out->calls[out->n_calls]);
        out->n_calls++;
    }
    /* content around tool calls: empty becomes null */
    const char *content = lisa_toolcalls_content(tc);
    out->content = content[0] ? lisa_strdup(content) : NULL;
    lisa_toolcalls_destroy(&tc);
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
    if (parse_tools)
        s_tool_calls(text, len, id_prefix, out);
    else
        out->content = lisa_strndup(text, len);
    lisa_free(&text);
    if (out->n_calls)
        out->finish_reason = "tool_calls";
    else
        out->finish_reason = strcmp(finish, "length") == 0 ? "length" : "stop";
    return LISA_OK;
}
