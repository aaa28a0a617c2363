/*
 * lisa-trainer: the policy's generation engine and the synchronous RL loop
 * in one process (docs/trainer-service.md).
 *
 *   lisa-trainer train --model DIR --train-data FILE [key=value ...]
 *   lisa-trainer serve --model DIR [...]
 *
 * Data parallel: with trainer.n_gpus_per_node=G this process is the
 * node's first rank and launches the other G - 1 itself (the same command
 * line plus their rank, one GPU each); ranks launched one by one (indexed
 * pods) say trainer.world_size, trainer.rank and trainer.bootstrap. Rank 0
 * runs the RL loop; every rank serves its own engine (trn_group, trn_dp).
 */
#include "lisa/lisa_config.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "trn_backend.h"
#include "trn_ckpt.h"
#include "trn_data.h"
#include "trn_dp.h"
#include "trn_engine.h"
#include "trn_group.h"
#include "trn_loop.h"
#include "trn_run_cfg.h"

#include <czmq.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

/* ---- ranks -------------------------------------------------------------- */

typedef struct {
    pid_t *pids; /* ranks this process launched */
    int n;
    bool gone;
} s_kids_t;

/* Whether every launched rank still runs (trn_group's liveness check). */
static int
s_kids_alive(void *ctx)
{
    s_kids_t *k = ctx;
    for (int i = 0; i < k->n; i++) {
        int st = 0;
        if (k->pids[i] > 0 && waitpid(k->pids[i], &st, WNOHANG) == k->pids[i]) {
            lisa_log_error("rank launched as pid %ld exited (%s %d)",
                           (long) k->pids[i],
                           WIFEXITED(st) ? "status" : "signal",
                           WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            k->pids[i] = -1;
            k->gone = true;
        }
    }
    return !k->gone;
}

/* Waits for the launched ranks to leave (they do after rank 0's STOP),
 * then ends any left after `grace_ms`. Returns how many failed. */
static int
s_kids_reap(s_kids_t *k, int grace_ms)
{
    int failed = k->gone ? 1 : 0;
    struct timespec tick = {.tv_sec = 0, .tv_nsec = 50 * 1000000L};
    for (int phase = 0; phase < 3; phase++) {
        int left = 0;
        for (int waited = 0; waited < grace_ms; waited += 50) {
            left = 0;
            for (int i = 0; i < k->n; i++) {
                int st = 0;
                if (k->pids[i] <= 0)
                    continue;
                if (waitpid(k->pids[i], &st, WNOHANG) == k->pids[i]) {
                    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        failed++;
                    k->pids[i] = -1;
                } else {
                    left++;
                }
            }
            if (!left)
                return failed;
            nanosleep(&tick, NULL);
        }
        for (int i = 0; i < k->n; i++) /* then TERM, then KILL */
            if (k->pids[i] > 0)
                kill(k->pids[i], phase == 0 ? SIGTERM : SIGKILL);
        grace_ms = 5000;
    }
    return failed;
}

/* Launches local ranks first+1 .. first+n-1: this program with the same
 * arguments plus the rank's, on GPU base+i. */
static lisa_rc_t
s_kids_spawn(s_kids_t *k, int argc, char **argv, int first, int n, int world,
             const char *endpoint)
{
    const char *dev = getenv("LISA_CUDA_DEVICE");
    int base = dev && *dev ? atoi(dev) : 0;
    k->pids = lisa_calloc((size_t) n, sizeof *k->pids);
    pid_t parent = getpid();
    for (int i = 1; i < n; i++) {
        char a_rank[64], a_world[64], a_boot[700], e_dev[32], e_local[32];
        snprintf(a_rank, sizeof a_rank, "trainer.rank=%d", first + i);
        snprintf(a_world, sizeof a_world, "trainer.world_size=%d", world);
        snprintf(a_boot, sizeof a_boot, "trainer.bootstrap=%s", endpoint);
        snprintf(e_dev, sizeof e_dev, "%d", base + i);
        snprintf(e_local, sizeof e_local, "%d", i);
        char **av = lisa_calloc((size_t) argc + 6, sizeof *av);
        for (int j = 0; j < argc; j++)
            av[j] = argv[j];
        av[argc] = a_rank;
        av[argc + 1] = a_world;
        av[argc + 2] = a_boot;
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            /* the rank ends with its launcher, whatever kills it */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent)
                _exit(EXIT_ENGINE);
            setenv("LISA_TRN_SPAWNED", "1", 1);
            setenv("LISA_TRN_LOCAL_RANK", e_local, 1);
            setenv("LISA_CUDA_DEVICE", e_dev, 1);
            execv("/proc/self/exe", av);
            _exit(127);
        }
        lisa_free(&av);
        if (pid < 0) {
            lisa_log_error("cannot launch rank %d: %s", first + i,
                           strerror(errno));
            return LISA_ERR;
        }
        k->pids[k->n++] = pid;
        lisa_log_info("launched rank %d as pid %ld on GPU %d", first + i,
                      (long) pid, base + i);
    }
    return LISA_OK;
}

