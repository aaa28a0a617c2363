/*
 * trn_group: the trainer's ranks over ZeroMQ (see trn_group.h).
 *
 * One socket per rank: rank 0's ROUTER knows each other rank by the
 * identity its join arrived from; the others' DEALER talks to rank 0
 * alone. Every wait is a poll loop of short ticks over the socket and its
 * monitor (disconnects), checking the deadline, the stop flag and rank
 * 0's liveness check on each tick.
 *
 * Rank 0's port is an ordinary loopback or cluster port, and a process of
 * another run (an earlier test, a rank left over from an earlier run whose
 * socket reconnects to a port that is now ours) may connect to it. A join
 * of another run is refused and the bootstrap goes on; a message that is no
 * join, or later comes from an identity no rank joined with, is dropped
 * with a warning. ZeroMQ's disconnect event does not say whose connection
 * closed, so after one rank 0 probes every rank's route for a while
 * (S_PROBE_MS): an empty message each tick, sent with ROUTER_MANDATORY,
 * which fails once a rank's connection is gone (the other ranks drop
 * empty messages). Only a rank's lost route ends the group.
 */
#include "trn_group.h"

#include "lisa/lisa_codec.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "trn_err.h"

#include <czmq.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define S_TICK_MS  100
#define S_PROBE_MS 1000 /* how long rank 0 probes after a disconnect */

struct trn_group {
    int rank, world;
    int timeout_ms;
    size_t max_frame;
    zsock_t *sock;
    void *mon; /* PAIR receiving the monitor's events */
    char mon_ep[64];
    char endpoint[512];
    char run_id[160];
    char digest[160];
    char **urls;         /* per rank */
    zframe_t **peers;    /* rank 0: identity of each rank (index 0 unused) */
    int64_t probe_until; /* rank 0: probe the ranks' routes till then */
    bool joined, stopped, lost;
    uint64_t seq; /* current command */
    int (*alive)(void *ctx);
    void *alive_ctx;
    volatile sig_atomic_t *stop;
    lisa_codec_stats_t stats;
};

/* Sends m (consumed) to rank r (rank 0; on the others, to rank 0): a
 * rank whose route is gone (rank 0's ROUTER_MANDATORY refuses the send)
 * marks the group lost, LISA_UNAVAILABLE. */
static lisa_rc_t
s_route(trn_group_t *g, int r, zmsg_t *m)
{
    if (g->rank == 0)
        zmsg_prepend(m, &(zframe_t *){zframe_dup(g->peers[r])});
    if (zmsg_send(&m, g->sock) == 0)
        return LISA_OK;
    zmsg_destroy(&m);
    if (g->rank != 0 || zmq_errno() != EHOSTUNREACH)
        return LISA_ERR;
    g->lost = true;
    lisa_log_warn("group: a rank disconnected (rank %d)", r);
    return LISA_UNAVAILABLE;
}

/* Rank 0, while a disconnect is recent: an empty message to every rank;
 * one whose route is gone (ROUTER_MANDATORY refuses it) marks the group
 * lost. */
static void
s_probe(trn_group_t *g)
{
    if (!g->probe_until || g->lost || g->stopped)
        return;
    for (int r = 1; r < g->world; r++) {
        zmsg_t *m = zmsg_new();
        zmsg_addmem(m, "", 0);
        if (s_route(g, r, m) == LISA_UNAVAILABLE)
            return;
    }
    if (zclock_mono() >= g->probe_until) {
        g->probe_until = 0;
        lisa_log_warn("group: a connection that is no rank's closed "
                      "(ignored)");
    }
}

/* Drains monitor events: a disconnect after the join marks the group
 * lost on a rank other than 0, and starts rank 0's probes. */
