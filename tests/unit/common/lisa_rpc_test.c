/*
 * lisa_rpc tests against a real ZeroMQ ROUTER peer running in a thread.
 * The first test is the usage example.
 */
#include "lisa/lisa_codec.h"
#include "lisa/lisa_rpc.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

/* The peer: a ROUTER that answers every request with CODE_OK (stats body),
 * except that it silently drops the first `drop` requests and echoes the
 * caller into the error text. With `curve` it is a CURVE server with a
 * fresh key, whose handshake a client without keys fails: such a client's
 * socket never gets a connected peer and no request ever arrives. */
typedef struct {
    int drop;
    int seen;
    bool curve;
} peer_cfg_t;

static void
s_peer(zsock_t *pipe, void *arg)
{
    peer_cfg_t *cfg = arg;
    zsock_t *router = zsock_new(ZMQ_ROUTER);
    zcert_t *cert = cfg->curve ? zcert_new() : NULL;
    if (cert) {
        zsock_set_curve_server(router, 1);
        zcert_apply(cert, router);
    }
    int port = zsock_bind(router, "tcp://127.0.0.1:*");
    zsock_signal(pipe, 0);
    zstr_sendf(pipe, "%d", port);
    zpoller_t *p = zpoller_new(pipe, router, NULL);
    for (;;) {
        void *which = zpoller_wait(p, 1000);
        if (which == pipe)
            break;
        if (which != router)
            continue;
        zmsg_t *m = zmsg_recv(router);
        zframe_t *id = zmsg_pop(m);
        zframe_t *empty = zmsg_pop(m);
        zframe_t *body = zmsg_pop(m);
        ProtobufCMessage *msg = NULL;
        cfg->seen++;
        if (lisa_codec_decode_frame(&lisa__request__descriptor, body,
                                    LISA_MAX_RPC_FRAME, NULL, &msg,
                                    NULL) == LISA_OK &&
            cfg->drop-- <= 0) {
            Lisa__Request *req = (Lisa__Request *) msg;
            Lisa__Reply rep = LISA__REPLY__INIT;
            Lisa__StatsRep sr = LISA__STATS_REP__INIT;
            rep.request_id = req->request_id;
            rep.code = LISA__CODE__CODE_OK;
            rep.error = req->caller;
            rep.body_case = LISA__REPLY__BODY_STATS;
            rep.stats = &sr;
            zmsg_t *out = zmsg_new();
            zmsg_append(out, &id);
            zmsg_append(out, &empty);
            /* a stale reply first: the client must drop it */
            Lisa__Reply stale = LISA__REPLY__INIT;
            stale.request_id = 7;
            stale.body_case = LISA__REPLY__BODY_STATS;
            stale.stats = &sr;
            zmsg_t *st = zmsg_dup(out);
            lisa_codec_append(st, &stale.base);
            zmsg_send(&st, router);
            lisa_codec_append(out, &rep.base);
            zmsg_send(&out, router);
        }
        lisa_codec_free(&msg);
        zframe_destroy(&id);
        zframe_destroy(&empty);
        zframe_destroy(&body);
        zmsg_destroy(&m);
    }
    zpoller_destroy(&p);
    zcert_destroy(&cert);
    zsock_destroy(&router);
}

static zactor_t *
s_start(peer_cfg_t *cfg, char *endpoint, size_t n)
{
    zactor_t *a = zactor_new(s_peer, cfg);
    char *port = zstr_recv(a);
    snprintf(endpoint, n, "tcp://127.0.0.1:%s", port);
    zstr_free(&port);
    return a;
}

