/*
 * rwd_expr: values of LaTeX and plain expressions, free variables, bounds
 * on depth, size and literals.
 */
#include "rwd_expr.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double
val(const char *s)
{
    rwd_expr_t *e = rwd_expr_parse(s, strlen(s));
    cr_assert_not_null(e, "parse '%s'", s);
    double v = rwd_expr_eval(e, NULL);
    rwd_expr_destroy(&e);
    return v;
}

static bool
parses(const char *s)
{
    rwd_expr_t *e = rwd_expr_parse(s, strlen(s));
    bool ok = e != NULL;
    rwd_expr_destroy(&e);
    return ok;
}

Test(rwd_expr, usage)
{
    const char *s = "\\frac{x^2-1}{x-1}";
    rwd_expr_t *e = rwd_expr_parse(s, strlen(s));
    cr_assert_not_null(e);
    cr_assert_eq(rwd_expr_nvars(e), 1);
    cr_assert_str_eq(rwd_expr_var(e, 0), "x");
    double x = 3.0;
    cr_assert_float_eq(rwd_expr_eval(e, &x), 4.0, 1e-12);
    rwd_expr_t *f = rwd_expr_parse("x+1", 3);
    cr_assert(rwd_expr_equal(e, f, 6));
    rwd_expr_destroy(&e);
    rwd_expr_destroy(&f);
    cr_assert_null(e);
}

static const struct {
    const char *s;
    double v;
} vals[] = {
    {"1+2*3", 7},
    {"(1+2)*3", 9},
    {"2^3^2", 512},
    {"-2^2", -4},
    {"2^{-1}", 0.5},
    {"\\frac{1}{4}", 0.25},
    {"\\dfrac{3}{4}", 0.75},
    {"\\frac12", 0.5},
    {"\\frac{\\frac{1}{2}}{2}", 0.25},
    {"\\sqrt{16}", 4},
    {"\\sqrt[3]{27}", 3},
    {"sqrt(2)^2", 2},
    {"2\\sqrt{2}\\cdot\\sqrt{2}", 4},
    {"3!", 6},
    {"\\pi", 3.14159265358979323846},
    {"2\\pi", 6.28318530717958647692},
    {"\\sin(\\pi/2)", 1},
    {"\\cos 0", 1},
    {"\\ln e", 1},
    {"\\log_2 8", 3},
    {"\\exp(0)", 1},
    {"\\left(1+2\\right)\\times 3", 9},
    {"1.5\\times10^{3}", 1500},
    {"1.5e3", 1500},
    {"2E-2", 0.02},
    {"3 \\div 4", 0.75},
    {"2\\frac{1}{2}", 2.5},
    {"-2\\frac{1}{2}", -2.5},
    {"2 1/2", 2.5},
    {"\xcf\x80", 3.14159265358979323846},
    {"2\xc3\x97"
     "3",
     6},
    {"\xe2\x88\x9a"
     "9",
     3},
    {"1\xe2\x88\x92"
     "3",
     -2},
    {"\\,1\\;+\\!1", 2},
    {"{{{{1}}}}", 1},
    {"[2+3]", 5},
    {"0.1+0.2", 0.3},
    {"(-8)^{1/3}", -2},
};

Test(rwd_expr, values)
{
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        cr_expect_float_eq(val(vals[i].s), vals[i].v, 1e-9, "%s", vals[i].s);
}

Test(rwd_expr, undefined_values)
{
    cr_assert(isnan(val("1/0")));
    cr_assert(isnan(val("\\sqrt{-1}")));
    cr_assert(isnan(val("\\ln(0)")));
    cr_assert(isnan(val("(-1)^{0.5}")));
    cr_assert(isnan(val("(0.5)!")));
    cr_assert(isinf(val("10^{10^{10}}")));
    cr_assert(isinf(val("\\infty")));
}

Test(rwd_expr, not_expressions)
{
    static const char *const bad[] = {
        "",          "Paris", "the answer", "1+",      "(1+2",  "1+2)",
        "\\frac{1}", "x=1",   "1,2",        "\\{1\\}", "a < b", "\\unknown",
        "1 2",       "@",     "\\frac",     "^2",      "2^",    "\\sqrt",
        "()",        "{}",    "1..2",       "x__1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_not(parses(bad[i]), "'%s' parsed", bad[i]);
}

Test(rwd_expr, variables)
{
    rwd_expr_t *e = rwd_expr_parse("x_1 + x_{2} + \\theta + ab", 25);
    cr_assert_not_null(e);
    cr_assert_eq(rwd_expr_nvars(e), 5);
    double v[5] = {1, 2, 3, 4, 5};
    cr_assert_float_eq(rwd_expr_eval(e, v), 1 + 2 + 3 + 4 * 5, 1e-12);
    rwd_expr_destroy(&e);
    /* More than RWD_EXPR_MAX_VARS distinct variables. */
    cr_assert_not(parses("a+b+c+d+f+g+h+j+k+l"));
}

Test(rwd_expr, integers)
{
    char d[64];
    bool neg;
    rwd_expr_t *e = rwd_expr_parse("-007", 4);
    cr_assert(rwd_expr_integer(e, d, sizeof d, &neg));
    cr_assert_str_eq(d, "7");
    cr_assert(neg);
    rwd_expr_destroy(&e);
    e = rwd_expr_parse("7.0", 3);
    cr_assert_not(rwd_expr_integer(e, d, sizeof d, &neg));
    cr_assert(rwd_expr_inexact(e));
    rwd_expr_destroy(&e);
}

Test(rwd_expr, bounds, .timeout = 10)
{
    static char s[RWD_EXPR_MAX_LEN + 2];
    memset(s, '(', sizeof s);
    cr_assert_null(rwd_expr_parse(s, sizeof s)); /* too long */
    size_t d = 200;
    memset(s, '(', d);
    s[d] = '1';
    memset(s + d + 1, ')', d);
    cr_assert_null(rwd_expr_parse(s, 2 * d + 1)); /* too deep */
    memset(s, '-', 1000);
    s[1000] = '1';
    cr_assert_null(rwd_expr_parse(s, 1001)); /* unary chain too deep */
    for (size_t i = 0; i < 4000; i += 2) {
        s[i] = '1';
        s[i + 1] = '+';
    }
    s[3999] = '1';
    cr_assert_null(rwd_expr_parse(s, 4000)); /* too many nodes */
    memset(s, '9', 4000);
    rwd_expr_t *e = rwd_expr_parse(s, 4000);
    cr_assert_not_null(e);
    cr_assert(isinf(rwd_expr_eval(e, NULL)) || rwd_expr_eval(e, NULL) > 1e300);
    rwd_expr_destroy(&e);
}
