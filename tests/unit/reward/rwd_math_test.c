/*
 * rwd_math: final-answer extraction and mathematical equivalence, driven by
 * tables (equal and unequal pairs per family, adversarial inputs), plus
 * generated families and bounds on pathological input.
 */
#include "rwd_math.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool
eq(const char *g, const char *p)
{
    return rwd_math_equal(g, strlen(g), p, strlen(p), NULL);
}

Test(rwd_math, usage)
{
    const char *answer =
        "First compute ... so the result is \\boxed{\\frac{1}{2}}.";
    size_t off, n;
    cr_assert(rwd_math_last_boxed(answer, strlen(answer), &off, &n));
    cr_assert_eq(n, strlen("\\frac{1}{2}"));
    rwd_math_why_t why;
    cr_assert(rwd_math_equal("0.5", 3, answer + off, n, &why));
    cr_assert_str_eq(why.how, "number");
}

typedef struct {
    const char *gold;
    const char *pred;
    bool equal;
} row_t;

static const row_t rows[] = {
    /* integers */
    {"70", "70", true},
    {"70", "070", true},
    {"70", "71", false},
    {"-3", "-3", true},
    {"-3", "3", false},
    {"0", "-0", true},
    {"117", "117.0", true},
    {"117", "117.", true},
    {"12345678901234567890", "12345678901234567890", true},
    {"12345678901234567890", "12345678901234567891", false},
    {"1000000001", "1000000000", false},
    /* thousands separators */
    {"1000", "1,000", true},
    {"1000000", "1,000,000", true},
    {"1000000", "1{,}000{,}000", true},
    {"1234567", "1\\,234\\,567", true},
    {"1234", "1,234", true},
    {"1234.5", "1,234.5", true},
    {"1,2", "2,1", true},
    {"\\{417,409,8\\}", "\\{8,417,409\\}", true},
    {"417,409,8", "8, 409, 417", true},
    {"417,409", "417409", true},
    /* decimals and fractions */
    {"0.5", "\\frac{1}{2}", true},
    {"0.5", "1/2", true},
    {"\\frac{1}{2}", "\\dfrac{1}{2}", true},
    {"\\frac{1}{2}", "\\tfrac{1}{2}", true},
    {"\\frac12", "0.5", true},
    {"\\frac{3}{4}", "\\frac34", true},
    {"\\frac{2}{4}", "\\frac{1}{2}", true},
    {"\\frac{1}{3}", "0.333333", true},
    {"\\frac{1}{3}", "0.33", false},
    {"\\frac{1}{3}", "0.3333", false},
    {"\\frac{2}{3}", "0.666667", true},
    {"2.2", "2.20", true},
    {"2.2", "2.21", false},
    {"10", "10.0", true},
    {".5", "0.5", true},
    {"-\\frac{1}{2}", "-0.5", true},
    {"\\frac{-1}{2}", "-0.5", true},
    {"-\\frac{1}{2}", "0.5", false},
    {"\\frac{1}{2}", "\\frac{1}{3}", false},
    /* mixed numbers */
    {"2\\frac{1}{2}", "2.5", true},
    {"2\\frac{1}{2}", "5/2", true},
    {"2 1/2", "2.5", true},
    {"3\\frac{1}{4}", "\\frac{13}{4}", true},
    {"2\\frac{1}{2}", "1", false},
    /* percentages */
    {"50\\%", "50", true},
    {"50\\%", "0.5", true},
    {"0.5", "50\\%", true},
    {"50", "50%", true},
    {"50\\%", "0.51", false},
    {"12.5\\%", "0.125", true},
    /* roots and pi */
    {"3\\sqrt{2}", "\\sqrt{18}", true},
    {"3\\sqrt{2}", "\\sqrt{19}", false},
    {"\\frac{\\sqrt{3}}{2}", "\\sqrt{3}/2", true},
    {"\\sqrt[3]{8}", "2", true},
    {"\\sqrt[3]{-8}", "-2", true},
    {"2\\sqrt{2}", "\\sqrt{8}", true},
    {"\\sqrt{2}", "1.414214", true},
    {"\\sqrt{2}", "1.41", false},
    {"\\pi/2", "\\frac{\\pi}{2}", true},
    {"\\pi/2", "1.570796", true},
    {"\\pi/2", "1.5708", false},
    {"2\\pi", "\\pi \\cdot 2", true},
    {"2\\pi", "2 \\times \\pi", true},
    {"\\pi", "3", false},
    {"e", "2.718282", true},
    {"e^2", "\\exp(2)", true},
    /* scientific notation */
    {"1.5\\times10^{3}", "1500", true},
    {"1.5 \\times 10^3", "1500", true},
    {"1500", "1.5e3", true},
    {"0.00015", "1.5\\times 10^{-4}", true},
    {"1.5\\times10^{3}", "1600", false},
    {"6.02\\times10^{23}", "6.02e23", true},
    /* units, text wrappers, degrees */
    {"5", "5 \\text{ cm}", true},
    {"5", "5 cm", true},
    {"5", "5\\text{cm}", true},
    {"2.2", "2.2\\,\\mathrm{keV}", true},
    {"2.2", "2.2 keV", true},
    {"2.2", "2.3 keV", false},
    {"9.8", "9.8 \\text{m/s}^2", true},
    {"30", "30^\\circ", true},
    {"30^\\circ", "30", true},
    {"30", "30^{\\circ}", true},
    {"30", "30°", true},
    {"30", "31^\\circ", false},
    {"\\$5", "5", true},
    {"\\text{Paris}", "Paris", true},
    {"\\text{Paris}", "paris", true},
    {"\\text{Paris}", "London", false},
    {"\\textbf{12}", "12", true},
    {"\\mathrm{12}", "12", true},
    /* sets, tuples, intervals */
    {"\\{1,2,3\\}", "\\{3,2,1\\}", true},
    {"\\{1,2,3\\}", "\\{1,2\\}", false},
    {"\\{1,2,3\\}", "\\{1,2,4\\}", false},
    {"\\{1,2,3\\}", "1, 2, 3", true},
    {"1,2,3", "3, 1, 2", true},
    {"\\{\\frac{1}{2}, 2\\}", "\\{2, 0.5\\}", true},
    {"(1,2)", "(1, 2)", true},
    {"(1,2)", "(2,1)", false},
    {"(1,2)", "[1,2]", false},
    {"[1,2)", "[1,2)", true},
    {"[1,2)", "[1,2]", false},
    {"(-\\infty, 3]", "(-\\infty,3]", true},
    {"(-\\infty, 3]", "(-\\infty,4]", false},
    {"(0,1) \\cup (2,3)", "(2,3)\\cup(0,1)", true},
    {"(0,1) \\cup (2,3)", "(0,1)\\cup(2,4)", false},
    {"\\left(1, 2\\right)", "(1,2)", true},
    {"x=1, y=2", "1, 2", true},
    /* symbolic expressions */
    {"(x+1)^2", "x^2+2x+1", true},
    {"(x+1)^2", "x^2+x+1", false},
    {"x^2", "x*x", true},
    {"x^2", "x \\cdot x", true},
    {"\\frac{x}{2}", "x/2", true},
    {"\\frac{x}{2}", "0.5x", true},
    {"2x+3y", "3y+2x", true},
    {"2x+3y", "3x+2y", false},
    {"\\sin x", "\\sin(x)", true},
    {"\\sin^2 x + \\cos^2 x", "1", true},
    {"\\ln(e^x)", "x", true},
    {"\\frac{1}{x-1}", "\\frac{-1}{1-x}", true},
    {"\\sqrt{x^2}", "x", false},
    {"a+b", "b+a", true},
    {"x_1+x_2", "x_2+x_1", true},
    {"\\theta", "\\theta", true},
    {"2\\theta", "\\theta+\\theta", true},
    {"n(n+1)/2", "\\frac{n^2+n}{2}", true},
    {"\\binom{5}{2}", "10", false},
    {"5!", "120", true},
    {"3^{2^{2}}", "81", true},
    {"2^-1", "0.5", true},
    {"\\log_2 8", "3", true},
    /* assignments */
    {"5", "x = 5", true},
    {"x=5", "5", true},
    {"x = 5", "x = 6", false},
    {"5", "a \\approx 5", true},
    /* letters */
    {"B", "B", true},
    {"B", "\\text{B}", true},
    {"B", "(B)", true},
    {"B", "\\textbf{(B)}", true},
    {"B", "C", false},
    {"I", "\\text{I}", true},
    /* infinity */
    {"\\infty", "\\infty", true},
    {"\\infty", "-\\infty", false},
    {"\\infty", "inf", true},
    /* delimiters and noise */
    {"70", "$70$", true},
    {"70", "\\(70\\)", true},
    {"70", "\\[70\\]", true},
    {"70", "70.", true},
    {"70", " 70 ", true},
    {"70", "\\displaystyle 70", true},
    {"\\boxed{70}", "70", true},
    {"\\boxed{\\boxed{70}}", "70", true},
    /* adversarial: unparseable, empty, words */
    {"70", "", false},
    {"", "70", false},
    {"70", "seventy", false},
    {"70", "The answer is 70", false},
    {"70", "{", false},
    {"70", "}}}}", false},
    {"70", "\\frac{70}", false},
    {"70", "70 / 0", false},
    {"1/0", "2/0", false},
    {"0/0", "0/0", true},
    {"70", "\\unknowncommand{70}", false},
    {"x", "y", false},
    {"Paris", "sirap", false},
    {"abc", "cba", false},
};

