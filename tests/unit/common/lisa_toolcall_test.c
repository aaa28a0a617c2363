/*
 * lisa_toolcall tests. The first test is the usage example.
 */
#include "lisa/lisa_mem.h"
#include "lisa/lisa_toolcall.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lisa_toolcalls_t *
s_parse(const char *text)
{
    lisa_toolcalls_t *tc = lisa_toolcalls_parse(text, strlen(text), "call_");
    cr_assert_not_null(tc);
    return tc;
}

Test(lisa_toolcall, usage)
{
    const char *out = "Let me look.\n<tool_call>\n{\"name\": \"execute_bash\","
                      " \"arguments\": {\"command\": \"ls\",  \"n\": 1.50}}\n"
                      "</tool_call>";
    lisa_toolcalls_t *tc = lisa_toolcalls_parse(out, strlen(out), "call_7_");
    cr_assert_str_eq(lisa_toolcalls_content(tc), "Let me look.");
    cr_assert_eq(lisa_toolcalls_count(tc), 1);
    cr_assert_eq(lisa_toolcalls_errors(tc), 0);
    const lisa_toolcall_t *c = lisa_toolcalls_get(tc, 0);
    cr_assert_str_eq(c->id, "call_7_0");
    cr_assert_str_eq(c->name, "execute_bash");
    /* the model's exact bytes, so re-rendering reproduces them */
    cr_assert_str_eq(c->arguments, "{\"command\": \"ls\",  \"n\": 1.50}");
    cr_assert_null(c->error);
    cr_assert_null(lisa_toolcalls_get(tc, 1));
    lisa_toolcalls_destroy(&tc);
    cr_assert_null(tc);
    lisa_toolcalls_destroy(&tc);
}

Test(lisa_toolcall, no_calls)
{
    lisa_toolcalls_t *tc = s_parse("  just text\n");
    cr_assert_str_eq(lisa_toolcalls_content(tc), "  just text\n");
    cr_assert_eq(lisa_toolcalls_count(tc), 0);
    lisa_toolcalls_destroy(&tc);
}

Test(lisa_toolcall, errors_per_call)
{
    lisa_toolcalls_t *tc = s_parse(
        "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
        "<tool_call>{not json}</tool_call>\n"
        "<tool_call>{\"arguments\": {}}</tool_call>"
        "middle\n"
        "<tool_call>{\"name\": \"b\", \"arguments\": [1]}</tool_call>"
        "<tool_call>{\"name\": \"c\", \"arguments\": \"{\\\"x\\\": 1}\"}"
        "</tool_call>"
        "<tool_call>{\"name\": \"d\"}</tool_call>"
        "<tool_call>[1, 2]</tool_call>"
        "<tool_call>\n{\"name\": \"e\", \"argu");
    cr_assert_eq(lisa_toolcalls_count(tc), 8);
    cr_assert_eq(lisa_toolcalls_errors(tc), 5);
    cr_assert_str_eq(lisa_toolcalls_content(tc), "middle");
    const char *want_err[] = {NULL,
                              "tool call is not valid JSON",
                              "tool call has no name",
                              "tool call arguments are not an object",
                              NULL,
                              NULL,
                              "tool call is not a JSON object",
                              "unterminated <tool_call> block"};
    for (size_t i = 0; i < 8; i++) {
        const lisa_toolcall_t *c = lisa_toolcalls_get(tc, i);
        if (want_err[i]) {
            cr_assert_str_eq(c->error, want_err[i], "call %zu", i);
            cr_assert_null(c->name);
            cr_assert_null(c->arguments);
        } else {
            cr_assert_null(c->error, "call %zu: %s", i, c->error);
        }
        cr_assert_not_null(c->raw);
    }
    cr_assert_str_eq(lisa_toolcalls_get(tc, 4)->arguments, "{\"x\": 1}");
    cr_assert_str_eq(lisa_toolcalls_get(tc, 5)->arguments, "{}");
    cr_assert_str_eq(lisa_toolcalls_get(tc, 7)->raw, "\n{\"name\": \"e\", "
                                                     "\"argu");
    lisa_toolcalls_destroy(&tc);
}

Test(lisa_toolcall, bounded)
{
    char buf[64 * (LISA_TOOLCALL_MAX_CALLS + 4)];
    size_t n = 0;
    for (int i = 0; i < LISA_TOOLCALL_MAX_CALLS + 3; i++)
        n += (size_t) snprintf(buf + n, sizeof buf - n,
                               "<tool_call>{\"name\": \"f\"}</tool_call>");
    lisa_toolcalls_t *tc = lisa_toolcalls_parse(buf, n, NULL);
    cr_assert_eq(lisa_toolcalls_count(tc), LISA_TOOLCALL_MAX_CALLS + 1);
    cr_assert_str_eq(lisa_toolcalls_get(tc, LISA_TOOLCALL_MAX_CALLS)->error,
                     "too many tool calls");
    cr_assert_str_eq(lisa_toolcalls_get(tc, 0)->id, "call_0");
    lisa_toolcalls_destroy(&tc);
    cr_assert_null(lisa_toolcalls_parse(buf, LISA_TOOLCALL_MAX_TEXT + 1, NULL));
}