Test(lisa_rpc, usage)
{
    peer_cfg_t cfg = {0, 0};
    char ep[64];
    zactor_t *peer = s_start(&cfg, ep, sizeof ep);

    /* A service makes one client and calls the broker with a deadline. */
    lisa_rpc_t *rpc = lisa_rpc_new(ep, "test-1");
    cr_assert_not_null(rpc);
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__StatsReq sreq = LISA__STATS_REQ__INIT;
    req.body_case = LISA__REQUEST__BODY_STATS;
    req.stats = &sreq;
    Lisa__Reply *rep = NULL;
    cr_assert_eq(lisa_rpc_call(rpc, &req, 2000, &rep), LISA_OK);
    cr_assert_eq(lisa_rpc_reply_rc(rep), LISA_OK);
    cr_assert_eq(rep->request_id, req.request_id);
    cr_assert_str_eq(rep->error, "test-1");
    lisa_rpc_reply_free(&rep);
    cr_assert_null(rep);
    cr_assert_geq(lisa_rpc_dropped(rpc), 1); /* the stale reply */

    lisa_rpc_destroy(&rpc);
    lisa_rpc_destroy(&rpc); /* safe twice */
    zactor_destroy(&peer);
}

Test(lisa_rpc, idempotent_request_is_retried_on_a_new_socket)
{
    peer_cfg_t cfg = {2, 0};
    char ep[64];
    zactor_t *peer = s_start(&cfg, ep, sizeof ep);
    lisa_rpc_t *rpc = lisa_rpc_new(ep, "retry");
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__StatsReq sreq = LISA__STATS_REQ__INIT;
    req.body_case = LISA__REQUEST__BODY_STATS;
    req.stats = &sreq;
    Lisa__Reply *rep = NULL;
    cr_assert_eq(lisa_rpc_call(rpc, &req, 150, &rep), LISA_OK);
    cr_assert_eq(rep->request_id, req.request_id);
    lisa_rpc_reply_free(&rep);
    zactor_destroy(&peer);
    cr_assert_eq(cfg.seen, 3);
    lisa_rpc_destroy(&rpc);
}

Test(lisa_rpc, a_peer_refusing_the_handshake_times_out_every_try, .timeout = 30)
{
    peer_cfg_t cfg = {.curve = true};
    char ep[64];
    zactor_t *peer = s_start(&cfg, ep, sizeof ep);
    lisa_rpc_t *rpc = lisa_rpc_new(ep, "no-keys");
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__StatsReq sreq = LISA__STATS_REQ__INIT;
    req.body_case = LISA__REQUEST__BODY_STATS;
    req.stats = &sreq;
    cr_assert(lisa_rpc_idempotent(&req));
    /* twice: the retries' fresh sockets must not block their sends */
    for (int i = 0; i < 2; i++) {
        Lisa__Reply *rep = NULL;
        int64_t t0 = zclock_mono();
        cr_assert_eq(lisa_rpc_call(rpc, &req, 300, &rep), LISA_TIMEOUT);
        cr_assert_null(rep);
        int64_t took = zclock_mono() - t0;
        cr_assert_lt(took, 5000, "took %lld ms", (long long) took);
    }
    lisa_rpc_destroy(&rpc);
    zactor_destroy(&peer);
    cr_assert_eq(cfg.seen, 0); /* nothing got through the handshake */
}

Test(lisa_rpc, non_idempotent_request_times_out_after_one_try)
{
    peer_cfg_t cfg = {5, 0};
    char ep[64];
    zactor_t *peer = s_start(&cfg, ep, sizeof ep);
    lisa_rpc_t *rpc = lisa_rpc_new(ep, "claim");
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__ClaimReq c = LISA__CLAIM_REQ__INIT;
    req.body_case = LISA__REQUEST__BODY_CLAIM;
    req.claim = &c;
    cr_assert_not(lisa_rpc_idempotent(&req));
    Lisa__Reply *rep = NULL;
    int64_t t0 = zclock_mono();
    cr_assert_eq(lisa_rpc_call(rpc, &req, 100, &rep), LISA_TIMEOUT);
    cr_assert_lt(zclock_mono() - t0, 1000);
    cr_assert_null(rep);
    zactor_destroy(&peer);
    cr_assert_eq(cfg.seen, 1);
    cr_assert_eq(lisa_rpc_call(rpc, &req, 0, &rep), LISA_INVALID);
    lisa_rpc_destroy(&rpc);
}

typedef struct {
    int ok;
    int timeouts;
    int errors;
    uint64_t last_id;
} tally_t;

