/*
 * rwd_config: defaults < environment < flags, validation of integers and
 * unknown flags, --help.
 */
#include "rwd_config.h"

#include <criterion/criterion.h>
#include <stdlib.h>

Test(rwd_config, usage)
{
    char *argv[] = {"lisa-reward", "worker", "--broker", "tcp://127.0.0.1:9",
                    "--threads=2"};
    rwd_config_t c;
    cr_assert_eq(rwd_config_parse(&c, 5, argv, 2), LISA_OK);
    cr_assert_str_eq(c.broker, "tcp://127.0.0.1:9");
    cr_assert_eq(c.threads, 2);
    cr_assert_eq(c.heartbeat_ms, 1000);
    cr_assert_eq(c.liveness, 3);
    rwd_config_clear(&c);
    cr_assert_null(c.broker);
}

Test(rwd_config, precedence)
{
    setenv("LISA_REWARD_THREADS", "7", 1);
    setenv("LISA_REWARD_LIVENESS", "5", 1);
    char *argv[] = {"x", "--liveness", "4"};
    rwd_config_t c;
    cr_assert_eq(rwd_config_parse(&c, 3, argv, 1), LISA_OK);
    cr_assert_eq(c.threads, 7);
    cr_assert_eq(c.liveness, 4);
    rwd_config_clear(&c);
    unsetenv("LISA_REWARD_THREADS");
    unsetenv("LISA_REWARD_LIVENESS");
}

Test(rwd_config, rejects)
{
    static char *bad[][3] = {
        {"x", "--threads", "0"},     {"x", "--threads", "abc"},
        {"x", "--threads", "99999"}, {"x", "--nope", "1"},
        {"x", "stray", "1"},         {"x", "--log-level", "loud"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rwd_config_t c;
        cr_expect_eq(rwd_config_parse(&c, 3, bad[i], 1), LISA_INVALID, "%s %s",
                     bad[i][1], bad[i][2]);
        rwd_config_clear(&c);
    }
    char *missing[] = {"x", "--broker"};
    rwd_config_t c;
    cr_expect_eq(rwd_config_parse(&c, 2, missing, 1), LISA_INVALID);
    rwd_config_clear(&c);
    char *help[] = {"x", "--help"};
    cr_expect_eq(rwd_config_parse(&c, 2, help, 1), LISA_AGAIN);
    rwd_config_clear(&c);
}