static void
s_drain_monitor(trn_group_t *g)
{
    for (;;) {
        zmq_msg_t ev;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, g->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t kind = 0;
        if (zmq_msg_size(&ev) >= 2)
            memcpy(&kind, zmq_msg_data(&ev), 2);
        bool more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        while (more) { /* the endpoint frame */
            zmq_msg_t part;
            zmq_msg_init(&part);
            if (zmq_msg_recv(&part, g->mon, 0) < 0) {
                zmq_msg_close(&part);
                break;
            }
            more = zmq_msg_more(&part);
            zmq_msg_close(&part);
        }
        if (kind != ZMQ_EVENT_DISCONNECTED || g->stopped)
            continue;
        if (g->rank > 0) { /* its one connection is rank 0's */
            g->lost = true;
            lisa_log_warn("group: rank 0 disconnected");
        } else if (g->joined) { /* a rank's, or a stranger's: probe */
            g->probe_until = zclock_mono() + S_PROBE_MS;
        }
    }
}

/* Waits for one message: LISA_OK with *out (identity first on rank 0),
 * LISA_TIMEOUT at deadline_ms (< 0: none), LISA_UNAVAILABLE when a peer
 * went away or a launched rank died, LISA_AGAIN when stopped. */
static lisa_rc_t
s_recv(trn_group_t *g, int64_t deadline_ms, zmsg_t **out, trn_err_t *err)
{
    void *sock = zsock_resolve(g->sock);
    for (;;) {
        zmq_pollitem_t it[2] = {{sock, 0, ZMQ_POLLIN, 0},
                                {g->mon, 0, ZMQ_POLLIN, 0}};
        int64_t wait = S_TICK_MS;
        if (deadline_ms >= 0) {
            int64_t left = deadline_ms - zclock_mono();
            if (left <= 0)
                return trn_fail(err, LISA_TIMEOUT,
                                "group: no answer from the other ranks "
                                "within %d ms",
                                g->timeout_ms);
            wait = left < wait ? left : wait;
        }
        int n = zmq_poll(it, 2, (long) wait);
        /* what a peer sent before it left still counts: messages first */
        if (n > 0 && (it[0].revents & ZMQ_POLLIN)) {
            *out = zmsg_recv(g->sock);
            /* rank 0's probes: one empty frame */
            if (*out && g->rank > 0 && zmsg_size(*out) == 1 &&
                zframe_size(zmsg_first(*out)) == 0) {
                zmsg_destroy(out);
                continue;
            }
            if (*out)
                return LISA_OK;
        }
        if (it[1].revents & ZMQ_POLLIN)
            s_drain_monitor(g);
        s_probe(g);
        if (g->lost && !(zsock_events(g->sock) & ZMQ_POLLIN))
            return trn_fail(err, LISA_UNAVAILABLE, "group: %s",
                            g->rank == 0 ? "a rank disconnected"
                                         : "rank 0 went away");
        if (g->stop && *g->stop)
            return trn_fail(err, LISA_AGAIN, "group: stopped");
        if (g->alive && !g->alive(g->alive_ctx))
            return trn_fail(err, LISA_UNAVAILABLE,
                            "group: a rank this process launched exited");
    }
}

/* Decodes the last frame of m as a Bootstrap envelope. */
static Lisa__Bootstrap *
s_decode(trn_group_t *g, zmsg_t *m)
{
    zframe_t *f = zmsg_last(m);
    ProtobufCMessage *pm = NULL;
    const char *why = NULL;
    if (!f ||
        lisa_codec_decode_frame(&lisa__bootstrap__descriptor, f, g->max_frame,
                                &g->stats, &pm, &why) != LISA_OK) {
        lisa_log_warn("group: refused a frame: %s", why ? why : "empty");
        return NULL;
    }
    return (Lisa__Bootstrap *) pm;
}

static lisa_rc_t
s_send(trn_group_t *g, int r, Lisa__Bootstrap *b)
{
    zmsg_t *m = zmsg_new();
    lisa_codec_append(m, &b->base);
    return s_route(g, r, m);
}

/* The error of a failed send to rank r. */
static lisa_rc_t
s_send_failed(const trn_group_t *g, int r, trn_err_t *err)
{
    if (g->lost)
        return trn_fail(err, LISA_UNAVAILABLE,
                        "group: a rank disconnected (rank %d)", r);
    return trn_fail(err, LISA_ERR, "group: cannot send to rank %d", r);
}

