/*
 * lisa-trainer: the policy's generation engine and the synchronous RL loop
 * in one process (docs/trainer-service.md).
 *
 *   lisa-trainer train --model DIR --train-data FILE [key=value ...]
 *   lisa-trainer serve --model DIR [...]
 *   lisa-trainer check --model DIR --train-data FILE [key=value ...]
 *
 * This file reads the command line and the settings, checks the data, and
 * runs the command: the rank's parts are assembled by trn_service (group,
 * backend, engine, resume) and the ranks it launches are trn_ranks'.
 * Rank 0 runs the RL loop (trn_loop); the other ranks follow its commands
 * (trn_dp); `serve` runs the engine until a signal.
 */
#include "lisa/lisa_config.h"
#include "lisa/lisa_curve.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "trn_data.h"
#include "trn_dp.h"
#include "trn_loop.h"
#include "trn_ranks.h"
#include "trn_run_cfg.h"
#include "trn_service.h"

#include <czmq.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t s_stop = 0;

static void
s_on_signal(int sig)
{
    (void) sig;
    s_stop = 1;
}

static void
s_usage(FILE *f)
{
    fprintf(f, "usage: lisa-trainer train|serve|check [--help] [flags] "
               "[key=value ...]\n"
               "  train  the synchronous RL loop with its generation engine\n"
               "  serve  the generation engine alone\n"
               "  check  train's settings and data checked, nothing run\n");
}

/* What the command line asked for. */
typedef struct {
    bool train;
    trn_run_cfg_t cfg;
    trn_step_cfg_t sc;
    trn_ranks_plan_t plan;
    trn_data_t *tdata, *vdata;
    trn_prompts_t *prompts; /* agent.prompts, rank 0 */
    lisa_config_source_t *src;
} s_args_t;

/* The settings: defaults < file < environment < flags. TRN_EXIT_DONE with
 * *quit set after --help. */
static trn_exit_t
s_settings(s_args_t *a, int argc, char **argv, bool *quit)
{
    char err[512] = "";
    a->src = lisa_calloc(trn_run_cfg_table_len, sizeof *a->src);
    lisa_config_opts_t opts = {
        .prog = a->train ? "lisa-trainer train" : "lisa-trainer serve",
        .about = "lisa-trainer: generation engine and synchronous RL loop",
        .sources = a->src};
    lisa_rc_t rc =
        lisa_config_load_ex(trn_run_cfg_table, trn_run_cfg_table_len, &a->cfg,
                            argc - 1, argv + 1, &opts, err, sizeof err);
    *quit = rc == LISA_AGAIN;
    if (rc == LISA_AGAIN)
        return TRN_EXIT_DONE;
    if (rc != LISA_OK) {
        fprintf(stderr, "lisa-trainer: %s\n", err);
        return TRN_EXIT_CONFIG;
    }
    lisa_log_level_t level;
    if (lisa_log_level_parse(a->cfg.log_level, &level) == LISA_OK)
        lisa_log_set_level(level);
    if (trn_run_cfg_fold(&a->cfg, err, sizeof err) != LISA_OK) {
        fprintf(stderr, "lisa-trainer: %s\n", err);
        return TRN_EXIT_CONFIG;
    }
    lisa_config_dump(trn_run_cfg_table, trn_run_cfg_table_len, &a->cfg, a->src);
    return TRN_EXIT_DONE;
}

/* The rank, the model and the data: everything checked before a model is
 * loaded. */
