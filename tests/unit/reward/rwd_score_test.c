/*
 * rwd_score: the routing table (every prefix, unknown sources), empty
 * answers, bounds, qa_type routing and the explanation JSON.
 */
#include "rwd_score.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static rwd_scorer_t *S;

static void
setup(void)
{
    S = rwd_scorer_new(NULL);
}

static void
teardown(void)
{
    rwd_scorer_destroy(&S);
}

static lisa_rc_t
run(const char *ds, const char *ans, const char *gt, const char *extra,
    rwd_result_t *r)
{
    rwd_input_t in = {.data_source = ds,
                      .answer = ans,
                      .answer_len = ans ? strlen(ans) : 0,
                      .ground_truth = gt,
                      .truth_len = strlen(gt),
                      .extra_info_json = extra};
    return rwd_score(S, &in, r);
}

Test(rwd_score, usage, .init = setup, .fini = teardown)
{
    rwd_scorer_t *s = rwd_scorer_new(NULL);
    rwd_input_t in = {.data_source = "math_mini",
                      .answer = "so \\boxed{70}",
                      .answer_len = 13,
                      .ground_truth = "70",
                      .truth_len = 2};
    rwd_result_t r;
    cr_assert_eq(rwd_score(s, &in, &r), LISA_OK);
    cr_assert_float_eq(r.reward, 1.0, 0);
    cr_assert_str_eq(r.rule, "math_equiv");
    cr_assert_str_eq(r.extracted, "70");
    json_t *j = json_loads(r.explanation_json, 0, NULL);
    cr_assert_not_null(j);
    cr_assert_str_eq(json_string_value(json_object_get(j, "source")), "boxed");
    json_decref(j);
    rwd_result_clear(&r);
    rwd_scorer_destroy(&s);
    cr_assert_null(s);
}

static const struct {
    const char *ds;
    const char *route;
} routes[] = {
    {"math", "math"},
    {"math_mini", "math"},
    {"physics_mini", "math"},
    {"chem", "mc"},
    {"chem_mini", "mc"},
    {"biomed_mini", "mc"},
    {"instruct_pretrain", "qa"},
    {"long_context_mini", "qa"},
    {"instruct_follow_mini", "ifeval"},
    {"instruct_follow", "ifeval"},
    {"instruct_follo", NULL},
    {"", NULL},
    {"Math", NULL},
    {"mat", NULL},
    {"unknown", NULL},
};

Test(rwd_score, routing_table, .init = setup, .fini = teardown)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const char *got = rwd_score_route(routes[i].ds);
        if (!routes[i].route) {
            cr_expect_null(got, "%s", routes[i].ds);
            rwd_result_t r;
            cr_expect_eq(run(routes[i].ds, "1", "1", NULL, &r), LISA_INVALID);
            cr_expect_not_null(strstr(r.error, "unknown data source"));
            rwd_result_clear(&r);
        } else {
            cr_expect_str_eq(got, routes[i].route, "%s", routes[i].ds);
        }
    }
}

Test(rwd_score, empty_answers_score_zero, .init = setup, .fini = teardown)
{
    static const char *const ds[] = {
        "math",   "physics",           "chem",
        "biomed", "instruct_pretrain", "long_context"};
    static const char *const empties[] = {"", " ", "\n\t  \r\n", NULL};
    for (size_t i = 0; i < 6; i++) {
        for (size_t k = 0; k < 4; k++) {
            rwd_result_t r;
            cr_assert_eq(run(ds[i], empties[k], "A", NULL, &r), LISA_OK);
            cr_expect_float_eq(r.reward, 0.0, 0);
            cr_expect_str_eq(r.rule, "empty");
            rwd_result_clear(&r);
        }
    }
}

Test(rwd_score, bounds, .init = setup, .fini = teardown)
{
    size_t n = RWD_MAX_ANSWER + 1;
    char *big = malloc(n + 1);
    memset(big, '1', n);
    big[n] = '\0';
    rwd_result_t r;
    cr_assert_eq(run("math", big, "1", NULL, &r), LISA_TOOLARGE);
    rwd_result_clear(&r);
    big[RWD_MAX_TRUTH + 1] = '\0';
    cr_assert_eq(run("math", "1", big, NULL, &r), LISA_TOOLARGE);
    rwd_result_clear(&r);
    free(big);
}

Test(rwd_score, qa_types, .init = setup, .fini = teardown)
{
    rwd_result_t r;
    cr_assert_eq(run("instruct_pretrain", "The answer is C", "C",
                     "{\"qa_type\": \"multiple choice\"}", &r),
                 LISA_OK);
    cr_expect_str_eq(r.rule, "mc_letter");
    cr_expect_float_eq(r.reward, 1.0, 0);
    rwd_result_clear(&r);
    cr_assert_eq(run("instruct_pretrain", "A and C", "A,B,C",
                     "{\"qa_type\": \"Multiple Choice\"}", &r),
                 LISA_OK);
    cr_expect_str_eq(r.rule, "mc_f1");
    cr_expect_float_eq(r.reward, 0.8, 1e-12);
    rwd_result_clear(&r);
    cr_assert_eq(run("long_context", "\\boxed{1/2}", "0.5", "{}", &r), LISA_OK);
    cr_expect_str_eq(r.rule, "open_equiv");
    rwd_result_clear(&r);
    cr_assert_eq(run("long_context", "cats run", "the cat runs", NULL, &r),
                 LISA_OK);
    cr_expect_str_eq(r.rule, "rouge_l");
    cr_expect_float_eq(r.reward, 0.8, 1e-12);
    rwd_result_clear(&r);
    cr_assert_eq(run("long_context", "x", "y", "[1]", &r), LISA_INVALID);
    rwd_result_clear(&r);
}

Test(rwd_score, invalid_utf8_in_output_is_sanitized, .init = setup,
     .fini = teardown)
{
    rwd_result_t r;
    cr_assert_eq(run("math", "\\boxed{\xff\xfe 7}", "7", NULL, &r), LISA_OK);
    json_t *j = json_loads(r.explanation_json, 0, NULL);
    cr_assert_not_null(j, "explanation must stay valid JSON");
    cr_assert_not_null(strstr(r.extracted, "??"));
    json_decref(j);
    rwd_result_clear(&r);
}

Test(rwd_score, judge_needs_url)
{
    rwd_scorer_config_t c = {.judge_sources = "physics"};
    rwd_scorer_t *s = rwd_scorer_new(&c);
    cr_assert_null(s);
}
