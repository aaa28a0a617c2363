/*
 * Tests of the small controller modules: sandbox names, the creation
 * token bucket, exit-code outcomes and the config table. The first test
 * is the usage example.
 */
#include "ctl_backend.h"
#include "ctl_config.h"
#include "ctl_outcome.h"
#include "ctl_rate.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

Test(ctl_backend, usage)
{
    char name[CTL_NAME_MAX];
    ctl_backend_name("R_0001/x", 2, name);
    cr_assert_str_eq(name, "lisa-r-0001-x-a2");
    /* The same attempt always gets the same name. */
    char again[CTL_NAME_MAX];
    ctl_backend_name("R_0001/x", 2, again);
    cr_assert_str_eq(name, again);
}

Test(ctl_backend, long_ids_stay_distinct_dns_labels)
{
    char a[CTL_NAME_MAX], b[CTL_NAME_MAX];
    char id1[200], id2[200];
    memset(id1, 'a', 150);
    id1[150] = '\0';
    memcpy(id2, id1, 151);
    id2[149] = 'b';
    ctl_backend_name(id1, 7, a);
    ctl_backend_name(id2, 7, b);
    cr_assert_leq(strlen(a), 63);
    cr_assert_leq(strlen(b), 63);
    cr_assert_str_neq(a, b);
    cr_assert_eq(strcmp(a + strlen(a) - 3, "-a7"), 0);
    for (const char *p = a; *p; p++)
        cr_assert((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
                  *p == '-');
}

Test(ctl_rate, bucket)
{
    ctl_rate_t r;
    ctl_rate_init(&r, 10, 5, 1000);
    cr_assert_eq(ctl_rate_available(&r, 1000), 5);
    ctl_rate_take(&r, 5);
    cr_assert_eq(ctl_rate_available(&r, 1000), 0);
    cr_assert_eq(ctl_rate_available(&r, 1100), 1); /* 10/s */
    cr_assert_eq(ctl_rate_available(&r, 1350), 3);
    cr_assert_eq(ctl_rate_available(&r, 99999), 5); /* capped by burst */
}

Test(ctl_outcome, table)
{
    ctl_sandbox_t sb = {.phase = CTL_PHASE_EXITED};
    static const struct {
        int code;
        bool oom, deadline, report;
        Lisa__FailureKind kind;
    } cases[] = {
        {0, false, false, false, LISA__FAILURE_KIND__FAILURE_NONE},
        {9, false, false, false, LISA__FAILURE_KIND__FAILURE_NONE},
        {10, false, false, false, LISA__FAILURE_KIND__FAILURE_NONE},
        {3, false, false, true, LISA__FAILURE_KIND__FAILURE_INFRA},
        {7, false, false, true, LISA__FAILURE_KIND__FAILURE_INFRA},
        {5, false, false, true, LISA__FAILURE_KIND__FAILURE_AGENT},
        {137, true, false, true, LISA__FAILURE_KIND__FAILURE_OOM},
        {137, false, true, true, LISA__FAILURE_KIND__FAILURE_DEADLINE},
        {137, false, false, true, LISA__FAILURE_KIND__FAILURE_SANDBOX},
        {-1, false, false, true, LISA__FAILURE_KIND__FAILURE_SANDBOX},
        {127, false, false, true, LISA__FAILURE_KIND__FAILURE_SANDBOX},
        {42, false, false, true, LISA__FAILURE_KIND__FAILURE_SANDBOX},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sb.exit_code = cases[i].code;
        sb.oom = cases[i].oom;
        sb.deadline_exceeded = cases[i].deadline;
        ctl_outcome_t o = ctl_outcome_of(&sb);
        cr_assert_eq(o.report, cases[i].report, "case %zu", i);
        if (o.report)
            cr_assert_eq(o.kind, cases[i].kind, "case %zu", i);
        cr_assert_not_null(o.why);
    }
}

Test(ctl_config, precedence_and_bounds)
{
    ctl_config_t c;
    char err[256];
    setenv("LISA_CTL_MAX", "3", 1);
    setenv("LISA_CTL_BACKEND", "docker", 1);
    char *argv[] = {"x", "--backend=k8s", "--grace-ms=2s",
                    "--memory-bytes=512MiB", NULL};
    cr_assert_eq(ctl_config_load(&c, 4, argv, NULL, err, sizeof err), LISA_OK,
                 "%s", err);
    cr_assert_eq(c.max_concurrency, 3); /* environment beats default */
    cr_assert_str_eq(c.backend, "k8s"); /* flag beats environment */
    cr_assert_eq(c.tick_ms, 200);
    cr_assert_eq(c.grace_ms, 2000);
    cr_assert_eq(c.memory_bytes, 512u << 20);
    cr_assert_str_eq(c.run_id, "");
    cr_assert(c.memory_rlimit);
    ctl_config_clear(&c);
    char *bad[] = {"x", "--backend=lxc", NULL};
    cr_assert_eq(ctl_config_load(&c, 2, bad, NULL, err, sizeof err),
                 LISA_INVALID);
    ctl_config_clear(&c);
    char *bad2[] = {"x", "--max-concurrency=0", NULL};
    cr_assert_eq(ctl_config_load(&c, 2, bad2, NULL, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "max"), "%s", err);
    ctl_config_clear(&c);
    unsetenv("LISA_CTL_MAX");
    unsetenv("LISA_CTL_BACKEND");
}