static trn_exit_t
s_check(s_args_t *a)
{
    char err[512] = "";
    const trn_run_cfg_t *cfg = &a->cfg;
    if (trn_ranks_plan(cfg, a->train, &a->plan, err, sizeof err) != LISA_OK) {
        fprintf(stderr, "lisa-trainer: %s\n", err);
        return TRN_EXIT_CONFIG;
    }
    if (a->plan.rank > 0) {
        static char svc[64];
        snprintf(svc, sizeof svc, "lisa-trainer.r%lld",
                 (long long) a->plan.rank);
        lisa_log_set_service(svc);
    }
    if (!cfg->model && !cfg->resume) {
        fprintf(stderr, "lisa-trainer: --model is required\n");
        return TRN_EXIT_CONFIG;
    }
    if (!a->train)
        return TRN_EXIT_DONE;
    if (cfg->val_only && !(cfg->val_files && *cfg->val_files)) {
        fprintf(stderr, "lisa-trainer: trainer.val_only needs --val-data\n");
        return TRN_EXIT_CONFIG;
    }
    if (!cfg->train_files && !cfg->val_only) {
        fprintf(stderr, "lisa-trainer: --train-data is required\n");
        return TRN_EXIT_CONFIG;
    }
    if ((cfg->train_files && trn_data_load(cfg->train_files, &a->tdata, err,
                                           sizeof err) != LISA_OK) ||
        (cfg->val_files && *cfg->val_files &&
         trn_data_load(cfg->val_files, &a->vdata, err, sizeof err) !=
             LISA_OK)) {
        fprintf(stderr, "lisa-trainer: data: %s\n", err);
        return TRN_EXIT_CONFIG;
    }
    if (cfg->prompts && *cfg->prompts && a->plan.rank == 0) {
        a->prompts = trn_prompts_load(cfg->prompts, err, sizeof err);
        if (!a->prompts) {
            fprintf(stderr, "lisa-trainer: agent.prompts: %s\n", err);
            return TRN_EXIT_CONFIG;
        }
        lisa_log_info("prompts: %zu prompt file(s) from %s",
                      trn_prompts_count(a->prompts), cfg->prompts);
    }
    /* fail on bad enum values before loading a model */
    trn_failed_t fp;
    bool de, bf;
    if (trn_run_cfg_resolve(&a->cfg, &a->sc, &fp, &de, &bf, err, sizeof err) !=
        LISA_OK) {
        fprintf(stderr, "lisa-trainer: %s\n", err);
        return TRN_EXIT_CONFIG;
    }
    return TRN_EXIT_DONE;
}

/* The exit status for the loop's outcome. */
static trn_exit_t
s_loop_exit(lisa_rc_t rc)
{
    switch (rc) {
    case LISA_OK:
        return TRN_EXIT_DONE;
    case LISA_UNAVAILABLE:
    case LISA_TIMEOUT:
        return TRN_EXIT_BROKER;
    case LISA_INVALID:
    case LISA_AGAIN:
        return TRN_EXIT_CONFIG;
    default:
        return TRN_EXIT_MODEL;
    }
}

/* Runs the command on an assembled rank. */
static trn_exit_t
s_run(s_args_t *a, trn_service_t *svc, const trn_ckpt_state_t *st)
{
    char err[512] = "";
    trn_err_t terr = {{0}};
    if (!a->train) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000000L};
        while (!s_stop)
            nanosleep(&ts, NULL);
        return TRN_EXIT_DONE;
    }
    if (a->plan.rank > 0) { /* the other ranks follow rank 0's commands */
        lisa_rc_t rc = trn_dp_follow(
            trn_service_backend(svc), trn_service_group(svc),
            trn_service_engine(svc), &a->sc,
            (int) (a->cfg.step_timeout_ms > INT32_MAX ? INT32_MAX
                                                      : a->cfg.step_timeout_ms),
            &terr);
        if (rc != LISA_OK) {
            fprintf(stderr, "lisa-trainer: %s\n", terr.msg);
            return rc == LISA_AGAIN ? TRN_EXIT_DONE : TRN_EXIT_MODEL;
        }
        lisa_log_info("train: done (rank %lld)", (long long) a->plan.rank);
        return TRN_EXIT_DONE;
    }
    trn_service_wrap_dp(svc); /* rank 0 trains through the group */
    char runbuf[160];
    if (a->cfg.run_id && *a->cfg.run_id)
        snprintf(runbuf, sizeof runbuf, "%s", a->cfg.run_id);
    else if (st->run_id[0])
        snprintf(runbuf, sizeof runbuf, "%s", st->run_id);
    else
        snprintf(runbuf, sizeof runbuf, "lisa-%lld", (long long) time(NULL));
    trn_loop_args_t la = {.cfg = &a->cfg,
                          .backend = trn_service_backend(svc),
                          .engine = trn_service_engine(svc),
                          .train = a->tdata,
                          .val = a->vdata,
                          .prompts = a->prompts,
                          .run_id = runbuf,
                          .start_step = st->global_step,
                          .policy_version = st->policy_version,
                          .stop = &s_stop};
    lisa_rc_t rc = trn_loop_run(&la, err, sizeof err);
    if (rc != LISA_OK)
        fprintf(stderr, "lisa-trainer: %s\n", err);
    else
        lisa_log_info("train: done");
    return s_loop_exit(rc);
}

