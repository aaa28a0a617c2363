/*
 * trn_service: one trainer rank assembled from its parts
 * (see trn_service.h for the order and why).
 *
 * The service owns what it builds: the group, the launched ranks, the
 * backend (later trn_dp's wrapper around it) and the engine, plus the
 * strings the engine's configuration points at. A step that fails leaves
 * the service as it is; trn_service_destroy takes apart whatever exists,
 * so a failure at any step tears down exactly what was built.
 */
#include "trn_service.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "trn_dp.h"
#include "trn_gguf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct trn_service {
    trn_run_cfg_t *cfg;
    const trn_step_cfg_t *step;
    trn_ranks_plan_t plan;
    bool train;
    trn_ranks_t *ranks;
    trn_group_t *group;
    trn_backend_t *be;
    trn_engine_t *eng;
    char endpoint[600];  /* the group's bootstrap */
    char host[256];      /* the engine's listen address */
    char engine_id[200]; /* the engine's id at the broker */
};

/* "HOST:PORT" -> host and port. */
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

/* Step 1: the group; rank 0 binds before it launches the node's ranks. */
static trn_exit_t
s_group(trn_service_t *s, const trn_service_args_t *a, char *err, size_t errlen)
{
    const trn_run_cfg_t *cfg = s->cfg;
    int64_t rank = s->plan.rank, launch = s->plan.launch;
    const char *boot = cfg->bootstrap && *cfg->bootstrap ? cfg->bootstrap
                                                         : "tcp://127.0.0.1:0";
    const char *pc = strrchr(boot, ':');
    const char *port = pc && pc[1] && strcmp(pc + 1, "0") != 0 ? pc + 1 : "*";
    if (rank == 0 && cfg->nodes <= 1 && launch > 1)
        snprintf(s->endpoint, sizeof s->endpoint, "tcp://127.0.0.1:%s", port);
    else if (rank == 0)
        snprintf(s->endpoint, sizeof s->endpoint, "tcp://*:%s",
                 strcmp(port, "*") == 0 ? "7300" : port);
    else
        snprintf(s->endpoint, sizeof s->endpoint, "%s", boot);
    trn_err_t terr = {{0}};
    trn_group_cfg_t gc = {.rank = (int) rank,
                          .world = (int) s->plan.world,
                          .endpoint = s->endpoint,
                          .run_id = cfg->run_id ? cfg->run_id : "",
                          .timeout_ms = (int) cfg->rank_timeout_ms,
                          .alive = launch > 1 ? trn_ranks_alive : NULL,
                          .alive_ctx = s->ranks,
                          .stop = a->stop};
    s->group = trn_group_new(&gc, &terr);
    if (!s->group) {
        snprintf(err, errlen, "%s", terr.msg);
        return TRN_EXIT_CONFIG;
    }
    if (launch <= 1)
        return TRN_EXIT_DONE;
    /* the node's ranks reach this one on loopback (rank 0) or rank 0
     * where it is */
    char kid_ep[600];
    const char *bound = trn_group_endpoint(s->group);
    const char *bc = strrchr(bound, ':');
    if (rank == 0)
        snprintf(kid_ep, sizeof kid_ep, "tcp://127.0.0.1:%s",
                 bc ? bc + 1 : "7300");
    else
        snprintf(kid_ep, sizeof kid_ep, "%s", s->endpoint);
    if (trn_ranks_spawn(s->ranks, a->argc, a->argv, (int) rank, (int) launch,
                        (int) s->plan.world, kid_ep) != LISA_OK)
        return TRN_EXIT_ENGINE;
    return TRN_EXIT_DONE;
}