/* The rank whose identity is the first frame of m, or -1. */
static int
s_peer(const trn_group_t *g, zmsg_t *m)
{
    zframe_t *id = zmsg_first(m);
    for (int r = 1; r < g->world && id; r++)
        if (g->peers[r] && zframe_eq(g->peers[r], id))
            return r;
    return -1;
}

trn_group_t *
trn_group_new(const trn_group_cfg_t *c, trn_err_t *err)
{
    if (c->world < 1 || c->world > TRN_GROUP_MAX_WORLD || c->rank < 0 ||
        c->rank >= c->world || !c->endpoint || !*c->endpoint) {
        trn_fail(err, LISA_INVALID,
                 "group: bad rank %d of world %d or no endpoint", c->rank,
                 c->world);
        return NULL;
    }
    trn_group_t *g = lisa_calloc(1, sizeof *g);
    g->rank = c->rank;
    g->world = c->world;
    g->timeout_ms = c->timeout_ms > 0 ? c->timeout_ms : 600000;
    g->max_frame = c->max_frame ? c->max_frame : TRN_GROUP_MAX_FRAME;
    g->alive = c->alive;
    g->alive_ctx = c->alive_ctx;
    g->stop = c->stop;
    snprintf(g->run_id, sizeof g->run_id, "%s", c->run_id ? c->run_id : "");
    snprintf(g->digest, sizeof g->digest, "%s", c->digest ? c->digest : "");
    g->urls = lisa_calloc((size_t) g->world, sizeof *g->urls);
    g->urls[g->rank] = lisa_strdup(c->engine_url ? c->engine_url : "");
    g->peers = lisa_calloc((size_t) g->world, sizeof *g->peers);
    g->sock = zsock_new(g->rank == 0 ? ZMQ_ROUTER : ZMQ_DEALER);
    if (!g->sock)
        goto fail;
    zsock_set_maxmsgsize(
        g->sock,
        (int) (g->max_frame > (size_t) INT32_MAX ? INT32_MAX : g->max_frame));
    zsock_set_heartbeat_ivl(g->sock, 1000);
    zsock_set_heartbeat_timeout(g->sock, 10000);
    zsock_set_heartbeat_ttl(g->sock, 10000);
    zsock_set_linger(g->sock, 1000);
    zsock_set_sndhwm(g->sock, 0);
    zsock_set_rcvhwm(g->sock, 0);
    if (g->rank == 0) /* a send to a rank whose route is gone fails */
        zsock_set_router_mandatory(g->sock, 1);
    snprintf(g->mon_ep, sizeof g->mon_ep, "inproc://trn-group-%p", (void *) g);
    if (zmq_socket_monitor(zsock_resolve(g->sock), g->mon_ep,
                           ZMQ_EVENT_DISCONNECTED) != 0)
        goto fail;
    g->mon = zmq_socket(zsys_init(), ZMQ_PAIR);
    if (!g->mon || zmq_connect(g->mon, g->mon_ep) != 0)
        goto fail;
    if (g->rank == 0) {
        if (zsock_bind(g->sock, "%s", c->endpoint) < 0) {
            trn_fail(err, LISA_UNAVAILABLE, "group: cannot bind %.200s",
                     c->endpoint);
            goto fail_quiet;
        }
        const char *ep = zsock_endpoint(g->sock);
        snprintf(g->endpoint, sizeof g->endpoint, "%s", ep ? ep : c->endpoint);
    } else {
        if (zsock_connect(g->sock, "%s", c->endpoint) != 0) {
            trn_fail(err, LISA_INVALID, "group: cannot connect to %.200s",
                     c->endpoint);
            goto fail_quiet;
        }
        snprintf(g->endpoint, sizeof g->endpoint, "%s", c->endpoint);
    }
    return g;
fail:
    trn_fail(err, LISA_ERR, "group: socket setup failed: %s",
             zmq_strerror(zmq_errno()));
fail_quiet:
    trn_group_destroy(&g);
    return NULL;
}

int
trn_group_rank(const trn_group_t *g)
{
    return g->rank;
}

int
trn_group_world(const trn_group_t *g)
{
    return g->world;
}

const char *
trn_group_endpoint(const trn_group_t *g)
{
    return g->endpoint;
}

