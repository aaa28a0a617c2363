/*
 * rwd_worker against a real ZeroMQ ROUTER peer: the test plays the broker
 * with czmq and scripts the protocol (ready -> request -> reply,
 * heartbeats both ways, malformed frames answered while the worker
 * survives, reconnect when the broker goes silent, and a worker process
 * killed mid-request observed as silence).
 */
#include "lisa/lisa_codec.h"
#include "rwd_config.h"
#include "rwd_score.h"
#include "rwd_worker.h"

#include <criterion/criterion.h>
#include <czmq.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Spawns the worker binary without the runner's descriptors (Criterion's
 * IPC sockets must not live on in the child). */
static pid_t
spawn(char **argv)
{
    for (int fd = 3; fd < 1024; fd++) {
        int fl = fcntl(fd, F_GETFD);
        if (fl >= 0)
            fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
    }
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, argv[0], NULL, NULL, argv, environ), 0);
    return pid;
}

typedef struct {
    zsock_t *router;
    char endpoint[64];
    zframe_t *peer; /* routing id of the last sender */
    bool keepalive; /* heartbeat the worker while waiting */
} broker_t;

static void broker_heartbeat(broker_t *b);

static void
broker_open(broker_t *b)
{
    memset(b, 0, sizeof *b);
    b->router = zsock_new(ZMQ_ROUTER);
    cr_assert_not_null(b->router);
    int port = zsock_bind(b->router, "tcp://127.0.0.1:*");
    cr_assert_gt(port, 0);
    snprintf(b->endpoint, sizeof b->endpoint, "tcp://127.0.0.1:%d", port);
    b->keepalive = true;
}

static void
broker_close(broker_t *b)
{
    zframe_destroy(&b->peer);
    zsock_destroy(&b->router);
}

/* Next WorkerMsg within ms, or NULL on silence. */
static Lisa__WorkerMsg *
broker_recv(broker_t *b, int ms)
{
    zsock_set_rcvtimeo(b->router, ms);
    zmsg_t *m = zmsg_recv(b->router);
    if (!m)
        return NULL;
    cr_assert_eq(zmsg_size(m), 2, "worker frames are [id][WorkerMsg]");
    zframe_destroy(&b->peer);
    b->peer = zmsg_pop(m);
    zframe_t *f = zmsg_pop(m);
    ProtobufCMessage *pm = NULL;
    lisa_rc_t rc =
        lisa_codec_decode_frame(&lisa__worker_msg__descriptor, f,
                                LISA_MAX_WORKER_FRAME, NULL, &pm, NULL);
    cr_assert_eq(rc, LISA_OK);
    zframe_destroy(&f);
    zmsg_destroy(&m);
    return (Lisa__WorkerMsg *) pm;
}

/* Next message that is not a heartbeat. */
static Lisa__WorkerMsg *
broker_recv_skip_hb(broker_t *b, int ms, int *heartbeats)
{
    int64_t until = zclock_mono() + ms;
    for (;;) {
        int64_t left = until - zclock_mono();
        if (left <= 0)
            return NULL;
        if (b->keepalive && b->peer)
            broker_heartbeat(b);
        Lisa__WorkerMsg *m =
            broker_recv(b, (int) (b->keepalive && left > 80 ? 80 : left));
        if (!m)
            continue;
        if (m->body_case != LISA__WORKER_MSG__BODY_HEARTBEAT)
            return m;
        if (heartbeats)
            (*heartbeats)++;
        lisa_codec_free((ProtobufCMessage **) &m);
    }
}

static void
broker_send_raw(broker_t *b, const void *data, size_t len)
{
    zmsg_t *m = zmsg_new();
    zmsg_append(m, &(zframe_t *){zframe_dup(b->peer)});
    zmsg_addmem(m, data, len);
    cr_assert_eq(zmsg_send(&m, b->router), 0);
}

static void
broker_send(broker_t *b, Lisa__WorkerMsg *msg)
{
    zframe_t *f = lisa_codec_encode(&msg->base);
    broker_send_raw(b, zframe_data(f), zframe_size(f));
    zframe_destroy(&f);
}