/* The engine's port and advertised URL for this rank of the node. */
static trn_exit_t
s_engine_address(trn_service_t *s, uint16_t *port, char *err, size_t errlen)
{
    trn_run_cfg_t *cfg = s->cfg;
    int local_rank = s->plan.local_rank;
    bool spawned = s->plan.spawned;
    if (cfg->engine_port > 0 && cfg->engine_port + local_rank < 65536) {
        /* one port per rank of the node */
        char listenbuf[64], urlbuf[320];
        int64_t p = cfg->engine_port + local_rank;
        snprintf(listenbuf, sizeof listenbuf, "0.0.0.0:%lld", (long long) p);
        lisa_free(&cfg->listen);
        cfg->listen = lisa_strdup(listenbuf);
        if (spawned && cfg->advertise_host && *cfg->advertise_host)
            lisa_free(&cfg->engine_url); /* the launcher's own */
        if (!cfg->engine_url && cfg->advertise_host && *cfg->advertise_host) {
            snprintf(urlbuf, sizeof urlbuf, "http://%s:%lld",
                     cfg->advertise_host, (long long) p);
            cfg->engine_url = lisa_strdup(urlbuf);
        }
    }
    if (s_listen(cfg->listen, s->host, sizeof s->host, port) != 0) {
        snprintf(err, errlen, "bad engine.listen %s", cfg->listen);
        return TRN_EXIT_CONFIG;
    }
    if (cfg->engine_port <= 0 && *port != 0 && local_rank > 0) {
        if (*port + local_rank > 65535) {
            snprintf(err, errlen, "engine.listen port + rank > 65535");
            return TRN_EXIT_CONFIG;
        }
        *port = (uint16_t) (*port + local_rank);
    }
    if (spawned && !(cfg->advertise_host && *cfg->advertise_host))
        lisa_free(&cfg->engine_url); /* each rank advertises its own */
    return TRN_EXIT_DONE;
}

/* The engine's tokenizer directory: the model's, or for a GGUF file the
 * tokenizer it holds, written into <out>/tokenizer once. */
static const char *
s_tokenizer_dir(const trn_run_cfg_t *cfg, char *buf, size_t cap)
{
    struct stat sb;
    if (!cfg->model || !cfg->out_dir || stat(cfg->model, &sb) != 0 ||
        !S_ISREG(sb.st_mode))
        return cfg->model;
    snprintf(buf, cap, "%s/tokenizer", cfg->out_dir);
    mkdir(cfg->out_dir, 0755);
    mkdir(buf, 0755);
    trn_gguf_t *g = NULL;
    trn_err_t e;
    if (trn_gguf_open(cfg->model, &g, &e) != LISA_OK ||
        trn_gguf_write_tokenizer(g, buf, &e) != LISA_OK)
        lisa_log_warn("engine: no tokenizer from %s: %s", cfg->model, e.msg);
    trn_gguf_destroy(&g);
    return buf;
}

/* Step 3: the engine, paused until the checkpoint's version is known. */
static trn_exit_t
s_engine(trn_service_t *s, char *err, size_t errlen)
{
    const trn_run_cfg_t *cfg = s->cfg;
    char tokdir[4096];
    uint16_t port = 0;
    trn_exit_t code = s_engine_address(s, &port, err, errlen);
    if (code != TRN_EXIT_DONE)
        return code;
    char idbuf[64];
    snprintf(idbuf, sizeof idbuf, "trainer-%ld", (long) getpid());
    const char *id = cfg->engine_id ? cfg->engine_id : idbuf;
    if (s->plan.rank > 0)
        snprintf(s->engine_id, sizeof s->engine_id, "%s-r%lld", id,
                 (long long) s->plan.rank);
    else
        snprintf(s->engine_id, sizeof s->engine_id, "%s", id);
    size_t kv_bytes = 0;
    double kv_frac = 0;
    if (trn_run_cfg_kv_memory(cfg, &kv_bytes, &kv_frac, err, errlen) != LISA_OK)
        return TRN_EXIT_CONFIG;
    int64_t seqs = cfg->max_batch > 0 ? cfg->max_batch : cfg->max_seqs;
    if (seqs <= 0 || cfg->block_size <= 0 || cfg->max_step_tokens <= 0 ||
        (cfg->block_size & (cfg->block_size - 1)) != 0 ||
        cfg->block_size > 1024) {
        snprintf(err, errlen,
                 "engine.max_seqs, engine.max_step_tokens must be > 0 and "
                 "engine.block_size a power of two up to 1024");
        return TRN_EXIT_CONFIG;
    }
    trn_engine_cfg_t ec = {
        .address = s->host,
        .port = port,
        .url = cfg->engine_url,
        .engine_id = s->engine_id,
        .broker = cfg->broker,
        .register_ttl_ms = cfg->register_ttl_ms,
        .max_batch = (size_t) seqs,
        .max_len = (size_t) (cfg->max_len > 0 ? cfg->max_len : 0),
        .block_size = (size_t) cfg->block_size,
        .max_step_tokens = (size_t) cfg->max_step_tokens,
        .kv_bytes = kv_bytes,
        .kv_fraction = kv_frac,
        .no_prefix_cache = !cfg->prefix_cache,
        /* serving holds bf16 weights, the KV cache and step buffers; a
         * training rank brings its training state on for the update */
        .offload_train = true,
        .time_share = s->train,
        .queue_max = (size_t) (cfg->queue_max > 0 ? cfg->queue_max : 1024),
        .queue_timeout_ms = cfg->queue_timeout_ms,
        .batch_wait_ms = cfg->batch_wait_ms,
        .policy_version = 0,
        .seed = cfg->seed + (uint64_t) s->plan.rank * 0x9e3779b97f4a7c15ull,
        .tokenizer_dir = s_tokenizer_dir(cfg, tokdir, sizeof tokdir),
    };
    s->eng = trn_engine_new(s->be, &ec);
    if (!s->eng) {
        snprintf(err, errlen, "engine failed to start on %s", cfg->listen);
        return TRN_EXIT_ENGINE;
    }
    if (trn_engine_pause(s->eng, 1000) != LISA_OK)
        lisa_log_warn("engine: busy before the start");
    return TRN_EXIT_DONE;
}

