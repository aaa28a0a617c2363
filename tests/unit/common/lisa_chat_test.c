/*
 * lisa_chat tests. The first test is the usage example. Whole-template
 * equality with transformers is checked by the chat oracle tests; these
 * pin the structure and the error paths.
 */
#include "lisa/lisa_chat.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <string.h>

static json_t *
s_json(const char *text)
{
    json_error_t err;
    json_t *v = json_loads(text, 0, &err);
    cr_assert_not_null(v, "bad test JSON: %s", err.text);
    return v;
}

Test(lisa_chat, usage)
{
    json_t *messages = s_json(
        "[{\"role\": \"system\", \"content\": \"Be brief.\"},"
        " {\"role\": \"user\", \"content\": \"List files.\"},"
        " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{"
        "   \"id\": \"call_0\", \"type\": \"function\", \"function\": {"
        "   \"name\": \"execute_bash\","
        "   \"arguments\": \"{\\\"command\\\": \\\"ls\\\"}\"}}]},"
        " {\"role\": \"tool\", \"content\": \"a.txt\"}]");
    json_t *tools = s_json("[{\"type\": \"function\", \"function\": {"
                           "\"name\": \"execute_bash\", \"parameters\": {}}}]");
    lisa_chat_opts_t opts = lisa_chat_opts_default();
    char *text = NULL;
    size_t len = 0;
    const char *why = NULL;
    cr_assert_eq(lisa_chat_render(messages, tools, &opts, &text, &len, &why),
                 LISA_OK);
    const char *want =
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or "
        "more functions to assist with the user query.\n\nYou are provided "
        "with function signatures within <tools></tools> XML tags:\n<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"execute_bash\", "
        "\"parameters\": {}}}\n</tools>\n\nFor each function call, return a "
        "json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
        "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
        "<|im_end|>\n"
        "<|im_start|>user\nList files.<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"execute_bash\", "
        "\"arguments\": {\"command\": \"ls\"}}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\na.txt\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n";
    cr_assert_str_eq(text, want);
    cr_assert_eq(len, strlen(want));
    lisa_free(&text);

    /* The gateway's continuation after the generated assistant turn
     * (index 2, ended with <|im_end|>): the tool turn and the prompt. */
    cr_assert_eq(lisa_chat_render_continuation(messages, tools, 3, true, &opts,
                                               &text, &len, &why),
                 LISA_OK);
    cr_assert_str_eq(text, "\n<|im_start|>user\n<tool_response>\na.txt\n"
                           "</tool_response><|im_end|>\n"
                           "<|im_start|>assistant\n");
    lisa_free(&text);
    json_decref(messages);
    json_decref(tools);
}

