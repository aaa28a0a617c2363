/*
 * trn_dp / trn_group tests: data parallel across ranks over real ZeroMQ on
 * loopback, with the CPU backend and a small random model, each rank with
 * its own generation engine. Two ranks and three ranks train a batch to
 * the same weights as one rank (checked through log-probs after the
 * step), every rank holds the same weights afterwards, the step's reported
 * sums equal one rank's; bad joins are refused, a missing rank ends the
 * bootstrap at its deadline, a departed rank ends a step at once, and
 * strangers on rank 0's port (another run's rank, a socket that speaks
 * something else, their disconnects) change nothing, and a rank whose
 * rank 0 endpoint is held by something else (that answers no ZMTP, or says
 * nothing) ends its join instead of waiting on. With
 * context parallelism on, the longest trajectories train on every rank at
 * once, split between them, to the same weights. The first test is the
 * usage example.
 */
#include "trn_backend.h"
#include "trn_dp.h"
#include "trn_engine.h"
#include "trn_group.h"
#include "trn_tiny_model.h"

#include <criterion/criterion.h>
#include <czmq.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_SEQS 7

static char s_dir[128];

static void
s_setup(void)
{
    trn_tiny_model_dir(s_dir, sizeof s_dir, "trn_dp_test", 2, 7);
}

static void
s_teardown(void)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

/* A batch of S_SEQS trajectories of different lengths, two groups. */
typedef struct {
    size_t off[S_SEQS + 1];
    int32_t tok[1024];
    uint8_t mask[1024];
    float lp[1024];
    int64_t group[S_SEQS];
    double score[S_SEQS];
    trn_rollouts_t r;
} s_batch_t;

static void
s_batch(s_batch_t *b)
{
    unsigned seed = 5;
    size_t t = 0;
    b->off[0] = 0;
    for (size_t s = 0; s < S_SEQS; s++) {
        size_t len = 20 + (s * 13) % 41;
        for (size_t k = 0; k < len; k++, t++) {
            b->tok[t] = (int32_t) (rand_r(&seed) % 64);
            b->mask[t] = k >= 6 && (k % 5) != 0;
            b->lp[t] = b->mask[t] ? -2.0f : 0.0f;
        }
        b->off[s + 1] = t;
        b->group[s] = (int64_t) (s % 2);
        b->score[s] = (double) ((s * 7) % 3) / 2.0;
    }
    trn_rollouts_t r = {.n_seqs = S_SEQS,
                        .seq_offsets = b->off,
                        .tokens = b->tok,
                        .mask = b->mask,
                        .rollout_logp = b->lp,
                        .group = b->group,
                        .score = b->score};
    b->r = r;
}

/* Context parallelism for trajectories over this many tokens (0: off),
 * on every rank of a test alike. */
static size_t s_cp_tokens;

static trn_step_cfg_t
s_cfg(void)
{
    trn_step_cfg_t c = trn_step_defaults();
    c.optim.lr = 1e-2;
    c.micro_tokens = 64; /* several micro-batches to spread */
    c.loss.entropy_coef = 0.01;
    if (s_cp_tokens > 0) {
        /* the trajectories of 57 and 59 tokens run on every rank; a
         * per-sequence mean needs each one's whole count of tokens */
        c.cp_tokens = s_cp_tokens;
        c.loss.agg = TRN_AGG_SEQ_MEAN_TOKEN_MEAN;
    }
    return c;
}

typedef struct {
    int rank, world;
    char endpoint[256];
    const char *digest;
    trn_backend_t *b;
    trn_engine_t *e;
    trn_group_t *g;
    lisa_rc_t join_rc, follow_rc;
    bool leave_after_join; /* the departed-rank test */
    trn_err_t err;
} s_rank_t;

static trn_backend_t *
s_backend(void)
{
    trn_err_t err = {{0}};
    trn_backend_t *b = trn_backend_new("cpu", s_dir, 1, false, &err);
    cr_assert(b, "%s", err.msg);
    return b;
}