const char *
trn_group_engine_url(const trn_group_t *g, int r)
{
    return r >= 0 && r < g->world && g->urls[r] ? g->urls[r] : "";
}

lisa_rc_t
trn_group_set_identity(trn_group_t *g, const char *engine_url,
                       const char *digest)
{
    if (g->joined || !engine_url || !digest)
        return LISA_CONFLICT;
    lisa_free(&g->urls[g->rank]);
    g->urls[g->rank] = lisa_strdup(engine_url);
    snprintf(g->digest, sizeof g->digest, "%s", digest);
    return LISA_OK;
}

static void
s_refuse(trn_group_t *g, zmsg_t *m, const char *why)
{
    Lisa__BootstrapAssign a = LISA__BOOTSTRAP_ASSIGN__INIT;
    a.code = LISA__CODE__CODE_INVALID;
    a.error = (char *) (uintptr_t) why;
    Lisa__Bootstrap b = LISA__BOOTSTRAP__INIT;
    b.body_case = LISA__BOOTSTRAP__BODY_ASSIGN;
    b.assign = &a;
    zmsg_t *out = zmsg_new();
    zmsg_append(out, &(zframe_t *){zframe_dup(zmsg_first(m))});
    lisa_codec_append(out, &b.base);
    if (zmsg_send(&out, g->sock) != 0)
        zmsg_destroy(&out);
}

/* Whether a message rank 0 got while ranks join is a stranger's, dropped
 * (what is no join) or refused (a join of another run); the bootstrap goes
 * on either way. */
static bool
s_stranger_join(trn_group_t *g, zmsg_t *m, const Lisa__Bootstrap *b)
{
    if (!b || b->body_case != LISA__BOOTSTRAP__BODY_JOIN) {
        lisa_log_warn("group: dropped a message that is no rank's join");
        return true;
    }
    if (*b->join->run_id && *g->run_id &&
        strcmp(b->join->run_id, g->run_id) != 0) {
        char why[256];
        snprintf(why, sizeof why, "rank %u is in run %.60s, not %.60s",
                 b->join->rank, b->join->run_id, g->run_id);
        lisa_log_warn("group: refused a join: %s", why);
        s_refuse(g, m, why);
        return true;
    }
    return false;
}

static lisa_rc_t
s_join_root(trn_group_t *g, const uint8_t *id, trn_err_t *err)
{
    int64_t deadline = zclock_mono() + g->timeout_ms;
    int joined = 1;
    lisa_rc_t rc = LISA_OK;
    while (joined < g->world) {
        zmsg_t *m = NULL;
        rc = s_recv(g, deadline, &m, err);
        if (rc == LISA_TIMEOUT)
            return trn_fail(err, LISA_TIMEOUT,
                            "group: %d of %d ranks joined within %d ms", joined,
                            g->world, g->timeout_ms);
        if (rc != LISA_OK)
            return rc;
        Lisa__Bootstrap *b = zmsg_size(m) == 2 ? s_decode(g, m) : NULL;
        if (s_stranger_join(g, m, b)) {
            lisa_codec_free((ProtobufCMessage **) &b);
            zmsg_destroy(&m);
            continue;
        }
        char why[256] = "";
        if (b->join->world_size != (uint32_t) g->world)
            snprintf(why, sizeof why, "world size %u, rank 0 has %d",
                     b->join->world_size, g->world);
        else if (b->join->rank == 0 || b->join->rank >= (uint32_t) g->world)
            snprintf(why, sizeof why, "bad rank %u", b->join->rank);
        else if (g->peers[b->join->rank])
            snprintf(why, sizeof why, "rank %u joined twice", b->join->rank);
        else if (strcmp(b->join->config_digest, g->digest) != 0)
            snprintf(why, sizeof why,
                     "rank %u has other settings or another model "
                     "(digest %.40s, rank 0 %.40s)",
                     b->join->rank, b->join->config_digest, g->digest);
        if (*why) {
            s_refuse(g, m, why);
            lisa_codec_free((ProtobufCMessage **) &b);
            zmsg_destroy(&m);
            return trn_fail(err, LISA_INVALID, "group: refused a rank: %s",
                            why);
        }
        int r = (int) b->join->rank;
        g->peers[r] = zframe_dup(zmsg_first(m));
        g->urls[r] = lisa_strdup(b->join->engine_url);
        lisa_log_info("group: rank %d joined (engine %s)", r, g->urls[r]);
        joined++;
        lisa_codec_free((ProtobufCMessage **) &b);
        zmsg_destroy(&m);
    }
    Lisa__BootstrapAssign a = LISA__BOOTSTRAP_ASSIGN__INIT;
    a.code = LISA__CODE__CODE_OK;
    if (id) {
        a.nccl_unique_id.data = (uint8_t *) (uintptr_t) id;
        a.nccl_unique_id.len = TRN_GROUP_ID_BYTES;
    }
    a.n_engine_urls = (size_t) g->world;
    a.engine_urls = g->urls;
    Lisa__Bootstrap b = LISA__BOOTSTRAP__INIT;
    b.body_case = LISA__BOOTSTRAP__BODY_ASSIGN;
    b.assign = &a;
    for (int r = 1; r < g->world; r++)
        if (s_send(g, r, &b) != LISA_OK)
            return s_send_failed(g, r, err);
    g->joined = true;
    lisa_log_info("group: all %d ranks joined on %s", g->world, g->endpoint);
    return LISA_OK;
}

