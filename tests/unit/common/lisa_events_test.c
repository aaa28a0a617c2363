/*
 * lisa_events tests, over real ZeroMQ sockets on loopback. The first test
 * is the usage example.
 */
#include "lisa/lisa_events.h"

#include <criterion/criterion.h>
#include <string.h>

typedef struct {
    uint64_t seqs[8];
    size_t n;
} seen_t;

static void
on_event(void *arg, const Lisa__Event *ev)
{
    seen_t *s = arg;
    if (s->n < 8)
        s->seqs[s->n] = ev->seq;
    s->n++;
}

static void
publish(zsock_t *pub, const char *topic, uint64_t seq)
{
    Lisa__Event ev = LISA__EVENT__INIT;
    Lisa__RolloutEvent ro = LISA__ROLLOUT_EVENT__INIT;
    ev.seq = seq;
    ev.body_case = LISA__EVENT__BODY_ROLLOUT;
    ev.rollout = &ro;
    ro.rollout_id = "r-1";
    cr_assert_eq(lisa_codec_send(zsock_resolve(pub), topic, &ev.base), LISA_OK);
}

/* Waits up to ms for something to read on sock. */
static void
wait_in(zsock_t *sock, long ms)
{
    zmq_pollitem_t it = {zsock_resolve(sock), 0, ZMQ_POLLIN, 0};
    (void) zmq_poll(&it, 1, ms);
}

/* A PUB socket on a loopback port, and its endpoint. */
static zsock_t *
bound_pub(char *ep, size_t cap)
{
    zsock_t *pub = zsock_new(ZMQ_PUB);
    cr_assert_not_null(pub);
    zsock_set_sndhwm(pub, 10000); /* a batch and more in flight */
    int port = zsock_bind(pub, "tcp://127.0.0.1:*");
    cr_assert_gt(port, 0);
    snprintf(ep, cap, "tcp://127.0.0.1:%d", port);
    return pub;
}

/* Publishes event 1 until the subscription sees one (the slow joiner). */
static void
joined(zsock_t *pub, zsock_t *sub, seen_t *seen)
{
    for (int i = 0; i < 200 && seen->n == 0; i++) {
        publish(pub, "rollout", 1);
        wait_in(sub, 10);
        lisa_events_drain(sub, on_event, seen, NULL);
    }
    cr_assert_gt(seen->n, 0, "the subscription never joined");
    memset(seen, 0, sizeof *seen);
}

/* A subscription to "rollout" on a fresh PUB socket (*pub), joined. */
static zsock_t *
subscribed(zsock_t **pub, seen_t *seen)
{
    char ep[64];
    *pub = bound_pub(ep, sizeof ep);
    zsock_t *sub = lisa_events_sub(ep, "rollout");
    cr_assert_not_null(sub);
    joined(*pub, sub, seen);
    return sub;
}

/* Drains until `want` events have come in all (or a second has passed);
 * returns how many the drains handed on. */
static size_t
drain_until(zsock_t *sub, seen_t *seen, size_t want, lisa_codec_stats_t *st)
{
    size_t got = 0;
    for (int i = 0; i < 100 && seen->n < want; i++) {
        wait_in(sub, 10);
        got += lisa_events_drain(sub, on_event, seen, st);
    }
    return got;
}

Test(lisa_events, usage)
{
    char ep[64];
    zsock_t *pub = bound_pub(ep, sizeof ep);
    /* a service subscribes to a topic and drains from its loop */
    zsock_t *sub = lisa_events_sub(ep, "rollout");
    cr_assert_not_null(sub);
    seen_t seen = {0};
    joined(pub, sub, &seen);

    publish(pub, "rollout", 7);
    publish(pub, "policy", 8); /* another topic: not delivered */
    publish(pub, "rollout", 9);
    cr_assert_eq(drain_until(sub, &seen, 2, NULL), 2);
    cr_assert_eq(seen.n, 2);
    cr_assert_eq(seen.seqs[0], 7);
    cr_assert_eq(seen.seqs[1], 9);
    zsock_destroy(&sub);
    zsock_destroy(&pub);
}

Test(lisa_events, bad_frames_are_dropped_and_counted)
{
    zsock_t *pub;
    seen_t seen = {0};
    zsock_t *sub = subscribed(&pub, &seen);

    /* not protobuf; a topic with no body; then a good one */
    zstr_sendm(pub, "rollout");
    zstr_send(pub, "\xff\xff\xff garbage");
    zstr_send(pub, "rollout");
    publish(pub, "rollout", 3);
    lisa_codec_stats_t st = {0};
    cr_assert_eq(drain_until(sub, &seen, 1, &st), 1);
    cr_assert_eq(seen.n, 1);
    cr_assert_eq(seen.seqs[0], 3);
    cr_assert_eq(st.ok, 1);
    cr_assert_eq(st.malformed, 1);
    zsock_destroy(&sub);
    zsock_destroy(&pub);
}

/* The bound on one drain, over an inproc pipe (whatever is sent is there
 * at once): 1005 waiting events take a batch and then the rest. */
Test(lisa_events, a_batch_is_bounded)
{
    zsock_t *push = zsock_new(ZMQ_PUSH), *pull = zsock_new(ZMQ_PULL);
    cr_assert(push && pull);
    zsock_set_sndhwm(push, 10000);
    zsock_set_rcvhwm(pull, 10000);
    cr_assert_eq(zsock_bind(push, "inproc://lisa-events-batch"), 0);
    cr_assert_eq(zsock_connect(pull, "inproc://lisa-events-batch"), 0);

    const size_t n = LISA_EVENTS_BATCH + 5;
    for (size_t i = 0; i < n; i++)
        publish(push, "rollout", 100 + i);
    seen_t seen = {0};
    cr_assert_eq(lisa_events_drain(pull, on_event, &seen, NULL),
                 LISA_EVENTS_BATCH);
    cr_assert_eq(lisa_events_drain(pull, on_event, &seen, NULL), 5);
    cr_assert_eq(lisa_events_drain(pull, on_event, &seen, NULL), 0);
    cr_assert_eq(seen.n, n);
    cr_assert_eq(seen.seqs[0], 100);
    cr_assert_eq(seen.seqs[7], 107);
    zsock_destroy(&pull);
    zsock_destroy(&push);
}

Test(lisa_events, a_bad_endpoint_is_null)
{
    cr_assert_null(lisa_events_sub("not-an-endpoint", "rollout"));
}