Test(lisa_chat, no_tools_and_thinking)
{
    json_t *m = s_json("[{\"role\": \"system\", \"content\": \"S\"},"
                       " {\"role\": \"user\", \"content\": \"Q\"},"
                       " {\"role\": \"assistant\", \"content\": "
                       "\"<think>\\nr\\n</think>\\n\\nA\"}]");
    lisa_chat_opts_t o = {.add_generation_prompt = false,
                          .enable_thinking = -1};
    char *t = NULL;
    cr_assert_eq(lisa_chat_render(m, NULL, &o, &t, NULL, NULL), LISA_OK);
    /* the last assistant turn after the query keeps its think block */
    cr_assert_str_eq(t, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n"
                        "Q<|im_end|>\n<|im_start|>assistant\n<think>\nr\n"
                        "</think>\n\nA<|im_end|>\n");
    lisa_free(&t);
    o.add_generation_prompt = true;
    o.enable_thinking = 0;
    cr_assert_eq(lisa_chat_render_from(m, NULL, 3, &o, &t, NULL, NULL),
                 LISA_OK);
    cr_assert_str_eq(t, "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    lisa_free(&t);
    json_decref(m);
}

Test(lisa_chat, liberties_and_errors)
{
    /* null content renders as "", parts are joined with "\n" */
    json_t *m = s_json("[{\"role\": \"user\", \"content\": [{\"type\": "
                       "\"text\", \"text\": \"a\"}, {\"type\": \"text\", "
                       "\"text\": \"b\"}]}, {\"role\": \"assistant\", "
                       "\"content\": null}]");
    lisa_chat_opts_t o = {.add_generation_prompt = false,
                          .enable_thinking = -1};
    char *t = NULL;
    cr_assert_eq(lisa_chat_render(m, NULL, &o, &t, NULL, NULL), LISA_OK);
    cr_assert_str_eq(t, "<|im_start|>user\na\nb<|im_end|>\n"
                        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
                        "<|im_end|>\n");
    lisa_free(&t);
    json_decref(m);

    const char *why = NULL;
    json_t *bad = s_json("{\"role\": \"user\"}");
    cr_assert_eq(lisa_chat_render(bad, NULL, NULL, &t, NULL, &why),
                 LISA_INVALID);
    cr_assert_not_null(why);
    cr_assert_null(t);
    json_decref(bad);
    bad = s_json("[{\"role\": \"user\", \"content\": 5}]");
    cr_assert_eq(lisa_chat_render(bad, NULL, NULL, &t, NULL, &why),
                 LISA_INVALID);
    json_decref(bad);
    bad = s_json("[{\"role\": \"assistant\", \"content\": \"\", "
                 "\"tool_calls\": [{\"function\": {\"name\": \"f\"}}]}]");
    cr_assert_eq(lisa_chat_render(bad, NULL, NULL, &t, NULL, &why),
                 LISA_INVALID);
    cr_assert_str_eq(why, "a tool call has no arguments");
    cr_assert_eq(lisa_chat_render_from(bad, NULL, 2, NULL, &t, NULL, &why),
                 LISA_INVALID);
    json_decref(bad);
}

Test(lisa_chat, bounded)
{
    json_t *m = json_array();
    for (int i = 0; i <= LISA_CHAT_MAX_MESSAGES; i++)
        json_array_append_new(
            m, json_pack("{ss ss}", "role", "user", "content", "x"));
    char *t = NULL;
    const char *why = NULL;
    cr_assert_eq(lisa_chat_render(m, NULL, NULL, &t, NULL, &why),
                 LISA_TOOLARGE);
    json_decref(m);
    /* one huge message past the output bound */
    size_t n = LISA_CHAT_MAX_OUTPUT + 1;
    char *big = lisa_malloc(n + 1);
    memset(big, 'a', n);
    big[n] = '\0';
    m = json_pack("[{ss ss}]", "role", "user", "content", big);
    cr_assert_eq(lisa_chat_render(m, NULL, NULL, &t, NULL, &why),
                 LISA_TOOLARGE);
    cr_assert_null(t);
    json_decref(m);
    lisa_free(&big);
}

/* developer_as_system: OpenAI's developer role is the system prompt (the
 * template alone drops it), first or later. */
Test(lisa_chat, developer_as_system)
{
    json_t *msgs = json_loads(
        "[{\"role\":\"developer\",\"content\":\"D\"},{\"role\":\"user\","
        "\"content\":\"u\"},{\"role\":\"developer\",\"content\":\"E\"}]",
        0, NULL);
    lisa_chat_opts_t o = lisa_chat_opts_default();
    char *out = NULL;
    cr_assert_eq(lisa_chat_render(msgs, NULL, &o, &out, NULL, NULL), LISA_OK);
    cr_assert_str_eq(out, "<|im_start|>user\nu<|im_end|>\n"
                          "<|im_start|>assistant\n");
    lisa_free(&out);
    o.developer_as_system = true;
    cr_assert_eq(lisa_chat_render(msgs, NULL, &o, &out, NULL, NULL), LISA_OK);
    cr_assert_str_eq(out, "<|im_start|>system\nD<|im_end|>\n"
                          "<|im_start|>user\nu<|im_end|>\n"
                          "<|im_start|>system\nE<|im_end|>\n"
                          "<|im_start|>assistant\n");
    lisa_free(&out);
    json_decref(msgs);
}

/* SmolLM2's ChatML: the default system turn, the content verbatim (no
 * think handling), no empty think block on the generation prompt. */
Test(lisa_chat, smollm2_chatml)
{
    json_t *messages = s_json(
        "[{\"role\": \"user\", \"content\": \"hi\"},"
        " {\"role\": \"assistant\", \"content\": \"<think>\\nx\\n</think>\\n\\n"
        "hello\"},"
        " {\"role\": \"user\", \"content\": \"bye\"}]");
    lisa_chat_opts_t opts = lisa_chat_opts_default();
    opts.tmpl = LISA_CHAT_SMOLLM2;
    opts.enable_thinking = 0;
    char *text = NULL;
    cr_assert_eq(lisa_chat_render(messages, NULL, &opts, &text, NULL, NULL),
                 LISA_OK);
    cr_assert_str_eq(text,
                     "<|im_start|>system\nYou are a helpful AI assistant named "
                     "SmolLM, trained by Hugging Face<|im_end|>\n"
                     "<|im_start|>user\nhi<|im_end|>\n"
                     "<|im_start|>assistant\n<think>\nx\n</think>\n\nhello"
                     "<|im_end|>\n<|im_start|>user\nbye<|im_end|>\n"
                     "<|im_start|>assistant\n");
    lisa_free(&text);
    /* a continuation does not repeat the default system turn */
    cr_assert_eq(lisa_chat_render_continuation(messages, NULL, 2, true, &opts,
                                               &text, NULL, NULL),
                 LISA_OK);
    cr_assert_str_eq(text, "\n<|im_start|>user\nbye<|im_end|>\n"
                           "<|im_start|>assistant\n");
    lisa_free(&text);
    /* with tools, the default system text opens the tools turn */
    json_t *tools = s_json("[{\"type\": \"function\", \"function\": "
                           "{\"name\": \"submit\"}}]");
    cr_assert_eq(lisa_chat_render(messages, tools, &opts, &text, NULL, NULL),
                 LISA_OK);
    cr_assert(strncmp(text,
                      "<|im_start|>system\nYou are a helpful AI assistant "
                      "named SmolLM, trained by Hugging Face\n\n# Tools\n",
                      strlen("<|im_start|>system\nYou are a helpful AI "
                             "assistant named SmolLM, trained by Hugging "
                             "Face\n\n# Tools\n")) == 0,
              "%s", text);
    lisa_free(&text);
    /* an empty conversation has no system turn */
    json_t *empty = json_array();
    cr_assert_eq(lisa_chat_render(empty, NULL, &opts, &text, NULL, NULL),
                 LISA_OK);
    cr_assert_str_eq(text, "<|im_start|>assistant\n");
    lisa_free(&text);
    json_decref(empty);
    json_decref(tools);
    json_decref(messages);
}

Test(lisa_chat, template_detect)
{
    static const char smol[] =
        "{% for message in messages %}{% if loop.first and "
        "messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are "
        "a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] "
        "+ '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
    static const char qwen[] =
        "{%- if tools %}<|im_start|>system ... <tool_call> ... "
        "<tool_response> ... <think> ... <|im_end|>";
    lisa_chat_template_t t = LISA_CHAT_QWEN3;
    const char *why = NULL;
    cr_assert_eq(lisa_chat_template_detect(smol, &t, &why), LISA_OK);
    cr_assert_eq(t, LISA_CHAT_SMOLLM2);
    cr_assert_str_eq(lisa_chat_template_name(t), "smollm2");
    cr_assert_eq(lisa_chat_template_detect(qwen, &t, &why), LISA_OK);
    cr_assert_eq(t, LISA_CHAT_QWEN3);
    cr_assert_eq(lisa_chat_template_detect(NULL, &t, &why), LISA_NOTFOUND);
    cr_assert_eq(t, LISA_CHAT_QWEN3);
    cr_assert_not_null(why);
    /* ChatML without SmolLM2's system text, a Llama-3 template: refused */
    cr_assert_eq(lisa_chat_template_detect(
                     "{{'<|im_start|>' + m + '<|im_end|>'}}", &t, &why),
                 LISA_INVALID);
    cr_assert_not_null(strstr(why, "unknown chat template"));
    cr_assert_eq(lisa_chat_template_detect(
                     "{{ '<|start_header_id|>' }}{{ '<|eot_id|>' }}", &t, &why),
                 LISA_INVALID);
}