Test(lisa_toolcall, openai_message)
{
    lisa_toolcalls_t *tc = s_parse("<tool_call>\n{\"name\": \"f\", "
                                   "\"arguments\": {\"a\": 1}}\n</tool_call>"
                                   "<tool_call>oops</tool_call>");
    json_t *m = lisa_toolcalls_message(tc);
    char *s = json_dumps(m, JSON_COMPACT);
    cr_assert_str_eq(s, "{\"role\":\"assistant\",\"content\":null,"
                        "\"tool_calls\":[{\"id\":\"call_0\",\"type\":"
                        "\"function\",\"function\":{\"name\":\"f\","
                        "\"arguments\":\"{\\\"a\\\": 1}\"}}]}");
    free(s);
    json_decref(m);
    lisa_toolcalls_destroy(&tc);
    tc = s_parse("plain answer");
    m = lisa_toolcalls_message(tc);
    s = json_dumps(m, JSON_COMPACT);
    cr_assert_str_eq(s, "{\"role\":\"assistant\",\"content\":"
                        "\"plain answer\"}");
    free(s);
    json_decref(m);
    lisa_toolcalls_destroy(&tc);
}

/* KEEP_MALFORMED: a malformed block is text where the model wrote it;
 * every call knows its bytes in the text and its parsed arguments. */
Test(lisa_toolcall, keep_malformed_and_positions)
{
    const char *t = "Plan.\n<tool_call>\n{\"name\": \"a\", \"arguments\": "
                    "{\"x\": 0.1}}\n</tool_call>\n<tool_call>{bad}</tool_call>"
                    "\n<tool_call>{\"name\": \"b\", \"arguments\": "
                    "\"{\\\"y\\\": 2}\"}</tool_call> tail";
    lisa_toolcalls_t *tc = lisa_toolcalls_parse_opts(
        t, strlen(t), "c", LISA_TOOLCALL_KEEP_MALFORMED, NULL);
    cr_assert_eq(lisa_toolcalls_count(tc), 3);
    cr_assert_eq(lisa_toolcalls_errors(tc), 1);
    cr_assert_str_eq(lisa_toolcalls_content(tc),
                     "Plan.\n<tool_call>{bad}</tool_call>\ntail");
    const lisa_toolcall_t *a = lisa_toolcalls_get(tc, 0);
    const lisa_toolcall_t *bad = lisa_toolcalls_get(tc, 1);
    const lisa_toolcall_t *b = lisa_toolcalls_get(tc, 2);
    cr_assert_eq(a->start, 6);
    cr_assert(strncmp(t + a->start, "<tool_call>", 11) == 0);
    cr_assert(strncmp(t + a->end - 12, "</tool_call>", 12) == 0);
    cr_assert_str_eq(a->arguments, "{\"x\": 0.1}");
    cr_assert(json_is_object(a->value));
    cr_assert(json_real_value(json_object_get(a->value, "x")) == 0.1);
    cr_assert_null(bad->value);
    cr_assert_eq(bad->end - bad->start, strlen("<tool_call>{bad}</tool_call>"));
    cr_assert_eq(json_integer_value(json_object_get(b->value, "y")), 2);
    lisa_toolcalls_destroy(&tc);
    /* without the flag the malformed block is a block like the others */
    tc = lisa_toolcalls_parse(t, strlen(t), "c");
    cr_assert_str_eq(lisa_toolcalls_content(tc), "Plan.\ntail");
    lisa_toolcalls_destroy(&tc);
    /* only malformed blocks: the text as is */
    const char *only = " <tool_call>{bad}</tool_call> ";
    tc = lisa_toolcalls_parse_opts(only, strlen(only), NULL,
                                   LISA_TOOLCALL_KEEP_MALFORMED, json_loadb);
    cr_assert_str_eq(lisa_toolcalls_content(tc), only);
    cr_assert_str_eq(lisa_toolcalls_get(tc, 0)->id, "call_0");
    lisa_toolcalls_destroy(&tc);
    /* unterminated: the rest of the text is the block, and text */
    const char *cut = "<tool_call>{\"name\": \"a\", \"arguments\": {}}"
                      "</tool_call> then <tool_call>{\"na";
    tc = lisa_toolcalls_parse_opts(cut, strlen(cut), NULL,
                                   LISA_TOOLCALL_KEEP_MALFORMED, NULL);
    cr_assert_eq(lisa_toolcalls_get(tc, 1)->end, strlen(cut));
    cr_assert_str_eq(lisa_toolcalls_content(tc), "then <tool_call>{\"na");
    lisa_toolcalls_destroy(&tc);
}

Test(lisa_toolcall, ids_without_printf)
{
    char *id = lisa_toolcall_id("call_", NULL, 0);
    cr_assert_str_eq(id, "call_0");
    lisa_free(&id);
    id = lisa_toolcall_id("chatcmpl-7", "_", 1234567890123ull);
    cr_assert_str_eq(id, "chatcmpl-7_1234567890123");
    lisa_free(&id);
    id = lisa_toolcall_id("", "", SIZE_MAX);
    char want[32];
    snprintf(want, sizeof want, "%zu", (size_t) SIZE_MAX);
    cr_assert_str_eq(id, want);
    lisa_free(&id);
    /* the prefix is clipped to LISA_TOOLCALL_MAX_PREFIX bytes */
    char long_prefix[300];
    memset(long_prefix, 'p', sizeof long_prefix - 1);
    long_prefix[sizeof long_prefix - 1] = '\0';
    id = lisa_toolcall_id(long_prefix, "_", 7);
    cr_assert_eq(strlen(id), LISA_TOOLCALL_MAX_PREFIX + 2);
    cr_assert_str_eq(id + LISA_TOOLCALL_MAX_PREFIX, "_7");
    lisa_free(&id);
}