static void
broker_request(broker_t *b, uint64_t job, const char *ds, const char *answer,
               const char *gt)
{
    Lisa__WorkerMsg msg = LISA__WORKER_MSG__INIT;
    Lisa__ScoreRequest q = LISA__SCORE_REQUEST__INIT;
    q.job_id = job;
    q.rollout_id = "r-1";
    q.attempt = 1;
    q.data_source = (char *) ds;
    q.answer = (char *) answer;
    q.ground_truth = (char *) gt;
    q.extra_info_json = "{}";
    q.budget_ms = 5000;
    msg.body_case = LISA__WORKER_MSG__BODY_REQUEST;
    msg.request = &q;
    broker_send(b, &msg);
}

static void
broker_heartbeat(broker_t *b)
{
    Lisa__WorkerMsg msg = LISA__WORKER_MSG__INIT;
    Lisa__WorkerHeartbeat hb = LISA__WORKER_HEARTBEAT__INIT;
    msg.body_case = LISA__WORKER_MSG__BODY_HEARTBEAT;
    msg.heartbeat = &hb;
    broker_send(b, &msg);
}

/* An in-process worker on a thread. */
typedef struct {
    rwd_config_t cfg;
    rwd_scorer_t *scorer;
    rwd_worker_t *w;
    pthread_t th;
    lisa_rc_t rc;
} inproc_t;

static void *
inproc_main(void *arg)
{
    inproc_t *p = arg;
    p->rc = rwd_worker_run(p->w);
    return NULL;
}

static void
inproc_start(inproc_t *p, const char *endpoint, const char *extra_flag,
             const char *extra_val)
{
    char *argv[] = {"x",
                    "--broker",
                    (char *) endpoint,
                    "--heartbeat-ms",
                    "100",
                    "--reconnect-ms",
                    "50",
                    "--threads",
                    "3",
                    "--worker-id",
                    "w-test",
                    "--log-level",
                    "error",
                    "--liveness",
                    "10",
                    (char *) extra_flag,
                    (char *) extra_val};
    int argc = extra_flag ? 17 : 15;
    cr_assert_eq(rwd_config_parse(&p->cfg, argc, argv, 1), LISA_OK);
    p->scorer = rwd_scorer_new(NULL);
    p->w = rwd_worker_new(&p->cfg, p->scorer);
    cr_assert_not_null(p->w);
    pthread_create(&p->th, NULL, inproc_main, p);
}

static void
inproc_stop(inproc_t *p)
{
    rwd_worker_stop(p->w);
    pthread_join(p->th, NULL);
    cr_assert_eq(p->rc, LISA_OK);
    rwd_worker_destroy(&p->w);
    rwd_scorer_destroy(&p->scorer);
    rwd_config_clear(&p->cfg);
}

static Lisa__WorkerMsg *
expect_ready(broker_t *b)
{
    Lisa__WorkerMsg *m = broker_recv_skip_hb(b, 3000, NULL);
    cr_assert_not_null(m, "no READY");
    cr_assert_eq(m->body_case, LISA__WORKER_MSG__BODY_READY);
    return m;
}