static trn_engine_t *
s_engine(trn_backend_t *b)
{
    trn_engine_cfg_t ec = {.address = "127.0.0.1", .max_batch = 2, .seed = 1};
    trn_engine_t *e = trn_engine_new(b, &ec);
    cr_assert(e);
    return e;
}

static void *
s_follower(void *arg)
{
    s_rank_t *k = arg;
    trn_group_cfg_t gc = {.rank = k->rank,
                          .world = k->world,
                          .endpoint = k->endpoint,
                          .run_id = "run",
                          .digest = k->digest,
                          .engine_url = trn_engine_url(k->e),
                          .timeout_ms = 5000};
    k->g = trn_group_new(&gc, &k->err);
    if (!k->g) {
        k->join_rc = LISA_ERR;
        return NULL;
    }
    k->join_rc = trn_group_join(k->g, NULL, NULL, &k->err);
    if (k->join_rc != LISA_OK || k->leave_after_join) {
        trn_group_destroy(&k->g);
        return NULL;
    }
    trn_step_cfg_t c = s_cfg();
    k->follow_rc = trn_dp_follow(k->b, k->g, k->e, &c, 5000, &k->err);
    trn_group_destroy(&k->g);
    return NULL;
}

static trn_group_t *
s_root(int world, const char *digest, int timeout_ms, trn_engine_t *e,
       trn_err_t *err)
{
    trn_group_cfg_t gc = {.rank = 0,
                          .world = world,
                          .endpoint = "tcp://127.0.0.1:*",
                          .run_id = "run",
                          .digest = digest,
                          .engine_url = e ? trn_engine_url(e) : "",
                          .timeout_ms = timeout_ms};
    trn_group_t *g = trn_group_new(&gc, err);
    cr_assert(g, "%s", err->msg);
    return g;
}

/* Starts rank `rank` in a thread; with `leave` it leaves right after the
 * join. */
static void
s_start(s_rank_t *k, int rank, int world, trn_group_t *root, const char *dg,
        bool leave, pthread_t *th)
{
    memset(k, 0, sizeof *k);
    k->leave_after_join = leave;
    k->rank = rank;
    k->world = world;
    k->digest = dg;
    snprintf(k->endpoint, sizeof k->endpoint, "%s", trn_group_endpoint(root));
    k->b = s_backend();
    k->e = s_engine(k->b);
    cr_assert_eq(pthread_create(th, NULL, s_follower, k), 0);
}

