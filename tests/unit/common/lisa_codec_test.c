/*
 * lisa_codec tests. The first test is the usage example.
 */
#include "lisa/lisa_codec.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

Test(lisa_codec, usage)
{
    /* A caller fills in a body; the codec stamps the version and packs. */
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__StatsReq stats_req = LISA__STATS_REQ__INIT;
    req.request_id = 42;
    req.body_case = LISA__REQUEST__BODY_STATS;
    req.stats = &stats_req;
    zframe_t *frame = lisa_codec_encode(&req.base);

    /* The receiver decodes with a bound and gets a typed message back. */
    lisa_codec_stats_t counters = {0};
    ProtobufCMessage *msg = NULL;
    const char *why = NULL;
    lisa_rc_t rc =
        lisa_codec_decode_frame(&lisa__request__descriptor, frame,
                                LISA_MAX_RPC_FRAME, &counters, &msg, &why);
    cr_assert_eq(rc, LISA_OK, "%s", why);
    Lisa__Request *got = (Lisa__Request *) msg;
    cr_assert_eq(got->version, LISA_PROTOCOL_VERSION);
    cr_assert_eq(got->request_id, 42);
    cr_assert_eq(got->body_case, LISA__REQUEST__BODY_STATS);
    cr_assert_eq(counters.ok, 1);
    lisa_codec_free(&msg);
    cr_assert_null(msg);
    lisa_codec_free(&msg); /* safe twice */
    zframe_destroy(&frame);
}

Test(lisa_codec, oversized_frame_is_refused)
{
    size_t n = 2048;
    uint8_t *buf = calloc(1, n);
    lisa_codec_stats_t c = {0};
    ProtobufCMessage *m = NULL;
    const char *why = NULL;
    cr_assert_eq(lisa_codec_decode(&lisa__request__descriptor, buf, n, 1024, &c,
                                   &m, &why),
                 LISA_TOOLARGE);
    cr_assert_null(m);
    cr_assert_eq(c.too_large, 1);
    cr_assert_str_eq(why, "frame exceeds the size limit");
    free(buf);
}

Test(lisa_codec, truncated_frames_are_malformed)
{
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__EnqueueReq enq = LISA__ENQUEUE_REQ__INIT;
    enq.run_id = "run-with-a-longish-name";
    req.body_case = LISA__REQUEST__BODY_ENQUEUE;
    req.enqueue = &enq;
    zframe_t *f = lisa_codec_encode(&req.base);
    size_t n = zframe_size(f);
    lisa_codec_stats_t c = {0};
    int refused = 0;
    for (size_t cut = 1; cut < n; cut++) {
        ProtobufCMessage *m = NULL;
        lisa_rc_t rc =
            lisa_codec_decode(&lisa__request__descriptor, zframe_data(f), cut,
                              LISA_MAX_RPC_FRAME, &c, &m, NULL);
        if (rc != LISA_OK)
            refused++;
        cr_assert((rc == LISA_OK) == (m != NULL));
        lisa_codec_free(&m);
    }
    /* Every cut inside the body breaks a length prefix. */
    cr_assert_geq(refused, (int) n - 4);
    cr_assert_eq(c.malformed + c.wrong_type + c.bad_version,
                 (uint64_t) refused);
    zframe_destroy(&f);
}

Test(lisa_codec, wrong_envelope_type_is_unsupported)
{
    Lisa__WorkerMsg w = LISA__WORKER_MSG__INIT;
    Lisa__WorkerReady ready = LISA__WORKER_READY__INIT;
    ready.worker_id = "w1";
    w.body_case = LISA__WORKER_MSG__BODY_READY;
    w.ready = &ready;
    zframe_t *f = lisa_codec_encode(&w.base);
    lisa_codec_stats_t c = {0};
    ProtobufCMessage *m = NULL;
    const char *why = NULL;
    cr_assert_eq(lisa_codec_decode_frame(&lisa__request__descriptor, f,
                                         LISA_MAX_RPC_FRAME, &c, &m, &why),
                 LISA_UNSUPPORTED);
    cr_assert_null(m);
    cr_assert_eq(c.wrong_type, 1);
    /* ... and the same bytes decode as what they are. */
    cr_assert_eq(lisa_codec_decode_frame(&lisa__worker_msg__descriptor, f,
                                         LISA_MAX_WORKER_FRAME, &c, &m, &why),
                 LISA_OK);
    lisa_codec_free(&m);
    zframe_destroy(&f);
}

Test(lisa_codec, other_version_is_unsupported)
{
    Lisa__Event ev = LISA__EVENT__INIT;
    Lisa__PolicyEvent pe = LISA__POLICY_EVENT__INIT;
    ev.body_case = LISA__EVENT__BODY_POLICY;
    ev.policy = &pe;
    ev.version = 7;
    /* Pack by hand: lisa_codec_encode would stamp version 1. */
    size_t n = protobuf_c_message_get_packed_size(&ev.base);
    uint8_t buf[64];
    cr_assert_leq(n, sizeof buf);
    protobuf_c_message_pack(&ev.base, buf);
    lisa_codec_stats_t c = {0};
    ProtobufCMessage *m = NULL;
    cr_assert_eq(lisa_codec_decode(&lisa__event__descriptor, buf, n,
                                   LISA_MAX_EVENT_FRAME, &c, &m, NULL),
                 LISA_UNSUPPORTED);
    cr_assert_eq(c.bad_version, 1);
    cr_assert_eq(lisa_codec_stats_refused(&c), 1);
}

