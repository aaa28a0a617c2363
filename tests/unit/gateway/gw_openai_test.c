/*
 * gw_openai: request validation, response shaping, message digests.
 */
#include "gw_openai.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_unicode.h"

#include <criterion/criterion.h>
#include <string.h>

static lisa_rc_t
parse(const char *body, gw_chat_req_t *req, gw_err_t *err)
{
    return gw_chat_req_parse(body, strlen(body), req, err);
}

/* Usage: parse a request, answer it, both plain and streamed. */
Test(gw_openai, usage)
{
    gw_chat_req_t req;
    gw_err_t err;
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
        ","
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"parameters\":{}}}],\"temperature\":0.5,\"max_tokens\":64,"
        "\"stop\":\"X\",\"stream\":true}";
    cr_assert_eq(parse(body, &req, &err), LISA_OK, "%s", err.message);
    cr_assert_eq(json_array_size(req.messages), 1);
    cr_assert_eq(req.temperature, 0.5);
    cr_assert_eq(req.max_tokens, 64);
    cr_assert_eq(req.n_stop, 1);
    cr_assert_str_eq(req.stop[0], "X");
    cr_assert(req.stream);

    gw_tool_call_t call = {lisa_strdup("call_1"), lisa_strdup("f"),
                           lisa_strdup("{\"a\": 1}")};
    gw_reply_t r = {lisa_strdup("thinking"), &call, 1, "tool_calls"};
    gw_usage_t u = {10, 5, 7};
    char *plain = gw_chat_response("chatcmpl-1", 7, "m", &r, &u);
    json_t *o = json_loads(plain, 0, NULL);
    json_t *msg = json_object_get(
        json_array_get(json_object_get(o, "choices"), 0), "message");
    cr_assert_str_eq(json_string_value(json_object_get(msg, "content")),
                     "thinking");
    json_t *tc = json_array_get(json_object_get(msg, "tool_calls"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(tc, "function"), "arguments")),
                     "{\"a\": 1}");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "usage"),
                                                    "total_tokens")),
                 15);
    /* the engine's cached prompt tokens, OpenAI's name for them */
    cr_assert_eq(json_integer_value(json_object_get(
                     json_object_get(json_object_get(o, "usage"),
                                     "prompt_tokens_details"),
                     "cached_tokens")),
                 7);
    json_decref(o);
    free(plain);

    size_t len;
    char *sse = gw_chat_stream("chatcmpl-1", 7, "m", &r, &u, true, &len);
    cr_assert_eq(strlen(sse), len);
    cr_assert(strstr(sse, "\"content\":\"thinking\""));
    cr_assert(strstr(sse, "\"finish_reason\":\"tool_calls\""));
    cr_assert(strstr(sse, "\"total_tokens\":15"));
    cr_assert(strstr(sse, "\"prompt_tokens_details\":{\"cached_tokens\":7}"));
    cr_assert(strncmp(sse + len - 14, "data: [DONE]\n\n", 14) == 0);
    lisa_free(&sse);
    r.calls = NULL;
    r.n_calls = 0;
    lisa_free(&call.id);
    lisa_free(&call.name);
    lisa_free(&call.arguments);
    gw_reply_clear(&r);
    gw_chat_req_clear(&req);
}

/* Every kind of bad input is a 400 naming the parameter. */
Test(gw_openai, refuses_bad_requests)
{
    static const struct {
        const char *body;
        const char *param;
    } cases[] = {
        {"{\"messages\":[", NULL},
        {"[1,2]", NULL},
        {"{\"messages\":[]}", "messages"},
        {"{\"messages\":\"hi\"}", "messages"},
        {"{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}",
         "messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
         "\"image_url\"}]}]}",
         "messages"},
        {"{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}", "n"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"temperature\":3}",
         "temperature"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"top_p\":0}",
         "top_p"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"max_tokens\":0}",
         "max_tokens"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
         "stop"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"bogus\":1}",
         "bogus"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"tool_choice\":\"auto\"}",
         "tool_choice"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"tools\":[{\"type\":\"function\"}]}",
         "tools"},
        {"{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":1}]}]"
         "}",
         "messages"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"stream\":\"yes\"}",
         "stream"},
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
         "\"messages\":[]}",
         NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gw_chat_req_t req;
        gw_err_t err = {0};
        cr_assert_eq(parse(cases[i].body, &req, &err), LISA_INVALID,
                     "case %zu accepted", i);
        cr_assert_eq(err.status, 400);
        cr_assert_str_eq(err.type, "invalid_request_error");
        if (cases[i].param)
            cr_assert_str_eq(err.param, cases[i].param, "case %zu", i);
        char *body = gw_err_body(&err);
        json_t *o = json_loads(body, 0, NULL);
        cr_assert(json_is_string(
            json_object_get(json_object_get(o, "error"), "message")));
        json_decref(o);
        free(body);
    }
}

