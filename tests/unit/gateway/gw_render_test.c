/*
 * gw_render: Qwen3 chat template text, tokenization of appended turns,
 * replies with tool calls.
 */
#include "gw_render.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <string.h>

#define TOKDIR LISA_SOURCE_DIR "/tests/fixtures/qwen3-tokenizer"

static gw_render_t *r;

static void
setup(void)
{
    r = gw_render_new(TOKDIR);
    cr_assert_not_null(r);
}

static void
teardown(void)
{
    gw_render_destroy(&r);
}

static json_t *
J(const char *s)
{
    json_t *j = json_loads(s, 0, NULL);
    cr_assert_not_null(j, "%s", s);
    return j;
}

static void
ids_of(const char *text, lisa_ids_t *out)
{
    cr_assert_eq(lisa_tokenizer_encode(gw_render_tokenizer(r), text,
                                       strlen(text), true, out),
                 LISA_OK);
}

/* Usage: render a conversation, then only its new turn, then a reply. */
Test(gw_render, usage, .init = setup, .fini = teardown)
{
    json_t *msgs = J("[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                     "{\"role\":\"user\",\"content\":\"List files.\"}]");
    json_t *tools = J("[{\"type\":\"function\",\"function\":{\"name\":"
                      "\"execute_bash\",\"parameters\":{}}}]");
    char *text = gw_render_text(r, msgs, 0, tools, -1);
    cr_assert(strncmp(text, "<|im_start|>system\nBe brief.\n\n# Tools\n", 36) ==
              0);
    cr_assert(strstr(text, "<tools>\n{\"type\": \"function\", \"function\": "
                           "{\"name\": \"execute_bash\", \"parameters\": "
                           "{}}}\n</tools>"));
    cr_assert(strstr(text, "<|im_start|>user\nList files.<|im_end|>\n"
                           "<|im_start|>assistant\n"));
    lisa_ids_t *ids = lisa_ids_new(10000);
    cr_assert_eq(gw_render_prompt(r, msgs, 0, tools, -1, ids), LISA_OK);
    lisa_ids_t *want = lisa_ids_new(10000);
    ids_of(text, want);
    cr_assert_eq(lisa_ids_len(ids), lisa_ids_len(want));
    cr_assert_arr_eq(lisa_ids_data(ids), lisa_ids_data(want),
                     lisa_ids_len(ids) * sizeof(int32_t));
    lisa_free(&text);

    /* the agent appends the reply and a tool result: only that is new */
    json_array_append_new(msgs, J("{\"role\":\"assistant\",\"content\":null}"));
    json_array_append_new(msgs, J("{\"role\":\"tool\",\"tool_call_id\":\"c\","
                                  "\"content\":\"a.txt\"}"));
    int32_t im_end = lisa_tokenizer_im_end_id(gw_render_tokenizer(r));
    text = gw_render_text(r, msgs, 3, tools, im_end);
    cr_assert_str_eq(text, "\n<|im_start|>user\n<tool_response>\na.txt\n"
                           "</tool_response><|im_end|>\n"
                           "<|im_start|>assistant\n");
    lisa_free(&text);
    text = gw_render_text(r, msgs, 3, tools, 42);
    cr_assert(strncmp(text, "<|im_end|>\n<|im_start|>user", 27) == 0);
    lisa_free(&text);

    /* a reply with a tool call */
    lisa_ids_clear(want);
    ids_of("Looking.\n<tool_call>\n{\"name\": \"execute_bash\", "
           "\"arguments\": {\"command\": \"ls\"}}\n</tool_call><|im_end|>",
           want);
    gw_reply_t rep;
    cr_assert_eq(gw_render_reply(r, (const uint32_t *) lisa_ids_data(want),
                                 lisa_ids_len(want), "stop", true, "call_7",
                                 &rep),
                 LISA_OK);
    cr_assert_str_eq(rep.content, "Looking.");
    cr_assert_eq(rep.n_calls, 1);
    cr_assert_str_eq(rep.calls[0].id, "call_7_0");
    cr_assert_str_eq(rep.calls[0].name, "execute_bash");
    cr_assert_str_eq(rep.calls[0].arguments, "{\"command\": \"ls\"}");
    cr_assert_str_eq(rep.finish_reason, "tool_calls");
    gw_reply_clear(&rep);
    lisa_ids_destroy(&ids);
    lisa_ids_destroy(&want);
    json_decref(msgs);
    json_decref(tools);
}

/* Appended turns tokenize alone exactly as they do in context. */
Test(gw_render, appended_ids_equal_ids_in_context, .init = setup,
     .fini = teardown)
{
    static const char *const prev[] = {
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nHello there!",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n  spaces  "};
    static const char *const tails[] = {"<|im_end|>", ""};
    json_t *msgs = J("[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":"
                     "\"assistant\",\"content\":\"x\"},{\"role\":\"user\","
                     "\"content\":\"\\n\\n  next: ünïcode 中文\"}]");
    int32_t im_end = lisa_tokenizer_im_end_id(gw_render_tokenizer(r));
    for (size_t k = 0; k < 2; k++) {
        lisa_ids_t *a = lisa_ids_new(10000), *b = lisa_ids_new(10000);
        char full[512];
        snprintf(full, sizeof full, "%s%s", prev[k], tails[k]);
        ids_of(full, a);
        int32_t last = lisa_ids_data(a)[lisa_ids_len(a) - 1];
        cr_assert_eq(last == im_end, k == 0);
        cr_assert_eq(gw_render_prompt(r, msgs, 2, NULL, last, a), LISA_OK);
        char *app = gw_render_text(r, msgs, 2, NULL, last);
        char whole[1024];
        snprintf(whole, sizeof whole, "%s%s", full, app);
        ids_of(whole, b);
        cr_assert_eq(lisa_ids_len(a), lisa_ids_len(b), "case %zu", k);
        cr_assert_arr_eq(lisa_ids_data(a), lisa_ids_data(b),
                         lisa_ids_len(a) * sizeof(int32_t));
        lisa_free(&app);
        lisa_ids_destroy(&a);
        lisa_ids_destroy(&b);
    }
    json_decref(msgs);
}

/* Consecutive tool results share one user turn; history is re-rendered. */
Test(gw_render, grouping_and_history, .init = setup, .fini = teardown)
{
    json_t *msgs = J(
        "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
        "\"content\":\"\",\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},{\"id\":\"b\","
        "\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":"
        "\"{\\\"x\\\": 1}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"a\","
        "\"content\":\"1\"},{\"role\":\"tool\",\"tool_call_id\":\"b\","
        "\"content\":\"2\"}]");
    char *text = gw_render_text(r, msgs, 0, NULL, -1);
    cr_assert_str_eq(
        text, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
              "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"
              "\n<tool_call>\n{\"name\": \"g\", \"arguments\": {\"x\": 1}}\n"
              "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n1\n"
              "</tool_response>\n<tool_response>\n2\n</tool_response>"
              "<|im_end|>\n<|im_start|>assistant\n");
    lisa_free(&text);
    json_decref(msgs);
}

/* Malformed blocks stay text; tool_choice none keeps calls as text. */
Test(gw_render, reply_edge_cases, .init = setup, .fini = teardown)
{
    static const struct {
        const char *text;
        bool parse;
        const char *finish;
        size_t calls;
        const char *content;
        const char *fin;
    } cases[] = {
        {"plain answer", true, "stop", 0, "plain answer", "stop"},
        {"cut off", true, "length", 0, "cut off", "length"},
        {"<tool_call>\nnot json\n</tool_call>", true, "stop", 0,
         "<tool_call>\nnot json\n</tool_call>", "stop"},
        {"<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
         false, "stop", 0,
         "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
         "stop"},
        {"<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
         true, "stop", 1, NULL, "tool_calls"},
        {"<tool_call>\n{\"name\": \"f\"", true, "length", 0,
         "<tool_call>\n{\"name\": \"f\"", "length"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lisa_ids_t *ids = lisa_ids_new(1000);
        ids_of(cases[i].text, ids);
        gw_reply_t rep;
        cr_assert_eq(gw_render_reply(r, (const uint32_t *) lisa_ids_data(ids),
                                     lisa_ids_len(ids), cases[i].finish,
                                     cases[i].parse, "c", &rep),
                     LISA_OK);
        cr_assert_eq(rep.n_calls, cases[i].calls, "case %zu", i);
        if (cases[i].content)
            cr_assert_str_eq(rep.content, cases[i].content, "case %zu", i);
        else
            cr_assert_null(rep.content, "case %zu", i);
        cr_assert_str_eq(rep.finish_reason, cases[i].fin, "case %zu", i);
        gw_reply_clear(&rep);
        lisa_ids_destroy(&ids);
    }
    cr_assert_null(gw_render_new("/nonexistent"));
}

/* A parsed tool call carries its arguments in the digest's form: the
 * reply digest is the same with it as computed from the arguments text. */
Test(gw_render, canonical_arguments_match_the_digest, .init = setup,
     .fini = teardown)
{
    static const char *const texts[] = {
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"z\": 1, \"a\": "
        "[1.5, -2e-07, \"x\\n\\\"y\\u00e9\", null, true], \"m\": {\"b\": "
        "{}, \"a\": []}}}\n</tool_call>",
        "ok <tool_call>\n{\"name\": \"g\", \"arguments\": \"{\\\"q\\\": "
        "2}\"}\n</tool_call>",
    };
    for (size_t i = 0; i < 2; i++) {
        lisa_ids_t *ids = lisa_ids_new(1000);
        ids_of(texts[i], ids);
        gw_reply_t rep;
        cr_assert_eq(gw_render_reply(r, (const uint32_t *) lisa_ids_data(ids),
                                     lisa_ids_len(ids), "stop", true, "c",
                                     &rep),
                     LISA_OK);
        cr_assert_eq(rep.n_calls, 1, "case %zu", i);
        /* both carry the form of the value the parser read (an object, or
         * the object a string held) */
        cr_assert_not_null(rep.calls[0].canonical, "case %zu", i);
        uint8_t with[GW_DIGEST_LEN], without[GW_DIGEST_LEN];
        gw_reply_digest(&rep, with);
        lisa_free(&rep.calls[0].canonical);
        gw_reply_digest(&rep, without);
        cr_assert_arr_eq(with, without, GW_DIGEST_LEN, "case %zu", i);
        gw_reply_clear(&rep);
        lisa_ids_destroy(&ids);
    }
}

/* The arguments the agent gets are the bytes the model wrote: decimals,
 * exponents, escapes in either case and non-ASCII text are not written
 * again (jansson would give 0.10000000000000001 and upper-case \u). */
Test(gw_render, arguments_are_the_models_bytes, .init = setup, .fini = teardown)
{
    static const char *const args[] = {
        "{\"x\": 0.1, \"eps\": 1e-7, \"n\": 3.0, \"big\": 1E+20}",
        "{\"path\": \"/tmp/caf\\u00e9 \\u00E9\", \"s\": \"日本 🎉\"}",
        "{ \"spaced\" :[1 ,2.50, -0.0 ] ,\"o\":{}}",
        "{\"q\": \"\\\"quoted\\\" \\/ \\n\"}",
    };
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "Calling.\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
                 "%s}\n</tool_call><|im_end|>",
                 args[i]);
        lisa_ids_t *ids = lisa_ids_new(1000);
        ids_of(text, ids);
        gw_reply_t rep;
        cr_assert_eq(gw_render_reply(r, (const uint32_t *) lisa_ids_data(ids),
                                     lisa_ids_len(ids), "stop", true, "c",
                                     &rep),
                     LISA_OK);
        cr_assert_eq(rep.n_calls, 1, "case %zu", i);
        cr_assert_str_eq(rep.calls[0].arguments, args[i], "case %zu", i);
        cr_assert_str_eq(rep.content, "Calling.");
        /* sent back as the agent got them, they digest as the reply did */
        char msg[1024];
        json_t *m = json_pack(
            "{ss ss s[{ss ss s{ss ss}}]}", "role", "assistant", "content",
            "Calling.", "tool_calls", "id", rep.calls[0].id, "type", "function",
            "function", "name", "f", "arguments", rep.calls[0].arguments);
        cr_assert_not_null(m);
        uint8_t dm[GW_DIGEST_LEN], dr[GW_DIGEST_LEN];
        gw_msg_digest(m, dm);
        gw_reply_digest(&rep, dr);
        cr_assert_arr_eq(dm, dr, GW_DIGEST_LEN, "case %zu", i);
        /* and a later full render writes them as the model did */
        json_t *msgs =
            json_pack("[{ss ss} O]", "role", "user", "content", "q", m);
        char *t = gw_render_text(r, msgs, 0, NULL, -1);
        snprintf(msg, sizeof msg, "\"arguments\": %s}\n</tool_call>", args[i]);
        cr_assert_not_null(strstr(t, msg), "case %zu: %s", i, t);
        lisa_free(&t);
        json_decref(msgs);
        json_decref(m);
        gw_reply_clear(&rep);
        lisa_ids_destroy(&ids);
    }
}