static lisa_rc_t
s_join_rank(trn_group_t *g, uint8_t *id, bool *have_id, trn_err_t *err)
{
    Lisa__BootstrapJoin j = LISA__BOOTSTRAP_JOIN__INIT;
    j.rank = (uint32_t) g->rank;
    j.world_size = (uint32_t) g->world;
    j.engine_url = g->urls[g->rank];
    j.run_id = g->run_id;
    j.config_digest = g->digest;
    Lisa__Bootstrap b = LISA__BOOTSTRAP__INIT;
    b.body_case = LISA__BOOTSTRAP__BODY_JOIN;
    b.join = &j;
    if (s_send(g, 0, &b) != LISA_OK)
        return trn_fail(err, LISA_ERR, "group: cannot send the join");
    zmsg_t *m = NULL;
    lisa_rc_t rc = s_recv(g, zclock_mono() + g->timeout_ms, &m, err);
    if (rc == LISA_TIMEOUT)
        return trn_fail(err, LISA_TIMEOUT,
                        "group: rank 0 at %.200s did not answer the join "
                        "within %d ms",
                        g->endpoint, g->timeout_ms);
    if (rc != LISA_OK)
        return rc;
    Lisa__Bootstrap *a = s_decode(g, m);
    zmsg_destroy(&m);
    if (!a || a->body_case != LISA__BOOTSTRAP__BODY_ASSIGN) {
        lisa_codec_free((ProtobufCMessage **) &a);
        return trn_fail(err, LISA_INVALID,
                        "group: rank 0 answered the join with no assignment");
    }
    if (a->assign->code != LISA__CODE__CODE_OK) {
        rc = trn_fail(err, LISA_INVALID, "group: rank 0 refused this rank: %s",
                      a->assign->error);
        lisa_codec_free((ProtobufCMessage **) &a);
        return rc;
    }
    if (a->assign->nccl_unique_id.len != 0 &&
        a->assign->nccl_unique_id.len != TRN_GROUP_ID_BYTES) {
        lisa_codec_free((ProtobufCMessage **) &a);
        return trn_fail(err, LISA_INVALID, "group: bad unique id length");
    }
    if (have_id)
        *have_id = a->assign->nccl_unique_id.len == TRN_GROUP_ID_BYTES;
    if (id && a->assign->nccl_unique_id.len == TRN_GROUP_ID_BYTES)
        memcpy(id, a->assign->nccl_unique_id.data, TRN_GROUP_ID_BYTES);
    for (size_t r = 0; r < a->assign->n_engine_urls && r < (size_t) g->world;
         r++)
        if ((int) r != g->rank) {
            lisa_free(&g->urls[r]);
            g->urls[r] = lisa_strdup(a->assign->engine_urls[r]);
        }
    lisa_codec_free((ProtobufCMessage **) &a);
    g->joined = true;
    lisa_log_info("group: rank %d of %d joined %s", g->rank, g->world,
                  g->endpoint);
    return LISA_OK;
}