Test(rwd_math, table)
{
    size_t n = sizeof rows / sizeof rows[0], bad = 0;
    for (size_t i = 0; i < n; i++) {
        bool got = eq(rows[i].gold, rows[i].pred);
        if (got != rows[i].equal) {
            bad++;
            cr_log_error("gold '%s' pred '%s': expected %d got %d",
                         rows[i].gold, rows[i].pred, rows[i].equal, got);
        }
    }
    cr_assert_eq(bad, 0, "%zu of %zu rows wrong", bad, n);
}

/* Equality is symmetric on every row (percent rows aside: asymmetric by
 * design only in which side carries the sign, and both orders hold). */
Test(rwd_math, symmetric)
{
    size_t n = sizeof rows / sizeof rows[0];
    for (size_t i = 0; i < n; i++) {
        if (!*rows[i].gold || !*rows[i].pred || strstr(rows[i].gold, "boxed"))
            continue;
        bool ab = eq(rows[i].gold, rows[i].pred);
        bool ba = eq(rows[i].pred, rows[i].gold);
        if (strchr(rows[i].gold, '=') || strchr(rows[i].pred, '=') ||
            strstr(rows[i].pred, "approx"))
            continue;
        cr_expect_eq(ab, ba, "asymmetric: '%s' vs '%s'", rows[i].gold,
                     rows[i].pred);
    }
}

