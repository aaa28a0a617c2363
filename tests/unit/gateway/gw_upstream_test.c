/*
 * gw_upstream: engine request body and response parsing.
 */
#include "gw_upstream.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Usage: build a request, parse an answer. */
Test(gw_upstream, usage)
{
    uint32_t ids[] = {151644, 0, 4294967295u, 7};
    int32_t stop[] = {151645, 151643};
    const char *strs[] = {"\"quoted\""};
    gw_sampling_t s = {.model = "m",
                       .max_tokens = 32,
                       .temperature = 0.5,
                       .top_p = -1,
                       .stop_ids = stop,
                       .n_stop_ids = 2,
                       .stop = strs,
                       .n_stop = 1};
    size_t len;
    char *body = gw_upstream_body(ids, 4, &s, &len);
    cr_assert_eq(strlen(body), len);
    json_t *o = json_loads(body, 0, NULL);
    cr_assert_not_null(o, "%s", body);
    json_t *p = json_object_get(o, "prompt");
    cr_assert_eq(json_array_size(p), 4);
    cr_assert_eq(json_integer_value(json_array_get(p, 2)), 4294967295ll);
    cr_assert_eq(json_real_value(json_object_get(o, "temperature")), 0.5);
    cr_assert_null(json_object_get(o, "top_p"));
    cr_assert_eq(json_integer_value(json_object_get(o, "max_tokens")), 32);
    cr_assert_eq(json_integer_value(
                     json_array_get(json_object_get(o, "stop_token_ids"), 1)),
                 151643);
    cr_assert_str_eq(
        json_string_value(json_array_get(json_object_get(o, "stop"), 0)),
        "\"quoted\"");
    cr_assert(json_is_true(json_object_get(o, "return_token_ids")));
    json_decref(o);
    free(body);

    const char *ans = "{\"choices\":[{\"index\":0,\"token_ids\":[5,6],"
                      "\"logprobs\":{\"token_logprobs\":[-0.5,0]},"
                      "\"finish_reason\":\"stop\"}],\"policy_version\":9}";
    gw_completion_t c;
    char why[128];
    cr_assert_eq(gw_upstream_parse(ans, strlen(ans), 100, &c, why, sizeof why),
                 LISA_OK, "%s", why);
    cr_assert_eq(c.n, 2);
    cr_assert_eq(c.ids[1], 6);
    cr_assert_eq(c.logprobs[0], -0.5f);
    cr_assert_str_eq(c.finish_reason, "stop");
    cr_assert_eq(c.policy_version, 9);
    gw_completion_clear(&c);
    gw_completion_clear(&c);
}

Test(gw_upstream, vllm_token_strings_and_refusals)
{
    const char *v = "{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:11\","
                    "\"token_id:12\"],\"token_logprobs\":[-1,-2]},"
                    "\"finish_reason\":\"length\",\"policy_version\":3}]}";
    gw_completion_t c;
    char why[128];
    cr_assert_eq(gw_upstream_parse(v, strlen(v), 100, &c, why, sizeof why),
                 LISA_OK, "%s", why);
    cr_assert_eq(c.ids[0], 11);
    cr_assert_eq(c.policy_version, 3);
    gw_completion_clear(&c);
    static const char *const bad[] = {
        "not json",
        "{}",
        "{\"choices\":[]}",
        "{\"choices\":[{\"token_ids\":[1],\"finish_reason\":\"stop\"}]}",
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"token_logprobs\":"
        "[0.5]},\"finish_reason\":\"stop\"}]}",
        "{\"choices\":[{\"token_ids\":[1,2],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}]}",
        "{\"choices\":[{\"token_ids\":[-1],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}]}",
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"abort\"}]}",
        "{\"choices\":[{\"token_ids\":[1,2,3],\"logprobs\":{\"token_logprobs\":"
        "[-1,-1,-1]},\"finish_reason\":\"stop\"}]}",
        "{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:x\"],"
        "\"token_logprobs\":[-1]},\"finish_reason\":\"stop\"}]}",
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}],\"policy_version\":-2}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        cr_assert_eq(
            gw_upstream_parse(bad[i], strlen(bad[i]), 2, &c, why, sizeof why),
            LISA_INVALID, "case %zu accepted", i);
        cr_assert(why[0], "case %zu has no reason", i);
        cr_assert_null(c.ids);
    }
}