/* Tool schemas are written as the template's tojson writes them. */
Test(gw_render, tools_as_tojson, .init = setup, .fini = teardown)
{
    json_t *msgs = J("[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
                     "{\"role\":\"user\",\"content\":\"q\"}]");
    json_t *tools = J("[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                      "\"parameters\":{\"a\":0.1,\"b\":1e-7,\"c\":3.0,"
                      "\"d\":\"caf\\u00e9\\u0001\",\"e\":[1,-0.0]}}}]");
    char *text = gw_render_text(r, msgs, 0, tools, -1);
    cr_assert_not_null(text);
    cr_assert(strstr(text, "\"parameters\": {\"a\": 0.1, \"b\": 1e-07, \"c\": "
                           "3.0, \"d\": \"café\\u0001\", \"e\": [1, -0.0]}}}\n"
                           "</tools>"),
              "%s", text);
    /* the developer message is the system prompt */
    cr_assert(strncmp(text, "<|im_start|>system\nBe brief.\n\n# Tools\n", 36) ==
              0);
    lisa_free(&text);
    json_decref(msgs);
    json_decref(tools);
}

/* A malformed block between well-formed ones stays in the content. */
Test(gw_render, malformed_block_is_content, .init = setup, .fini = teardown)
{
    lisa_ids_t *ids = lisa_ids_new(1000);
    ids_of("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n"
           "<tool_call>\nnot json\n</tool_call>\n<tool_call>\n{\"name\": "
           "\"g\", \"arguments\": {\"k\": 1}}\n</tool_call>",
           ids);
    gw_reply_t rep;
    cr_assert_eq(gw_render_reply(r, (const uint32_t *) lisa_ids_data(ids),
                                 lisa_ids_len(ids), "stop", true, "c", &rep),
                 LISA_OK);
    cr_assert_eq(rep.n_calls, 2);
    cr_assert_str_eq(rep.calls[0].id, "c_0");
    cr_assert_str_eq(rep.calls[1].id, "c_1");
    cr_assert_str_eq(rep.calls[1].name, "g");
    cr_assert_str_eq(rep.content, "<tool_call>\nnot json\n</tool_call>");
    gw_reply_clear(&rep);
    lisa_ids_destroy(&ids);
}