/* Sets the rank's bus identity before any broker socket is made. */
static trn_exit_t
s_curve(const trn_run_cfg_t *cfg)
{
    char err[256] = "";
    if (lisa_curve_use(cfg->curve_cert, cfg->broker_cert, err, sizeof err) ==
        LISA_OK)
        return TRN_EXIT_DONE;
    fprintf(stderr, "lisa-trainer: %s\n", err);
    return TRN_EXIT_CONFIG;
}

/* Assembles the rank, runs the command, tears down. */
static trn_exit_t
s_serve(s_args_t *a, int argc, char **argv)
{
    char err[512] = "";
    trn_service_args_t sa = {.cfg = &a->cfg,
                             .step = &a->sc,
                             .plan = &a->plan,
                             .train = a->train,
                             .argc = argc,
                             .argv = argv,
                             .stop = &s_stop};
    trn_exit_t code = TRN_EXIT_DONE;
    trn_service_t *svc = trn_service_new(&sa, &code, err, sizeof err);
    if (!svc) {
        if (err[0])
            fprintf(stderr, "lisa-trainer: %s\n", err);
        return code;
    }
    struct sigaction sig;
    memset(&sig, 0, sizeof sig);
    sig.sa_handler = s_on_signal;
    sigaction(SIGINT, &sig, NULL);
    sigaction(SIGTERM, &sig, NULL);
    trn_ckpt_state_t st;
    code = trn_service_join(svc, err, sizeof err);
    if (code == TRN_EXIT_DONE)
        code = trn_service_resume(svc, a->tdata, &st, err, sizeof err);
    if (code != TRN_EXIT_DONE)
        fprintf(stderr, "lisa-trainer: %s\n", err);
    else
        code = s_run(a, svc, &st);
    return trn_service_destroy(&svc, code);
}

int
main(int argc, char **argv)
{
    lisa_log_set_service("lisa-trainer");
    /* before any thread opens a socket (czmq initialises lazily) */
    zsys_init();
    zsys_set_logstream(NULL);
    if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        s_usage(argc < 2 ? stderr : stdout);
        if (argc >= 2) /* the settings both commands take */
            lisa_config_help(stdout, "lisa-trainer train|serve",
                             "\nsettings of both commands:", trn_run_cfg_table,
                             trn_run_cfg_table_len);
        return argc < 2 ? TRN_EXIT_CONFIG : TRN_EXIT_DONE;
    }
    s_args_t a;
    memset(&a, 0, sizeof a);
    bool check = strcmp(argv[1], "check") == 0;
    a.train = check || strcmp(argv[1], "train") == 0;
    if (!a.train && strcmp(argv[1], "serve") != 0) {
        s_usage(stderr);
        return TRN_EXIT_CONFIG;
    }
    a.sc = trn_step_defaults();
    bool quit = false;
    trn_exit_t code = s_settings(&a, argc, argv, &quit);
    if (code == TRN_EXIT_DONE && !quit)
        code = s_check(&a);
    if (code == TRN_EXIT_DONE && !quit && check)
        lisa_log_info("check: the settings and the data are good");
    else if (code == TRN_EXIT_DONE && !quit)
        code = s_curve(&a.cfg);
    if (code == TRN_EXIT_DONE && !quit && !check)
        code = s_serve(&a, argc, argv);
    lisa_curve_forget();
    trn_data_destroy(&a.tdata);
    trn_data_destroy(&a.vdata);
    trn_prompts_destroy(&a.prompts);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &a.cfg);
    lisa_free(&a.src);
    return (int) code;
}