Test(rwd_worker, usage, .timeout = 30)
{
    broker_t b;
    broker_open(&b);
    inproc_t p;
    inproc_start(&p, b.endpoint, NULL, NULL);

    Lisa__WorkerMsg *m = expect_ready(&b);
    cr_assert_str_eq(m->ready->worker_id, "w-test");
    cr_assert_eq(m->ready->capacity, 3);
    cr_assert_eq(m->ready->n_data_sources, 7);
    bool has_if = false;
    for (size_t i = 0; i < m->ready->n_data_sources; i++) {
        cr_assert_str_eq(m->ready->data_sources[i], rwd_score_prefix(i));
        has_if |= strcmp(m->ready->data_sources[i], "instruct_follow") == 0;
    }
    cr_assert(has_if, "the worker advertises instruct_follow");
    lisa_codec_free((ProtobufCMessage **) &m);

    broker_request(&b, 42, "math_mini", "so \\boxed{70}", "70");
    m = broker_recv_skip_hb(&b, 3000, NULL);
    cr_assert_not_null(m);
    cr_assert_eq(m->body_case, LISA__WORKER_MSG__BODY_REPLY);
    cr_assert_eq(m->reply->job_id, 42);
    cr_assert_eq(m->reply->code, LISA__CODE__CODE_OK);
    cr_assert_not_null(m->reply->reward);
    cr_assert_float_eq(m->reply->reward->value, 1.0, 1e-12);
    cr_assert_str_eq(m->reply->reward->rule, "math_equiv");
    cr_assert_str_eq(m->reply->reward->extracted, "70");
    cr_assert_str_eq(m->reply->reward->worker_id, "w-test");
    cr_assert_not_null(strstr(m->reply->reward->explanation_json, "\"boxed\""));
    lisa_codec_free((ProtobufCMessage **) &m);

    inproc_stop(&p);
    m = broker_recv_skip_hb(&b, 2000, NULL);
    cr_assert_not_null(m, "no DISCONNECT on shutdown");
    cr_assert_eq(m->body_case, LISA__WORKER_MSG__BODY_DISCONNECT);
    lisa_codec_free((ProtobufCMessage **) &m);
    broker_close(&b);
}

Test(rwd_worker, heartbeats_both_ways, .timeout = 30)
{
    broker_t b;
    broker_open(&b);
    inproc_t p;
    inproc_start(&p, b.endpoint, NULL, NULL);
    Lisa__WorkerMsg *m = expect_ready(&b);
    lisa_codec_free((ProtobufCMessage **) &m);
    /* For 1 s the broker heartbeats every 100 ms: the worker heartbeats
     * back while idle and never reconnects (no second READY). */
    int hb = 0, readies = 0;
    int64_t until = zclock_mono() + 1000;
    while (zclock_mono() < until) {
        broker_heartbeat(&b);
        m = broker_recv(&b, 100);
        if (!m)
            continue;
        if (m->body_case == LISA__WORKER_MSG__BODY_HEARTBEAT)
            hb++;
        if (m->body_case == LISA__WORKER_MSG__BODY_READY)
            readies++;
        lisa_codec_free((ProtobufCMessage **) &m);
    }
    cr_assert_geq(hb, 3, "worker heartbeats: %d", hb);
    cr_assert_eq(readies, 0);
    rwd_worker_stats_t st;
    rwd_worker_stats(p.w, &st);
    cr_assert_geq(st.heartbeats_in, 3);
    cr_assert_eq(st.reconnects, 0);
    inproc_stop(&p);
    broker_close(&b);
}

Test(rwd_worker, malformed_then_survives, .timeout = 30)
{
    broker_t b;
    broker_open(&b);
    inproc_t p;
    inproc_start(&p, b.endpoint, NULL, NULL);
    Lisa__WorkerMsg *m = expect_ready(&b);
    lisa_codec_free((ProtobufCMessage **) &m);

    /* Garbage bytes: an error reply with job 0. */
    broker_send_raw(&b, "\xff\xff\xff garbage", 12);
    m = broker_recv_skip_hb(&b, 2000, NULL);
    cr_assert_not_null(m);
    cr_assert_eq(m->body_case, LISA__WORKER_MSG__BODY_REPLY);
    cr_assert_eq(m->reply->job_id, 0);
    cr_assert_neq(m->reply->code, LISA__CODE__CODE_OK);
    cr_assert_null(m->reply->reward);
    lisa_codec_free((ProtobufCMessage **) &m);

    /* A valid frame of another envelope type: CODE_UNSUPPORTED. */
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__StatsReq sr = LISA__STATS_REQ__INIT;
    req.body_case = LISA__REQUEST__BODY_STATS;
    req.stats = &sr;
    zframe_t *f = lisa_codec_encode(&req.base);
    broker_send_raw(&b, zframe_data(f), zframe_size(f));
    zframe_destroy(&f);
    m = broker_recv_skip_hb(&b, 2000, NULL);
    cr_assert_not_null(m);
    cr_assert_eq(m->reply->code, LISA__CODE__CODE_UNSUPPORTED);
    lisa_codec_free((ProtobufCMessage **) &m);

    /* Unknown data source: CODE_INVALID for that job, not a silent 0. */
    broker_request(&b, 7, "astrology", "x", "y");
    m = broker_recv_skip_hb(&b, 2000, NULL);
    cr_assert_not_null(m);
    cr_assert_eq(m->reply->job_id, 7);
    cr_assert_eq(m->reply->code, LISA__CODE__CODE_INVALID);
    cr_assert_not_null(strstr(m->reply->error, "unknown data source"));
    cr_assert_null(m->reply->reward);
    lisa_codec_free((ProtobufCMessage **) &m);

    /* Still serving. */
    broker_request(&b, 8, "biomed_mini", "The answer is E.", "E");
    m = broker_recv_skip_hb(&b, 2000, NULL);
    cr_assert_not_null(m);
    cr_assert_eq(m->reply->job_id, 8);
    cr_assert_float_eq(m->reply->reward->value, 1.0, 1e-12);
    lisa_codec_free((ProtobufCMessage **) &m);
    rwd_worker_stats_t st;
    rwd_worker_stats(p.w, &st);
    cr_assert_eq(st.bad_frames, 2);
    inproc_stop(&p);
    broker_close(&b);
}

