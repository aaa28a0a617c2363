/*
 * gw_config: the gateway's settings table.
 */
#include "gw_config.h"

#include <criterion/criterion.h>
#include <string.h>

/* Usage: load from flags; defaults fill the rest. */
Test(gw_config, usage)
{
    gw_config_t cfg;
    char err[256];
    char *argv[] = {"lisa-gateway",
                    "--token-key",
                    "hex:00",
                    "--tokenizer",
                    "/t",
                    "--port",
                    "0",
                    "--max-body",
                    "64KiB",
                    "--request-timeout",
                    "1s",
                    NULL};
    cr_assert_eq(gw_config_load(&cfg, 11, argv, err, sizeof err), LISA_OK, "%s",
                 err);
    cr_assert_eq(cfg.port, 0);
    cr_assert_eq(cfg.max_body, 64 * 1024);
    cr_assert_eq(cfg.request_timeout_ms, 1000);
    cr_assert_str_eq(cfg.tokenizer, "/t");
    cr_assert_str_eq(cfg.broker, "tcp://127.0.0.1:7100");
    cr_assert_eq(cfg.max_context, 65536);
    cr_assert_eq(cfg.upstream_retries, 2);
    gw_config_free(&cfg);
    gw_config_free(&cfg);
}

Test(gw_config, refusals_and_defaults)
{
    gw_config_t cfg;
    char err[256];
    char *missing[] = {"lisa-gateway", "--tokenizer", "/t", NULL};
    unsetenv("LISA_TOKEN_KEY");
    cr_assert_eq(gw_config_load(&cfg, 3, missing, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "token_key"), "%s", err);
    char *bad[] = {"lisa-gateway", "--token-key", "k", "--tokenizer",
                   "/t",           "--max-body",  "1", NULL};
    cr_assert_eq(gw_config_load(&cfg, 7, bad, err, sizeof err), LISA_INVALID);
    cr_assert_eq(gw_config_defaults(&cfg), LISA_OK);
    cr_assert_eq(cfg.port, 7180);
    cr_assert_eq(cfg.span_queue, 65536);
    gw_config_free(&cfg);
}