Test(lisa_codec, random_bytes_never_crash)
{
    unsigned seed = 12345;
    lisa_codec_stats_t c = {0};
    uint8_t buf[512];
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t) (rand_r(&seed) % (int) sizeof buf);
        for (size_t k = 0; k < n; k++)
            buf[k] = (uint8_t) rand_r(&seed);
        ProtobufCMessage *m = NULL;
        lisa_rc_t rc = lisa_codec_decode(&lisa__request__descriptor, buf, n,
                                         LISA_MAX_RPC_FRAME, &c, &m, NULL);
        cr_assert((rc == LISA_OK) == (m != NULL));
        lisa_codec_free(&m);
    }
    cr_assert_eq(c.ok + lisa_codec_stats_refused(&c), 20000);
    cr_assert_gt(lisa_codec_stats_refused(&c), 19000);
}

Test(lisa_codec, send_with_topic_over_real_sockets)
{
    zsock_t *pub = zsock_new_pub("inproc://codec-test");
    zsock_t *sub = zsock_new_sub("inproc://codec-test", "policy");
    cr_assert_not_null(pub);
    cr_assert_not_null(sub);
    zclock_sleep(50);
    Lisa__Event ev = LISA__EVENT__INIT;
    Lisa__PolicyEvent pe = LISA__POLICY_EVENT__INIT;
    pe.version = 9;
    ev.seq = 1;
    ev.body_case = LISA__EVENT__BODY_POLICY;
    ev.policy = &pe;
    cr_assert_eq(lisa_codec_send(zsock_resolve(pub), "policy", &ev.base),
                 LISA_OK);
    zsock_set_rcvtimeo(sub, 2000);
    zmsg_t *zm = zmsg_recv(sub);
    cr_assert_not_null(zm);
    cr_assert_eq(zmsg_size(zm), 2);
    char *topic = zmsg_popstr(zm);
    cr_assert_str_eq(topic, "policy");
    free(topic);
    zframe_t *f = zmsg_pop(zm);
    ProtobufCMessage *m = NULL;
    cr_assert_eq(lisa_codec_decode_frame(&lisa__event__descriptor, f,
                                         LISA_MAX_EVENT_FRAME, NULL, &m, NULL),
                 LISA_OK);
    cr_assert_eq(((Lisa__Event *) m)->policy->version, 9);
    lisa_codec_free(&m);
    zframe_destroy(&f);
    zmsg_destroy(&zm);
    zsock_destroy(&sub);
    zsock_destroy(&pub);
}

/* Packs req (protobuf-c does not check strings) and decodes it again. */
static lisa_rc_t
s_round_trip(Lisa__Request *req, const char **why)
{
    zframe_t *frame = lisa_codec_encode(&req->base);
    lisa_codec_stats_t c = {0};
    ProtobufCMessage *m = NULL;
    lisa_rc_t rc = lisa_codec_decode_frame(&lisa__request__descriptor, frame,
                                           LISA_MAX_RPC_FRAME, &c, &m, why);
    cr_assert_eq(c.malformed, rc == LISA_INVALID ? 1u : 0u);
    lisa_codec_free(&m);
    zframe_destroy(&frame);
    return rc;
}

Test(lisa_codec, invalid_utf8_strings_are_malformed)
{
    /* a top-level string of the body (a oneof member) */
    Lisa__Request req = LISA__REQUEST__INIT;
    Lisa__CancelReq cq = LISA__CANCEL_REQ__INIT;
    req.body_case = LISA__REQUEST__BODY_CANCEL;
    req.cancel = &cq;
    cq.reason = "fine \xc3\xa9";
    const char *why = NULL;
    cr_assert_eq(s_round_trip(&req, &why), LISA_OK, "%s", why);
    cq.reason = "bad \xff";
    cr_assert_eq(s_round_trip(&req, &why), LISA_INVALID);
    cr_assert_str_eq(why, "a string field is not valid UTF-8");
    /* a repeated string */
    char *ids[] = {"r-1", "r-\xc0\xaf"}; /* an overlong '/' */
    cq.reason = "";
    cq.n_rollout_ids = 2;
    cq.rollout_ids = ids;
    cr_assert_eq(s_round_trip(&req, &why), LISA_INVALID);
    /* a string inside a repeated message */
    Lisa__EnqueueReq enq = LISA__ENQUEUE_REQ__INIT;
    Lisa__TaskSpec t = LISA__TASK_SPEC__INIT;
    Lisa__TaskSpec *tasks[] = {&t};
    enq.n_tasks = 1;
    enq.tasks = tasks;
    t.problem_statement = "surrogate \xed\xa0\x80";
    req.body_case = LISA__REQUEST__BODY_ENQUEUE;
    req.enqueue = &enq;
    cr_assert_eq(s_round_trip(&req, &why), LISA_INVALID);
    t.problem_statement = "x";
    cr_assert_eq(s_round_trip(&req, &why), LISA_OK, "%s", why);
}