lisa_rc_t
trn_group_join(trn_group_t *g, uint8_t *id, bool *have_id, trn_err_t *err)
{
    if (g->joined)
        return trn_fail(err, LISA_CONFLICT, "group: already joined");
    if (g->world == 1) {
        g->joined = true;
        if (have_id)
            *have_id = false;
        return LISA_OK;
    }
    if (g->rank == 0) {
        if (have_id)
            *have_id = id != NULL;
        return s_join_root(g, id, err);
    }
    return s_join_rank(g, id, have_id, err);
}

static lisa_rc_t
s_send_command(trn_group_t *g, Lisa__RankCommand *cmd, trn_err_t *err)
{
    Lisa__Bootstrap b = LISA__BOOTSTRAP__INIT;
    b.body_case = LISA__BOOTSTRAP__BODY_COMMAND;
    b.command = cmd;
    for (int r = 1; r < g->world; r++)
        if (s_send(g, r, &b) != LISA_OK)
            return s_send_failed(g, r, err);
    return LISA_OK;
}

lisa_rc_t
trn_group_command(trn_group_t *g, Lisa__RankCommand *cmd, trn_err_t *err)
{
    if (g->rank != 0 || !g->joined)
        return trn_fail(err, LISA_CONFLICT,
                        "group: commands come from a joined rank 0");
    if (g->lost)
        return trn_fail(err, LISA_UNAVAILABLE, "group: a rank disconnected");
    if (g->stopped)
        return trn_fail(err, LISA_ERR,
                        "group: the ranks stopped after an earlier failure");
    cmd->seq = ++g->seq;
    return s_send_command(g, cmd, err);
}

/* Rank 0: one result of seq from every other rank; `partial` says which
 * kind is expected. With `sum`, adds each rank's values (n) in rank
 * order after rank 0's. */
static lisa_rc_t
s_collect(trn_group_t *g, bool partial, double *sum, size_t n, trn_err_t *err)
{
    int64_t deadline = zclock_mono() + g->timeout_ms;
    Lisa__RankResult **got = lisa_calloc((size_t) g->world, sizeof *got);
    int have = 1;
    lisa_rc_t rc = LISA_OK, first = LISA_OK;
    char ferr[sizeof err->msg] = "";
    while (have < g->world && rc == LISA_OK) {
        zmsg_t *m = NULL;
        rc = s_recv(g, deadline, &m, err);
        if (rc != LISA_OK)
            break;
        int r = s_peer(g, m);
        if (r <= 0) { /* no rank's: a stranger's, dropped */
            lisa_log_warn("group: dropped a message from a connection that "
                          "is no rank's");
            zmsg_destroy(&m);
            continue;
        }
        Lisa__Bootstrap *b = zmsg_size(m) == 2 ? s_decode(g, m) : NULL;
        zmsg_destroy(&m);
        if (!b || b->body_case != LISA__BOOTSTRAP__BODY_RESULT ||
            b->result->seq != g->seq || got[r]) {
            lisa_codec_free((ProtobufCMessage **) &b);
            rc = trn_fail(err, LISA_INVALID,
                          "group: unexpected message from rank %d", r);
            break;
        }
        Lisa__RankResult *res = b->result;
        bool is_final =
            !(res->code == LISA__CODE__CODE_OK && res->n_values > 0);
        if (res->code != LISA__CODE__CODE_OK) {
            if (first == LISA_OK)
                snprintf(ferr, sizeof ferr, "rank %d: %s", r, res->error);
            first = LISA_ERR;
        } else if (partial == is_final || (partial && res->n_values != n)) {
            lisa_codec_free((ProtobufCMessage **) &b);
            rc = trn_fail(err, LISA_INVALID,
                          "group: rank %d is out of step with rank 0", r);
            break;
        }
        b->result = NULL; /* keep the result, free the envelope */
        b->body_case = LISA__BOOTSTRAP__BODY__NOT_SET;
        lisa_codec_free((ProtobufCMessage **) &b);
        got[r] = res;
        have++;
    }
    if (rc == LISA_OK && first != LISA_OK)
        rc = trn_fail(err, LISA_ERR, "group: %s", ferr);
    if (rc == LISA_OK && sum)
        for (int r = 1; r < g->world; r++)
            for (size_t i = 0; i < n; i++)
                sum[i] += got[r]->values[i];
    for (int r = 1; r < g->world; r++)
        if (got[r])
            protobuf_c_message_free_unpacked(&got[r]->base, NULL);
    lisa_free(&got);
    return rc;
}

