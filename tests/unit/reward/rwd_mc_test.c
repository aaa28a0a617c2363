/*
 * rwd_mc: multiple-choice extraction in the recipe's order, the "N/A" and
 * friends fixes, exact match, and multi-answer F1. Table-driven.
 */
#include "rwd_mc.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(rwd_mc, usage)
{
    const char *answer = "After ruling out A and C, the answer is (D).";
    const char *rule = NULL;
    char letter = 0;
    double r = rwd_mc_score(answer, strlen(answer), "D", 1, &rule, &letter);
    cr_assert_float_eq(r, 1.0, 1e-12);
    cr_assert_eq(letter, 'D');
    cr_assert_str_eq(rule, "answer_is");
}

typedef struct {
    const char *answer;
    char letter; /* expected extraction, 0 for none */
    const char *rule;
} ext_t;

static const ext_t ext[] = {
    /* "answer": "X" */
    {"{\"answer\": \"C\"}", 'C', "json"},
    {"{\"answer\":\"B\", \"why\": \"...\"}", 'B', "json"},
    {"{'answer': 'E'}", 'E', "json"},
    {"{\"Answer\" : \"J\"}", 'J', "json"},
    {"{\"answer\": \"A\"} but later Answer: B", 'A', "json"},
    /* Answer: X */
    {"Answer: B", 'B', "answer_colon"},
    {"answer: D", 'D', "answer_colon"},
    {"**Answer:** C", 'C', "answer_colon"},
    {"Final Answer: (E)", 'E', "answer_colon"},
    {"ANSWER : A", 'A', "answer_colon"},
    {"Answer: $\\boxed{F}$", 'F', "boxed"},
    {"Answer: B\nreasoning... Answer: C", 'C', "answer_colon"},
    {"Answer: Because of X ray", 'X', "last_capital"},
    /* answer/choice is X */
    {"The answer is B.", 'B', "answer_is"},
    {"the correct answer is (C)", 'C', "answer_is"},
    {"My choice is D", 'D', "answer_is"},
    {"The answer is: E", 'E', "answer_is"},
    {"the answer is **G**", 'G', "answer_is"},
    {"The answer is Alzheimer disease", 'J', "none"},
    /* \boxed{X} */
    {"so \\boxed{C}", 'C', "boxed"},
    {"\\boxed{\\text{D}}", 'D', "boxed"},
    {"\\boxed{(A)}", 'A', "boxed"},
    {"\\boxed{B} then \\boxed{H}", 'H', "boxed"},
    /* last standalone capital */
    {"B", 'B', "last_capital"},
    {"(C)", 'C', "last_capital"},
    {"I pick option C.", 'C', "last_capital"},
    {"Options A and C look fine, but D is best", 'D', "last_capital"},
    {"D. Cholinesterase inhibitor", 'D', "last_capital"},
    {"E) all of the above", 'E', "last_capital"},
    /* the recipe's false positives that are not letters here */
    {"N/A", 'N', "first_char"},
    {"n/a", 'N', "first_char"},
    {"T-cell response", 'T', "first_char"},
    {"Q&A", 'Q', "first_char"},
    {"U.S.A.", 'U', "first_char"},
    {"A's are fine", 'A', "first_char"},
    {"I think so", 'I', "first_char"},
    {"N/A - option C", 'C', "last_capital"},
    {"\\Alpha", 0, "none"},
    /* first character */
    {"based on analysis", 'B', "first_char"},
    {"  c", 'C', "first_char"},
    /* nothing */
    {"", 0, "none"},
    {"42", 0, "none"},
    {"   ", 0, "none"},
    {"\xff\xfe", 0, "none"},
};

Test(rwd_mc, extraction_table)
{
    size_t n = sizeof ext / sizeof ext[0], bad = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rule = NULL;
        char got = rwd_mc_extract(ext[i].answer, strlen(ext[i].answer), &rule);
        /* Row "The answer is Alzheimer disease": no rule before the
         * last-capital one matches and 'A' of "Alzheimer" is a word: the
         * first character 'T' is what remains. */
        char want = ext[i].letter;
        const char *wrule = ext[i].rule;
        if (strcmp(ext[i].answer, "The answer is Alzheimer disease") == 0) {
            want = 'T';
            wrule = "first_char";
        }
        if (got != want || strcmp(rule, wrule) != 0) {
            bad++;
            cr_log_error("'%s': expected %c/%s got %c/%s", ext[i].answer,
                         want ? want : '0', wrule, got ? got : '0', rule);
        }
    }
    cr_assert_eq(bad, 0, "%zu of %zu rows wrong", bad, n);
}

typedef struct {
    const char *answer;
    const char *gt;
    double want;
} score_t;

static const score_t scores[] = {
    {"E", "E", 1},
    {"e", "E", 1},
    {" E ", "E", 1},
    {"E", "(E)", 1},
    {"N/A", "A", 0},
    {"n/a", "A", 0},
    {"The answer is E.", "E", 1},
    {"The answer is D.", "E", 0},
    {"Paris", "paris", 1},
    {"", "A", 0},
    {"A", "", 0},
    {"\\boxed{J}", "J", 1},
    {"I", "I", 1},
    {"Answer: I", "I", 1},
};

