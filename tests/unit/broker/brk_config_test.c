/*
 * brk_config tests. The first test is the usage example.
 */
#include "brk_config.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Test(brk_config, usage)
{
    char *argv[] = {"lisa-broker", "--lease-ms", "250", "--data", "/tmp/x"};
    brk_config_t cfg;
    cr_assert_eq(brk_config_load(&cfg, 5, argv, stdout, stderr), LISA_OK);
    cr_assert_eq(cfg.lease_ms, 250);
    cr_assert_str_eq(cfg.data_dir, "/tmp/x");
    cr_assert_str_eq(cfg.rpc_endpoint, "tcp://*:7100");
    cr_assert_str_eq(cfg.sync, "full");
    cr_assert_eq(cfg.max_attempts, 3);
    brk_config_free(&cfg);
}

Test(brk_config, precedence_defaults_file_env_flags)
{
    char path[] = "/tmp/brk_config_test_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char *text = "# broker\nlease_ms = 111\nmax_attempts=7\n"
                       "backoff_ms = 5\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t) strlen(text));
    close(fd);
    setenv("LISA_BROKER_MAX_ATTEMPTS", "8", 1);
    setenv("LISA_BROKER_BACKOFF_MS", "6", 1);
    char *argv[] = {"lisa-broker", "--config", path, "--backoff-ms", "9"};
    brk_config_t cfg;
    cr_assert_eq(brk_config_load(&cfg, 5, argv, stdout, stderr), LISA_OK);
    cr_assert_eq(cfg.lease_ms, 111);   /* file */
    cr_assert_eq(cfg.max_attempts, 8); /* env over file */
    cr_assert_eq(cfg.backoff_ms, 9);   /* flag over env */
    brk_config_free(&cfg);
    unsetenv("LISA_BROKER_MAX_ATTEMPTS");
    unsetenv("LISA_BROKER_BACKOFF_MS");
    unlink(path);
}

Test(brk_config, bad_values_are_refused)
{
    FILE *devnull = fopen("/dev/null", "w");
    brk_config_t cfg;
    char *a1[] = {"b", "--lease-ms", "abc"};
    cr_assert_eq(brk_config_load(&cfg, 3, a1, devnull, devnull), LISA_INVALID);
    char *a2[] = {"b", "--lease-ms", "1"}; /* below the minimum */
    cr_assert_eq(brk_config_load(&cfg, 3, a2, devnull, devnull), LISA_INVALID);
    char *a3[] = {"b", "--sync", "sometimes"};
    cr_assert_eq(brk_config_load(&cfg, 3, a3, devnull, devnull), LISA_INVALID);
    char *a4[] = {"b", "--no-such-flag", "1"};
    cr_assert_eq(brk_config_load(&cfg, 3, a4, devnull, devnull), LISA_INVALID);
    char *a5[] = {"b", "--lease-ms"};
    cr_assert_eq(brk_config_load(&cfg, 2, a5, devnull, devnull), LISA_INVALID);
    char *a6[] = {"b", "--help"};
    cr_assert_eq(brk_config_load(&cfg, 2, a6, devnull, devnull), LISA_AGAIN);
    fclose(devnull);
}

Test(brk_config, dump_lists_every_setting)
{
    char *argv[] = {"b"};
    brk_config_t cfg;
    cr_assert_eq(brk_config_load(&cfg, 1, argv, stdout, stderr), LISA_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    brk_config_dump(&cfg, f);
    fclose(f);
    cr_assert_not_null(strstr(buf, "lease_ms = 30s\n"), "%s", buf);
    cr_assert_not_null(strstr(buf, "worker_endpoint = tcp://*:7103\n"));
    free(buf);
    brk_config_free(&cfg);
}

Test(brk_config, durations_and_sizes_take_units)
{
    char *argv[] = {"b",     "--lease-ms", "2s", "--max-rpc-frame",
                    "64KiB", "--tick-ms",  "25"};
    brk_config_t cfg;
    cr_assert_eq(brk_config_load(&cfg, 7, argv, stdout, stderr), LISA_OK);
    cr_assert_eq(cfg.lease_ms, 2000);
    cr_assert_eq(cfg.max_rpc_frame, 65536);
    cr_assert_eq(cfg.tick_ms, 25);
    brk_config_free(&cfg);
}
