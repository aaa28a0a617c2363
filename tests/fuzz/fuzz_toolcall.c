/*
 * Fuzz target: the tool-call parser and the chat renderer on untrusted
 * text. Mode by the first byte:
 *   even: parse generated text into content + tool calls, then render the
 *         rebuilt assistant message through the chat template;
 *   odd:  the bytes as a JSON {"messages": [...], "tools": [...]} request,
 *         rendered whole and from every start index.
 * Never a crash, a leak or an out-of-bounds access.
 */
#include "lisa/lisa_chat.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_toolcall.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
s_render_parsed(const lisa_toolcalls_t *tc)
{
    json_t *calls = json_array();
    for (size_t i = 0; i < lisa_toolcalls_count(tc); i++) {
        const lisa_toolcall_t *c = lisa_toolcalls_get(tc, i);
        if (c->error)
            continue;
        json_array_append_new(calls, json_pack("{ss s{ss ss}}", "id", c->id,
                                               "function", "name", c->name,
                                               "arguments", c->arguments));
    }
    json_t *content = json_string(lisa_toolcalls_content(tc));
    json_t *msgs =
        json_pack("[{ss ss}, {ss so* so}]", "role", "user", "content", "q",
                  "role", "assistant", "content", content, "tool_calls", calls);
    if (!msgs) /* jansson released the stolen references */
        return;
    char *out = NULL;
    if (lisa_chat_render(msgs, NULL, NULL, &out, NULL, NULL) == LISA_OK)
        lisa_free(&out);
    json_decref(msgs);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *) data + 1;
    size_t n = size - 1;
    if ((data[0] & 1) == 0) {
        lisa_toolcalls_t *tc = lisa_toolcalls_parse(text, n, "call_");
        if (!tc)
            return 0;
        if (lisa_toolcalls_count(tc) > LISA_TOOLCALL_MAX_CALLS + 1)
            abort();
        s_render_parsed(tc);
        lisa_toolcalls_destroy(&tc);
        return 0;
    }
    json_error_t err;
    json_t *req = json_loadb(text, n, 0, &err);
    if (!req)
        return 0;
    json_t *msgs = json_object_get(req, "messages");
    json_t *tools = json_object_get(req, "tools");
    size_t count = json_is_array(msgs) ? json_array_size(msgs) : 0;
    for (size_t start = 0; start <= count && start < 64; start++) {
        char *out = NULL;
        lisa_chat_opts_t o = lisa_chat_opts_default();
        o.enable_thinking = (int) (data[0] >> 1) % 3 - 1;
        if (lisa_chat_render_continuation(msgs, tools, start, data[0] & 2, &o,
                                          &out, NULL, NULL) == LISA_OK)
            lisa_free(&out);
    }
    json_decref(req);
    return 0;
}