Test(rwd_worker, concurrent_requests_each_answered_once, .timeout = 30)
{
    broker_t b;
    broker_open(&b);
    inproc_t p;
    inproc_start(&p, b.endpoint, "--capacity", "64");
    Lisa__WorkerMsg *m = expect_ready(&b);
    lisa_codec_free((ProtobufCMessage **) &m);
    enum { N = 60 };
    char ans[N][32], gt[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(ans[i], sizeof ans[i], "\\boxed{\\frac{%d}{2}}", 2 * i);
        snprintf(gt[i], sizeof gt[i], "%d", i % 5 ? i : i + 1);
        broker_request(&b, (uint64_t) (1000 + i), "math", ans[i], gt[i]);
    }
    int seen[N] = {0};
    for (int k = 0; k < N; k++) {
        m = broker_recv_skip_hb(&b, 5000, NULL);
        cr_assert_not_null(m, "reply %d missing", k);
        cr_assert_eq(m->body_case, LISA__WORKER_MSG__BODY_REPLY);
        int i = (int) m->reply->job_id - 1000;
        cr_assert(i >= 0 && i < N);
        seen[i]++;
        cr_assert_float_eq(m->reply->reward->value, i % 5 ? 1.0 : 0.0, 1e-12);
        lisa_codec_free((ProtobufCMessage **) &m);
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(seen[i], 1);
    inproc_stop(&p);
    broker_close(&b);
}

Test(rwd_worker, over_capacity_is_busy, .timeout = 30)
{
    broker_t b;
    broker_open(&b);
    /* A judge endpoint that accepts and never answers keeps jobs busy. */
    zsock_t *silent = zsock_new(ZMQ_STREAM);
    int port = zsock_bind(silent, "tcp://127.0.0.1:*");
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", port);
    inproc_t p;
    char *argv[] = {"x",    "--broker",           b.endpoint, "--heartbeat-ms",
                    "100",  "--threads",          "1",        "--capacity",
                    "1",    "--judge-url",        url,        "--judge-sources",
                    "slow", "--judge-timeout-ms", "1500",     "--judge-retries",
                    "0",    "--log-level",        "error",    "--liveness",
                    "20"};
    /* liveness 20 x 100 ms: a loaded machine must not make the worker
     * think this scripted broker died while the judge call hangs */
    cr_assert_eq(rwd_config_parse(&p.cfg, 21, argv, 1), LISA_OK);
    rwd_scorer_config_t sc = {
        .judge_sources = "slow",
        .judge = {.base_url = url, .timeout_ms = 1500, .retries = 0}};
    p.scorer = rwd_scorer_new(&sc);
    p.w = rwd_worker_new(&p.cfg, p.scorer);
    pthread_create(&p.th, NULL, inproc_main, &p);
    Lisa__WorkerMsg *m = expect_ready(&b);
    lisa_codec_free((ProtobufCMessage **) &m);
    broker_request(&b, 1, "slow", "a", "b");
    broker_request(&b, 2, "math", "1", "1");
    m = broker_recv_skip_hb(&b, 1000, NULL);
    cr_assert_not_null(m);
    cr_assert_eq(m->body_case, LISA__WORKER_MSG__BODY_REPLY);
    cr_assert_eq(m->reply->job_id, 2);
    cr_assert_eq(m->reply->code, LISA__CODE__CODE_BUSY);
    lisa_codec_free((ProtobufCMessage **) &m);
    /* The judge call times out within its budget: CODE_UNAVAILABLE. */
    m = broker_recv_skip_hb(&b, 4000, NULL);
    cr_assert_not_null(m);
    cr_assert_eq(m->body_case, LISA__WORKER_MSG__BODY_REPLY);
    cr_assert_eq(m->reply->job_id, 1, "job %llu code %d error %s",
                 (unsigned long long) m->reply->job_id, (int) m->reply->code,
                 m->reply->error);
    cr_assert_eq(m->reply->code, LISA__CODE__CODE_UNAVAILABLE);
    lisa_codec_free((ProtobufCMessage **) &m);
    inproc_stop(&p);
    zsock_destroy(&silent);
    broker_close(&b);
}

Test(rwd_worker, reconnects_when_broker_silent, .timeout = 30)
{
    broker_t b;
    broker_open(&b);
    inproc_t p;
    inproc_start(&p, b.endpoint, "--liveness", "3");
    Lisa__WorkerMsg *m = expect_ready(&b);
    lisa_codec_free((ProtobufCMessage **) &m);
    zframe_t *first = zframe_dup(b.peer);
    b.keepalive = false;
    /* Say nothing: after liveness (3) x 100 ms the worker reconnects and
     * says READY again from a new connection. */
    int hb = 0;
    int64_t t0 = zclock_mono();
    m = broker_recv_skip_hb(&b, 3000, &hb);
    int64_t waited = zclock_mono() - t0;
    cr_assert_not_null(m, "no second READY");
    cr_assert_eq(m->body_case, LISA__WORKER_MSG__BODY_READY);
    cr_assert_geq(waited, 250, "reconnected after %lld ms", (long long) waited);
    cr_assert_not(zframe_eq(first, b.peer), "same connection");
    cr_assert_geq(hb, 1, "idle heartbeats before giving up");
    lisa_codec_free((ProtobufCMessage **) &m);
    b.keepalive = true;
    /* The new connection serves. */
    broker_request(&b, 5, "chem", "Answer: C", "C");
    m = broker_recv_skip_hb(&b, 2000, NULL);
    cr_assert_not_null(m);
    cr_assert_eq(m->reply->job_id, 5);
    lisa_codec_free((ProtobufCMessage **) &m);
    zframe_destroy(&first);
    rwd_worker_stats_t st;
    rwd_worker_stats(p.w, &st);
    cr_assert_geq(st.reconnects, 1);
    inproc_stop(&p);
    broker_close(&b);
}

Test(rwd_worker, process_killed_mid_request_is_silence, .timeout = 60)
{
    broker_t b;
    broker_open(&b);
    zsock_t *silent = zsock_new(ZMQ_STREAM);
    int port = zsock_bind(silent, "tcp://127.0.0.1:*");
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", port);
    char *argv[] = {LISA_BINARY_DIR "/bin/lisa-reward",
                    "worker",
                    "--liveness",
                    "10",
                    "--broker",
                    b.endpoint,
                    "--heartbeat-ms",
                    "100",
                    "--judge-url",
                    url,
                    "--judge-sources",
                    "slow",
                    "--judge-timeout-ms",
                    "20000",
                    "--log-level",
                    "error",
                    NULL};
    pid_t pid = spawn(argv);
    Lisa__WorkerMsg *m = expect_ready(&b);
    lisa_codec_free((ProtobufCMessage **) &m);
    broker_request(&b, 9, "slow", "a", "b");
    /* While the request is being scored the worker keeps heartbeating. */
    int hb = 0;
    m = broker_recv_skip_hb(&b, 500, &hb);
    cr_assert_null(m, "no reply expected yet");
    cr_assert_geq(hb, 2);
    cr_assert_eq(kill(pid, SIGKILL), 0);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status));
    /* Frames the worker sent before it died may still be queued here. */
    while ((m = broker_recv(&b, 200)) != NULL) {
        cr_assert_neq(m->body_case, LISA__WORKER_MSG__BODY_REPLY);
        lisa_codec_free((ProtobufCMessage **) &m);
    }
    /* Dead worker: neither reply nor heartbeat for several liveness
     * periods; this silence is what the broker acts on. */
    m = broker_recv(&b, 1000);
    cr_assert_null(m, "a killed worker said something");
    zsock_destroy(&silent);
    broker_close(&b);
}