Test(rwd_math, generated_families)
{
    char g[128], p[128];
    size_t checked = 0;
    for (int a = 1; a <= 60; a++) {
        for (int b = 1; b <= 12; b++) {
            snprintf(g, sizeof g, "\\frac{%d}{%d}", a, b);
            snprintf(p, sizeof p, "%d/%d", 3 * a, 3 * b);
            cr_assert(eq(g, p), "%s vs %s", g, p);
            snprintf(p, sizeof p, "\\dfrac{%d}{%d}", a + 1, b);
            cr_assert(!eq(g, p), "%s vs %s", g, p);
            snprintf(p, sizeof p, "%.6f", (double) a / b);
            cr_assert(eq(g, p), "%s vs %s", g, p);
            checked += 3;
        }
        snprintf(g, sizeof g, "%d", a * 1000 + 7);
        snprintf(p, sizeof p, "%d,%03d", a, 7);
        cr_assert(eq(g, p), "%s vs %s", g, p);
        snprintf(g, sizeof g, "%d^\\circ", a);
        snprintf(p, sizeof p, "%d", a);
        cr_assert(eq(g, p));
        snprintf(g, sizeof g, "(x+%d)^2", a);
        snprintf(p, sizeof p, "x^2+%dx+%d", 2 * a, a * a);
        cr_assert(eq(g, p), "%s vs %s", g, p);
        snprintf(p, sizeof p, "x^2+%dx+%d", 2 * a, a * a + 1);
        cr_assert(!eq(g, p), "%s vs %s", g, p);
        checked += 5;
    }
    cr_assert_gt(checked, 2000);
}

