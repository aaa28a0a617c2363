/*
 * rwd_judge: the verdict rule (last CORRECT/INCORRECT word wins) and the
 * bounded behaviour against an endpoint that refuses connections. The
 * HTTP exchange with a live OpenAI-compatible server is tested by
 * tests/integration/reward/test_reward_score_cli.py.
 */
#include "rwd_judge.h"

#include <criterion/criterion.h>
#include <curl/curl.h>
#include <czmq.h>

Test(rwd_judge, usage)
{
    cr_assert_eq(rwd_judge_verdict("The candidate matches. CORRECT"), 1);
    cr_assert_eq(rwd_judge_verdict("INCORRECT"), 0);
}

Test(rwd_judge, verdicts)
{
    static const struct {
        const char *text;
        int v;
    } rows[] = {
        {"CORRECT", 1},
        {"INCORRECT", 0},
        {"Is it CORRECT? No. INCORRECT", 0},
        {"INCORRECT at first, but CORRECT", 1},
        {"**CORRECT**", 1},
        {"correct", -1},
        {"CORRECTLY", -1},
        {"UNCORRECT", -1},
        {"", -1},
        {NULL, -1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        cr_expect_eq(rwd_judge_verdict(rows[i].text), rows[i].v, "%s",
                     rows[i].text ? rows[i].text : "(null)");
}

Test(rwd_judge, unreachable_is_bounded, .timeout = 20)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rwd_judge_config_t c = {.base_url = "http://127.0.0.1:9/v1",
                            .model = "m",
                            .timeout_ms = 500,
                            .retries = 2,
                            .backoff_ms = 10};
    double r = -1;
    char *v = NULL;
    int64_t t0 = zclock_mono();
    lisa_rc_t rc = rwd_judge_score(&c, "q", "1", "1", 0, &r, &v);
    cr_assert_eq(rc, LISA_UNAVAILABLE);
    cr_assert_null(v);
    cr_assert_lt(zclock_mono() - t0, 5000);
    /* A deadline in the past stops before any call. */
    rc = rwd_judge_score(&c, "q", "1", "1", zclock_mono() - 1, &r, &v);
    cr_assert_eq(rc, LISA_TIMEOUT);
    curl_global_cleanup();
}
