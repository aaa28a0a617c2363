/*
 * gw_json: the quick reader gives jansson's values, and gives up (NULL)
 * on whatever it does not take on, where jansson then decides.
 */
#include "gw_json.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Both readers on the same bytes: equal values, keys in the same order. */
static void
s_same(const char *text, size_t flags)
{
    json_t *f = gw_json_load(text, strlen(text), flags);
    cr_assert_not_null(f, "gave up on %s", text);
    json_t *j = json_loadb(text, strlen(text), flags, NULL);
    cr_assert_not_null(j, "%s", text);
    cr_assert(json_equal(f, j), "%s", text);
    size_t df = JSON_PRESERVE_ORDER | JSON_ENCODE_ANY | JSON_COMPACT;
    char *a = json_dumps(f, df), *b = json_dumps(j, df);
    cr_assert_str_eq(a, b);
    free(a);
    free(b);
    json_decref(f);
    json_decref(j);
}

/* Usage: read a chat message; NULL means "ask json_loadb". */
Test(gw_json, usage)
{
    const char *m = "{\"role\":\"tool\",\"tool_call_id\":\"call_1\","
                    "\"content\":\"total 8\\nREADME.md\"}";
    json_t *v = gw_json_load(m, strlen(m), JSON_REJECT_DUPLICATES);
    cr_assert_not_null(v);
    cr_assert_str_eq(json_string_value(json_object_get(v, "content")),
                     "total 8\nREADME.md");
    json_decref(v);
    json_error_t e;
    v = gw_json_loadb("{\"a\":1,}", 8, 0, &e); /* jansson's own error */
    cr_assert_null(v);
    cr_assert_str_neq(e.text, "");
}

Test(gw_json, same_values_as_jansson)
{
    s_same("{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
           "\"c\",\"type\":\"function\",\"function\":{\"name\":\"f\","
           "\"arguments\":\"{\\\"x\\\": 1}\"}}]}",
           JSON_REJECT_DUPLICATES);
    s_same(" {\"z\":1,\"a\":[true,false,null,-0,0,12,-345678901234567890],"
           "\"m\":{}} ",
           0);
    s_same("{\"r\":[1.0,-2.5e3,1E-2,0.1,123456789.123456789,1e-400]}", 0);
    s_same("{\"s\":\"\\u00e9\\u20ac\\ud83d\\ude00 \\/\\b\\f\\r\\t\\\"\\\\\"}",
           0);
    s_same("{\"\xc3\xa9t\xc3\xa9\":\"\xe2\x82\xac \xf0\x9f\x98\x80 "
           "long enough to take the sixteen-byte path\"}",
           0);
    s_same("{\"k\\n\":\"v\",\"k\":\"\\u0041\"}", JSON_REJECT_DUPLICATES);
    s_same("[[[[]]],{},[{}]]", 0);
    s_same("\"a string\"", JSON_DECODE_ANY);
    s_same("42", JSON_DECODE_ANY);
    s_same("1.5", JSON_DECODE_ANY);
    s_same("null", JSON_DECODE_ANY);
}

Test(gw_json, gives_up_where_jansson_decides)
{
    static const char *const give_up[] = {
        "",
        "  ",
        "{\"a\":1,\"a\":2}",           /* duplicate */
        "{\"a\":\"\\u0000\"}",         /* escaped NUL */
        "{\"a\":\"\\udc00\"}",         /* lone low surrogate */
        "{\"a\":\"\\ud800x\"}",        /* lone high surrogate */
        "{\"a\":\"\xc3\"}",            /* bad UTF-8 */
        "{\"a\":\"\xed\xa0\x80\"}",    /* encoded surrogate */
        "{\"a\":\"\x01\"}",            /* control character */
        "{\"a\":1234567890123456789}", /* might not fit */
        "{\"a\":1e400}",               /* overflows */
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":.5}",
        "{\"a\":tru}",
        "{\"a\":1,}",
        "[1,]",
        "{\"a\" 1}",
        "{} x",
        "\"top\"", /* a scalar without JSON_DECODE_ANY */
        "{\"a\":\"\\x\"}",
    };
    for (size_t i = 0; i < sizeof give_up / sizeof give_up[0]; i++)
        cr_assert_null(gw_json_load(give_up[i], strlen(give_up[i]), 0), "%s",
                       give_up[i]);
    char deep[300];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    deep[200] = '\0';
    cr_assert_null(gw_json_load(deep, 200, 0));
    json_t *j = gw_json_loadb(deep, 200, 0, NULL); /* jansson takes it */
    cr_assert_not_null(j);
    json_decref(j);
}

/* The writer gives jansson's bytes, or NULL where jansson decides. */
Test(gw_json, dump_writes_janssons_bytes)
{
    const char *text = "{\"z\":{\"b\":[1,-2,\"x\\n\\u0001\\\"\"],\"a\":null},"
                       "\"\\u00e9\":true,\"a\":[],\"m\":{},\"q\":false}";
    json_t *v = json_loads(text, 0, NULL);
    cr_assert_not_null(v);
    static const size_t fl[] = {JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY,
                                JSON_PRESERVE_ORDER | JSON_ENCODE_ANY,
                                JSON_PRESERVE_ORDER, JSON_COMPACT,
                                JSON_SORT_KEYS};
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) {
        char *w = gw_json_dump(v, fl[i]), *r = json_dumps(v, fl[i]);
        cr_assert_not_null(w);
        cr_assert_str_eq(w, r);
        free(w);
        free(r);
    }
    json_t *s = json_string("plain");
    cr_assert_null(gw_json_dump(s, JSON_COMPACT)); /* needs ENCODE_ANY */
    char *w = gw_json_dump(s, JSON_COMPACT | JSON_ENCODE_ANY);
    cr_assert_str_eq(w, "\"plain\"");
    free(w);
    json_decref(s);
    json_t *r = json_pack("{s:f}", "t", 0.5); /* reals: jansson writes */
    cr_assert_null(gw_json_dump(r, JSON_COMPACT));
    w = gw_json_dumps(r, JSON_COMPACT);
    cr_assert_str_eq(w, "{\"t\":0.5}");
    free(w);
    json_decref(r);
    cr_assert_null(gw_json_dump(v, JSON_INDENT(2)));
    json_decref(v);
}