/* Tears down in the order the file comment gives. */
static trn_exit_t
s_teardown(trn_service_t *s, trn_exit_t code)
{
    trn_group_stop(s->group, code == TRN_EXIT_DONE);
    trn_engine_destroy(&s->eng);
    trn_backend_destroy(&s->be);
    trn_group_destroy(&s->group);
    if (trn_ranks_count(s->ranks) &&
        trn_ranks_reap(s->ranks, code == TRN_EXIT_DONE ? 60000 : 5000) > 0 &&
        code == TRN_EXIT_DONE) {
        fprintf(stderr, "lisa-trainer: a launched rank failed\n");
        code = TRN_EXIT_MODEL;
    }
    trn_ranks_destroy(&s->ranks);
    return code;
}

trn_service_t *
trn_service_new(const trn_service_args_t *a, trn_exit_t *code, char *err,
                size_t errlen)
{
    err[0] = '\0';
    trn_service_t *s = lisa_calloc(1, sizeof *s);
    s->cfg = a->cfg;
    s->step = a->step;
    s->plan = *a->plan;
    s->train = a->train;
    s->ranks = trn_ranks_new();
    *code = TRN_EXIT_DONE;
    if (s->plan.world > 1)
        *code = s_group(s, a, err, errlen);
    if (*code == TRN_EXIT_DONE) {
        const trn_run_cfg_t *cfg = s->cfg;
        const char *mdir =
            cfg->resume && *cfg->resume ? cfg->resume : cfg->model;
        trn_err_t terr = {{0}};
        s->be = trn_backend_new(
            cfg->backend, mdir, (int) (cfg->threads > 0 ? cfg->threads : 1),
            a->train && (cfg->use_kl || cfg->kl_in_reward), &terr);
        if (!s->be) {
            snprintf(err, errlen, "model %s: %s", mdir, terr.msg);
            *code = TRN_EXIT_MODEL;
        }
    }
    if (*code == TRN_EXIT_DONE)
        *code = s_engine(s, err, errlen);
    if (*code == TRN_EXIT_DONE)
        return s;
    (void) s_teardown(s, *code);
    lisa_free(&s);
    return NULL;
}