/* The small reader answers the usual replies exactly as jansson does, and
 * leaves everything else (refusals included) to jansson. */
Test(gw_upstream, fast_reader_agrees_or_declines)
{
    static const char *const answered[] = {
        "{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":"
        "\"caf\\u00e9\",\"token_ids\":[40,686,1401,151645],\"logprobs\":{"
        "\"token_logprobs\":[-0.050000000000000003,-0.2,-3e-05,0]},"
        "\"finish_reason\":\"stop\"}],\"policy_version\":3}",
        " {\"choices\" : [ {\"finish_reason\":\"length\",\"policy_version\":7,"
        "\"logprobs\":{\"tokens\":null,\"token_logprobs\":[-1.5E+2,-0.0]},"
        "\"token_ids\":[0,2147483647],\"text\":\"r\xc3\xa9sum\xc3\xa9 "
        "\\\"q\\\" \xf0\x9f\x98\x80\"},{\"index\":1}],\"usage\":{\"n\":1.25e10,"
        "\"x\":[true,false,null,{},[]]}}\r\n",
        "{\"choices\":[{\"token_ids\":[],\"logprobs\":{\"token_logprobs\":[]},"
        "\"finish_reason\":\"length\"}]}",
        /* integer logprobs ("-0" is jansson's integer 0), long and short
         * decimals, exponents */
        "{\"choices\":[{\"token_ids\":[1,2,3,4,5,6,7,8],\"logprobs\":{"
        "\"token_logprobs\":[-0,-7,-0.0,-0.050000000000000003,-1e-05,"
        "-0.30000001192092896,-123456789012345678901234.5,-1E22]},"
        "\"finish_reason\":\"stop\"}]}",
        /* the root's policy version wins over the choice's */
        "{\"policy_version\":0,\"choices\":[{\"token_ids\":[-0],\"logprobs\":"
        "{\"token_logprobs\":[-1]},\"finish_reason\":\"stop\","
        "\"policy_version\":\"x\"}]}",
    };
    for (size_t i = 0; i < sizeof answered / sizeof answered[0]; i++) {
        gw_completion_t f, j;
        char why[128];
        size_t n = strlen(answered[i]);
        cr_assert_eq(gw_upstream_parse_fast(answered[i], n, 100, &f), LISA_OK,
                     "case %zu declined", i);
        cr_assert_eq(
            gw_upstream_parse_json(answered[i], n, 100, &j, why, sizeof why),
            LISA_OK, "case %zu: %s", i, why);
        cr_assert_eq(f.n, j.n);
        for (size_t k = 0; k < f.n; k++) {
            cr_assert_eq(f.ids[k], j.ids[k]);
            /* bit for bit: -0.0 and 0.0 differ */
            cr_assert_eq(memcmp(&f.logprobs[k], &j.logprobs[k], sizeof(float)),
                         0, "case %zu logprob %zu", i, k);
        }
        cr_assert_str_eq(f.finish_reason, j.finish_reason);
        cr_assert_eq(f.policy_version, j.policy_version);
        gw_completion_clear(&f);
        gw_completion_clear(&j);
    }
    static const char *const declined[] = {
        "",
        "[]",
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}]} x",
        /* duplicate key the reader needs */
        "{\"choices\":[{\"token_ids\":[1],\"token_ids\":[2],\"logprobs\":{"
        "\"token_logprobs\":[-1]},\"finish_reason\":\"stop\"}]}",
        /* escaped key */
        "{\"choices\":[{\"token\\u005fids\":[1],\"logprobs\":{"
        "\"token_logprobs\":[-1]},\"finish_reason\":\"stop\"}]}",
        /* an integer jansson refuses as too big, elsewhere in the body */
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}],\"n\":99999999999999999999}",
        /* a real that overflows */
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}],\"n\":1e999}",
        /* a lone surrogate and a NUL escape */
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}],\"t\":\"\\ud800\"}",
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}],\"t\":\"\\u0000\"}",
        /* invalid UTF-8 (overlong, then a surrogate) */
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}],\"t\":\"\xc0\xaf\"}",
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}],\"t\":\"\xed\xa0\x80\"}",
        /* a real id, a leading zero, a positive logprob */
        "{\"choices\":[{\"token_ids\":[1.0],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}]}",
        "{\"choices\":[{\"token_ids\":[01],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}]}",
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"token_logprobs\":"
        "[0.5]},\"finish_reason\":\"stop\"}]}",
        /* vLLM's token strings: jansson's job */
        "{\"choices\":[{\"logprobs\":{\"tokens\":[\"token_id:11\"],"
        "\"token_logprobs\":[-1]},\"finish_reason\":\"length\"}]}",
    };
    for (size_t i = 0; i < sizeof declined / sizeof declined[0]; i++) {
        gw_completion_t f;
        cr_assert_eq(
            gw_upstream_parse_fast(declined[i], strlen(declined[i]), 100, &f),
            LISA_UNSUPPORTED, "case %zu answered", i);
        cr_assert_null(f.ids);
    }
    /* nesting deeper than the small reader goes: jansson decides */
    char deep[400];
    size_t k = (size_t) snprintf(
        deep, sizeof deep,
        "{\"choices\":[{\"token_ids\":[1],\"logprobs\":{\"token_logprobs\":"
        "[-1]},\"finish_reason\":\"stop\"}],\"d\":");
    for (int i = 0; i < 80; i++)
        deep[k++] = '[';
    for (int i = 0; i < 80; i++)
        deep[k++] = ']';
    deep[k++] = '}';
    gw_completion_t c;
    char why[128];
    cr_assert_eq(gw_upstream_parse_fast(deep, k, 100, &c), LISA_UNSUPPORTED);
    cr_assert_eq(gw_upstream_parse(deep, k, 100, &c, why, sizeof why), LISA_OK,
                 "%s", why);
    cr_assert_eq(c.ids[0], 1);
    gw_completion_clear(&c);
}

