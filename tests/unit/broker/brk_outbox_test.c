/*
 * brk_outbox tests with a real store (SQLite in a temporary directory) and
 * real ZeroMQ sockets (inproc ROUTER/DEALER for replies, PUB/SUB for
 * events): nothing leaves before the COMMIT; a mark and undo drop what a
 * failed request queued; a flush hands score jobs, drops and finished
 * rollouts to the sink, and the replies the sink queues leave with the
 * batch; with sync "full" replies wait for the syncer. The first test is
 * the usage example.
 */
#include "brk_outbox.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char s_dir[256];
static brk_store_t *s_store;
static zsock_t *s_router, *s_dealer, *s_pub, *s_sub;
static zframe_t *s_peer; /* the dealer's identity as the router sees it */

/* What the sink was handed. */
static struct {
    char adopted[8][64];
    uint32_t attempts[8];
    size_t n_adopted;
    char dropped[8][64];
    size_t n_dropped;
    char finished[8][64];
    size_t n_finished;
    size_t flushes;
    brk_outbox_t *ob; /* to reply from the finished callback */
} s_seen;

static void
s_adopt(void *arg, const char *id, uint32_t attempt, const char *ds)
{
    (void) arg, (void) ds;
    snprintf(s_seen.adopted[s_seen.n_adopted], 64, "%s", id);
    s_seen.attempts[s_seen.n_adopted++] = attempt;
}

static void
s_drop(void *arg, const char *id)
{
    (void) arg;
    snprintf(s_seen.dropped[s_seen.n_dropped++], 64, "%s", id);
}

static void
s_finished(void *arg, char *const *ids, size_t n)
{
    (void) arg;
    for (size_t i = 0; i < n; i++) {
        snprintf(s_seen.finished[s_seen.n_finished++], 64, "%s", ids[i]);
        /* a wait answered by this batch */
        Lisa__Reply rep = LISA__REPLY__INIT;
        rep.request_id = 900 + i;
        brk_outbox_reply(s_seen.ob, s_peer, false, &rep);
    }
}

static void
s_flushed(void *arg)
{
    (void) arg;
    s_seen.flushes++;
}

static const brk_outbox_sink_t s_sink = {NULL, s_adopt, s_drop, s_finished,
                                         s_flushed};