/* A digest of what must agree between ranks: the backend, the model's
 * shape and the step's settings. */
static void
s_digest(const trn_run_cfg_t *c, const trn_config_t *m,
         const trn_step_cfg_t *sc, char *out, size_t len)
{
    char text[2048];
    snprintf(text, sizeof text,
             "%s|%lld,%lld,%lld,%lld,%lld,%lld,%lld,%d|%d,%d,%.9g|%.9g,%.9g,"
             "%.9g,%d,%.9g,%d,%.9g|%.9g,%.9g,%.9g,%.9g,%.9g|%.9g,%.9g,%zu,%d,"
             "%.9g|%lld,%lld,%llu",
             c->backend, (long long) m->hidden_size,
             (long long) m->intermediate_size, (long long) m->num_hidden_layers,
             (long long) m->num_attention_heads,
             (long long) m->num_key_value_heads, (long long) m->head_dim,
             (long long) m->vocab_size, (int) m->tie_word_embeddings,
             (int) sc->adv.kind, (int) sc->adv.norm_by_std, sc->adv.eps,
             sc->loss.clip_low, sc->loss.clip_high, sc->loss.clip_c,
             (int) sc->loss.agg, sc->loss.kl_coef, (int) sc->loss.kl_type,
             sc->loss.entropy_coef, c->lr, sc->optim.beta1, sc->optim.beta2,
             sc->optim.eps, sc->optim.weight_decay, sc->grad_clip,
             (double) sc->temperature, sc->micro_tokens, (int) sc->bypass,
             sc->is_threshold, (long long) c->batch_size, (long long) c->n,
             (unsigned long long) c->seed);
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = text; *p; p++)
        h = (h ^ (uint8_t) *p) * 1099511628211ull;
    snprintf(out, len, "%016llx", (unsigned long long) h);
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
    trn_step_cfg_t sc = trn_step_defaults();
    s_kids_t kids = {0};
    trn_group_t *group = NULL;
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
    /* the ranks: this process's, the world's, and which it launches */
    bool spawned = getenv("LISA_TRN_SPAWNED") != NULL;
    int local_rank = spawned ? atoi(getenv("LISA_TRN_LOCAL_RANK")
                                        ? getenv("LISA_TRN_LOCAL_RANK")
                                        : "0")
                             : 0;
    int64_t world = cfg.world, rank = cfg.rank, launch = 1;
    if (cfg.gpus_per_node < 1 || cfg.nodes < 1) {
        fprintf(stderr, "lisa-trainer: trainer.n_gpus_per_node and "
                        "trainer.nnodes must be at least 1\n");
        code = EXIT_CONFIG;
        goto out;
    }
    if (!spawned && (cfg.gpus_per_node > 1 || cfg.nodes > 1)) {
        if (cfg.node_rank < 0 || cfg.node_rank >= cfg.nodes ||
            cfg.nodes * cfg.gpus_per_node > TRN_GROUP_MAX_WORLD) {
            fprintf(stderr, "lisa-trainer: bad trainer.nnodes / "
                            "trainer.node_rank / trainer.n_gpus_per_node\n");
            code = EXIT_CONFIG;
            goto out;
        }
        world = cfg.nodes * cfg.gpus_per_node;
        rank = cfg.node_rank * cfg.gpus_per_node;
        launch = cfg.gpus_per_node;
        if (cfg.world > 1 && cfg.world != world) {
            fprintf(stderr,
                    "lisa-trainer: trainer.world_size %lld is not "
                    "trainer.nnodes x trainer.n_gpus_per_node (%lld)\n",
                    (long long) cfg.world, (long long) world);
            code = EXIT_CONFIG;
            goto out;
        }
    }
    if (world < 1 || world > TRN_GROUP_MAX_WORLD || rank < 0 || rank >= world) {
        fprintf(stderr, "lisa-trainer: bad rank %lld of world size %lld\n",
                (long long) rank, (long long) world);
        code = EXIT_CONFIG;
        goto out;
    }
    if (world > 1 && !train) {
        fprintf(stderr, "lisa-trainer: serve runs one rank; data parallel is "
                        "for train\n");
        code = EXIT_CONFIG;
        goto out;
    }
    if (world > 1 && launch == 1 && !spawned &&
        (!cfg.bootstrap || !*cfg.bootstrap) && rank > 0) {
        fprintf(stderr,
                "lisa-trainer: rank %lld needs trainer.bootstrap "
                "(rank 0's tcp://HOST:PORT)\n",
                (long long) rank);
        code = EXIT_CONFIG;
        goto out;
    }
    if (rank > 0) {
        static char svc[64];
        snprintf(svc, sizeof svc, "lisa-trainer.r%lld", (long long) rank);
        lisa_log_set_service(svc);
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
    /* the group first: rank 0 binds before it launches the node's ranks */
    char endpoint[600] = "";
    if (world > 1) {
        const char *boot = cfg.bootstrap && *cfg.bootstrap
                               ? cfg.bootstrap
                               : "tcp://127.0.0.1:0";
        const char *pc = strrchr(boot, ':');
        const char *port =
            pc && pc[1] && strcmp(pc + 1, "0") != 0 ? pc + 1 : "*";
        if (rank == 0 && cfg.nodes <= 1 && launch > 1)
            snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%s", port);
        else if (rank == 0)
            snprintf(endpoint, sizeof endpoint, "tcp://*:%s",
                     strcmp(port, "*") == 0 ? "7300" : port);
        else
            snprintf(endpoint, sizeof endpoint, "%s", boot);
        trn_group_cfg_t gc = {.rank = (int) rank,
                              .world = (int) world,
                              .endpoint = endpoint,
                              .run_id = cfg.run_id ? cfg.run_id : "",
                              .timeout_ms = (int) cfg.rank_timeout_ms,
                              .alive = launch > 1 ? s_kids_alive : NULL,
                              .alive_ctx = &kids,
                              .stop = &s_stop};
        group = trn_group_new(&gc, &terr);
        if (!group) {
            fprintf(stderr, "lisa-trainer: %s\n", terr.msg);
            code = EXIT_CONFIG;
            goto out;
        }
        if (launch > 1) {
            /* the node's ranks reach this one on loopback (rank 0) or
             * rank 0 where it is */
            char kid_ep[600];
            const char *bound = trn_group_endpoint(group);
            const char *bc = strrchr(bound, ':');
            if (rank == 0)
                snprintf(kid_ep, sizeof kid_ep, "tcp://127.0.0.1:%s",
                         bc ? bc + 1 : "7300");
            else
                snprintf(kid_ep, sizeof kid_ep, "%s", endpoint);
            if (s_kids_spawn(&kids, argc, argv, (int) rank, (int) launch,
                             (int) world, kid_ep) != LISA_OK) {
                code = EXIT_ENGINE;
                goto out;
            }
        }
    }
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
    char host[256], idbuf[64], runbuf[160], listenbuf[64], urlbuf[320];
    uint16_t port = 0;
    if (cfg.engine_port > 0 && cfg.engine_port + local_rank < 65536) {
        /* one port per rank of the node */
        int64_t p = cfg.engine_port + local_rank;
        snprintf(listenbuf, sizeof listenbuf, "0.0.0.0:%lld", (long long) p);
        lisa_free(&cfg.listen);
        cfg.listen = lisa_strdup(listenbuf);
        if (spawned && cfg.advertise_host && *cfg.advertise_host)
            lisa_free(&cfg.engine_url); /* the launcher's own */
        if (!cfg.engine_url && cfg.advertise_host && *cfg.advertise_host) {
            snprintf(urlbuf, sizeof urlbuf, "http://%s:%lld",
                     cfg.advertise_host, (long long) p);
            cfg.engine_url = lisa_strdup(urlbuf);
        }
    }
    if (s_listen(cfg.listen, host, sizeof host, &port) != 0) {
        fprintf(stderr, "lisa-trainer: bad engine.listen %s\n", cfg.listen);
        code = EXIT_CONFIG;
        goto out;
    }
    if (cfg.engine_port <= 0 && port != 0 && local_rank > 0) {
        if (port + local_rank > 65535) {
            fprintf(stderr,
                    "lisa-trainer: engine.listen port + rank > 65535\n");
            code = EXIT_CONFIG;
            goto out;
        }
        port = (uint16_t) (port + local_rank);
    }
    if (spawned && !(cfg.advertise_host && *cfg.advertise_host))
        lisa_free(&cfg.engine_url); /* each rank advertises its own */
    char engine_id[200];
    snprintf(idbuf, sizeof idbuf, "trainer-%ld", (long) getpid());
    if (rank > 0)
        snprintf(engine_id, sizeof engine_id, "%s-r%lld",
                 cfg.engine_id ? cfg.engine_id : idbuf, (long long) rank);
    else
        snprintf(engine_id, sizeof engine_id, "%s",
                 cfg.engine_id ? cfg.engine_id : idbuf);
    trn_engine_cfg_t ec = {
        .address = host,
        .port = port,
        .url = cfg.engine_url,
        .engine_id = engine_id,
        .broker = cfg.broker,
        .register_ttl_ms = cfg.register_ttl_ms,
        .max_batch = (size_t) (cfg.max_batch > 0 ? cfg.max_batch : 16),
        .max_len = (size_t) (cfg.max_len > 0 ? cfg.max_len : 0),
        .queue_max = (size_t) (cfg.queue_max > 0 ? cfg.queue_max : 256),
        .queue_timeout_ms = cfg.queue_timeout_ms,
        .policy_version = 0,
        .seed = cfg.seed + (uint64_t) rank * 0x9e3779b97f4a7c15ull,
    };
    /* the engine waits (paused) until the checkpoint's version is known */
    eng = trn_engine_new(be, &ec);
    if (!eng) {
        fprintf(stderr, "lisa-trainer: engine failed to start on %s\n",
                cfg.listen);
        code = EXIT_ENGINE;
        goto out;
    }
    if (trn_engine_pause(eng, 1000) != LISA_OK)
        lisa_log_warn("engine: busy before the start");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = s_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (group) { /* every rank's engine is up: join, then the device group */
        char digest[40];
        s_digest(&cfg, be->ops->config(be), &sc, digest, sizeof digest);
        uint8_t id[TRN_GROUP_ID_BYTES];
        bool have_id = false;
        bool dev = be->ops->dist_join != NULL;
        if (rank == 0 && dev && be->ops->dist_id(be, id, &terr) != LISA_OK) {
            fprintf(stderr, "lisa-trainer: %s\n", terr.msg);
            code = EXIT_MODEL;
            goto out;
        }
        if (trn_group_set_identity(group, trn_engine_url(eng), digest) !=
                LISA_OK ||
            trn_group_join(group, rank > 0 || dev ? id : NULL,
                           rank == 0 ? NULL : &have_id, &terr) != LISA_OK) {
            fprintf(stderr, "lisa-trainer: ranks: %s\n", terr.msg);
            code = EXIT_CONFIG;
            goto out;
        }
        if (rank > 0 && have_id != dev) {
            fprintf(stderr,
                    "lisa-trainer: ranks: rank 0 %s a device "
                    "communicator and this rank %s\n",
                    have_id ? "uses" : "does not use",
                    dev ? "does" : "does not");
            code = EXIT_CONFIG;
            goto out;
        }
        if (dev &&
            be->ops->dist_join(be, id, (int) rank, (int) world,
                               (int) cfg.rank_timeout_ms, trn_group_peers_ok,
                               group, &terr) != LISA_OK) {
            fprintf(stderr, "lisa-trainer: ranks: %s\n", terr.msg);
            code = EXIT_MODEL;
            goto out;
        }
    }
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
    trn_engine_resume(eng, st.policy_version);
    mkdir(cfg.out_dir, 0755);
    /* engine.url (rank r > 0: engine-r<r>.url) appears whole: written
     * aside, then renamed into place */
    char path[4096], tmp[4200];
    if (rank > 0)
        snprintf(path, sizeof path, "%s/engine-r%lld.url", cfg.out_dir,
                 (long long) rank);
    else
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
    if (rank > 0) { /* the other ranks follow rank 0's commands */
        rc = trn_dp_follow(be, group, eng, &sc,
                           (int) (cfg.step_timeout_ms > INT32_MAX
                                      ? INT32_MAX
                                      : cfg.step_timeout_ms),
                           &terr);
        if (rc != LISA_OK) {
            fprintf(stderr, "lisa-trainer: %s\n", terr.msg);
            code = rc == LISA_AGAIN ? EXIT_DONE : EXIT_MODEL;
        } else {
            lisa_log_info("train: done (rank %lld)", (long long) rank);
        }
        goto out;
    }
    if (group) { /* rank 0 trains through the group */
        trn_backend_t *dp = trn_dp_wrap(be, group, eng);
        be = dp;
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
    /* in this order: the ranks hear the stop; every rank leaves the device
     * communicator at once (its waits still watch the group); then the
     * group goes and the launched ranks are collected */
    trn_group_stop(group, code == EXIT_DONE);
    trn_engine_destroy(&eng);
    trn_backend_destroy(&be);
    trn_group_destroy(&group);
    if (kids.n && s_kids_reap(&kids, code == EXIT_DONE ? 60000 : 5000) > 0 &&
        code == EXIT_DONE) {
        fprintf(stderr, "lisa-trainer: a launched rank failed\n");
        code = EXIT_MODEL;
    }
    lisa_free(&kids.pids);
    trn_data_destroy(&tdata);
    trn_data_destroy(&vdata);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &cfg);
    lisa_free(&src);
    return code;
}
