/*
 * lisa_tojson tests. The first test is the usage example; the expected
 * strings are what Python's json.dumps(ensure_ascii=False) prints.
 */
#include "lisa/lisa_mem.h"
#include "lisa/lisa_tojson.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

static void
s_check(const char *in, const char *want)
{
    json_error_t err;
    json_t *v = json_loads(in, JSON_DECODE_ANY, &err);
    cr_assert_not_null(v, "%s", err.text);
    char *out = NULL;
    cr_assert_eq(lisa_tojson(v, 1 << 20, &out, NULL), LISA_OK);
    cr_assert_str_eq(out, want);
    lisa_free(&out);
    json_decref(v);
}

Test(lisa_tojson, usage)
{
    json_t *v = json_pack("{s:s, s:[i, f, b, n]}", "name", "caf\xc3\xa9 <a/>",
                          "xs", 1, 0.5, 1);
    char *out = NULL;
    size_t len = 0;
    cr_assert_eq(lisa_tojson(v, 1024, &out, &len), LISA_OK);
    cr_assert_str_eq(out,
                     "{\"name\": \"caf\xc3\xa9 <a/>\", \"xs\": [1, 0.5, true, "
                     "null]}");
    cr_assert_eq(len, strlen(out));
    lisa_free(&out);
    cr_assert_eq(lisa_tojson(v, 10, &out, &len), LISA_TOOLARGE);
    cr_assert_null(out);
    json_decref(v);
}

Test(lisa_tojson, python_formats)
{
    s_check("{}", "{}");
    s_check("[]", "[]");
    s_check("\"\\u0001\\n\\t\\\"\\\\\\/\\u007f\\u2028\"",
            "\"\\u0001\\n\\t\\\"\\\\/\x7f\xe2\x80\xa8\"");
    s_check("[1.0, 100.0, 1e16, 1e15, 0.0001, 0.00001, -0.0, 1.5e-7, "
            "123456789012345678.0, 0.1, 3.14159, 2.5e300, -7]",
            "[1.0, 100.0, 1e+16, 1000000000000000.0, 0.0001, 1e-05, -0.0, "
            "1.5e-07, 1.2345678901234568e+17, 0.1, 3.14159, 2.5e+300, -7]");
    s_check("{\"b\": 1, \"a\": {\"z\": [], \"y\": null}}",
            "{\"b\": 1, \"a\": {\"z\": [], \"y\": null}}");
}

Test(lisa_tojson, float_repr)
{
    char buf[32];
    cr_assert_eq(lisa_tojson_float(0.3, buf), 3);
    cr_assert_str_eq(buf, "0.3");
    lisa_tojson_float(1.0 / 3.0, buf);
    cr_assert_str_eq(buf, "0.3333333333333333");
    lisa_tojson_float(9007199254740993.0, buf);
    cr_assert_str_eq(buf, "9007199254740992.0");
    lisa_tojson_float(5e-324, buf);
    cr_assert_str_eq(buf, "5e-324");
    /* zeros, exponents past 15, and the longest text there is */
    cr_assert_eq(lisa_tojson_float(0.0, buf), 3);
    cr_assert_str_eq(buf, "0.0");
    cr_assert_eq(lisa_tojson_float(-0.0, buf), 4);
    cr_assert_str_eq(buf, "-0.0");
    lisa_tojson_float(1e16, buf);
    cr_assert_str_eq(buf, "1e+16");
    lisa_tojson_float(1.7976931348623157e308, buf);
    cr_assert_str_eq(buf, "1.7976931348623157e+308");
    cr_assert_eq(lisa_tojson_float(-2.2250738585072014e-308, buf), 24);
    cr_assert_str_eq(buf, "-2.2250738585072014e-308");
    lisa_tojson_float(0.0001, buf);
    cr_assert_str_eq(buf, "0.0001");
    lisa_tojson_float(0.00001, buf);
    cr_assert_str_eq(buf, "1e-05");
}

Test(lisa_tojson, too_deep)
{
    json_t *v = json_array();
    json_t *cur = v;
    for (int i = 0; i < LISA_TOJSON_MAX_DEPTH + 2; i++) {
        json_t *inner = json_array();
        json_array_append_new(cur, inner);
        cur = inner;
    }
    char *out = NULL;
    cr_assert_eq(lisa_tojson(v, 1 << 20, &out, NULL), LISA_INVALID);
    json_decref(v);
    cr_assert_eq(lisa_tojson(NULL, 10, &out, NULL), LISA_INVALID);
}
