/*
 * agt_config tests: defaults < environment < flags, bounds. The first test
 * is the usage example.
 */
#include "agt_config.h"
#include "agt_exit.h"
#include "agt_loop.h"

#include <criterion/criterion.h>
#include <string.h>

static const char *
s_env(const char *name)
{
    if (strcmp(name, "LISA_GATEWAY_URL") == 0)
        return "http://127.0.0.1:7180";
    if (strcmp(name, "LISA_ATTEMPT_TOKEN") == 0)
        return "tok";
    if (strcmp(name, "LISA_CMD_TIMEOUT_S") == 0)
        return "30";
    return NULL;
}

static const char *
s_noenv(const char *name)
{
    (void) name;
    return NULL;
}

Test(agt_config, usage)
{
    agt_config_t c;
    int help = 0;
    char err[256];
    char *argv[] = {"lisa-agent", "--cmd-timeout-s=5", NULL};
    cr_assert_eq(agt_config_load(&c, 2, argv, s_env, &help, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_eq(agt_config_validate(&c, err, sizeof err), LISA_OK);
    cr_assert_str_eq(c.gateway_url, "http://127.0.0.1:7180");
    cr_assert_eq(c.cmd_timeout_s, 5); /* flag beats environment */
    cr_assert_eq(c.max_turns, 100);   /* default */
    cr_assert_eq(c.head_lines, 40);
    cr_assert_eq(c.clip_chars, 10000);
    cr_assert_str_eq(c.testbed, "/testbed");
    agt_config_clear(&c);
}

Test(agt_config, bad_values_and_missing_endpoint)
{
    agt_config_t c;
    int help = 0;
    char err[256];
    char *a1[] = {"x", "--cmd-timeout-s=abc"};
    cr_assert_eq(agt_config_load(&c, 2, a1, s_env, &help, err, sizeof err),
                 LISA_INVALID);
    agt_config_clear(&c);
    char *a2[] = {"x", "--heartbeat-ms=1"};
    cr_assert_eq(agt_config_load(&c, 2, a2, s_env, &help, err, sizeof err),
                 LISA_INVALID);
    agt_config_clear(&c);
    char *a3[] = {"x", "--nope=1"};
    cr_assert_eq(agt_config_load(&c, 2, a3, s_env, &help, err, sizeof err),
                 LISA_INVALID);
    agt_config_clear(&c);
    char *a4[] = {"x", "--help"};
    cr_assert_eq(agt_config_load(&c, 2, a4, s_noenv, &help, err, sizeof err),
                 LISA_OK);
    cr_assert(help);
    cr_assert_eq(agt_config_validate(&c, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "gateway"));
    agt_config_clear(&c);
}

Test(agt_config, exit_table)
{
    cr_assert_str_eq(agt_exit_name(AGT_EXIT_RESULT), "result");
    cr_assert_str_eq(agt_exit_name(77), "unknown");
    cr_assert(agt_exit_retryable(AGT_EXIT_GATEWAY));
    cr_assert_not(agt_exit_retryable(AGT_EXIT_TASK));
    cr_assert_not(agt_exit_retryable(AGT_EXIT_OK));
}

Test(agt_config, steps_text)
{
    char buf[128];
    cr_assert_str_eq(agt_loop_steps_text(7, buf, sizeof buf),
                     "Steps Remaining: 7");
    cr_assert(strstr(agt_loop_steps_text(1, buf, sizeof buf),
                     "submit your answer NOW"));
}