static void
s_cb(void *arg, uint64_t id, lisa_rc_t rc, const Lisa__Reply *reply)
{
    tally_t *t = arg;
    t->last_id = id;
    if (rc == LISA_OK) {
        cr_assert_eq(reply->request_id, id);
        t->ok++;
    } else if (rc == LISA_TIMEOUT) {
        cr_assert_null(reply);
        t->timeouts++;
    } else {
        t->errors++;
    }
}

static int
s_stop_when_done(zloop_t *loop, int timer_id, void *arg)
{
    lisa_rpc_t *rpc = arg;
    return lisa_rpc_pending(rpc) == 0 ? -1 : 0;
}

Test(lisa_rpc, async_from_a_zloop)
{
    peer_cfg_t cfg = {1, 0}; /* first request is never answered */
    char ep[64];
    zactor_t *peer = s_start(&cfg, ep, sizeof ep);
    lisa_rpc_t *rpc = lisa_rpc_new(ep, "async");
    tally_t t = {0};
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__StatsReq sreq = LISA__STATS_REQ__INIT;
    req.body_case = LISA__REQUEST__BODY_STATS;
    req.stats = &sreq;
    uint64_t first = 0;
    cr_assert_eq(lisa_rpc_send(rpc, &req, 200, s_cb, &t, &first), LISA_OK);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(lisa_rpc_send(rpc, &req, 5000, s_cb, &t, NULL), LISA_OK);
    cr_assert_eq(lisa_rpc_pending(rpc), 11);
    zloop_t *loop = zloop_new();
    cr_assert_eq(lisa_rpc_attach(rpc, loop, 20), LISA_OK);
    zloop_timer(loop, 10, 0, s_stop_when_done, rpc);
    zloop_start(loop);
    cr_assert_eq(t.ok, 10);
    cr_assert_eq(t.timeouts, 1);
    lisa_rpc_detach(rpc);
    zloop_destroy(&loop);

    /* Requests still open at destroy get LISA_ERR. */
    cfg.drop = 1;
    cr_assert_eq(lisa_rpc_send(rpc, &req, 5000, s_cb, &t, NULL), LISA_OK);
    lisa_rpc_destroy(&rpc);
    cr_assert_eq(t.errors, 1);
    zactor_destroy(&peer);
}

/* A signal handler's flag ends a synchronous wait within about 100 ms,
 * also a wait already under way, and the client keeps working after. */
static volatile sig_atomic_t s_flag;

static void *
s_raise_later(void *arg)
{
    (void) arg;
    zclock_sleep(200);
    s_flag = 1;
    return NULL;
}

Test(lisa_rpc, interrupt_flag_ends_the_wait)
{
    peer_cfg_t cfg = {1000, 0}; /* drops every request */
    char ep[64];
    zactor_t *peer = s_start(&cfg, ep, sizeof ep);
    lisa_rpc_t *rpc = lisa_rpc_new(ep, "stop");
    lisa_rpc_set_interrupt(rpc, &s_flag);
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__StatsReq sreq = LISA__STATS_REQ__INIT;
    req.body_case = LISA__REQUEST__BODY_STATS;
    req.stats = &sreq;
    Lisa__Reply *rep = NULL;
    s_flag = 0;
    pthread_t t;
    pthread_create(&t, NULL, s_raise_later, NULL);
    int64_t t0 = zclock_mono();
    cr_assert_eq(lisa_rpc_call(rpc, &req, 10000, &rep), LISA_AGAIN);
    int64_t took = zclock_mono() - t0;
    pthread_join(t, NULL);
    cr_assert_null(rep);
    cr_assert(took >= 190 && took < 1000, "took %lld ms", (long long) took);
    /* set before the call: it returns at once (the request was sent) */
    t0 = zclock_mono();
    cr_assert_eq(lisa_rpc_call(rpc, &req, 10000, &rep), LISA_AGAIN);
    cr_assert_lt(zclock_mono() - t0, 200);
    /* without the flag the same client times out as before */
    lisa_rpc_set_interrupt(rpc, NULL);
    cr_assert_eq(lisa_rpc_call(rpc, &req, 150, &rep), LISA_TIMEOUT);
    zactor_destroy(&peer);
    cr_assert_geq(cfg.seen, 2);
    lisa_rpc_destroy(&rpc);
}