Test(rwd_worker, process_sigterm_says_disconnect, .timeout = 30)
{
    broker_t b;
    broker_open(&b);
    char *argv[] = {LISA_BINARY_DIR "/bin/lisa-reward",
                    "worker",
                    "--liveness",
                    "10",
                    "--broker",
                    b.endpoint,
                    "--heartbeat-ms",
                    "100",
                    "--log-level",
                    "error",
                    NULL};
    pid_t pid = spawn(argv);
    Lisa__WorkerMsg *m = expect_ready(&b);
    lisa_codec_free((ProtobufCMessage **) &m);
    broker_request(&b, 3, "physics_mini", "\\boxed{2.2}", "\\boxed{2.2}");
    m = broker_recv_skip_hb(&b, 2000, NULL);
    cr_assert_not_null(m);
    cr_assert_float_eq(m->reply->reward->value, 1.0, 1e-12);
    lisa_codec_free((ProtobufCMessage **) &m);
    cr_assert_eq(kill(pid, SIGTERM), 0);
    m = broker_recv_skip_hb(&b, 3000, NULL);
    cr_assert_not_null(m);
    cr_assert_eq(m->body_case, LISA__WORKER_MSG__BODY_DISCONNECT);
    lisa_codec_free((ProtobufCMessage **) &m);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    broker_close(&b);
}