lisa_rc_t
trn_group_finish(trn_group_t *g, trn_err_t *err)
{
    if (g->rank != 0 || !g->joined)
        return trn_fail(err, LISA_CONFLICT, "group: finish is rank 0's");
    if (g->world == 1)
        return LISA_OK;
    if (g->stopped)
        return trn_fail(err, LISA_ERR, "group: the run was stopped");
    return s_collect(g, false, NULL, 0, err);
}

lisa_rc_t
trn_group_next(trn_group_t *g, Lisa__RankCommand **cmd, trn_err_t *err)
{
    *cmd = NULL;
    if (g->rank == 0 || !g->joined)
        return trn_fail(err, LISA_CONFLICT,
                        "group: only a joined rank > 0 takes commands");
    if (g->stopped)
        return trn_fail(err, LISA_ERR, "group: rank 0 stopped the run");
    zmsg_t *m = NULL;
    lisa_rc_t rc = s_recv(g, -1, &m, err);
    if (rc != LISA_OK)
        return rc;
    Lisa__Bootstrap *b = s_decode(g, m);
    zmsg_destroy(&m);
    if (!b || b->body_case != LISA__BOOTSTRAP__BODY_COMMAND ||
        b->command->seq <= g->seq ||
        b->command->op == LISA__RANK_OP__RANK_OP_SUM) {
        lisa_codec_free((ProtobufCMessage **) &b);
        return trn_fail(err, LISA_INVALID,
                        "group: unexpected message from rank 0");
    }
    g->seq = b->command->seq;
    *cmd = b->command;
    b->command = NULL;
    b->body_case = LISA__BOOTSTRAP__BODY__NOT_SET;
    lisa_codec_free((ProtobufCMessage **) &b);
    return LISA_OK;
}

void
trn_group_free_command(Lisa__RankCommand **cmd)
{
    if (cmd && *cmd) {
        protobuf_c_message_free_unpacked(&(*cmd)->base, NULL);
        *cmd = NULL;
    }
}

static lisa_rc_t
s_result(trn_group_t *g, lisa_rc_t rc, const char *error, double *v, size_t n)
{
    Lisa__RankResult res = LISA__RANK_RESULT__INIT;
    res.seq = g->seq;
    res.rank = (uint32_t) g->rank;
    res.code = rc == LISA_OK ? LISA__CODE__CODE_OK : LISA__CODE__CODE_ERROR;
    res.error = (char *) (uintptr_t) (error ? error : "");
    res.values = v;
    res.n_values = n;
    Lisa__Bootstrap b = LISA__BOOTSTRAP__INIT;
    b.body_case = LISA__BOOTSTRAP__BODY_RESULT;
    b.result = &res;
    return s_send(g, 0, &b);
}

lisa_rc_t
trn_group_reply(trn_group_t *g, lisa_rc_t rc, const char *error)
{
    if (g->rank == 0)
        return LISA_CONFLICT;
    return s_result(g, rc, error, NULL, 0);
}

