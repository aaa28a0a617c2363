/*
 * trn_run_cfg tests: trainer.logger takes verl's list syntax (quoted or
 * not, with blanks, or one name), refuses a logger lisa does not have
 * with a message naming it and the supported ones, and trn_run_cfg_resolve
 * refuses it too (so the trainer stops before loading a model); the
 * tensorboard folder defaults to <out>/tensorboard. The first test is the
 * usage example.
 */
#include "lisa/lisa_mem.h"
#include "trn_run_cfg.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

Test(trn_run_cfg, usage)
{
    trn_run_cfg_t c;
    memset(&c, 0, sizeof c);
    char *argv[] = {"train", "trainer.logger=['console','tensorboard']",
                    "--out", "runs/x"};
    char err[256];
    unsetenv("TENSORBOARD_DIR");
    cr_assert_eq(lisa_config_load(trn_run_cfg_table, trn_run_cfg_table_len, &c,
                                  4, argv, err, sizeof err),
                 LISA_OK, "%s", err);
    unsigned lg = 0;
    cr_assert_eq(trn_run_cfg_loggers(c.logger, &lg, err, sizeof err), LISA_OK,
                 "%s", err);
    cr_assert_eq(lg, TRN_LOGGER_CONSOLE | TRN_LOGGER_TENSORBOARD);
    char *d = trn_run_cfg_tensorboard_dir(&c);
    cr_assert_str_eq(d, "runs/x/tensorboard");
    lisa_free(&d);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
    /* the default is the console alone; a folder of one's own */
    char *def[] = {"train", "trainer.tensorboard_dir=/tmp/tb"};
    cr_assert_eq(lisa_config_load(trn_run_cfg_table, trn_run_cfg_table_len, &c,
                                  2, def, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_eq(trn_run_cfg_loggers(c.logger, &lg, err, sizeof err), LISA_OK);
    cr_assert_eq(lg, TRN_LOGGER_CONSOLE);
    d = trn_run_cfg_tensorboard_dir(&c);
    cr_assert_str_eq(d, "/tmp/tb");
    lisa_free(&d);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
}

Test(trn_run_cfg, logger_spellings)
{
    static const struct {
        const char *spec;
        unsigned want;
    } ok[] = {
        {"[console,tensorboard]", TRN_LOGGER_CONSOLE | TRN_LOGGER_TENSORBOARD},
        {"['tensorboard']", TRN_LOGGER_TENSORBOARD},
        {"[\"console\", \"tensorboard\"]",
         TRN_LOGGER_CONSOLE | TRN_LOGGER_TENSORBOARD},
        {" [ console , tensorboard ] ",
         TRN_LOGGER_CONSOLE | TRN_LOGGER_TENSORBOARD},
        {"tensorboard", TRN_LOGGER_TENSORBOARD},
        {"console,tensorboard", TRN_LOGGER_CONSOLE | TRN_LOGGER_TENSORBOARD},
        {"[]", 0},
        {"", 0},
    };
    char err[256];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        unsigned lg = 99;
        cr_assert_eq(trn_run_cfg_loggers(ok[i].spec, &lg, err, sizeof err),
                     LISA_OK, "%s: %s", ok[i].spec, err);
        cr_assert_eq(lg, ok[i].want, "%s", ok[i].spec);
    }
    unsigned lg;
    cr_assert_eq(
        trn_run_cfg_loggers("['console','wandb']", &lg, err, sizeof err),
        LISA_INVALID);
    cr_assert(strstr(err, "trainer.logger") && strstr(err, "'wandb'") &&
                  strstr(err, "console and tensorboard"),
              "%s", err);
    cr_assert_eq(trn_run_cfg_loggers("[console", &lg, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "trainer.logger"), "%s", err);
    cr_assert_eq(trn_run_cfg_loggers("tensorboards", &lg, err, sizeof err),
                 LISA_INVALID);
}

Test(trn_run_cfg, resolve_refuses_an_unknown_logger)
{
    trn_run_cfg_t c;
    memset(&c, 0, sizeof c);
    char *argv[] = {"train", "trainer.logger=[console,mlflow]"};
    char err[256];
    cr_assert_eq(lisa_config_load(trn_run_cfg_table, trn_run_cfg_table_len, &c,
                                  2, argv, err, sizeof err),
                 LISA_OK, "%s", err);
    trn_step_cfg_t s;
    trn_failed_t fp;
    bool de, bf;
    cr_assert_eq(trn_run_cfg_resolve(&c, &s, &fp, &de, &bf, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "'mlflow'"), "%s", err);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
}
