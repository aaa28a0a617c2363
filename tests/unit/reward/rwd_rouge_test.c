/*
 * rwd_rouge: ROUGE-L F-measure with stemming against reference values of
 * rouge-score 0.1.2, tokenization edge cases, LCS on long inputs, bounds.
 */
#include "rwd_rouge.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double
rl(const char *t, const char *p)
{
    return rwd_rouge_l(t, strlen(t), p, strlen(p), 0, NULL);
}

Test(rwd_rouge, usage)
{
    rwd_rouge_info_t info;
    const char *ref = "the cat sat on the mat";
    const char *cand = "the cat was sitting on a mat";
    double f = rwd_rouge_l(ref, strlen(ref), cand, strlen(cand), 0, &info);
    cr_assert_float_eq(f, 0.6153846153846153, 1e-15);
    cr_assert_eq(info.lcs, 4);
    cr_assert_eq(info.target_tokens, 6);
    cr_assert_eq(info.pred_tokens, 7);
}

Test(rwd_rouge, reference_values)
{
    cr_expect_float_eq(
        rl("Police killed the gunman", "The gunman was shot down by police"),
        0.36363636363636365, 1e-15);
    cr_expect_float_eq(rl("A", "B"), 0.0, 0);
    cr_expect_float_eq(rl("running dogs", "Dogs run!"), 0.5, 1e-15);
    cr_expect_float_eq(rl("", "x"), 0.0, 0);
    cr_expect_float_eq(rl("x", ""), 0.0, 0);
    cr_expect_float_eq(rl("\xc4\xb0stanbul is big", "istanbul big"),
                       0.3333333333333333, 1e-15);
    cr_expect_float_eq(rl("same words here", "SAME, words; here!"), 1.0, 0);
}

Test(rwd_rouge, tokens)
{
    char out[256];
    const char *t = "Hello, World! It's 2023 -- running\xe2\x84\xaa";
    size_t n = rwd_rouge_tokens(t, strlen(t), out, sizeof out);
    cr_assert_str_eq(out, "hello world it s 2023 runningk");
    cr_assert_eq(n, 6);
    const char *u = "\xff\xfe caf\xc3\xa9 na\xc3\xafve";
    rwd_rouge_tokens(u, strlen(u), out, sizeof out);
    cr_assert_str_eq(out, "caf na ve");
    n = rwd_rouge_tokens("aaa bbb ccc", 11, out, 8);
    cr_assert_str_eq(out, "aaa bbb");
    cr_assert_eq(n, 2);
}

/* Bit-parallel LCS equals the quadratic DP on generated sequences that
 * cross 64-bit word boundaries. */
Test(rwd_rouge, lcs_matches_dp)
{
    srand(5);
    for (int round = 0; round < 200; round++) {
        int m = 1 + rand() % 150, n = 1 + rand() % 150, k = 2 + rand() % 6;
        static char a[2000], b[2000];
        static int ta[200], tb[200];
        size_t al = 0, bl = 0;
        for (int i = 0; i < m; i++) {
            ta[i] = rand() % k;
            al += (size_t) sprintf(a + al, "w%d ", ta[i]);
        }
        for (int j = 0; j < n; j++) {
            tb[j] = rand() % k;
            bl += (size_t) sprintf(b + bl, "w%d ", tb[j]);
        }
        static int dp[201][201];
        for (int i = 0; i <= m; i++)
            for (int j = 0; j <= n; j++)
                dp[i][j] = i == 0 || j == 0 ? 0
                           : ta[i - 1] == tb[j - 1]
                               ? dp[i - 1][j - 1] + 1
                               : (dp[i - 1][j] > dp[i][j - 1] ? dp[i - 1][j]
                                                              : dp[i][j - 1]);
        rwd_rouge_info_t info;
        (void) rwd_rouge_l(a, al, b, bl, 0, &info);
        cr_assert_eq(info.lcs, (size_t) dp[m][n], "round %d", round);
    }
}

Test(rwd_rouge, huge_inputs_bounded, .timeout = 30)
{
    size_t n = 1u << 20;
    char *a = malloc(n), *b = malloc(n);
    for (size_t i = 0; i < n; i++) {
        a[i] = i % 3 == 2 ? ' ' : (char) ('a' + (i / 3) % 26);
        b[i] = i % 2 ? ' ' : 'x';
    }
    rwd_rouge_info_t info;
    double f = rwd_rouge_l(a, n, b, n, 0, &info);
    cr_assert(info.truncated);
    cr_assert_leq(info.target_tokens, RWD_ROUGE_MAX_TOKENS);
    cr_assert_float_eq(f, 0.0, 0);
    /* A deadline already passed stops the work. */
    f = rwd_rouge_l(a, n, a, n, 1, &info);
    cr_assert(info.timed_out);
    cr_assert_float_eq(f, 0.0, 0);
    free(a);
    free(b);
}