lisa_rc_t
trn_group_sum(trn_group_t *g, double *v, size_t n, trn_err_t *err)
{
    if (g->world == 1)
        return LISA_OK;
    if (!g->joined || g->stopped)
        return trn_fail(err, LISA_CONFLICT, "group: sum outside a run");
    if (n == 0)
        return LISA_OK;
    if (n * sizeof(double) + 64 > g->max_frame)
        return trn_fail(err, LISA_TOOLARGE,
                        "group: a sum of %zu values exceeds the frame bound "
                        "(%zu bytes)",
                        n, g->max_frame);
    if (g->rank == 0) {
        lisa_rc_t rc = s_collect(g, true, v, n, err);
        if (rc != LISA_OK) { /* the ranks waiting for the total stop now */
            trn_group_stop(g, false);
            return rc;
        }
        Lisa__RankCommand c = LISA__RANK_COMMAND__INIT;
        c.seq = g->seq;
        c.op = LISA__RANK_OP__RANK_OP_SUM;
        c.values = v;
        c.n_values = n;
        return s_send_command(g, &c, err);
    }
    if (s_result(g, LISA_OK, NULL, v, n) != LISA_OK)
        return trn_fail(err, LISA_ERR, "group: cannot send to rank 0");
    zmsg_t *m = NULL;
    lisa_rc_t rc = s_recv(g, zclock_mono() + g->timeout_ms, &m, err);
    if (rc != LISA_OK)
        return rc;
    Lisa__Bootstrap *b = s_decode(g, m);
    zmsg_destroy(&m);
    if (!b || b->body_case != LISA__BOOTSTRAP__BODY_COMMAND ||
        b->command->op != LISA__RANK_OP__RANK_OP_SUM ||
        b->command->seq != g->seq || b->command->n_values != n) {
        bool stop = b && b->body_case == LISA__BOOTSTRAP__BODY_COMMAND &&
                    b->command->op == LISA__RANK_OP__RANK_OP_STOP;
        g->stopped = true; /* nothing more comes from this run */
        rc = stop ? trn_fail(err, LISA_ERR, "group: rank 0 stopped the run")
                  : trn_fail(err, LISA_INVALID,
                             "group: rank 0 is out of step with this rank");
        lisa_codec_free((ProtobufCMessage **) &b);
        return rc;
    }
    memcpy(v, b->command->values, n * sizeof *v);
    lisa_codec_free((ProtobufCMessage **) &b);
    return LISA_OK;
}

int
trn_group_peers_ok(void *arg)
{
    trn_group_t *g = arg;
    if (!g)
        return 1;
    s_drain_monitor(g);
    s_probe(g);
    if (g->lost)
        return 0;
    return !(g->alive && !g->alive(g->alive_ctx));
}

static lisa_rc_t
s_comm_sum(void *self, double *v, size_t n, trn_err_t *err)
{
    return trn_group_sum(self, v, n, err);
}

trn_comm_t
trn_group_comm(trn_group_t *g)
{
    trn_comm_t c = {
        .rank = g->rank, .world = g->world, .self = g, .sum = s_comm_sum};
    return c;
}

void
trn_group_stop(trn_group_t *g, bool ok)
{
    if (!g || g->rank != 0 || !g->joined || g->stopped || g->world == 1) {
        if (g)
            g->stopped = true;
        return;
    }
    Lisa__RankCommand c = LISA__RANK_COMMAND__INIT;
    c.op = LISA__RANK_OP__RANK_OP_STOP;
    c.reason = ok ? 0 : 1;
    trn_err_t e = {{0}};
    if (g->lost || trn_group_command(g, &c, &e) != LISA_OK) {
        g->stopped = true;
        return;
    }
    int saved = g->timeout_ms;
    g->timeout_ms = 5000; /* the answers are courtesy */
    if (s_collect(g, false, NULL, 0, &e) != LISA_OK)
        lisa_log_warn("group: not every rank confirmed the stop");
    g->timeout_ms = saved;
    g->stopped = true;
}

void
trn_group_destroy(trn_group_t **gp)
{
    if (!gp || !*gp)
        return;
    trn_group_t *g = *gp;
    trn_group_stop(g, false);
    if (g->sock)
        zmq_socket_monitor(zsock_resolve(g->sock), NULL, 0);
    if (g->mon)
        zmq_close(g->mon);
    zsock_destroy(&g->sock);
    for (int r = 0; r < g->world; r++) {
        lisa_free(&g->urls[r]);
        zframe_destroy(&g->peers[r]);
    }
    lisa_free(&g->urls);
    lisa_free(&g->peers);
    lisa_free(gp);
}