trn_exit_t
trn_service_join(trn_service_t *s, char *err, size_t errlen)
{
    err[0] = '\0';
    if (!s->group)
        return TRN_EXIT_DONE;
    /* every rank's engine is up: join, then the device group */
    trn_backend_t *be = s->be;
    int64_t rank = s->plan.rank;
    trn_err_t terr = {{0}};
    char digest[40];
    s_digest(s->cfg, be->ops->config(be), s->step, digest, sizeof digest);
    uint8_t id[TRN_GROUP_ID_BYTES];
    bool have_id = false;
    bool dev = be->ops->dist_join != NULL;
    if (rank == 0 && dev && be->ops->dist_id(be, id, &terr) != LISA_OK) {
        snprintf(err, errlen, "%s", terr.msg);
        return TRN_EXIT_MODEL;
    }
    if (trn_group_set_identity(s->group, trn_engine_url(s->eng), digest) !=
            LISA_OK ||
        trn_group_join(s->group, rank > 0 || dev ? id : NULL,
                       rank == 0 ? NULL : &have_id, &terr) != LISA_OK) {
        snprintf(err, errlen, "ranks: %s", terr.msg);
        return TRN_EXIT_CONFIG;
    }
    if (rank > 0 && have_id != dev) {
        snprintf(err, errlen,
                 "ranks: rank 0 %s a device communicator and this rank %s",
                 have_id ? "uses" : "does not use", dev ? "does" : "does not");
        return TRN_EXIT_CONFIG;
    }
    if (dev &&
        be->ops->dist_join(be, id, (int) rank, (int) s->plan.world,
                           (int) s->cfg->rank_timeout_ms, trn_group_peers_ok,
                           s->group, &terr) != LISA_OK) {
        snprintf(err, errlen, "ranks: %s", terr.msg);
        return TRN_EXIT_MODEL;
    }
    return TRN_EXIT_DONE;
}

/* engine.url (rank r > 0: engine-r<r>.url) appears whole: written aside,
 * then renamed into place. */
static void
s_publish_url(const trn_service_t *s)
{
    char path[4096], tmp[4200];
    const char *out = s->cfg->out_dir;
    mkdir(out, 0755);
    if (s->plan.rank > 0)
        snprintf(path, sizeof path, "%s/engine-r%lld.url", out,
                 (long long) s->plan.rank);
    else
        snprintf(path, sizeof path, "%s/engine.url", out);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *uf = fopen(tmp, "w");
    if (!uf)
        return;
    int bad = fprintf(uf, "%s\n", trn_engine_url(s->eng)) < 0;
    bad |= fclose(uf) != 0;
    if (bad || rename(tmp, path) != 0) {
        lisa_log_warn("cannot write %s", path);
        unlink(tmp);
    }
}

trn_exit_t
trn_service_resume(trn_service_t *s, const trn_data_t *train_data,
                   trn_ckpt_state_t *st, char *err, size_t errlen)
{
    err[0] = '\0';
    memset(st, 0, sizeof *st);
    const trn_run_cfg_t *cfg = s->cfg;
    if (s->train && cfg->resume && *cfg->resume) {
        trn_err_t terr = {{0}};
        if (trn_ckpt_load(s->be, cfg->resume, st, &terr) != LISA_OK) {
            snprintf(err, errlen, "resume %s: %s", cfg->resume, terr.msg);
            return TRN_EXIT_MODEL;
        }
        if (st->data_seed != cfg->seed ||
            st->batch_size != (uint64_t) cfg->batch_size ||
            (train_data && st->n_train != trn_data_len(train_data)))
            lisa_log_warn("resume: data seed, batch size or train set size "
                          "differ from the checkpoint's; the data order "
                          "will not continue exactly");
    }
    trn_engine_resume(s->eng, st->policy_version);
    s_publish_url(s);
    return TRN_EXIT_DONE;
}

void
trn_service_wrap_dp(trn_service_t *s)
{
    if (s->group && s->plan.rank == 0)
        s->be = trn_dp_wrap(s->be, s->group, s->eng);
}

trn_backend_t *
trn_service_backend(trn_service_t *s)
{
    return s->be;
}

trn_engine_t *
trn_service_engine(trn_service_t *s)
{
    return s->eng;
}

trn_group_t *
trn_service_group(trn_service_t *s)
{
    return s->group;
}

trn_exit_t
trn_service_destroy(trn_service_t **s_p, trn_exit_t code)
{
    if (!s_p || !*s_p)
        return code;
    code = s_teardown(*s_p, code);
    lisa_free(s_p);
    return code;
}