/* Without --worker-id, two workers of one process (same host name, same
 * pid: what replicas on the host's network in their own pid namespaces
 * look like) still announce different ids. */
Test(rwd_worker, default_ids_differ_on_one_host, .timeout = 30)
{
    broker_t b;
    broker_open(&b);
    char *ids[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        char *argv[] = {"x",   "--broker",    b.endpoint, "--heartbeat-ms",
                        "100", "--log-level", "error"};
        inproc_t p;
        memset(&p, 0, sizeof p);
        cr_assert_eq(rwd_config_parse(&p.cfg, 7, argv, 1), LISA_OK);
        p.scorer = rwd_scorer_new(NULL);
        p.w = rwd_worker_new(&p.cfg, p.scorer);
        cr_assert_not_null(p.w);
        pthread_create(&p.th, NULL, inproc_main, &p);
        Lisa__WorkerMsg *m = expect_ready(&b);
        ids[i] = strdup(m->ready->worker_id);
        lisa_codec_free((ProtobufCMessage **) &m);
        inproc_stop(&p);
        m = broker_recv_skip_hb(&b, 2000, NULL);
        lisa_codec_free((ProtobufCMessage **) &m);
    }
    char host[64] = "host", prefix[160];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(prefix, sizeof prefix, "reward-%s-%ld-", host, (long) getpid());
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(strncmp(ids[i], prefix, strlen(prefix)), 0, "%s", ids[i]);
        const char *salt = ids[i] + strlen(prefix);
        cr_assert_eq(strlen(salt), 8, "%s", ids[i]);
        cr_assert_eq(strspn(salt, "0123456789abcdef"), 8, "%s", ids[i]);
    }
    cr_assert_str_neq(ids[0], ids[1]);
    free(ids[0]);
    free(ids[1]);
    broker_close(&b);
}