Test(rwd_math, last_boxed)
{
    size_t off, n;
    const char *s = "\\boxed{1} then \\boxed{\\frac{a}{b}} end";
    cr_assert(rwd_math_last_boxed(s, strlen(s), &off, &n));
    cr_assert_eq(strncmp(s + off, "\\frac{a}{b}", n), 0);
    s = "text \\boxed{unbalanced";
    cr_assert_not(rwd_math_last_boxed(s, strlen(s), &off, &n));
    s = "no box here";
    cr_assert_not(rwd_math_last_boxed(s, strlen(s), &off, &n));
    s = "\\boxed{{nested}{braces}}";
    cr_assert(rwd_math_last_boxed(s, strlen(s), &off, &n));
    cr_assert_eq(n, strlen("{nested}{braces}"));
    s = "\\fbox{7}";
    cr_assert(rwd_math_last_boxed(s, strlen(s), &off, &n));
    cr_assert_eq(s[off], '7');
    s = "$\\boxed 5$";
    cr_assert(rwd_math_last_boxed(s, strlen(s), &off, &n));
    cr_assert_eq(n, 1);
    s = "\\boxed{}";
    cr_assert(rwd_math_last_boxed(s, strlen(s), &off, &n));
    cr_assert_eq(n, 0);
}

/* Pathological inputs finish (bounded work) and compare as unequal. */
Test(rwd_math, pathological, .timeout = 20)
{
    size_t big = 1u << 20;
    char *s = malloc(big + 1);
    memset(s, '{', big);
    s[big] = '\0';
    cr_assert_not(rwd_math_equal("1", 1, s, big, NULL));
    size_t off, n;
    cr_assert_not(rwd_math_last_boxed(s, big, &off, &n));
    memset(s, '}', big);
    cr_assert_not(rwd_math_equal("1", 1, s, big, NULL));
    /* Deep nesting within the length bound. */
    size_t d = 3000;
    for (size_t i = 0; i < d; i++)
        s[i] = '(';
    s[d] = '1';
    for (size_t i = 0; i < d; i++)
        s[d + 1 + i] = ')';
    cr_assert_not(rwd_math_equal("1", 1, s, 2 * d + 1, NULL));
    /* Many \boxed{ openings. */
    for (size_t i = 0; i + 7 <= big; i += 7)
        memcpy(s + i, "\\boxed{", 7);
    cr_assert_not(rwd_math_last_boxed(s, big - big % 7, &off, &n));
    /* Huge exponent and huge literal. */
    cr_assert_not(eq("1", "10^{10^{10^{10}}}"));
    cr_assert(eq("10^{999}", "10^{999}"));
    memset(s, '9', 4000);
    s[4000] = '\0';
    cr_assert(eq(s, s));
    s[3999] = '8';
    cr_assert_not(eq(s, "9"));
    /* Invalid UTF-8 and control bytes. */
    cr_assert_not(eq("1", "\xff\xfe\x80"));
    cr_assert(eq("\xff", "\xff"));
    free(s);
}

Test(rwd_math, parses)
{
    cr_assert(rwd_math_parses("\\frac{1}{2}", 11));
    cr_assert(rwd_math_parses("\\{1,2\\}", 7));
    cr_assert(rwd_math_parses("5 cm", 4));
    cr_assert_not(rwd_math_parses("Paris", 5));
    cr_assert_not(rwd_math_parses("", 0));
}