static void
s_setup(void)
{
    memset(&s_seen, 0, sizeof s_seen);
    snprintf(s_dir, sizeof s_dir, "/tmp/brk_outbox_test_XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
    s_store = brk_store_open(s_dir, false);
    cr_assert_not_null(s_store);
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://outbox-%d", (int) getpid());
    s_router = zsock_new_router(ep);
    s_dealer = zsock_new(ZMQ_DEALER);
    cr_assert_eq(zsock_connect(s_dealer, "%s", ep), 0);
    snprintf(ep, sizeof ep, "inproc://outbox-ev-%d", (int) getpid());
    s_pub = zsock_new_pub(ep);
    s_sub = zsock_new_sub(ep, "");
    cr_assert(s_router && s_pub && s_sub);
    /* the router learns the dealer's identity from its first message */
    zstr_send(s_dealer, "hello");
    zmsg_t *m = zmsg_recv(s_router);
    cr_assert_not_null(m);
    s_peer = zmsg_pop(m);
    zmsg_destroy(&m);
}

static void
s_teardown(void)
{
    zframe_destroy(&s_peer);
    zsock_destroy(&s_dealer);
    zsock_destroy(&s_router);
    zsock_destroy(&s_sub);
    zsock_destroy(&s_pub);
    brk_store_close(&s_store);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

/* The next reply the dealer gets within ms, or NULL. */
static Lisa__Reply *
s_reply(int ms)
{
    zpoller_t *p = zpoller_new(s_dealer, NULL);
    void *which = zpoller_wait(p, ms);
    zpoller_destroy(&p);
    if (!which)
        return NULL;
    zframe_t *f = zframe_recv(s_dealer);
    Lisa__Reply *rep =
        lisa__reply__unpack(NULL, zframe_size(f), zframe_data(f));
    zframe_destroy(&f);
    return rep;
}

/* The seq of the next event within ms, or 0. */
static uint64_t
s_event_seq(int ms, char *topic, size_t n)
{
    zpoller_t *p = zpoller_new(s_sub, NULL);
    void *which = zpoller_wait(p, ms);
    zpoller_destroy(&p);
    if (!which)
        return 0;
    zmsg_t *m = zmsg_recv(s_sub);
    char *t = zmsg_popstr(m);
    snprintf(topic, n, "%s", t ? t : "");
    zstr_free(&t);
    zframe_t *f = zmsg_pop(m);
    Lisa__Event *ev = lisa__event__unpack(NULL, zframe_size(f), zframe_data(f));
    uint64_t seq = ev ? ev->seq : 0;
    lisa__event__free_unpacked(ev, NULL);
    zframe_destroy(&f);
    zmsg_destroy(&m);
    return seq;
}

static void
s_policy_event(brk_outbox_t *ob, uint64_t version)
{
    Lisa__Event ev = LISA__EVENT__INIT;
    Lisa__PolicyEvent pe = LISA__POLICY_EVENT__INIT;
    pe.version = version;
    ev.body_case = LISA__EVENT__BODY_POLICY;
    ev.policy = &pe;
    brk_outbox_event(ob, "policy", &ev);
}

TestSuite(brk_outbox, .init = s_setup, .fini = s_teardown);

Test(brk_outbox, usage)
{
    brk_outbox_t *ob = brk_outbox_new(s_store, s_router, s_pub, false, &s_sink);
    cr_assert_not_null(ob);
    zclock_sleep(50); /* let the subscription settle */
    cr_assert_eq(brk_store_begin(s_store), LISA_OK);
    Lisa__Reply rep = LISA__REPLY__INIT;
    rep.request_id = 7;
    brk_outbox_reply(ob, s_peer, false, &rep);
    s_policy_event(ob, 3);
    cr_assert_eq(brk_outbox_pending_replies(ob), 1);
    /* nothing leaves before the COMMIT */
    cr_assert_null(s_reply(50));
    cr_assert_eq(brk_outbox_commit(ob), LISA_OK);
    Lisa__Reply *got = s_reply(2000);
    cr_assert_not_null(got);
    cr_assert_eq(got->request_id, 7);
    lisa__reply__free_unpacked(got, NULL);
    char topic[32];
    cr_assert_eq(s_event_seq(2000, topic, sizeof topic), 1);
    cr_assert_str_eq(topic, "policy");
    cr_assert_eq(brk_outbox_event_seq(ob), 1);
    cr_assert_eq(brk_store_meta_get(s_store, "event_seq", 0), 1);
    cr_assert_eq(brk_outbox_errors(ob), 0);
    cr_assert_eq(s_seen.flushes, 1);
    brk_outbox_destroy(&ob);
    cr_assert_null(ob);
    brk_outbox_destroy(&ob);
}

Test(brk_outbox, undo_drops_what_a_failed_request_queued)
{
    brk_outbox_t *ob = brk_outbox_new(s_store, s_router, s_pub, false, &s_sink);
    s_seen.ob = ob;
    zclock_sleep(50);
    cr_assert_eq(brk_store_begin(s_store), LISA_OK);
    s_policy_event(ob, 1);
    brk_outbox_job(ob, "r-kept", 1, "math");
    brk_outbox_mark_t mark = brk_outbox_mark(ob);
    s_policy_event(ob, 2);
    brk_outbox_job(ob, "r-undone", 2, "math");
    brk_outbox_finished(ob, "r-undone");
    brk_outbox_drop_job(ob, "r-undone");
    brk_outbox_undo(ob, &mark);
    /* the failed request's error reply stays */
    brk_outbox_error(ob, s_peer, false, 11, LISA__REQUEST__BODY_CLAIM,
                     LISA_CONFLICT, "attempt 1 of r-x is over");
    cr_assert_eq(brk_outbox_commit(ob), LISA_OK);
    cr_assert_eq(s_seen.n_adopted, 1);
    cr_assert_str_eq(s_seen.adopted[0], "r-kept");
    cr_assert_eq(s_seen.n_finished, 0);
    cr_assert_eq(s_seen.n_dropped, 0);
    char topic[32];
    cr_assert_eq(s_event_seq(2000, topic, sizeof topic), 1);
    cr_assert_eq(s_event_seq(100, topic, sizeof topic), 0); /* no second */
    Lisa__Reply *got = s_reply(2000);
    cr_assert_not_null(got);
    cr_assert_eq(got->request_id, 11);
    cr_assert_eq(got->code, LISA__CODE__CODE_CONFLICT);
    cr_assert_str_eq(got->error, "attempt 1 of r-x is over");
    /* the empty body says which request it answers */
    cr_assert_eq(got->body_case, LISA__REPLY__BODY_CLAIM);
    lisa__reply__free_unpacked(got, NULL);
    cr_assert_eq(brk_outbox_errors(ob), 1);
    /* the next event continues the sequence */
    cr_assert_eq(brk_store_begin(s_store), LISA_OK);
    s_policy_event(ob, 3);
    cr_assert_eq(brk_outbox_commit(ob), LISA_OK);
    cr_assert_eq(s_event_seq(2000, topic, sizeof topic), 2);
    brk_outbox_destroy(&ob);
}

Test(brk_outbox, replies_the_sink_queues_leave_with_the_batch)
{
    brk_outbox_t *ob = brk_outbox_new(s_store, s_router, s_pub, false, &s_sink);
    s_seen.ob = ob;
    cr_assert_eq(brk_store_begin(s_store), LISA_OK);
    brk_outbox_job(ob, "r-1", 3, "math");
    brk_outbox_drop_job(ob, "r-0");
    brk_outbox_finished(ob, "r-2");
    brk_outbox_finished(ob, "r-3");
    cr_assert_eq(brk_outbox_commit(ob), LISA_OK);
    cr_assert_eq(s_seen.n_adopted, 1);
    cr_assert_eq(s_seen.attempts[0], 3);
    cr_assert_eq(s_seen.n_dropped, 1);
    cr_assert_str_eq(s_seen.dropped[0], "r-0");
    cr_assert_eq(s_seen.n_finished, 2);
    cr_assert_str_eq(s_seen.finished[1], "r-3");
    for (uint64_t i = 0; i < 2; i++) {
        Lisa__Reply *got = s_reply(2000);
        cr_assert_not_null(got, "reply %llu", (unsigned long long) i);
        cr_assert_eq(got->request_id, 900 + i);
        lisa__reply__free_unpacked(got, NULL);
    }
    cr_assert_eq(brk_outbox_pending_replies(ob), 0);
    brk_outbox_destroy(&ob);
}

Test(brk_outbox, with_full_sync_replies_wait_for_the_syncer)
{
    brk_outbox_t *ob = brk_outbox_new(s_store, s_router, s_pub, true, &s_sink);
    cr_assert_not_null(ob);
    void *syncer = brk_outbox_syncer_handle(ob);
    cr_assert_not_null(syncer);
    cr_assert_eq(brk_store_begin(s_store), LISA_OK);
    Lisa__Reply rep = LISA__REPLY__INIT;
    rep.request_id = 5;
    brk_outbox_reply(ob, s_peer, false, &rep);
    cr_assert_eq(brk_outbox_commit(ob), LISA_OK);
    cr_assert(brk_outbox_syncing(ob));
    cr_assert_eq(s_seen.flushes, 0);
    zmq_pollitem_t it = {syncer, 0, ZMQ_POLLIN, 0};
    cr_assert_eq(zmq_poll(&it, 1, 5000), 1);
    cr_assert_eq(brk_outbox_on_syncer(ob), LISA_OK);
    cr_assert_not(brk_outbox_syncing(ob));
    Lisa__Reply *got = s_reply(2000);
    cr_assert_not_null(got);
    cr_assert_eq(got->request_id, 5);
    lisa__reply__free_unpacked(got, NULL);
    cr_assert_eq(s_seen.flushes, 1);
    /* at stop, what is open is committed, synced and sent */
    cr_assert_eq(brk_store_begin(s_store), LISA_OK);
    rep.request_id = 6;
    brk_outbox_reply(ob, s_peer, false, &rep);
    brk_outbox_drain(ob);
    got = s_reply(2000);
    cr_assert_not_null(got);
    cr_assert_eq(got->request_id, 6);
    lisa__reply__free_unpacked(got, NULL);
    brk_outbox_destroy(&ob);
}