/* The body in three parts is byte for byte the body in one. */
Test(gw_upstream, body_split_equals_body_parts)
{
    uint32_t ids[] = {1, 22, 333, 4294967295u};
    int32_t stop[] = {151645};
    const char *strs[] = {"a\"b", "\n"};
    const char *models[] = {"lisa", "q\"uote\\d", "\xc3\xa9t\xc3\xa9", ""};
    const char *texts[] = {"", "7,8,9"};
    for (size_t m = 0; m < 4; m++)
        for (size_t t = 0; t < 2; t++)
            for (size_t n = 0; n <= 4; n += 4) {
                gw_sampling_t s = {.model = models[m],
                                   .max_tokens = 9,
                                   .temperature = m % 2 ? 0.7 : -1,
                                   .top_p = -1,
                                   .stop_ids = stop,
                                   .n_stop_ids = 1,
                                   .stop = strs,
                                   .n_stop = m % 3};
                size_t len, pl, ql;
                char *one = gw_upstream_body_parts(texts[t], strlen(texts[t]),
                                                   ids, n, &s, &len);
                char *pre, *post;
                gw_upstream_body_split(strlen(texts[t]), ids, n, &s, &pre, &pl,
                                       &post, &ql);
                char joined[1024];
                cr_assert_lt(pl + strlen(texts[t]) + ql, sizeof joined);
                snprintf(joined, sizeof joined, "%s%s%s", pre, texts[t], post);
                cr_assert_eq(pl + strlen(texts[t]) + ql, len);
                cr_assert_str_eq(joined, one);
                json_t *o = json_loads(joined, 0, NULL);
                cr_assert_not_null(o, "%s", joined);
                cr_assert_str_eq(json_string_value(json_object_get(o, "model")),
                                 models[m]);
                json_decref(o);
                free(one);
                free(pre);
                free(post);
            }
}

/* Ids are written as printf writes them, one comma between. */
Test(gw_upstream, write_ids_matches_printf)
{
    uint32_t ids[64];
    size_t n = 0;
    uint32_t edge[] = {0,        1,         9,          10,     99,
                       100,      101,       999,        1000,   9999,
                       10000,    65535,     99999,      151643, 1000000,
                       99999999, 100000000, 4294967295u};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        ids[n++] = edge[i];
    for (uint32_t v = 7; n < 64; v = v * 13 + 5)
        ids[n++] = v;
    char got[64 * 11], want[64 * 11];
    size_t len = gw_upstream_write_ids(got, ids, n);
    cr_assert_leq(len, GW_UPSTREAM_ID_TEXT_MAX(n));
    got[len] = '\0';
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += (size_t) snprintf(want + k, sizeof want - k, i ? ",%u" : "%u",
                               ids[i]);
    cr_assert_str_eq(got, want);
    cr_assert_eq(gw_upstream_write_ids(got, ids, 0), 0);
}