/* Seconds since t0 (monotonic). */
static double
s_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double) (t1.tv_sec - t0->tv_sec) +
           (double) (t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static void
s_free_rank(s_rank_t *k)
{
    trn_engine_destroy(&k->e);
    trn_backend_destroy(&k->b);
}

/* Log-probs of b's sampled tokens under backend x (one rank). */
static void
s_logprobs(trn_backend_t *x, s_batch_t *b, float *lp)
{
    trn_step_cfg_t c = s_cfg();
    trn_err_t err = {{0}};
    cr_assert_eq(x->ops->logprobs(x, &c, &b->r, lp, &err), LISA_OK, "%s",
                 err.msg);
}

static void
s_same_run(int world)
{
    s_batch_t b;
    s_batch(&b);
    size_t nt = b.off[S_SEQS];
    trn_step_cfg_t c = s_cfg();
    trn_err_t err = {{0}};

    /* one rank: the reference */
    trn_backend_t *one = s_backend();
    trn_step_out_t o1;
    cr_assert_eq(one->ops->train_step(one, &c, &b.r, &o1, &err), LISA_OK, "%s",
                 err.msg);
    float *ref = calloc(nt, sizeof *ref);
    s_logprobs(one, &b, ref);

    /* `world` ranks */
    trn_backend_t *b0 = s_backend();
    trn_engine_t *e0 = s_engine(b0);
    trn_group_t *g = s_root(world, "d1", 5000, e0, &err);
    s_rank_t k[4];
    pthread_t th[4];
    for (int r = 1; r < world; r++)
        s_start(&k[r], r, world, g, "d1", false, &th[r]);
    cr_assert_eq(trn_group_join(g, NULL, NULL, &err), LISA_OK, "%s", err.msg);
    for (int r = 1; r < world; r++)
        cr_assert_str_eq(trn_group_engine_url(g, r), trn_engine_url(k[r].e));
    trn_backend_t *dp = trn_dp_wrap(b0, g, e0);
    trn_step_out_t on;
    cr_assert_eq(dp->ops->train_step(dp, &c, &b.r, &on, &err), LISA_OK, "%s",
                 err.msg);
    float *got = calloc(nt, sizeof *got);
    dp->ops->logprobs(dp, &c, &b.r, got, &err);
    /* the reported sums cover the whole batch */
    cr_assert_float_eq(on.tokens, o1.tokens, 1e-9);
    cr_assert_eq(on.micro_batches, o1.micro_batches);
    /* the trajectories of 57 and 59 tokens, each once, when it is on */
    cr_assert_eq(on.cp_micro_batches, s_cp_tokens > 0 ? 2 : 0);
    cr_assert_eq(o1.cp_micro_batches, 0);
    cr_assert_float_eq(on.loss, o1.loss, 1e-5 * (1 + fabs(o1.loss)));
    cr_assert_float_eq(on.entropy, o1.entropy, 1e-5);
    cr_assert_float_eq(on.grad_norm, o1.grad_norm, 1e-4 * o1.grad_norm);
    cr_assert_gt(o1.grad_norm, 0);
    /* same weights: the log-probs after the step agree with one rank's,
     * and moved away from the engine's */
    double moved = 0;
    for (size_t t = 0; t < nt; t++) {
        /* context parallelism sums the keys' gradients in another order:
         * fp32 rounding, relative to the value */
        double tol = 2e-5 + (s_cp_tokens > 0 ? 1e-5 * fabs(ref[t]) : 0);
        cr_assert_float_eq(got[t], ref[t], tol, "token %zu: %g vs %g", t,
                           (double) got[t], (double) ref[t]);
        moved += b.mask[t] ? fabs((double) ref[t] + 2.0) : 0;
    }
    cr_assert_gt(moved, 0);
    /* after the step each engine serves the next policy version */
    cr_assert_eq(trn_engine_policy_version(e0), 0); /* the loop bumps 0 */
    trn_group_stop(g, true);
    for (int r = 1; r < world; r++) {
        pthread_join(th[r], NULL);
        cr_assert_eq(k[r].follow_rc, LISA_OK, "%s", k[r].err.msg);
        cr_assert_eq(trn_engine_policy_version(k[r].e), 1);
        float *mine = calloc(nt, sizeof *mine);
        s_logprobs(k[r].b, &b, mine);
        for (size_t t = 0; t < nt; t++)
            cr_assert_float_eq(mine[t], got[t], 1e-6, "rank %d token %zu", r,
                               t);
        free(mine);
        s_free_rank(&k[r]);
    }
    trn_engine_destroy(&e0);
    trn_backend_destroy(&dp);
    trn_group_destroy(&g);
    trn_backend_destroy(&one);
    free(ref);
    free(got);
}

TestSuite(trn_dp, .init = s_setup, .fini = s_teardown, .timeout = 60);

Test(trn_dp, usage_two_ranks_train_like_one)
{
    s_same_run(2);
}

Test(trn_dp, three_ranks_train_like_one)
{
    s_same_run(3);
}

Test(trn_dp, two_ranks_context_parallel_train_like_one)
{
    s_cp_tokens = 50;
    s_same_run(2);
}

Test(trn_dp, three_ranks_context_parallel_train_like_one)
{
    s_cp_tokens = 50;
    s_same_run(3);
}

typedef struct {
    int rank;
    char endpoint[256];
    double got[3];
    lisa_rc_t rc;
} s_summer_t;

/* A rank that takes one command and adds (rank + 1) * (1, 10, 100). */
static void *
s_summer(void *arg)
{
    s_summer_t *k = arg;
    trn_err_t err = {{0}};
    trn_group_cfg_t gc = {.rank = k->rank,
                          .world = 3,
                          .endpoint = k->endpoint,
                          .digest = "d",
                          .engine_url = "",
                          .timeout_ms = 5000};
    trn_group_t *g = trn_group_new(&gc, &err);
    k->rc = g ? trn_group_join(g, NULL, NULL, &err) : LISA_ERR;
    Lisa__RankCommand *cmd = NULL;
    if (k->rc == LISA_OK)
        k->rc = trn_group_next(g, &cmd, &err);
    if (k->rc == LISA_OK) {
        double v[3] = {k->rank + 1, 10.0 * (k->rank + 1),
                       100.0 * (k->rank + 1)};
        k->rc = trn_group_sum(g, v, 3, &err);
        memcpy(k->got, v, sizeof v);
        trn_group_free_command(&cmd);
        if (trn_group_reply(g, k->rc, err.msg) != LISA_OK)
            k->rc = LISA_ERR;
    }
    /* a rank leaves only after rank 0's STOP */
    if (k->rc == LISA_OK && trn_group_next(g, &cmd, &err) == LISA_OK) {
        if (cmd->op != LISA__RANK_OP__RANK_OP_STOP ||
            trn_group_reply(g, LISA_OK, NULL) != LISA_OK)
            k->rc = LISA_ERR;
        trn_group_free_command(&cmd);
    }
    trn_group_destroy(&g);
    return NULL;
}

/* Ranks 1 and 2 of three as s_summer threads on rank 0's endpoint ep. */
static void
s_summers(s_summer_t *k, pthread_t *th, const char *ep)
{
    for (int r = 1; r < 3; r++) {
        memset(&k[r], 0, sizeof k[r]);
        k[r].rank = r;
        snprintf(k[r].endpoint, sizeof k[r].endpoint, "%s", ep);
        cr_assert_eq(pthread_create(&th[r], NULL, s_summer, &k[r]), 0);
    }
}

/* Rank 0 of a joined group of three: one command whose sum crosses every
 * rank, then the stop; every rank got the total. */
static void
s_sum_and_stop(trn_group_t *g, s_summer_t *k, pthread_t *th)
{
    trn_err_t err = {{0}};
    trn_comm_t c = trn_group_comm(g);
    cr_assert_eq(c.world, 3);
    cr_assert_eq(c.rank, 0);
    Lisa__RankCommand cmd = LISA__RANK_COMMAND__INIT;
    cmd.op = LISA__RANK_OP__RANK_OP_LOGPROBS;
    cr_assert_eq(trn_group_command(g, &cmd, &err), LISA_OK, "%s", err.msg);
    double v[3] = {1, 10, 100};
    cr_assert_eq(c.sum(c.self, v, 3, &err), LISA_OK, "%s", err.msg);
    cr_assert_float_eq(v[0], 6, 1e-12);
    cr_assert_float_eq(v[1], 60, 1e-12);
    cr_assert_float_eq(v[2], 600, 1e-12);
    cr_assert_eq(trn_group_finish(g, &err), LISA_OK, "%s", err.msg);
    trn_group_stop(g, true);
    for (int r = 1; r < 3; r++) {
        pthread_join(th[r], NULL);
        cr_assert_eq(k[r].rc, LISA_OK);
        cr_assert_float_eq(k[r].got[2], 600, 1e-12);
    }
}

Test(trn_dp, sums_cross_every_rank)
{
    trn_err_t err = {{0}};
    trn_group_t *g = s_root(3, "d", 5000, NULL, &err);
    s_summer_t k[3];
    pthread_t th[3];
    s_summers(k, th, trn_group_endpoint(g));
    cr_assert_eq(trn_group_join(g, NULL, NULL, &err), LISA_OK, "%s", err.msg);
    s_sum_and_stop(g, k, th);
    trn_group_destroy(&g);
}

typedef struct {
    char endpoint[256];
    lisa_rc_t rc;
    trn_err_t err;
} s_foreign_t;

/* Rank 1 of another run, with rank 0's settings otherwise. */
static void *
s_foreign(void *arg)
{
    s_foreign_t *k = arg;
    trn_group_cfg_t gc = {.rank = 1,
                          .world = 3,
                          .endpoint = k->endpoint,
                          .run_id = "other",
                          .digest = "d",
                          .engine_url = "",
                          .timeout_ms = 5000};
    trn_group_t *g = trn_group_new(&gc, &k->err);
    k->rc = g ? trn_group_join(g, NULL, NULL, &k->err) : LISA_ERR;
    trn_group_destroy(&g);
    return NULL;
}

Test(trn_dp, strangers_on_rank_0s_port_change_nothing)
{
    trn_err_t err = {{0}};
    trn_group_t *g = s_root(3, "d", 5000, NULL, &err);
    const char *ep = trn_group_endpoint(g);
    /* a socket that speaks something else, before the ranks join */
    zsock_t *x = zsock_new(ZMQ_DEALER);
    cr_assert_eq(zsock_connect(x, "%s", ep), 0);
    cr_assert_eq(zstr_send(x, "hello"), 0);
    s_foreign_t f = {.rc = LISA_OK};
    snprintf(f.endpoint, sizeof f.endpoint, "%s", ep);
    pthread_t fth;
    cr_assert_eq(pthread_create(&fth, NULL, s_foreign, &f), 0);
    zclock_sleep(200); /* its join waits at rank 0 before the ranks' */
    s_summer_t k[3];
    pthread_t th[3];
    s_summers(k, th, ep);
    cr_assert_eq(trn_group_join(g, NULL, NULL, &err), LISA_OK, "%s", err.msg);
    pthread_join(fth, NULL);
    cr_assert_eq(f.rc, LISA_INVALID);
    cr_assert(strstr(f.err.msg, "in run other, not run"), "%s", f.err.msg);
    /* the stranger leaves after the join and another one talks */
    zsock_destroy(&x);
    zsock_t *y = zsock_new(ZMQ_DEALER);
    cr_assert_eq(zsock_connect(y, "%s", ep), 0);
    cr_assert_eq(zstr_send(y, "hello again"), 0);
    zclock_sleep(300); /* the disconnect and the message are at rank 0 */
    cr_assert(trn_group_peers_ok(g));
    s_sum_and_stop(g, k, th);
    zsock_destroy(&y);
    trn_group_destroy(&g);
}

Test(trn_dp, other_settings_are_refused)
{
    trn_err_t err = {{0}};
    trn_group_t *g = s_root(2, "mine", 5000, NULL, &err);
    s_rank_t k;
    pthread_t th;
    s_start(&k, 1, 2, g, "theirs", false, &th);
    lisa_rc_t rc = trn_group_join(g, NULL, NULL, &err);
    cr_assert_eq(rc, LISA_INVALID);
    cr_assert(strstr(err.msg, "other settings"), "%s", err.msg);
    pthread_join(th, NULL);
    cr_assert_eq(k.join_rc, LISA_INVALID);
    cr_assert(strstr(k.err.msg, "refused"), "%s", k.err.msg);
    s_free_rank(&k);
    trn_group_destroy(&g);
}

Test(trn_dp, a_missing_rank_ends_the_bootstrap_at_its_deadline)
{
    trn_err_t err = {{0}};
    trn_group_t *g = s_root(3, "d", 400, NULL, &err);
    s_rank_t k;
    pthread_t th;
    s_start(&k, 1, 3, g, "d", false, &th);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(trn_group_join(g, NULL, NULL, &err), LISA_TIMEOUT);
    double s = s_since(&t0);
    cr_assert(s >= 0.35 && s < 3, "%g s", s);
    cr_assert(strstr(err.msg, "2 of 3 ranks"), "%s", err.msg);
    trn_group_destroy(&g); /* rank 1 is still waiting for its answer */
    pthread_join(th, NULL);
    cr_assert_neq(k.join_rc, LISA_OK);
    s_free_rank(&k);
}

Test(trn_dp, a_departed_rank_ends_the_step_at_once)
{
    s_batch_t b;
    s_batch(&b);
    trn_err_t err = {{0}};
    trn_backend_t *b0 = s_backend();
    trn_engine_t *e0 = s_engine(b0);
    trn_group_t *g = s_root(2, "d", 30000, e0, &err);
    s_rank_t k;
    pthread_t th;
    s_start(&k, 1, 2, g, "d", true, &th);
    cr_assert_eq(trn_group_join(g, NULL, NULL, &err), LISA_OK, "%s", err.msg);
    pthread_join(th, NULL); /* rank 1 closed its socket */
    trn_backend_t *dp = trn_dp_wrap(b0, g, e0);
    trn_step_cfg_t c = s_cfg();
    trn_step_out_t o;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    lisa_rc_t rc = dp->ops->train_step(dp, &c, &b.r, &o, &err);
    double s = s_since(&t0);
    cr_assert_neq(rc, LISA_OK);
    cr_assert(s < 10, "took %g s", s);
    cr_assert(strstr(err.msg, "disconnected"), "%s", err.msg);
    trn_engine_destroy(&e0);
    trn_backend_destroy(&dp);
    trn_group_destroy(&g);
    s_free_rank(&k);
}

/* A TCP listener on loopback that answers every connection with bytes
 * that are no ZMTP greeting and closes it, or (silent) holds it open and
 * says nothing, until stop. */
typedef struct {
    int fd, held[16], nheld;
    bool silent;
    atomic_int stop;
} s_liar_t;

static void *
s_liar(void *arg)
{
    s_liar_t *l = arg;
    while (!l->stop) {
        int c = accept(l->fd, NULL, NULL);
        if (c < 0)
            continue;
        if (l->silent && l->nheld < 16) {
            l->held[l->nheld++] = c;
            continue;
        }
        static const char junk[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
        ssize_t n = write(c, junk, sizeof junk - 1);
        (void) n;
        close(c);
    }
    for (int i = 0; i < l->nheld; i++)
        close(l->held[i]);
    return NULL;
}

/* Rank 1 of two joining through a listener l started here; the join's
 * code, its error in err and its seconds in *secs. */
static lisa_rc_t
s_join_liar(s_liar_t *l, trn_err_t *err, double *secs)
{
    l->fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(l->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    cr_assert_eq(bind(l->fd, (struct sockaddr *) &a, sizeof a), 0);
    cr_assert_eq(listen(l->fd, 16), 0);
    cr_assert_eq(getsockname(l->fd, (struct sockaddr *) &a, &al), 0);
    struct timeval tv = {.tv_usec = 100000}; /* accept wakes for stop */
    setsockopt(l->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, s_liar, l), 0);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", ntohs(a.sin_port));
    trn_group_cfg_t gc = {.rank = 1,
                          .world = 2,
                          .endpoint = ep,
                          .digest = "d",
                          .engine_url = "",
                          .timeout_ms = 600};
    trn_group_t *g = trn_group_new(&gc, err);
    cr_assert_not_null(g, "%s", err->msg);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    lisa_rc_t rc = trn_group_join(g, NULL, NULL, err);
    *secs = s_since(&t0);
    trn_group_destroy(&g);
    l->stop = 1;
    pthread_join(th, NULL);
    close(l->fd);
    return rc;
}

Test(trn_dp, a_rank_whose_rank_0_speaks_something_else_ends_its_join)
{
    s_liar_t l = {.silent = false};
    trn_err_t err = {{0}};
    double s;
    lisa_rc_t rc = s_join_liar(&l, &err, &s);
    cr_assert_eq(rc, LISA_UNAVAILABLE, "%s: %s", lisa_rc_str(rc), err.msg);
    cr_assert(strstr(err.msg, "rank 0"), "%s", err.msg);
    cr_assert(s < 5, "the join took %g s", s);
}

Test(trn_dp, a_rank_whose_rank_0_says_nothing_ends_at_its_deadline)
{
    s_liar_t l = {.silent = true};
    trn_err_t err = {{0}};
    double s;
    lisa_rc_t rc = s_join_liar(&l, &err, &s);
    cr_assert_eq(rc, LISA_TIMEOUT, "%s: %s", lisa_rc_str(rc), err.msg);
    cr_assert(s >= 0.5 && s < 5, "the join took %g s", s);
}