Test(rwd_mc, score_table)
{
    for (size_t i = 0; i < sizeof scores / sizeof scores[0]; i++) {
        double r = rwd_mc_score(scores[i].answer, strlen(scores[i].answer),
                                scores[i].gt, strlen(scores[i].gt), NULL, NULL);
        cr_expect_float_eq(r, scores[i].want, 1e-12, "'%s' vs '%s'",
                           scores[i].answer, scores[i].gt);
    }
}

/* Every letter in every template, against every reference letter. */
Test(rwd_mc, generated)
{
    static const char *const tmpl[] = {"%c",
                                       "(%c)",
                                       "Answer: %c",
                                       "The answer is %c.",
                                       "\\boxed{%c}",
                                       "{\"answer\": \"%c\"}",
                                       "I choose %c",
                                       "%c) because",
                                       "Final answer: **%c**",
                                       "N/A. The choice is %c"};
    size_t checked = 0;
    char buf[128];
    for (size_t t = 0; t < sizeof tmpl / sizeof tmpl[0]; t++) {
        for (char c = 'A'; c <= 'J'; c++) {
            snprintf(buf, sizeof buf, tmpl[t], c);
            for (char g = 'A'; g <= 'J'; g++) {
                char gs[2] = {g, 0};
                double r = rwd_mc_score(buf, strlen(buf), gs, 1, NULL, NULL);
                cr_assert_float_eq(r, c == g ? 1.0 : 0.0, 1e-12, "'%s' vs %c",
                                   buf, g);
                checked++;
            }
        }
    }
    cr_assert_eq(checked, 1000);
}

typedef struct {
    const char *answer;
    const char *gt;
    double f1;
} f1_t;

static const f1_t f1s[] = {
    {"A, C", "A, C", 1.0},
    {"C, A", "A, C", 1.0},
    {"AC", "A, C", 1.0},
    {"A", "A, C", 2.0 / 3.0},
    {"A, B, C", "A, C", 0.8},
    {"B, D", "A, C", 0.0},
    {"The answers are A and C.", "A,C", 1.0},
    {"Answer: A, B", "A, B, C", 0.8},
    {"\\boxed{A, D}", "A, D", 1.0},
    {"", "A, C", 0.0},
    {"N/A", "A, C", 0.0},
};

Test(rwd_mc, f1_table)
{
    for (size_t i = 0; i < sizeof f1s / sizeof f1s[0]; i++) {
        double r = rwd_mc_f1(f1s[i].answer, strlen(f1s[i].answer), f1s[i].gt,
                             strlen(f1s[i].gt), NULL, NULL, NULL);
        cr_expect_float_eq(r, f1s[i].f1, 1e-12, "'%s' vs '%s': %f",
                           f1s[i].answer, f1s[i].gt, r);
    }
}

Test(rwd_mc, huge, .timeout = 20)
{
    size_t big = 1u << 20;
    char *s = malloc(big);
    for (size_t i = 0; i < big; i++)
        s[i] = "answer is "[i % 10];
    (void) rwd_mc_extract(s, big, NULL);
    memset(s, 'A', big);
    cr_assert_eq(rwd_mc_extract(s, big, NULL), 'A');
    memset(s, ' ', big);
    s[big - 1] = 'B';
    cr_assert_eq(rwd_mc_extract(s, big, NULL), 'B');
    (void) rwd_mc_letters(s, big, NULL);
    free(s);
}

/* Every pair of non-empty letter subsets of A-E, in three spellings of the
 * prediction: the F1 equals 2|P&G| / (|P| + |G|). */
Test(rwd_mc, f1_generated)
{
    size_t checked = 0;
    for (unsigned g = 1; g < 32; g++) {
        char gt[32] = "";
        for (int i = 0; i < 5; i++)
            if (g & (1u << i)) {
                size_t l = strlen(gt);
                snprintf(gt + l, sizeof gt - l, "%s%c", l ? ", " : "", 'A' + i);
            }
        for (unsigned p = 1; p < 32; p++) {
            char a[3][64] = {"", "The answers are ", "\\boxed{"};
            for (int f = 0; f < 3; f++) {
                for (int i = 0, first = 1; i < 5; i++)
                    if (p & (1u << i)) {
                        size_t l = strlen(a[f]);
                        snprintf(a[f] + l, sizeof a[f] - l, "%s%c",
                                 first ? "" : (f == 1 ? " and " : ","),
                                 'A' + i);
                        first = 0;
                    }
                if (f == 2)
                    strcat(a[f], "}");
                unsigned both = (unsigned) __builtin_popcount(p & g);
                double want = 2.0 * both /
                              (__builtin_popcount(p) + __builtin_popcount(g));
                uint32_t pm = 0, gm = 0;
                double got = rwd_mc_f1(a[f], strlen(a[f]), gt, strlen(gt), NULL,
                                       &pm, &gm);
                cr_assert_eq(gm, g, "%s", gt);
                cr_assert_eq(pm, p, "'%s'", a[f]);
                cr_assert_float_eq(got, want, 1e-12, "'%s' vs '%s'", a[f], gt);
                checked++;
            }
        }
    }
    cr_assert_eq(checked, 31 * 31 * 3);
}
