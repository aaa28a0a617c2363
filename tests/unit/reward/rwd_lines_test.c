/*
 * rwd_lines: JSON lines in and out through real FILE streams, in order,
 * with per-line errors.
 */
#include "rwd_lines.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(rwd_lines, usage)
{
    const char *input =
        "{\"data_source\":\"math\",\"answer\":\"\\\\boxed{2}\",\"ground_"
        "truth\":\"2\"}\n"
        "garbage\n"
        "\n"
        "{\"data_source\":\"biomed\",\"answer\":\"B\",\"ground_truth\":\"C\"}";
    FILE *in = fmemopen((void *) input, strlen(input), "r");
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    rwd_scorer_t *s = rwd_scorer_new(NULL);
    rwd_lines_stats_t st;
    cr_assert_eq(rwd_lines_run(s, in, out, 0, &st), LISA_OK);
    fclose(out);
    fclose(in);
    cr_assert_eq(st.lines, 3, "lines %llu scored %llu errors %llu: %s",
                 (unsigned long long) st.lines, (unsigned long long) st.scored,
                 (unsigned long long) st.errors, buf);
    cr_assert_eq(st.scored, 2);
    cr_assert_eq(st.errors, 1);
    char *l1 = strtok(buf, "\n"), *l2 = strtok(NULL, "\n"),
         *l3 = strtok(NULL, "\n");
    cr_assert_not_null(l3);
    json_t *a = json_loads(l1, 0, NULL), *b = json_loads(l2, 0, NULL),
           *c = json_loads(l3, 0, NULL);
    cr_assert_float_eq(json_real_value(json_object_get(a, "reward")), 1.0, 0);
    cr_assert_str_eq(json_string_value(json_object_get(b, "code")),
                     "CODE_INVALID");
    cr_assert_null(json_object_get(b, "reward"));
    cr_assert_float_eq(json_real_value(json_object_get(c, "reward")), 0.0, 0);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    free(buf);
    rwd_scorer_destroy(&s);
}

Test(rwd_lines, one_line_forms)
{
    rwd_scorer_t *s = rwd_scorer_new(NULL);
    static const struct {
        const char *line;
        bool ok;
    } rows[] = {
        {"{\"data_source\":\"math\",\"answer\":\"1\",\"ground_truth\":\"1\"}",
         true},
        {"{\"data_source\":\"math\",\"answer\":null,\"ground_truth\":\"1\"}",
         true},
        {"{\"data_source\":\"math\",\"ground_truth\":\"1\"}", true},
        {"{\"data_source\":\"math\",\"answer\":\"1\",\"reward_model\":{"
         "\"ground_truth\":\"1\"}}",
         true},
        {"{\"data_source\":\"math\",\"answer\":\"1\",\"extra_info\":{\"ground_"
         "truth\":\"1\"}}",
         true},
        {"{\"data_source\":\"math\",\"answer\":1,\"ground_truth\":\"1\"}",
         false},
        {"{\"data_source\":\"math\",\"answer\":\"1\"}", false},
        {"{\"answer\":\"1\",\"ground_truth\":\"1\"}", false},
        {"{\"data_source\":\"x\",\"answer\":\"1\",\"ground_truth\":\"1\"}",
         false},
        {"[]", false},
        {"{", false},
        {"{\"data_source\":\"math\",\"data_source\":\"math\"}", false},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        bool ok;
        char *o = rwd_lines_one(s, rows[i].line, strlen(rows[i].line), 0, &ok);
        cr_expect_eq(ok, rows[i].ok, "%s -> %s", rows[i].line, o);
        json_t *j = json_loads(o, 0, NULL);
        cr_expect_not_null(j, "output is JSON: %s", o);
        json_decref(j);
        free(o);
    }
    rwd_scorer_destroy(&s);
}
