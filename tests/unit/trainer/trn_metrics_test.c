/*
 * trn_metrics tests: a step record becomes one JSON line whose values
 * parse back (jansson), with summary statistics and per-group means
 * computed by hand; non-finite values become null. The first test is the
 * usage example.
 */
#include "lisa/lisa_mem.h"
#include "trn_metrics.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

Test(trn_metrics, usage)
{
    trn_metrics_t *m = trn_metrics_new();
    trn_metrics_set_str(m, "kind", "train");
    trn_metrics_set(m, "step", 3);
    const double r[4] = {1, 0, 0.5, 0.5};
    const char *ds[4] = {"math", "bio", "math", "bio"};
    trn_metrics_stats(m, "reward", r, 4);
    trn_metrics_by_group(m, "reward", ds, r, 4);
    FILE *f = tmpfile();
    cr_assert_eq(trn_metrics_write(m, f), LISA_OK);
    cr_assert_eq(trn_metrics_write(m, f), LISA_OK);
    rewind(f);
    char line[4096];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        cr_assert(o, "%s", je.text);
        cr_assert_str_eq(json_string_value(json_object_get(o, "kind")),
                         "train");
        cr_assert_eq(json_integer_value(json_object_get(o, "step")), 3);
        cr_assert_float_eq(json_number_value(json_object_get(o, "reward/mean")),
                           0.5, 1e-12);
        cr_assert_float_eq(json_number_value(json_object_get(o, "reward/std")),
                           sqrt(0.125), 1e-12);
        cr_assert_float_eq(
            json_number_value(json_object_get(o, "reward/math/mean")), 0.75,
            1e-12);
        cr_assert_float_eq(
            json_number_value(json_object_get(o, "reward/bio/mean")), 0.25,
            1e-12);
        cr_assert_eq(json_integer_value(json_object_get(o, "reward/bio/count")),
                     2);
        cr_assert_eq(json_number_value(json_object_get(o, "reward/min")), 0);
        cr_assert_eq(json_number_value(json_object_get(o, "reward/max")), 1);
        json_decref(o);
    }
    cr_assert_eq(lines, 2);
    fclose(f);
    trn_metrics_destroy(&m);
    cr_assert_null(m);
}

Test(trn_metrics, non_finite_values_are_null_and_get_reads_back)
{
    trn_metrics_t *m = trn_metrics_new();
    trn_metrics_set(m, "a", NAN);
    trn_metrics_set(m, "b", INFINITY);
    trn_metrics_set(m, "c", 0.25);
    trn_metrics_set(m, "c", 0.75); /* replaces */
    char *l = trn_metrics_line(m);
    cr_assert_str_eq(l, "{\"a\":null,\"b\":null,\"c\":0.75}");
    lisa_free(&l);
    cr_assert(isnan(trn_metrics_get(m, "a")));
    cr_assert(isnan(trn_metrics_get(m, "missing")));
    cr_assert_eq(trn_metrics_get(m, "c"), 0.75);
    /* an empty series adds nothing */
    trn_metrics_stats(m, "x", NULL, 0);
    cr_assert(isnan(trn_metrics_get(m, "x/mean")));
    trn_metrics_destroy(&m);
    trn_metrics_destroy(&m);
}

typedef struct {
    char keys[8][32];
    double vals[8];
    int n;
} s_seen_t;

static void
s_collect(const char *k, double v, void *ud)
{
    s_seen_t *s = ud;
    cr_assert_lt(s->n, 8);
    snprintf(s->keys[s->n], sizeof s->keys[0], "%s", k);
    s->vals[s->n++] = v;
}

Test(trn_metrics, each_visits_the_numbers_in_order)
{
    trn_metrics_t *m = trn_metrics_new();
    trn_metrics_set_str(m, "kind", "train");
    trn_metrics_set(m, "step", 4);
    trn_metrics_set(m, "z", 0.25);
    trn_metrics_set(m, "gone", NAN);
    trn_metrics_set(m, "a", -3);
    s_seen_t s = {.n = 0};
    trn_metrics_each(m, s_collect, &s);
    cr_assert_eq(s.n, 3);
    cr_assert_str_eq(s.keys[0], "step");
    cr_assert_eq(s.vals[0], 4);
    cr_assert_str_eq(s.keys[1], "z");
    cr_assert_eq(s.vals[1], 0.25);
    cr_assert_str_eq(s.keys[2], "a");
    cr_assert_eq(s.vals[2], -3);
    trn_metrics_destroy(&m);
}