/* History digests: cosmetic differences compare equal, real ones do not. */
Test(gw_openai, digests)
{
    uint8_t a[GW_DIGEST_LEN], b[GW_DIGEST_LEN];
    json_t *m1 = json_loads(
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
        "\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"arguments\":\"{\\\"x\\\": 1, \\\"y\\\": 2}\"}}],\"refusal\":null}",
        0, NULL);
    gw_tool_call_t call = {"c1", "f", "{\"y\":2,\"x\":1}"};
    gw_reply_t r = {NULL, &call, 1, "tool_calls"};
    gw_msg_digest(m1, a);
    gw_reply_digest(&r, b);
    cr_assert(memcmp(a, b, GW_DIGEST_LEN) == 0);
    call.arguments = "{\"y\":3,\"x\":1}";
    gw_reply_digest(&r, b);
    cr_assert(memcmp(a, b, GW_DIGEST_LEN) != 0);

    /* parts are joined as the renderer joins them, by "\n" */
    json_t *p1 =
        json_loads("{\"role\":\"user\",\"content\":\"a\\nb\"}", 0, NULL);
    json_t *p0 = json_loads("{\"role\":\"user\",\"content\":\"ab\"}", 0, NULL);
    json_t *p2 = json_loads("{\"role\":\"user\",\"content\":[{\"type\":"
                            "\"text\",\"text\":\"a\"},{\"type\":\"text\","
                            "\"text\":\"b\"}]}",
                            0, NULL);
    json_t *p3 =
        json_loads("{\"role\":\"system\",\"content\":\"a\\nb\"}", 0, NULL);
    gw_msg_digest(p1, a);
    gw_msg_digest(p2, b);
    cr_assert(memcmp(a, b, GW_DIGEST_LEN) == 0);
    gw_msg_digest(p0, a);
    cr_assert(memcmp(a, b, GW_DIGEST_LEN) != 0);
    gw_msg_digest(p1, a);
    gw_msg_digest(p3, b);
    cr_assert(memcmp(a, b, GW_DIGEST_LEN) != 0);
    gw_tools_digest(NULL, a);
    json_t *empty = json_array();
    gw_tools_digest(empty, b);
    cr_assert(memcmp(a, b, GW_DIGEST_LEN) == 0);
    json_decref(empty);
    json_decref(m1);
    json_decref(p0);
    json_decref(p1);
    json_decref(p2);
    json_decref(p3);
}

/* The direct writer gives the reference writer's bytes: escapes, UTF-8,
 * control characters, null content, several calls, no calls. */
Test(gw_openai, response_writer_matches_jansson)
{
    gw_tool_call_t calls[2] = {
        {lisa_strdup("call_0"), lisa_strdup("execute_bash"),
         lisa_strdup("{\"command\": \"ls \\\"a b\\\" | wc\\n\"}")},
        {lisa_strdup("call_1"), lisa_strdup("submit"), lisa_strdup("{}")}};
    static const char *const contents[] = {
        "plain", "quote \" backslash \\ slash / tab \t nl \n cr \r",
        "ctl \x01\x1f\x7f bell \b ff \f",
        "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", ""};
    gw_usage_t u = {123456789012ll, 42, 123456789011ll};
    for (size_t i = 0; i <= sizeof contents / sizeof contents[0]; i++)
        for (size_t nc = 0; nc <= 2; nc++) {
            gw_reply_t r = {
                i < sizeof contents / sizeof contents[0] ? (char *) contents[i]
                                                         : NULL,
                calls, nc, nc ? "tool_calls" : (i % 2 ? "length" : "stop")};
            char *a = gw_chat_response("chatcmpl-g-1", 1732900000,
                                       "lisa/m\xc3\xa9", &r, &u);
            char *b = gw_chat_response_json("chatcmpl-g-1", 1732900000,
                                            "lisa/m\xc3\xa9", &r, &u);
            cr_assert_str_eq(a, b, "content %zu, %zu calls", i, nc);
            free(a);
            free(b);
        }
    for (size_t k = 0; k < 2; k++) {
        lisa_free(&calls[k].id);
        lisa_free(&calls[k].name);
        lisa_free(&calls[k].arguments);
    }
}

Test(gw_openai, error_text_is_valid_utf8)
{
    /* an error quoting a request's bytes: replaced, never cut mid-character,
     * and the body is JSON */
    gw_err_t err;
    gw_err_set(&err, LISA_INVALID, 400, "invalid_request_error", NULL, NULL,
               "bad value '%s'", "\xc3\x28\xff");
    cr_assert(lisa_utf8_valid(err.message, strlen(err.message)));
    char *body = gw_err_body(&err);
    json_t *o = json_loads(body, 0, NULL);
    cr_assert_not_null(o, "%s", body);
    cr_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(o, "error"), "message")),
                     "bad value '\xef\xbf\xbd(\xef\xbf\xbd'");
    json_decref(o);
    free(body);
    char big[sizeof err.message + 8];
    memset(big, 'a', sizeof big);
    memcpy(big + sizeof err.message - 3, "\xe2\x82\xac",
           3); /* cut by the bound */
    big[sizeof big - 1] = '\0';
    gw_err_set(&err, LISA_INVALID, 400, "invalid_request_error", NULL, NULL,
               "%s", big);
    cr_assert(lisa_utf8_valid(err.message, strlen(err.message)));
}
