/*
 * gw_metrics: counters, gauges, histograms in Prometheus text.
 */
#include "gw_metrics.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

/* Usage: count, set, observe, render. */
Test(gw_metrics, usage)
{
    gw_metrics_t *m = gw_metrics_new();
    gw_metrics_add(m, "lisa_gateway_requests_total",
                   "route=\"chat\",code=\"200\"", 1);
    gw_metrics_add(m, "lisa_gateway_requests_total",
                   "route=\"chat\",code=\"200\"", 2);
    gw_metrics_set(m, "lisa_gateway_active_attempts", NULL, 5);
    gw_metrics_observe(m, "lisa_gateway_request_seconds", "route=\"chat\"",
                       0.0003);
    gw_metrics_observe(m, "lisa_gateway_request_seconds", "route=\"chat\"", 7);
    cr_assert_eq(gw_metrics_get(m, "lisa_gateway_requests_total",
                                "route=\"chat\",code=\"200\""),
                 3);
    size_t len;
    char *txt = gw_metrics_render(m, &len);
    cr_assert_eq(strlen(txt), len);
    cr_assert(strstr(txt, "# TYPE lisa_gateway_requests_total counter\n"));
    cr_assert(strstr(txt, "lisa_gateway_requests_total{route=\"chat\","
                          "code=\"200\"} 3\n"));
    cr_assert(strstr(txt, "lisa_gateway_active_attempts 5\n"));
    cr_assert(strstr(txt, "lisa_gateway_request_seconds_bucket{route="
                          "\"chat\",le=\"0.0005\"} 1\n"));
    cr_assert(strstr(txt, "lisa_gateway_request_seconds_bucket{route="
                          "\"chat\",le=\"10\"} 2\n"));
    cr_assert(strstr(txt, "lisa_gateway_request_seconds_count{route="
                          "\"chat\"} 2\n"));
    free(txt);
    /* an undeclared name is counted, not exported */
    gw_metrics_add(m, "nope", NULL, 1);
    cr_assert_eq(gw_metrics_get(m, "lisa_gateway_metrics_unknown_total", ""),
                 1);
    gw_metrics_destroy(&m);
    cr_assert_null(m);
}