/* usage.prompt_tokens_details.cached_tokens: read by both readers alike;
 * 0 when absent or not a non-negative integer. */
Test(gw_upstream, cached_tokens)
{
    static const struct {
        const char *usage;
        uint64_t want;
    } cases[] = {
        {"", 0},
        {",\"usage\":{\"prompt_tokens\":12,\"prompt_tokens_details\":{"
         "\"cached_tokens\":8}}",
         8},
        {",\"usage\":{\"prompt_tokens_details\":{\"audio_tokens\":1,"
         "\"cached_tokens\":0}}",
         0},
        {",\"usage\":{\"prompt_tokens_details\":null}", 0},
        {",\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":-3}}", 0},
        {",\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":2.5}}", 0},
        {",\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":\"9\"}}", 0},
        {",\"usage\":[1]", 0},
        {",\"usage\":{\"completion_tokens\":2,\"prompt_tokens_details\":{"
         "\"cached_tokens\":123456789012}}",
         123456789012ull},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"choices\":[{\"token_ids\":[5],\"logprobs\":{"
                 "\"token_logprobs\":[-0.5]},\"finish_reason\":\"stop\"}]%s}",
                 cases[i].usage);
        gw_completion_t f, j, c;
        char why[128];
        size_t n = strlen(body);
        cr_assert_eq(gw_upstream_parse_fast(body, n, 10, &f), LISA_OK,
                     "case %zu declined", i);
        cr_assert_eq(gw_upstream_parse_json(body, n, 10, &j, why, sizeof why),
                     LISA_OK, "case %zu: %s", i, why);
        cr_assert_eq(f.cached_tokens, cases[i].want, "case %zu", i);
        cr_assert_eq(j.cached_tokens, cases[i].want, "case %zu", i);
        cr_assert_eq(gw_upstream_parse(body, n, 10, &c, why, sizeof why),
                     LISA_OK);
        cr_assert_eq(c.cached_tokens, cases[i].want, "case %zu", i);
        gw_completion_clear(&f);
        gw_completion_clear(&j);
        gw_completion_clear(&c);
    }
    /* a duplicate is left to jansson (last one wins there) */
    const char *dup = "{\"choices\":[{\"token_ids\":[5],\"logprobs\":{"
                      "\"token_logprobs\":[-0.5]},\"finish_reason\":\"stop\"}],"
                      "\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":"
                      "1,\"cached_tokens\":4}}}";
    gw_completion_t f, c;
    char why[128];
    cr_assert_eq(gw_upstream_parse_fast(dup, strlen(dup), 10, &f),
                 LISA_UNSUPPORTED);
    cr_assert_eq(gw_upstream_parse(dup, strlen(dup), 10, &c, why, sizeof why),
                 LISA_OK);
    cr_assert_eq(c.cached_tokens, 4);
    gw_completion_clear(&c);
}

/* An engine's error answer, as the agent's error text shows it. */
Test(gw_upstream, error_text)
{
    static const struct {
        const char *body, *want;
    } cases[] = {
        {"{\"error\":{\"message\":\"bad key\",\"type\":\"x\"}}", "bad key"},
        {"{\"error\":\"no such model\"}", "no such model"},
        {"{\"detail\":\"Not Found\"}", "Not Found"},
        {"Unauthorized\r\n", "Unauthorized"},
        /* control bytes and non-ASCII become '?'; long text is cut */
        {"{\"error\":{\"message\":\"a\\nb\\u00e9\"}}", "a?b??"},
        {"{\"message\":\"0123456789012345678901234567890123\"}",
         "0123456789012345678901234567..."},
        /* nothing usable: JSON without a message, broken JSON, an array,
         * empty, text longer than the room */
        {"{\"choices\":[]}", ""},
        {"{\"error\":{\"message\":", ""},
        {"[1,2]", ""},
        {"", ""},
        {"a plain text answer far longer than the room", ""},
    };
    char out[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gw_upstream_error_text(cases[i].body, strlen(cases[i].body), out,
                               sizeof out);
        cr_assert_str_eq(out, cases[i].want, "%s", cases[i].body);
        cr_assert_lt(strlen(out), sizeof out);
    }
    cr_assert_str_eq(gw_upstream_error_text(NULL, 0, out, sizeof out), "");
}
