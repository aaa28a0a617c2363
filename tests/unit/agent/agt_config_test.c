/*
 * agt_config tests: defaults < environment < flags, bounds. The first test
 * is the usage example.
 */
#include "agt_config.h"
#include "agt_exit.h"
#include "agt_loop.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(agt_config, usage)
{
    agt_config_t c;
    char err[256];
    setenv("LISA_GATEWAY_URL", "http://127.0.0.1:7180", 1);
    setenv("LISA_ATTEMPT_TOKEN", "tok", 1);
    setenv("LISA_CMD_TIMEOUT_S", "30", 1);
    char *argv[] = {"lisa-agent", "--cmd-timeout-s=5", NULL};
    cr_assert_eq(agt_config_load(&c, 2, argv, NULL, err, sizeof err), LISA_OK,
                 "%s", err);
    cr_assert_eq(agt_config_validate(&c, err, sizeof err), LISA_OK);
    cr_assert_str_eq(c.gateway_url, "http://127.0.0.1:7180");
    cr_assert_str_eq(c.gateway_socket, ""); /* unset strings read as "" */
    cr_assert_eq(c.cmd_timeout_s, 5);       /* flag beats environment */
    cr_assert_eq(c.max_turns, 100);         /* default */
    cr_assert_eq(c.head_lines, 40);
    cr_assert_eq(c.clip_chars, 10000);
    cr_assert_str_eq(c.testbed, "/testbed");
    agt_config_clear(&c);
}

Test(agt_config, bad_values_and_missing_endpoint)
{
    agt_config_t c;
    char err[256];
    char *a1[] = {"x", "--cmd-timeout-s=abc", NULL};
    cr_assert_eq(agt_config_load(&c, 2, a1, NULL, err, sizeof err),
                 LISA_INVALID);
    agt_config_clear(&c);
    char *a2[] = {"x", "--heartbeat-ms=1", NULL};
    cr_assert_eq(agt_config_load(&c, 2, a2, NULL, err, sizeof err),
                 LISA_INVALID);
    agt_config_clear(&c);
    char *a3[] = {"x", "--nope=1", NULL};
    cr_assert_eq(agt_config_load(&c, 2, a3, NULL, err, sizeof err),
                 LISA_INVALID);
    agt_config_clear(&c);
    FILE *devnull = fopen("/dev/null", "w");
    char *a4[] = {"x", "--help", NULL};
    cr_assert_eq(agt_config_load(&c, 2, a4, devnull, err, sizeof err),
                 LISA_AGAIN);
    fclose(devnull);
    agt_config_clear(&c);
    unsetenv("LISA_GATEWAY_URL");
    unsetenv("LISA_GATEWAY_SOCKET");
    char *a5[] = {"x", NULL};
    cr_assert_eq(agt_config_load(&c, 1, a5, NULL, err, sizeof err), LISA_OK);
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

Test(agt_config, network_packages_needs_a_proxy)
{
    agt_config_t c;
    char err[256];
    setenv("LISA_GATEWAY_SOCKET", "/run/lisa/gateway.sock", 1);
    setenv("LISA_ATTEMPT_TOKEN", "tok", 1);
    char *a0[] = {"x", NULL};
    cr_assert_eq(agt_config_load(&c, 1, a0, NULL, err, sizeof err), LISA_OK);
    cr_assert_str_eq(c.network, "none"); /* the default: no network */
    cr_assert_eq(c.proxy_port, 3128);
    cr_assert_eq(agt_config_validate(&c, err, sizeof err), LISA_OK);
    agt_config_clear(&c);
    char *a1[] = {"x", "--network=packages", NULL};
    cr_assert_eq(agt_config_load(&c, 2, a1, NULL, err, sizeof err), LISA_OK);
    cr_assert_eq(agt_config_validate(&c, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "LISA_PROXY_SOCKET"));
    agt_config_clear(&c);
    char *a2[] = {"x", "--network=packages",
                  "--proxy-socket=/run/lisa/proxy.sock", NULL};
    cr_assert_eq(agt_config_load(&c, 3, a2, NULL, err, sizeof err), LISA_OK);
    cr_assert_eq(agt_config_validate(&c, err, sizeof err), LISA_OK);
    agt_config_clear(&c);
    char *a3[] = {"x", "--network=everything", NULL};
    cr_assert_eq(agt_config_load(&c, 2, a3, NULL, err, sizeof err), LISA_OK);
    cr_assert_eq(agt_config_validate(&c, err, sizeof err), LISA_INVALID);
    agt_config_clear(&c);
    unsetenv("LISA_GATEWAY_SOCKET");
}
