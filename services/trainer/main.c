/*
 * lisa-trainer: the policy's generation engine and the synchronous RL loop
 * in one process (docs/trainer-service.md).
 *
 *   lisa-trainer train --model DIR --train-data FILE [key=value ...]
 *   lisa-trainer serve --model DIR [...]
 */
#include "lisa/lisa_config.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "trn_backend.h"
#include "trn_ckpt.h"
#include "trn_data.h"
#include "trn_engine.h"
#include "trn_loop.h"
#include "trn_run_cfg.h"

#include <czmq.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum {
    EXIT_DONE = 0,
    EXIT_CONFIG = 1,
    EXIT_BROKER = 2,
    EXIT_MODEL = 3,
    EXIT_ENGINE = 4
};

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
    fprintf(f, "usage: lisa-trainer train|serve [--help] [flags] "
               "[key=value ...]\n"
               "  train  the synchronous RL loop with its generation engine\n"
               "  serve  the generation engine alone\n");
}

/* "HOST:PORT" -> host (static buffer) and port. */
static int
s_listen(const char *s, char *host, size_t hl, uint16_t *port)
{
    const char *c = strrchr(s, ':');
    if (!c || (size_t) (c - s) >= hl)
        return -1;
    memcpy(host, s, (size_t) (c - s));
    host[c - s] = '\0';
    char *end = NULL;
    long p = strtol(c + 1, &end, 10);
    if (!end || *end || p < 0 || p > 65535)
        return -1;
    *port = (uint16_t) p;
    return 0;
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
        return argc < 2 ? EXIT_CONFIG : EXIT_DONE;
    }
    bool train = strcmp(argv[1], "train") == 0;
    if (!train && strcmp(argv[1], "serve") != 0) {
        s_usage(stderr);
        return EXIT_CONFIG;
    }
    trn_run_cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    char err[512] = "";
    lisa_config_source_t *src = lisa_calloc(trn_run_cfg_table_len, sizeof *src);
    lisa_config_opts_t opts = {
        .prog = train ? "lisa-trainer train" : "lisa-trainer serve",
        .about = "lisa-trainer: generation engine and synchronous RL loop",
        .sources = src};
    lisa_rc_t rc =
        lisa_config_load_ex(trn_run_cfg_table, trn_run_cfg_table_len, &cfg,
                            argc - 1, argv + 1, &opts, err, sizeof err);
    int code = EXIT_DONE;
    trn_data_t *tdata = NULL, *vdata = NULL;
    trn_backend_t *be = NULL;
    trn_engine_t *eng = NULL;
    if (rc == LISA_AGAIN)
        goto out;
    if (rc != LISA_OK) {
        fprintf(stderr, "lisa-trainer: %s\n", err);
        code = EXIT_CONFIG;
        goto out;
    }
    lisa_log_level_t level;
    if (lisa_log_level_parse(cfg.log_level, &level) == LISA_OK)
        lisa_log_set_level(level);
    lisa_config_dump(trn_run_cfg_table, trn_run_cfg_table_len, &cfg, src);
    if (cfg.world > 1 || cfg.nodes > 1 || cfg.gpus_per_node > 1) {
        /* The kernels and NCCL data parallel exist (trn_dist); launching
         * and coordinating ranks from the service does not yet. */
        fprintf(stderr,
                "lisa-trainer: a data-parallel run (world size %lld) is not "
                "supported by this version; run one rank per trainer\n",
                (long long) cfg.world);
        code = EXIT_CONFIG;
        goto out;
    }
    if (!cfg.model && !cfg.resume) {
        fprintf(stderr, "lisa-trainer: --model is required\n");
        code = EXIT_CONFIG;
        goto out;
    }
    if (train) {
        if (!cfg.train_files) {
            fprintf(stderr, "lisa-trainer: --train-data is required\n");
            code = EXIT_CONFIG;
            goto out;
        }
        if (trn_data_load(cfg.train_files, &tdata, err, sizeof err) !=
                LISA_OK ||
            (cfg.val_files && *cfg.val_files &&
             trn_data_load(cfg.val_files, &vdata, err, sizeof err) !=
                 LISA_OK)) {
            fprintf(stderr, "lisa-trainer: data: %s\n", err);
            code = EXIT_CONFIG;
            goto out;
        }
        /* fail on bad enum values before loading a model */
        trn_step_cfg_t sc;
        trn_failed_t fp;
        bool de, bf;
        if (trn_run_cfg_resolve(&cfg, &sc, &fp, &de, &bf, err, sizeof err) !=
            LISA_OK) {
            fprintf(stderr, "lisa-trainer: %s\n", err);
            code = EXIT_CONFIG;
            goto out;
        }
    }
    trn_err_t terr = {{0}};
    const char *mdir = cfg.resume && *cfg.resume ? cfg.resume : cfg.model;
    be = trn_backend_new(cfg.backend, mdir,
                         (int) (cfg.threads > 0 ? cfg.threads : 1),
                         train && cfg.use_kl, &terr);
    if (!be) {
        fprintf(stderr, "lisa-trainer: model %s: %s\n", mdir, terr.msg);
        code = EXIT_MODEL;
        goto out;
    }
    trn_ckpt_state_t st;
    memset(&st, 0, sizeof st);
    if (train && cfg.resume && *cfg.resume) {
        if (trn_ckpt_load(be, cfg.resume, &st, &terr) != LISA_OK) {
            fprintf(stderr, "lisa-trainer: resume %s: %s\n", cfg.resume,
                    terr.msg);
            code = EXIT_MODEL;
            goto out;
        }
        if (st.data_seed != cfg.seed ||
            st.batch_size != (uint64_t) cfg.batch_size ||
            st.n_train != trn_data_len(tdata))
            lisa_log_warn("resume: data seed, batch size or train set size "
                          "differ from the checkpoint's; the data order "
                          "will not continue exactly");
    }
    char host[256], idbuf[64], runbuf[160], listenbuf[64], urlbuf[320];
    uint16_t port = 0;
    if (cfg.engine_port > 0 && cfg.engine_port < 65536) {
        snprintf(listenbuf, sizeof listenbuf, "0.0.0.0:%lld",
                 (long long) cfg.engine_port);
        lisa_free(&cfg.listen);
        cfg.listen = lisa_strdup(listenbuf);
        if (!cfg.engine_url && cfg.advertise_host && *cfg.advertise_host) {
            snprintf(urlbuf, sizeof urlbuf, "http://%s:%lld",
                     cfg.advertise_host, (long long) cfg.engine_port);
            cfg.engine_url = lisa_strdup(urlbuf);
        }
    }
    if (s_listen(cfg.listen, host, sizeof host, &port) != 0) {
        fprintf(stderr, "lisa-trainer: bad engine.listen %s\n", cfg.listen);
        code = EXIT_CONFIG;
        goto out;
    }
    snprintf(idbuf, sizeof idbuf, "trainer-%ld", (long) getpid());
    trn_engine_cfg_t ec = {
        .address = host,
        .port = port,
        .url = cfg.engine_url,
        .engine_id = cfg.engine_id ? cfg.engine_id : idbuf,
        .broker = cfg.broker,
        .register_ttl_ms = cfg.register_ttl_ms,
        .max_batch = (size_t) (cfg.max_batch > 0 ? cfg.max_batch : 16),
        .max_len = (size_t) (cfg.max_len > 0 ? cfg.max_len : 0),
        .queue_max = (size_t) (cfg.queue_max > 0 ? cfg.queue_max : 256),
        .queue_timeout_ms = cfg.queue_timeout_ms,
        .policy_version = st.policy_version,
        .seed = cfg.seed,
    };
    if (train)
        ec.policy_version = st.policy_version;
    eng = trn_engine_new(be, &ec);
    if (!eng) {
        fprintf(stderr, "lisa-trainer: engine failed to start on %s\n",
                cfg.listen);
        code = EXIT_ENGINE;
        goto out;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    mkdir(cfg.out_dir, 0755);
    /* engine.url appears whole: written aside, then renamed into place */
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/engine.url", cfg.out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *uf = fopen(tmp, "w");
    if (uf) {
        int bad = fprintf(uf, "%s\n", trn_engine_url(eng)) < 0;
        bad |= fclose(uf) != 0;
        if (bad || rename(tmp, path) != 0) {
            lisa_log_warn("cannot write %s", path);
            unlink(tmp);
        }
    }
    if (!train) {
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000000L};
        while (!s_stop)
            nanosleep(&ts, NULL);
        goto out;
    }
    if (cfg.run_id && *cfg.run_id)
        snprintf(runbuf, sizeof runbuf, "%s", cfg.run_id);
    else if (st.run_id[0])
        snprintf(runbuf, sizeof runbuf, "%s", st.run_id);
    else
        snprintf(runbuf, sizeof runbuf, "lisa-%lld", (long long) time(NULL));
    trn_loop_args_t la = {.cfg = &cfg,
                          .backend = be,
                          .engine = eng,
                          .train = tdata,
                          .val = vdata,
                          .run_id = runbuf,
                          .start_step = st.global_step,
                          .policy_version = st.policy_version,
                          .stop = &s_stop};
    rc = trn_loop_run(&la, err, sizeof err);
    switch (rc) {
    case LISA_OK:
        code = EXIT_DONE;
        break;
    case LISA_UNAVAILABLE:
    case LISA_TIMEOUT:
        code = EXIT_BROKER;
        break;
    case LISA_INVALID:
        code = EXIT_CONFIG;
        break;
    case LISA_AGAIN:
        code = EXIT_CONFIG;
        break;
    default:
        code = EXIT_MODEL;
        break;
    }
    if (rc != LISA_OK)
        fprintf(stderr, "lisa-trainer: %s\n", err);
    else
        lisa_log_info("train: done");
out:
    trn_engine_destroy(&eng);
    trn_backend_destroy(&be);
    trn_data_destroy(&tdata);
    trn_data_destroy(&vdata);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &cfg);
    lisa_free(&src);
    return code;
}
