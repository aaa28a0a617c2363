/*
 * trn_engine tests: the generation endpoint over real HTTP on loopback with
 * the CPU backend and a small random model. A completion has the shape the
 * gateway requires; pausing waits for in-flight generations, holds new
 * requests in the queue and the answer after resume carries the new policy
 * version. The first test is the usage example.
 */
#include "lisa/lisa_codec.h"
#include "lisa/lisa_tokenizer.h"
#include "trn_backend.h"
#include "trn_engine.h"
#include "trn_sampler.h"
#include "trn_tiny_model.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static char s_dir[128];
static trn_backend_t *s_b;
static trn_engine_t *s_e;

static void
s_setup(void)
{
    trn_tiny_model_dir(s_dir, sizeof s_dir, "trn_engine_test", 1, 1);
    trn_err_t err;
    s_b = trn_backend_new("cpu", s_dir, 1, false, &err);
    cr_assert(s_b, "%s", err.msg);
    trn_engine_cfg_t ec = {
        .address = "127.0.0.1", .max_batch = 4, .policy_version = 3, .seed = 1};
    s_e = trn_engine_new(s_b, &ec);
    cr_assert(s_e);
}

static void
s_teardown(void)
{
    trn_engine_destroy(&s_e);
    trn_backend_destroy(&s_b);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

/* POSTs body to /v1/completions on `port`; returns the status, *out the
 * response (headers and body when `head`, else the body). */
static int
s_post_port(uint16_t port, const char *body, char *out, size_t outlen,
            bool head)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *) &a, sizeof a) != 0)
        return -1;
    static _Thread_local char req[65536];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                     "Content-Type: application/json\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    if (write(fd, req, (size_t) n) != n)
        return -1;
    size_t got = 0;
    ssize_t r;
    while ((r = read(fd, req + got, sizeof req - 1 - got)) > 0)
        got += (size_t) r;
    req[got] = '\0';
    close(fd);
    int status = 0;
    sscanf(req, "HTTP/1.1 %d", &status);
    const char *b = strstr(req, "\r\n\r\n");
    snprintf(out, outlen, "%s", head ? req : b ? b + 4 : "");
    return status;
}

static int
s_post(const char *body, char *out, size_t outlen)
{
    return s_post_port(trn_engine_port(s_e), body, out, outlen, false);
}

typedef struct {
    const char *body;
    uint16_t port; /* 0: the suite's engine */
    char out[65536];
    int status;
    volatile int done;
} call_t;

static void *
s_call(void *arg)
{
    call_t *c = arg;
    c->status =
        c->port ? s_post_port(c->port, c->body, c->out, sizeof c->out, false)
                : s_post(c->body, c->out, sizeof c->out);
    c->done = 1;
    return NULL;
}

static void
s_sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000,
                          .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

TestSuite(trn_engine, .init = s_setup, .fini = s_teardown);

Test(trn_engine, usage)
{
    char out[4096];
    int st = s_post("{\"prompt\":[1,2,3],\"max_tokens\":5,\"temperature\":1,"
                    "\"seed\":9,\"stop_token_ids\":[]}",
                    out, sizeof out);
    cr_assert_eq(st, 200, "%s", out);
    json_t *j = json_loads(out, 0, NULL);
    cr_assert(j, "%s", out);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    json_t *ids = json_object_get(ch, "token_ids");
    json_t *lps =
        json_object_get(json_object_get(ch, "logprobs"), "token_logprobs");
    cr_assert_eq(json_array_size(ids), 5);
    cr_assert_eq(json_array_size(lps), 5);
    for (size_t i = 0; i < 5; i++) {
        cr_assert_lt(json_integer_value(json_array_get(ids, i)), 64);
        cr_assert_leq(json_number_value(json_array_get(lps, i)), 0.0);
    }
    cr_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")),
                     "length");
    cr_assert_eq(json_integer_value(json_object_get(j, "policy_version")), 3);
    json_decref(j);
    trn_engine_stats_t s = trn_engine_stats(s_e);
    cr_assert_eq(s.completed, 1);
    cr_assert_eq(s.tokens_generated, 5);
    cr_assert_eq(s.tokens_prefilled, 3);
}

Test(trn_engine, paused_requests_wait_and_get_the_new_version)
{
    cr_assert_eq(trn_engine_pause(s_e, 1000), LISA_OK); /* idle: at once */
    call_t c = {.body = "{\"prompt\":[5,6],\"max_tokens\":2}"};
    pthread_t t;
    pthread_create(&t, NULL, s_call, &c);
    for (int i = 0; i < 200 && trn_engine_stats(s_e).queued == 0; i++)
        s_sleep_ms(10);
    cr_assert_eq(trn_engine_stats(s_e).queued, 1);
    s_sleep_ms(200);
    cr_assert_eq(c.done, 0, "answered while paused");
    cr_assert_eq(trn_engine_stats(s_e).inflight, 0);
    trn_engine_resume(s_e, 4);
    pthread_join(t, NULL);
    cr_assert_eq(c.status, 200, "%s", c.out);
    json_t *j = json_loads(c.out, 0, NULL);
    cr_assert_eq(json_integer_value(json_object_get(j, "policy_version")), 4);
    json_decref(j);
    cr_assert_eq(trn_engine_policy_version(s_e), 4);
}

Test(trn_engine, pause_lets_in_flight_generations_finish)
{
    /* A generation of 250 tokens on the tiny model can finish between two
     * looks at the engine; try again until one is seen in flight. */
    bool seen = false;
    for (int attempt = 0; attempt < 10 && !seen; attempt++) {
        call_t c = {.body = "{\"prompt\":[1],\"max_tokens\":250,"
                            "\"temperature\":1}"};
        uint64_t done0 = trn_engine_stats(s_e).completed;
        pthread_t t;
        pthread_create(&t, NULL, s_call, &c);
        for (int i = 0; i < 5000; i++) {
            trn_engine_stats_t s = trn_engine_stats(s_e);
            if (s.inflight == 1 || s.completed > done0)
                break;
            s_sleep_ms(1);
        }
        if (trn_engine_stats(s_e).inflight == 1) {
            seen = true;
            cr_assert_eq(trn_engine_pause(s_e, 20000), LISA_OK);
            trn_engine_stats_t s = trn_engine_stats(s_e);
            cr_assert_eq(s.inflight, 0);
            cr_assert_eq(s.completed, done0 + 1); /* finished, not cut */
        }
        pthread_join(t, NULL);
        cr_assert_eq(c.status, 200);
        json_t *j = json_loads(c.out, 0, NULL);
        json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
        cr_assert_eq(json_array_size(json_object_get(ch, "token_ids")), 250);
        json_decref(j);
        if (seen)
            trn_engine_resume(s_e, 3);
    }
    cr_assert(seen, "no generation was ever seen in flight");
}

Test(trn_engine, bad_requests_are_400)
{
    char out[4096];
    cr_assert_eq(s_post("{\"prompt\":[1,64]}", out, sizeof out), 400);
    cr_assert(strstr(out, "prompt[1]"), "%s", out);
    cr_assert_eq(s_post("not json", out, sizeof out), 400);
    cr_assert_eq(trn_engine_stats(s_e).rejected_bad, 2);
}

/* A backend that samples "on the device": the CPU backend plus gen_sample
 * (gen_step + trn_sample inside the backend), as a GPU backend would
 * provide it. The engine must then take its tokens instead of sampling. */
typedef struct {
    trn_backend_t base;
    trn_backend_t *inner;
    trn_backend_ops_t ops;
    int calls;
} devb_t;

static devb_t *s_dev;

static lisa_rc_t
d_open(trn_backend_t *b, trn_kv_geom_t *g, trn_err_t *e)
{
    return ((devb_t *) b)->inner->ops->gen_open(((devb_t *) b)->inner, g, e);
}
static const trn_config_t *
d_config(const trn_backend_t *b)
{
    const devb_t *d = (const devb_t *) b;
    return d->inner->ops->config(d->inner);
}
static lisa_rc_t
d_sample(trn_backend_t *b, size_t n, const trn_gen_seq_t *seqs,
         const trn_sampling_t *samp, const uint64_t *seeds, int32_t *out_tok,
         float *out_lp, trn_err_t *err)
{
    devb_t *d = (devb_t *) b;
    size_t V = (size_t) d_config(b)->vocab_size;
    float *logits = malloc(n * V * sizeof *logits);
    lisa_rc_t rc = d->inner->ops->gen_step(d->inner, n, seqs, logits, err);
    for (size_t i = 0; rc == LISA_OK && i < n; i++) {
        /* a draw keyed by the position, as the GPU sampler's */
        uint64_t rng =
            trn_rng_seed(seeds[i] * 31 + seqs[i].start + seqs[i].n_new);
        rc = trn_sample(logits + i * V, V, &samp[i], &rng, &out_tok[i],
                        &out_lp[i], err);
    }
    free(logits);
    d->calls++;
    return rc;
}

Test(trn_engine, a_backend_that_samples_on_the_device)
{
    trn_err_t err;
    s_dev = calloc(1, sizeof *s_dev);
    s_dev->inner = trn_backend_new("cpu", s_dir, 1, false, &err);
    cr_assert(s_dev->inner);
    s_dev->ops = *s_dev->inner->ops;
    s_dev->ops.gen_open = d_open;
    s_dev->ops.config = d_config;
    s_dev->ops.gen_step = NULL;
    s_dev->ops.gen_sample = d_sample;
    s_dev->base.ops = &s_dev->ops;
    trn_engine_cfg_t ec = {.address = "127.0.0.1", .max_batch = 2};
    trn_engine_t *e2 = trn_engine_new(&s_dev->base, &ec);
    cr_assert(e2);
    /* greedy through the device path equals greedy through the host path */
    const char *greedy = "{\"prompt\":[4,5,6],\"max_tokens\":6,"
                         "\"temperature\":0}";
    char host[65536], dev[65536];
    cr_assert_eq(s_post(greedy, host, sizeof host), 200);
    trn_engine_t *keep = s_e;
    s_e = e2; /* s_post talks to s_e */
    cr_assert_eq(s_post(greedy, dev, sizeof dev), 200, "%s", dev);
    char other[65536];
    cr_assert_eq(s_post("{\"prompt\":[1],\"max_tokens\":4,\"seed\":5}", other,
                        sizeof other),
                 200);
    /* n choices through the device sampler: each its own seed (2 slots:
     * the third choice waits in the queue) */
    cr_assert_eq(s_post("{\"prompt\":[1,2,3],\"n\":3,\"max_tokens\":8,"
                        "\"temperature\":1,\"seed\":5}",
                        other, sizeof other),
                 200, "%s", other);
    s_e = keep;
    json_t *nc = json_loads(other, 0, NULL);
    json_t *chs = json_object_get(nc, "choices");
    cr_assert_eq(json_array_size(chs), 3);
    json_t *t0 = json_object_get(json_array_get(chs, 0), "token_ids");
    bool differ = false;
    for (size_t i = 1; i < 3; i++)
        differ |= !json_equal(
            t0, json_object_get(json_array_get(chs, i), "token_ids"));
    cr_assert(differ, "%s", other);
    json_decref(nc);
    json_t *a = json_loads(host, 0, NULL), *b = json_loads(dev, 0, NULL);
    json_t *ia = json_object_get(
        json_array_get(json_object_get(a, "choices"), 0), "token_ids");
    json_t *ib = json_object_get(
        json_array_get(json_object_get(b, "choices"), 0), "token_ids");
    cr_assert(json_equal(ia, ib), "%s vs %s", host, dev);
    json_decref(a);
    json_decref(b);
    cr_assert_geq(s_dev->calls, 6 + 4);
    trn_engine_destroy(&e2);
    trn_backend_destroy(&s_dev->inner);
    free(s_dev);
}

/* ---- registration with the broker --------------------------------------
 * The broker here is a real ZeroMQ ROUTER in the test that holds its reply
 * to the first EngineRegister while the engine is paused and resumed, as
 * lisa-trainer does at start-up (and each data-parallel rank on every
 * command). The state change must reach the broker as soon as that call
 * ends, not at the next renewal (TTL / 3 = 10 s here): a gateway that sees
 * the engine paused sends every first call of a step to other engines. */

/* Receives one request from the router (NULL on timeout); *id, *empty
 * keep the envelope for the reply. */
static Lisa__Request *
s_recv_register(zsock_t *router, zframe_t **id, zframe_t **empty)
{
    zmsg_t *m = zmsg_recv(router);
    if (!m)
        return NULL;
    *id = zmsg_pop(m);
    *empty = zmsg_pop(m);
    zframe_t *body = zmsg_pop(m);
    ProtobufCMessage *msg = NULL;
    lisa_rc_t rc = lisa_codec_decode_frame(
        &lisa__request__descriptor, body, LISA_MAX_RPC_FRAME, NULL, &msg, NULL);
    zframe_destroy(&body);
    zmsg_destroy(&m);
    cr_assert_eq(rc, LISA_OK);
    Lisa__Request *req = (Lisa__Request *) msg;
    cr_assert_eq(req->body_case, LISA__REQUEST__BODY_ENGINE_REGISTER);
    return req;
}

static void
s_reply_ok(zsock_t *router, zframe_t **id, zframe_t **empty, uint64_t rid)
{
    Lisa__Reply rep = LISA__REPLY__INIT;
    Lisa__EngineRegisterRep er = LISA__ENGINE_REGISTER_REP__INIT;
    rep.request_id = rid;
    rep.code = LISA__CODE__CODE_OK;
    rep.body_case = LISA__REPLY__BODY_ENGINE_REGISTER;
    rep.engine_register = &er;
    zmsg_t *out = zmsg_new();
    zmsg_append(out, id);
    zmsg_append(out, empty);
    lisa_codec_append(out, &rep.base);
    cr_assert_eq(zmsg_send(&out, router), 0);
}

Test(trn_engine_broker, a_resume_during_a_registration_is_registered_at_once)
{
    char dir[128];
    trn_tiny_model_dir(dir, sizeof dir, "trn_engine_reg", 1, 1);
    trn_err_t err;
    trn_backend_t *b = trn_backend_new("cpu", dir, 1, false, &err);
    cr_assert(b, "%s", err.msg);
    zsock_t *router = zsock_new(ZMQ_ROUTER);
    int port = zsock_bind(router, "tcp://127.0.0.1:*");
    cr_assert_gt(port, 0);
    zsock_set_rcvtimeo(router, 5000);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    trn_engine_cfg_t ec = {.address = "127.0.0.1",
                           .max_batch = 2,
                           .policy_version = 0,
                           .broker = ep,
                           .register_ttl_ms = 30000,
                           .seed = 1};
    trn_engine_t *e = trn_engine_new(b, &ec);
    cr_assert(e);
    zframe_t *id = NULL, *empty = NULL;
    Lisa__Request *first = s_recv_register(router, &id, &empty);
    cr_assert(first, "no registration within 5 s");
    uint64_t rid = first->request_id;
    cr_assert_eq(first->engine_register->engine->policy_version, 0);
    lisa_codec_free((ProtobufCMessage **) &first);
    /* the call is on the wire: pause, then resume at a new version */
    cr_assert_eq(trn_engine_pause(e, 1000), LISA_OK);
    trn_engine_resume(e, 9);
    s_reply_ok(router, &id, &empty, rid);
    zsock_set_rcvtimeo(router, 2000);
    int64_t t0 = zclock_mono();
    Lisa__Request *second = s_recv_register(router, &id, &empty);
    cr_assert(second, "the resume was not registered within 2 s");
    cr_assert_lt(zclock_mono() - t0, 2000);
    cr_assert_not(second->engine_register->engine->paused);
    cr_assert_eq(second->engine_register->engine->policy_version, 9);
    s_reply_ok(router, &id, &empty, second->request_id);
    lisa_codec_free((ProtobufCMessage **) &second);
    /* nothing changed since: no third call before the renewal */
    zsock_set_rcvtimeo(router, 500);
    zmsg_t *none = zmsg_recv(router);
    cr_assert_null(none, "registered again with nothing to tell");
    zsock_set_rcvtimeo(router, 100);
    trn_engine_destroy(&e); /* its last registration is not answered */
    zsock_destroy(&router);
    trn_backend_destroy(&b);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

/* ---- the scheduler and the paged cache ----------------------------------
 * Engines over the same tiny model with small blocks, small steps or a
 * small cache; greedy outputs must be the same whatever the cache did
 * (hit, chunked, preempted), since every path computes the same keys. */

static trn_engine_t *
s_engine(size_t block, size_t step, size_t kv_blocks, bool no_cache,
         size_t queue_max)
{
    trn_engine_cfg_t ec = {.address = "127.0.0.1",
                           .max_batch = 4,
                           .block_size = block,
                           .max_step_tokens = step,
                           .no_prefix_cache = no_cache,
                           .queue_max = queue_max,
                           .seed = 1};
    if (kv_blocks) {
        const trn_model_t *m = NULL;
        (void) m;
        /* the CPU cache takes kv_bytes / its block size in blocks */
        size_t per = 2 * (size_t) s_b->ops->config(s_b)->num_hidden_layers *
                     block *
                     (size_t) s_b->ops->config(s_b)->num_key_value_heads *
                     (size_t) s_b->ops->config(s_b)->head_dim * sizeof(float);
        ec.kv_bytes = kv_blocks * per;
    }
    trn_engine_t *e = trn_engine_new(s_b, &ec);
    cr_assert(e);
    return e;
}

/* {"prompt":[ids],"max_tokens":max,"temperature":0} into buf. */
static const char *
s_body(char *buf, size_t len, const int32_t *ids, size_t n, int max)
{
    size_t o = (size_t) snprintf(buf, len, "{\"prompt\":[");
    for (size_t i = 0; i < n; i++)
        o += (size_t) snprintf(buf + o, len - o, "%s%d", i ? "," : "", ids[i]);
    snprintf(buf + o, len - o, "],\"max_tokens\":%d,\"temperature\":0}", max);
    return buf;
}

/* The sampled ids of a completion into ids (returns their count) and its
 * cached_tokens into *cached. */
static size_t
s_result(const char *out, int32_t *ids, size_t max, long *cached)
{
    json_t *j = json_loads(out, 0, NULL);
    cr_assert(j, "%s", out);
    json_t *t = json_object_get(
        json_array_get(json_object_get(j, "choices"), 0), "token_ids");
    size_t n = json_array_size(t);
    cr_assert_leq(n, max);
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t) json_integer_value(json_array_get(t, i));
    json_t *u = json_object_get(j, "usage");
    if (cached)
        *cached = (long) json_integer_value(json_object_get(
            json_object_get(u, "prompt_tokens_details"), "cached_tokens"));
    json_decref(j);
    return n;
}

static size_t
s_greedy(trn_engine_t *e, const int32_t *p, size_t n, int max, int32_t *ids,
         long *cached)
{
    static char body[65536], out[65536];
    int st =
        s_post_port(trn_engine_port(e), s_body(body, sizeof body, p, n, max),
                    out, sizeof out, false);
    cr_assert_eq(st, 200, "%s", out);
    return s_result(out, ids, 256, cached);
}

Test(trn_engine, a_conversations_next_turn_is_served_from_the_cache)
{
    trn_engine_t *e = s_engine(4, 0, 0, false, 0);
    trn_engine_t *ref = s_engine(4, 0, 0, true, 0);
    int32_t conv[200], out[256], want[256];
    size_t n = 0;
    for (; n < 41; n++)
        conv[n] = (int32_t) ((n * 7 + 3) % 64);
    long cached = -1;
    for (int turn = 0; turn < 3; turn++) {
        size_t k = s_greedy(e, conv, n, 8, out, &cached);
        long rc = -1;
        size_t kr = s_greedy(ref, conv, n, 8, want, &rc);
        cr_assert_eq(rc, 0); /* no prefix cache: nothing cached */
        cr_assert_eq(k, kr);
        cr_assert_arr_eq(out, want, k * sizeof *out, "turn %d", turn);
        if (turn > 0) {
            /* the earlier turn computed its prompt and 7 of its 8 tokens:
             * every full block of those is found */
            size_t computed = n - 5 - 1;
            cr_assert_eq((size_t) cached, computed / 4 * 4, "turn %d: %ld",
                         turn, cached);
        }
        /* the next turn re-sends the history plus an observation */
        memcpy(conv + n, out, k * sizeof *out);
        n += k;
        for (int i = 0; i < 5; i++)
            conv[n++] = (int32_t) (11 + i + turn);
    }
    trn_engine_stats_t st = trn_engine_stats(e);
    cr_assert_gt(st.cached_tokens, 0);
    cr_assert_gt(st.kv_blocks_cached, 0);
    trn_engine_destroy(&ref);
    trn_engine_destroy(&e);
}

Test(trn_engine, the_samples_of_one_prompt_share_its_blocks)
{
    trn_engine_t *e = s_engine(8, 0, 0, false, 0);
    int32_t p[70], a[256], b[256];
    for (size_t i = 0; i < 70; i++)
        p[i] = (int32_t) ((i * 5 + 1) % 64);
    long c1 = -1, c2 = -1;
    size_t na = s_greedy(e, p, 70, 4, a, &c1);
    size_t nb = s_greedy(e, p, 70, 4, b, &c2);
    cr_assert_eq(c1, 0);
    cr_assert_eq(c2, 64); /* the whole blocks of the 69 positions before the
                             last */
    cr_assert_eq(na, nb);
    cr_assert_arr_eq(a, b, na * sizeof *a);
    trn_engine_destroy(&e);
}

Test(trn_engine, a_long_prompt_is_prefilled_in_chunks)
{
    /* steps of at most 8 new tokens (the floor is max_batch, 4) */
    trn_engine_t *e = s_engine(4, 8, 0, false, 0);
    trn_engine_t *ref = s_engine(4, 0, 0, true, 0);
    int32_t p[100], a[256], b[256];
    for (size_t i = 0; i < 100; i++)
        p[i] = (int32_t) ((i * 13 + 2) % 64);
    size_t na = s_greedy(e, p, 100, 6, a, NULL);
    size_t nb = s_greedy(ref, p, 100, 6, b, NULL);
    cr_assert_eq(na, nb);
    cr_assert_arr_eq(a, b, na * sizeof *a);
    trn_engine_stats_t st = trn_engine_stats(e);
    cr_assert_leq(st.step_tokens_max, 8);
    cr_assert_geq(st.steps, 100 / 8 + 6);
    trn_engine_destroy(&ref);
    trn_engine_destroy(&e);
}

Test(trn_engine, running_out_of_blocks_preempts_and_every_call_completes)
{
    /* 12 blocks of 4 (48 positions) for 4 calls of 8 + 16 positions each:
     * they cannot all run at once */
    trn_engine_t *e = s_engine(4, 0, 12, false, 0);
    trn_engine_t *ref = s_engine(4, 0, 0, true, 0);
    enum { C = 4 };
    static call_t calls[C];
    static char bodies[C][512];
    pthread_t th[C];
    int32_t p[C][8];
    uint16_t keep = trn_engine_port(s_e);
    (void) keep;
    trn_engine_t *saved = s_e;
    s_e = e;
    /* queued while paused, so all four are admitted together */
    cr_assert_eq(trn_engine_pause(e, 1000), LISA_OK);
    for (int c = 0; c < C; c++) {
        for (int i = 0; i < 8; i++)
            p[c][i] = (int32_t) ((c * 17 + i * 3) % 64);
        calls[c].body = s_body(bodies[c], sizeof bodies[c], p[c], 8, 16);
        calls[c].done = 0;
        pthread_create(&th[c], NULL, s_call, &calls[c]);
    }
    for (int i = 0; i < 500 && trn_engine_stats(e).queued < C; i++)
        s_sleep_ms(10);
    cr_assert_eq(trn_engine_stats(e).queued, C);
    trn_engine_resume(e, 0);
    for (int c = 0; c < C; c++)
        pthread_join(th[c], NULL);
    s_e = saved;
    for (int c = 0; c < C; c++) {
        cr_assert_eq(calls[c].status, 200, "%s", calls[c].out);
        int32_t got[256], want[256];
        size_t n = s_result(calls[c].out, got, 256, NULL);
        size_t nw = s_greedy(ref, p[c], 8, 16, want, NULL);
        cr_assert_eq(n, nw);
        cr_assert_arr_eq(got, want, n * sizeof *got, "call %d", c);
    }
    trn_engine_stats_t st = trn_engine_stats(e);
    cr_assert_gt(st.preemptions, 0);
    cr_assert_eq(st.completed, C);
    cr_assert_eq(st.kv_blocks, 12);
    trn_engine_destroy(&ref);
    trn_engine_destroy(&e);
}

/* ---- an agent-shaped load under cache pressure --------------------------
 * C conversations of T turns at once: a first prompt of P token ids, G
 * sampled tokens a turn, then O observation tokens and the whole history
 * sent again (the shape of bench/engine/agent_load.py, scaled down). The
 * conversations end at 252 positions each, 4032 in all, over a cache of
 * 2520 (1.6 times less): in the last turns not every history fits. Every
 * conversation must finish, and the positions computed beyond the
 * histories' own (histories evicted and recomputed, sequences preempted
 * and recomputed) must stay below the histories' size. Under a plain LRU
 * with first-come-first-served admission each history was evicted just
 * before its next turn was served and 3.4 times that was recomputed. */
enum {
    S_AC = 16,
    S_AT = 12,
    S_AP = 16,
    S_AG = 16,
    S_AO = 4,
    S_ABS = 8,
    S_AEND = S_AP + S_AT * S_AG + (S_AT - 1) * S_AO /* 252 */
};

typedef struct {
    uint16_t port;
    int c;
    int turns;     /* turns answered 200 with G tokens */
    int status;    /* of the first failed call (0: none) */
    char out[512]; /* its answer */
} conv_t;

static void *
s_conv(void *arg)
{
    conv_t *cv = arg;
    int32_t h[S_AEND + S_AO];
    size_t n = 0;
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t) (cv->c + 1);
    for (; n < S_AP; n++) /* random, so conversations share nothing */
        h[n] = (int32_t) ((x = x * 6364136223846793005ull + 1) >> 58);
    char *body = malloc(8192), *out = malloc(65536);
    for (int t = 0; t < S_AT; t++) {
        s_body(body, 8192, h, n, S_AG);
        int st = s_post_port(cv->port, body, out, 65536, false);
        json_t *j = st == 200 ? json_loads(out, 0, NULL) : NULL;
        json_t *ids = json_object_get(
            json_array_get(json_object_get(j, "choices"), 0), "token_ids");
        if (json_array_size(ids) != S_AG) {
            cv->status = st == 200 ? -1 : st;
            snprintf(cv->out, sizeof cv->out, "%s", out);
            json_decref(j);
            break;
        }
        for (size_t i = 0; i < S_AG; i++)
            h[n++] = (int32_t) json_integer_value(json_array_get(ids, i));
        json_decref(j);
        cv->turns++;
        for (int i = 0; t + 1 < S_AT && i < S_AO; i++)
            h[n++] = (int32_t) ((x = x * 6364136223846793005ull + 1) >> 58);
    }
    free(body);
    free(out);
    return NULL;
}

/* The CPU backend with steps of at least 2 ms: like a device's steps, they
 * take longer than a client's turn-around on loopback, so a conversation's
 * next turn is queued before the engine has moved on. */
static const trn_backend_ops_t *s_fast_ops;

static lisa_rc_t
s_slow_step(trn_backend_t *b, size_t n, const trn_gen_seq_t *seqs,
            float *logits, trn_err_t *err)
{
    lisa_rc_t rc = s_fast_ops->gen_step(b, n, seqs, logits, err);
    s_sleep_ms(2);
    return rc;
}

Test(trn_engine, an_agent_load_over_a_small_cache_finishes_without_thrashing,
     .timeout = 300)
{
    static trn_backend_ops_t slow;
    s_fast_ops = s_b->ops;
    slow = *s_fast_ops;
    slow.gen_step = s_slow_step;
    s_b->ops = &slow;
    size_t blocks = S_AC * S_AEND * 10 / 16 / S_ABS; /* 1.6 times too few */
    trn_engine_cfg_t ec = {.address = "127.0.0.1",
                           .max_batch = S_AC,
                           .block_size = S_ABS,
                           .max_step_tokens = 256,
                           .seed = 1};
    ec.kv_bytes = blocks * 2 *
                  (size_t) s_b->ops->config(s_b)->num_hidden_layers * S_ABS *
                  (size_t) s_b->ops->config(s_b)->num_key_value_heads *
                  (size_t) s_b->ops->config(s_b)->head_dim * sizeof(float);
    trn_engine_t *e = trn_engine_new(s_b, &ec);
    cr_assert(e);
    static conv_t cv[S_AC];
    pthread_t th[S_AC];
    for (int c = 0; c < S_AC; c++) {
        cv[c] = (conv_t){.port = trn_engine_port(e), .c = c};
        pthread_create(&th[c], NULL, s_conv, &cv[c]);
    }
    for (int c = 0; c < S_AC; c++)
        pthread_join(th[c], NULL);
    trn_engine_stats_t st = trn_engine_stats(e);
    cr_log_info(
        "agent load: %zu blocks, %llu positions computed, %llu "
        "recomputed after preemptions, %llu preemptions (at most "
        "%llu of one sequence), %llu of %llu prompt tokens cached, "
        "%llu steps",
        blocks, (unsigned long long) st.computed,
        (unsigned long long) st.recomputed, (unsigned long long) st.preemptions,
        (unsigned long long) st.preempted_max,
        (unsigned long long) st.cached_tokens,
        (unsigned long long) st.prompt_tokens, (unsigned long long) st.steps);
    for (int c = 0; c < S_AC; c++)
        cr_assert_eq(cv[c].turns, S_AT, "conversation %d: %d: %s", c,
                     cv[c].status, cv[c].out);
    cr_assert_eq(st.kv_blocks, blocks);
    cr_assert_eq(st.completed, S_AC * S_AT);
    /* each position of each history once: all but the last sampled */
    uint64_t own = S_AC * (S_AEND - 1);
    cr_assert_geq(st.computed, own);
    cr_assert_lt(st.computed - own, own, "%llu positions for %llu",
                 (unsigned long long) st.computed, (unsigned long long) own);
    /* preemptions are rare and cheap: no sequence is preempted again and
     * again */
    cr_assert_lt(st.recomputed * 10, own, "%llu recomputed",
                 (unsigned long long) st.recomputed);
    cr_assert_leq(st.preempted_max, 3);
    trn_engine_destroy(&e);
    s_b->ops = s_fast_ops;
}

Test(trn_engine, a_prompt_over_the_context_is_400_and_a_full_queue_429)
{
    char out[65536], body[8192];
    int32_t p[300];
    for (size_t i = 0; i < 300; i++)
        p[i] = 1;
    /* max_position_embeddings is 256 */
    cr_assert_eq(s_post(s_body(body, sizeof body, p, 256, 1), out, sizeof out),
                 400);
    cr_assert(strstr(out, "256"), "%s", out);
    /* a cache of 8 blocks of 4 holds 32 positions: a longer prompt can
     * never run */
    trn_engine_t *e = s_engine(4, 0, 8, false, 1);
    cr_assert_eq(s_post_port(trn_engine_port(e),
                             s_body(body, sizeof body, p, 40, 1), out,
                             sizeof out, false),
                 400);
    cr_assert(strstr(out, "32"), "%s", out);
    /* paused: the first call waits in the queue of 1, the second is 429 */
    cr_assert_eq(trn_engine_pause(e, 1000), LISA_OK);
    trn_engine_t *saved = s_e;
    s_e = e;
    call_t c1 = {.body = "{\"prompt\":[1,2],\"max_tokens\":2}"};
    pthread_t t1;
    pthread_create(&t1, NULL, s_call, &c1);
    for (int i = 0; i < 200 && trn_engine_stats(e).queued == 0; i++)
        s_sleep_ms(10);
    cr_assert_eq(
        s_post_port(trn_engine_port(e), c1.body, out, sizeof out, true), 429);
    cr_assert(strstr(out, "Retry-After"), "%s", out);
    trn_engine_resume(e, 4);
    pthread_join(t1, NULL);
    s_e = saved;
    cr_assert_eq(c1.status, 200, "%s", c1.out);
    trn_engine_destroy(&e);
}

/* POSTs body to e; returns the parsed 200 answer. */
static json_t *
s_ok(trn_engine_t *e, const char *body)
{
    static char out[262144];
    int st = s_post_port(trn_engine_port(e), body, out, sizeof out, false);
    cr_assert_eq(st, 200, "%s", out);
    json_t *j = json_loads(out, 0, NULL);
    cr_assert(j, "%s", out);
    return j;
}

/* The token ids of choice i of answer j into ids; returns their count. */
static size_t
s_choice(const json_t *j, size_t i, int32_t *ids, size_t max)
{
    json_t *ch = json_array_get(json_object_get(j, "choices"), i);
    cr_assert(ch, "no choice %zu", i);
    cr_assert_eq(json_integer_value(json_object_get(ch, "index")), (long) i);
    json_t *t = json_object_get(ch, "token_ids");
    json_t *lp =
        json_object_get(json_object_get(ch, "logprobs"), "token_logprobs");
    size_t n = json_array_size(t);
    cr_assert_leq(n, max);
    cr_assert_eq(json_array_size(lp), n);
    for (size_t k = 0; k < n; k++) {
        ids[k] = (int32_t) json_integer_value(json_array_get(t, k));
        cr_assert_leq(json_number_value(json_array_get(lp, k)), 0.0);
    }
    return n;
}

static long
s_usage(const json_t *j, const char *what)
{
    json_t *u = json_object_get(j, "usage");
    if (strcmp(what, "cached_tokens") == 0)
        u = json_object_get(u, "prompt_tokens_details");
    return (long) json_integer_value(json_object_get(u, what));
}

/* Nothing left in the engine: no sequence, no referenced block. */
static void
s_assert_idle(trn_engine_t *e)
{
    trn_engine_stats_t st = trn_engine_stats(e);
    cr_assert_eq(st.inflight, 0);
    cr_assert_eq(st.queued, 0);
    cr_assert_eq(st.kv_blocks_used, 0);
}

/* ---- decodes that outgrow the cache ------------------------------------
 * S_DC sequences of a short prompt and S_DG greedy tokens each, queued
 * while paused and admitted together, over a cache that holds a third of
 * their ends: their first chunks all fit, their decodes do not. Admitted
 * by their first chunk alone and readmitted in the very step that
 * preempted them, the youngest were preempted again at nearly every block
 * boundary and recomputed their tails each time. */
enum { S_DC = 16, S_DP = 8, S_DG = 120, S_DBS = 4 };

/* (no .timeout of its own: Criterion leaks its timeout record when two
 * tests with one run in parallel, which the ASan build reports) */
Test(trn_engine, decodes_that_outgrow_the_cache_are_preempted_rarely)
{
    size_t blocks = S_DC * (S_DP + S_DG) / S_DBS / 3;
    trn_engine_cfg_t ec = {.address = "127.0.0.1",
                           .max_batch = S_DC,
                           .block_size = S_DBS,
                           .seed = 1};
    ec.kv_bytes = blocks * 2 *
                  (size_t) s_b->ops->config(s_b)->num_hidden_layers * S_DBS *
                  (size_t) s_b->ops->config(s_b)->num_key_value_heads *
                  (size_t) s_b->ops->config(s_b)->head_dim * sizeof(float);
    trn_engine_t *e = trn_engine_new(s_b, &ec);
    cr_assert(e);
    static call_t calls[S_DC];
    static char bodies[S_DC][512];
    static int32_t p[S_DC][S_DP];
    pthread_t th[S_DC];
    trn_engine_t *saved = s_e;
    s_e = e;
    cr_assert_eq(trn_engine_pause(e, 1000), LISA_OK);
    for (int c = 0; c < S_DC; c++) {
        for (int i = 0; i < S_DP; i++)
            p[c][i] = (int32_t) ((c * 29 + i * 7 + 1) % 64);
        calls[c].body = s_body(bodies[c], sizeof bodies[c], p[c], S_DP, S_DG);
        calls[c].done = 0;
        pthread_create(&th[c], NULL, s_call, &calls[c]);
    }
    for (int i = 0; i < 500 && trn_engine_stats(e).queued < S_DC; i++)
        s_sleep_ms(10);
    cr_assert_eq(trn_engine_stats(e).queued, S_DC);
    trn_engine_resume(e, 0);
    for (int c = 0; c < S_DC; c++)
        pthread_join(th[c], NULL);
    s_e = saved;
    trn_engine_stats_t st = trn_engine_stats(e);
    uint64_t own = S_DC * (S_DP + S_DG - 1);
    cr_log_info(
        "outgrowing decodes: %zu blocks, %llu positions computed for "
        "%llu, %llu recomputed, %llu preemptions (at most %llu of one "
        "sequence), %llu steps",
        blocks, (unsigned long long) st.computed, (unsigned long long) own,
        (unsigned long long) st.recomputed, (unsigned long long) st.preemptions,
        (unsigned long long) st.preempted_max, (unsigned long long) st.steps);
    cr_assert_eq(st.completed, S_DC);
    cr_assert_gt(st.preemptions, 0, "the cache was meant to run short");
    /* admission expects the sequences to sample what they may (what
     * the ones that finished did): after the first, which it could not
     * know, preemptions are rare, none is preempted twice, and little
     * is recomputed (before: 16 preemptions, up to 3 of one sequence,
     * 858 positions recomputed, 2,890 computed for 2,032) */
    cr_assert_leq(st.preempted_max, 1);
    cr_assert_leq(st.preemptions, S_DC / 2);
    cr_assert_lt(st.recomputed * 4, own, "%llu recomputed",
                 (unsigned long long) st.recomputed);
    cr_assert_lt(st.computed * 4, own * 5, "%llu computed for %llu",
                 (unsigned long long) st.computed, (unsigned long long) own);
    s_assert_idle(e);
    trn_engine_destroy(&e); /* the reference opens the backend's cache */
    trn_engine_t *ref = s_engine(4, 0, 0, true, 0);
    for (int c = 0; c < S_DC; c++) {
        cr_assert_eq(calls[c].status, 200, "%s", calls[c].out);
        int32_t got[256], want[256];
        size_t n = s_result(calls[c].out, got, 256, NULL);
        size_t nw = s_greedy(ref, p[c], S_DP, S_DG, want, NULL);
        cr_assert_eq(n, S_DG);
        cr_assert_eq(nw, S_DG);
        cr_assert_arr_eq(got, want, n * sizeof *got, "call %d", c);
    }
    trn_engine_destroy(&ref);
}

Test(trn_engine, stop_strings_end_generation_at_the_token_that_completes_them)
{
    trn_engine_cfg_t ec = {.address = "127.0.0.1",
                           .max_batch = 2,
                           .seed = 1,
                           .tokenizer_dir = LISA_SOURCE_DIR
                           "/tests/fixtures/qwen3-tokenizer"};
    trn_engine_t *e = trn_engine_new(s_b, &ec);
    cr_assert(e);
    lisa_tokenizer_t *tk = lisa_tokenizer_new_from_dir(ec.tokenizer_dir);
    cr_assert(tk);
    int32_t p[6] = {3, 9, 27, 17, 40, 2}, all[256];
    size_t n = s_greedy(e, p, 6, 12, all, NULL);
    cr_assert_eq(n, 12);
    /* a stop string made of the end of token 4's bytes and the start of
     * token 5's: generation must end with token 5 */
    size_t l4 = 0, l5 = 0;
    const uint8_t *b4 = lisa_tokenizer_token_bytes(tk, all[4], &l4);
    const uint8_t *b5 = lisa_tokenizer_token_bytes(tk, all[5], &l5);
    cr_assert(b4 && b5 && l4 > 0 && l5 > 0);
    char stop[8];
    snprintf(stop, sizeof stop, "%c%c", b4[l4 - 1], b5[0]);
    /* the string must not occur earlier in the output */
    char text[512];
    size_t tl = 0;
    for (size_t i = 0; i < 5; i++) {
        size_t l = 0;
        const uint8_t *b = lisa_tokenizer_token_bytes(tk, all[i], &l);
        memcpy(text + tl, b, l);
        tl += l;
    }
    text[tl] = '\0';
    cr_assert_null(strstr(text, stop), "'%s' in '%s'", stop, text);
    char out[65536];
    json_t *req = json_pack("{s:[i,i,i,i,i,i],s:i,s:i,s:[s,s]}", "prompt", 3, 9,
                            27, 17, 40, 2, "max_tokens", 12, "temperature", 0,
                            "stop", "never-seen-string", stop);
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    cr_assert_eq(s_post_port(trn_engine_port(e), body, out, sizeof out, false),
                 200, "%s", out);
    free(body);
    int32_t got[256];
    size_t k = s_result(out, got, 256, NULL);
    cr_assert_eq(k, 6, "%s", out);
    cr_assert_arr_eq(got, all, 6 * sizeof *got);
    cr_assert(strstr(out, "\"finish_reason\":\"stop\""), "%s", out);
    /* n = 3 greedy choices: each stops at the same token on its own */
    req = json_pack("{s:[i,i,i,i,i,i],s:i,s:i,s:i,s:[s,s]}", "prompt", 3, 9, 27,
                    17, 40, 2, "max_tokens", 12, "temperature", 0, "n", 3,
                    "stop", "never-seen-string", stop);
    body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    json_t *three = s_ok(e, body);
    free(body);
    for (size_t i = 0; i < 3; i++) {
        int32_t c[256];
        cr_assert_eq(s_choice(three, i, c, 256), 6, "choice %zu", i);
        cr_assert_arr_eq(c, all, 6 * sizeof *c);
        cr_assert_str_eq(
            json_string_value(json_object_get(
                json_array_get(json_object_get(three, "choices"), i),
                "finish_reason")),
            "stop");
    }
    cr_assert_eq(s_usage(three, "completion_tokens"), 18);
    json_decref(three);
    s_assert_idle(e);
    /* bad stop values are 400; an engine without a tokenizer refuses them */
    cr_assert_eq(s_post_port(trn_engine_port(e),
                             "{\"prompt\":[1],\"stop\":[\"\"]}", out,
                             sizeof out, false),
                 400);
    cr_assert_eq(s_post_port(trn_engine_port(e), "{\"prompt\":[1],\"stop\":7}",
                             out, sizeof out, false),
                 400);
    cr_assert_eq(s_post("{\"prompt\":[1],\"stop\":\"x\"}", out, sizeof out),
                 400);
    cr_assert(strstr(out, "tokenizer"), "%s", out);
    lisa_tokenizer_destroy(&tk);
    trn_engine_destroy(&e);
}

/* ---- n choices of one prompt --------------------------------------------
 * The prompt is computed once, by choice 0; the others are forked from its
 * blocks (the full blocks shared by reference, the last partial block
 * recomputed), each with its own seed. */

/* {"prompt":[70 ids],"n":n,"max_tokens":6,...} */
static const char *
s_n_body(char *buf, size_t len, size_t n_prompt, int n, double temp, int seed)
{
    size_t o = (size_t) snprintf(buf, len, "{\"prompt\":[");
    for (size_t i = 0; i < n_prompt; i++)
        o += (size_t) snprintf(buf + o, len - o, "%s%zu", i ? "," : "",
                               (i * 5 + 1) % 64);
    snprintf(buf + o, len - o,
             "],\"n\":%d,\"max_tokens\":6,\"temperature\":%g,\"seed\":%d}", n,
             temp, seed);
    return buf;
}

Test(trn_engine, n_choices_compute_the_prompt_once)
{
    trn_engine_t *e = s_engine(8, 0, 0, false, 0);
    char body[4096];
    json_t *j = s_ok(e, s_n_body(body, sizeof body, 70, 4, 1.0, 7));
    cr_assert_eq(json_array_size(json_object_get(j, "choices")), 4);
    int32_t ids[4][256];
    size_t total = 0;
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(s_choice(j, i, ids[i], 256), 6);
        total += 6;
    }
    /* distinct seeds: the choices are not all the same sample */
    bool differ = false;
    for (size_t i = 1; i < 4; i++)
        differ |= memcmp(ids[0], ids[i], sizeof ids[0][0] * 6) != 0;
    cr_assert(differ, "4 choices at temperature 1 are all equal");
    cr_assert_eq(s_usage(j, "prompt_tokens"), 70);
    cr_assert_eq(s_usage(j, "completion_tokens"), (long) total);
    cr_assert_eq(s_usage(j, "total_tokens"), 70 + (long) total);
    cr_assert_eq(s_usage(j, "cached_tokens"), 0);
    json_decref(j);
    /* the prompt counted and computed once: each fork took the 8 full
     * blocks (64 positions) of the 69 before the last by reference and
     * recomputed the last 6 positions into its own block */
    trn_engine_stats_t st = trn_engine_stats(e);
    cr_assert_eq(st.prompt_tokens, 70);
    cr_assert_eq(st.shared_tokens, 3 * 64);
    cr_assert_eq(st.tokens_prefilled, 70 + 3 * 6);
    cr_assert_eq(st.tokens_generated, total);
    cr_assert_eq(st.completed, 1);
    s_assert_idle(e);
    /* choice 0 is what n = 1 with the same seed samples (fresh engine: the
     * same computation) */
    trn_engine_t *e1 = s_engine(8, 0, 0, false, 0);
    json_t *one = s_ok(e1, s_n_body(body, sizeof body, 70, 1, 1.0, 7));
    int32_t o[256];
    cr_assert_eq(s_choice(one, 0, o, 256), 6);
    cr_assert_arr_eq(o, ids[0], 6 * sizeof *o);
    json_decref(one);
    trn_engine_destroy(&e1);
    /* the same request on a fresh engine: the same 4 samples */
    trn_engine_t *e2 = s_engine(8, 0, 0, false, 0);
    json_t *again = s_ok(e2, s_n_body(body, sizeof body, 70, 4, 1.0, 7));
    for (size_t i = 0; i < 4; i++) {
        int32_t a[256];
        cr_assert_eq(s_choice(again, i, a, 256), 6);
        cr_assert_arr_eq(a, ids[i], 6 * sizeof *a, "choice %zu", i);
    }
    json_decref(again);
    s_assert_idle(e2);
    trn_engine_destroy(&e2);
    trn_engine_destroy(&e);
}

Test(trn_engine, n_greedy_choices_are_equal)
{
    trn_engine_t *e = s_engine(8, 0, 0, false, 0);
    char body[4096];
    json_t *g1 = s_ok(e, s_n_body(body, sizeof body, 21, 1, 0.0, 1));
    int32_t want[256];
    cr_assert_eq(s_choice(g1, 0, want, 256), 6);
    json_decref(g1);
    /* more choices than sequence slots (4): the last ones wait in the
     * queue and find the prompt in the prefix cache */
    json_t *j = s_ok(e, s_n_body(body, sizeof body, 21, 7, 0.0, 2));
    cr_assert_eq(json_array_size(json_object_get(j, "choices")), 7);
    for (size_t i = 0; i < 7; i++) {
        int32_t a[256];
        cr_assert_eq(s_choice(j, i, a, 256), 6);
        cr_assert_arr_eq(a, want, 6 * sizeof *a, "choice %zu", i);
    }
    cr_assert_eq(s_usage(j, "prompt_tokens"), 21);
    cr_assert_eq(s_usage(j, "completion_tokens"), 42);
    cr_assert_eq(s_usage(j, "cached_tokens"), 16); /* from the first call */
    json_decref(j);
    trn_engine_stats_t st = trn_engine_stats(e);
    cr_assert_eq(st.prompt_tokens, 42); /* once a request */
    cr_assert_eq(st.completed, 2);
    s_assert_idle(e);
    trn_engine_destroy(&e);
}

Test(trn_engine, n_outside_its_bounds_is_400)
{
    char out[4096];
    cr_assert_eq(s_post("{\"prompt\":[1],\"n\":65}", out, sizeof out), 400);
    cr_assert(strstr(out, "64"), "%s", out);
    cr_assert_eq(s_post("{\"prompt\":[1],\"n\":0}", out, sizeof out), 400);
    cr_assert_eq(s_post("{\"prompt\":[1],\"n\":\"2\"}", out, sizeof out), 400);
    json_t *j = s_ok(s_e, "{\"prompt\":[1],\"n\":64,\"max_tokens\":1}");
    cr_assert_eq(json_array_size(json_object_get(j, "choices")), 64);
    cr_assert_eq(s_usage(j, "completion_tokens"), 64);
    json_decref(j);
    s_assert_idle(s_e);
}

Test(trn_engine, n_choices_under_a_tiny_cache_are_preempted_and_complete)
{
    /* 12 blocks of 4: 6 choices of 8 + 16 positions cannot all run at
     * once; with and without the prefix cache every choice must be the
     * greedy answer */
    for (int no_cache = 0; no_cache < 2; no_cache++) {
        trn_engine_t *e = s_engine(4, 0, 12, no_cache, 0);
        trn_engine_t *ref = s_engine(4, 0, 0, true, 0);
        int32_t p[8], want[256];
        for (int i = 0; i < 8; i++)
            p[i] = (int32_t) ((i * 11 + 5) % 64);
        size_t nw = s_greedy(ref, p, 8, 16, want, NULL);
        cr_assert_eq(nw, 16);
        char body[1024];
        size_t o = (size_t) snprintf(body, sizeof body, "{\"prompt\":[");
        for (int i = 0; i < 8; i++)
            o += (size_t) snprintf(body + o, sizeof body - o, "%s%d",
                                   i ? "," : "", p[i]);
        snprintf(body + o, sizeof body - o,
                 "],\"n\":6,\"max_tokens\":16,\"temperature\":0}");
        json_t *j = s_ok(e, body);
        for (size_t i = 0; i < 6; i++) {
            int32_t a[256];
            cr_assert_eq(s_choice(j, i, a, 256), 16);
            cr_assert_arr_eq(a, want, 16 * sizeof *a, "choice %zu", i);
        }
        cr_assert_eq(s_usage(j, "completion_tokens"), 96);
        json_decref(j);
        trn_engine_stats_t st = trn_engine_stats(e);
        cr_assert_gt(st.preemptions, 0, "no_cache %d", no_cache);
        cr_assert_eq(st.completed, 1);
        s_assert_idle(e);
        /* sampled choices under the same pressure complete too */
        snprintf(body + o, sizeof body - o,
                 "],\"n\":6,\"max_tokens\":16,\"temperature\":1,\"seed\":3}");
        j = s_ok(e, body);
        for (size_t i = 0; i < 6; i++) {
            int32_t a[256];
            cr_assert_eq(s_choice(j, i, a, 256), 16);
        }
        json_decref(j);
        s_assert_idle(e);
        trn_engine_destroy(&ref);
        trn_engine_destroy(&e);
    }
}

/* A CPU backend whose gen_step fails at its fail_at-th call. */
typedef struct {
    trn_backend_t base;
    trn_backend_t *inner;
    trn_backend_ops_t ops;
    int calls, fail_at;
} failb_t;

static lisa_rc_t
f_open(trn_backend_t *b, trn_kv_geom_t *g, trn_err_t *e)
{
    return ((failb_t *) b)->inner->ops->gen_open(((failb_t *) b)->inner, g, e);
}
static const trn_config_t *
f_config(const trn_backend_t *b)
{
    const failb_t *f = (const failb_t *) b;
    return f->inner->ops->config(f->inner);
}
static lisa_rc_t
f_step(trn_backend_t *b, size_t n, const trn_gen_seq_t *seqs, float *logits,
       trn_err_t *err)
{
    failb_t *f = (failb_t *) b;
    if (++f->calls == f->fail_at) {
        snprintf(err->msg, sizeof err->msg, "injected failure");
        return LISA_ERR;
    }
    return f->inner->ops->gen_step(f->inner, n, seqs, logits, err);
}

Test(trn_engine, a_failed_step_answers_an_n_request_once_with_an_error)
{
    trn_err_t err;
    failb_t *f = calloc(1, sizeof *f);
    f->inner = trn_backend_new("cpu", s_dir, 1, false, &err);
    cr_assert(f->inner);
    f->ops = *f->inner->ops;
    f->ops.gen_open = f_open;
    f->ops.config = f_config;
    f->ops.gen_step = f_step;
    f->ops.gen_close = NULL;
    f->ops.mem_info = NULL;
    f->base.ops = &f->ops;
    /* 2 slots: choice 0 and one fork run, two forks wait in the queue;
     * the third step (the forks' second) fails */
    f->fail_at = 3;
    trn_engine_cfg_t ec = {.address = "127.0.0.1", .max_batch = 2, .seed = 1};
    trn_engine_t *e = trn_engine_new(&f->base, &ec);
    cr_assert(e);
    char out[65536];
    int st = s_post_port(trn_engine_port(e),
                         "{\"prompt\":[1,2,3],\"n\":4,\"max_tokens\":8}", out,
                         sizeof out, false);
    cr_assert_eq(st, 500, "%s", out);
    cr_assert(strstr(out, "injected failure"), "%s", out);
    /* the waiting forks are dropped, nothing is held, and the engine
     * serves the next request */
    for (int i = 0; i < 200 && trn_engine_stats(e).inflight > 0; i++)
        s_sleep_ms(10);
    trn_engine_stats_t s = trn_engine_stats(e);
    cr_assert_eq(s.inflight, 0);
    cr_assert_eq(s.queued, 0);
    cr_assert_eq(s.kv_blocks_used, 0);
    cr_assert_eq(s.completed, 0);
    st = s_post_port(trn_engine_port(e),
                     "{\"prompt\":[1,2,3],\"n\":3,\"max_tokens\":4}", out,
                     sizeof out, false);
    cr_assert_eq(st, 200, "%s", out);
    s_assert_idle(e);
    trn_engine_destroy(&e);
    trn_backend_destroy(&f->inner);
    free(f);
}

Test(trn_engine, a_pause_waits_for_every_choice)
{
    /* 6 choices on 4 slots: two forks wait in the queue, which counts as
     * in flight; the pause returns once all six are done */
    bool seen = false;
    for (int attempt = 0; attempt < 10 && !seen; attempt++) {
        call_t c = {.body = "{\"prompt\":[1,2],\"n\":6,\"max_tokens\":120,"
                            "\"temperature\":1}"};
        uint64_t done0 = trn_engine_stats(s_e).completed;
        pthread_t t;
        pthread_create(&t, NULL, s_call, &c);
        for (int i = 0; i < 5000; i++) {
            trn_engine_stats_t s = trn_engine_stats(s_e);
            if (s.inflight > 1 || s.completed > done0)
                break;
            s_sleep_ms(1);
        }
        if (trn_engine_stats(s_e).inflight > 1) {
            seen = true;
            cr_assert_eq(trn_engine_pause(s_e, 20000), LISA_OK);
            trn_engine_stats_t s = trn_engine_stats(s_e);
            cr_assert_eq(s.inflight, 0);
            cr_assert_eq(s.kv_blocks_used, 0);
            cr_assert_eq(s.completed, done0 + 1);
        }
        pthread_join(t, NULL);
        cr_assert_eq(c.status, 200, "%s", c.out);
        json_t *j = json_loads(c.out, 0, NULL);
        json_t *chs = json_object_get(j, "choices");
        cr_assert_eq(json_array_size(chs), 6);
        for (size_t i = 0; i < 6; i++)
            cr_assert_eq(json_array_size(json_object_get(json_array_get(chs, i),
                                                         "token_ids")),
                         120);
        json_decref(j);
        if (seen)
            trn_engine_resume(s_e, 3);
    }
    cr_assert(seen, "no request was ever seen in flight");
    s_assert_idle(s_e);
}

/* ---- new prompts wait for the callers answered with them (batch_wait) -- */

/* Milliseconds on the monotonic clock. */
static double
s_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

/* The n calls c queued while e is paused, so that they are admitted in
 * one step; after resume the first `wait` of them are awaited (each 200),
 * the rest (started in t) keep running. */
static void
s_wave(trn_engine_t *e, call_t *c, pthread_t *t, size_t n, size_t wait)
{
    cr_assert_eq(trn_engine_pause(e, 5000), LISA_OK);
    for (size_t i = 0; i < n; i++) {
        c[i].port = trn_engine_port(e);
        pthread_create(&t[i], NULL, s_call, &c[i]);
    }
    for (int i = 0; i < 1000 && trn_engine_stats(e).queued < n; i++)
        s_sleep_ms(5);
    cr_assert_eq(trn_engine_stats(e).queued, n);
    trn_engine_resume(e, 3);
    for (size_t i = 0; i < wait; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(c[i].status, 200, "%s", c[i].out);
    }
}

/* One call to the engine listening on `port`, its time (ms) in *ms. */
static void
s_timed_call(call_t *c, uint16_t port, double *ms)
{
    double t0 = s_ms();
    c->port = port;
    s_call(c);
    *ms = s_ms() - t0;
    cr_assert_eq(c->status, 200, "%s", c->out);
}

Test(trn_engine, a_new_prompt_waits_for_the_callers_answered_with_it)
{
    char dir[128];
    trn_tiny_model_dir_ctx(dir, sizeof dir, "trn_engine_wait", 1, 5, 65536);
    trn_err_t err;
    trn_backend_t *b = trn_backend_new("cpu", dir, 1, false, &err);
    cr_assert(b, "%s", err.msg);
    trn_engine_cfg_t ec = {.address = "127.0.0.1",
                           .max_batch = 4,
                           .seed = 1,
                           .batch_wait_ms = 400};
    trn_engine_t *e = trn_engine_new(b, &ec);
    cr_assert(e);
    uint16_t port = trn_engine_port(e);
    const char *body = "{\"prompt\":[5,6,7],\"max_tokens\":3}";

    /* idle: one of two callers answered together comes back and waits
     * until batch_wait has passed; then a lone caller does not wait */
    call_t w[2] = {{.body = body}, {.body = body}};
    pthread_t t[3];
    s_wave(e, w, t, 2, 2);
    call_t c = {.body = "{\"prompt\":[9,10],\"max_tokens\":2}"};
    double ms;
    s_timed_call(&c, port, &ms);
    cr_assert_geq(ms, 150.0, "answered after %.0f ms: it did not wait", ms);
    cr_assert_eq(trn_engine_stats(e).holds, 1);
    call_t d = {.body = "{\"prompt\":[9,11],\"max_tokens\":2}"};
    s_timed_call(&d, port, &ms);
    cr_assert_eq(trn_engine_stats(e).holds, 1, "a lone caller waited");

    /* busy: two callers answered while a long generation goes on come
     * back 60 ms apart; the first waits for the second (the long one
     * decodes meanwhile) and their prompts are computed in one step */
    call_t v[3] = {{.body = body},
                   {.body = body},
                   {.body = "{\"prompt\":[1,2,3],\"max_tokens\":60000}"}};
    s_wave(e, v, t, 3, 2);
    uint64_t mixed = trn_engine_stats(e).mixed_steps;
    call_t g = {.body = "{\"prompt\":[12,13,14],\"max_tokens\":2}",
                .port = port};
    call_t h = {.body = "{\"prompt\":[15,16,17,18],\"max_tokens\":2}",
                .port = port};
    pthread_t tg, th;
    double t0 = s_ms();
    pthread_create(&tg, NULL, s_call, &g);
    s_sleep_ms(60);
    trn_engine_stats_t st = trn_engine_stats(e);
    cr_assert_eq(st.queued, 1, "the first prompt did not wait");
    cr_assert_geq(st.inflight, 1, "the long generation ended too soon");
    cr_assert_eq(st.holds, 2);
    pthread_create(&th, NULL, s_call, &h);
    pthread_join(tg, NULL);
    double waited = s_ms() - t0;
    pthread_join(th, NULL);
    cr_assert_eq(g.status, 200, "%s", g.out);
    cr_assert_eq(h.status, 200, "%s", h.out);
    cr_assert_geq(waited, 55.0, "the first did not wait: %.0f ms", waited);
    cr_assert_lt(waited, 390.0, "the first waited out batch_wait");
    cr_assert_eq(
        trn_engine_stats(e).mixed_steps, mixed + 1,
        "the two prompts were computed in %llu steps",
        (unsigned long long) (trn_engine_stats(e).mixed_steps - mixed));
    /* the long generation is answered 503 as the engine stops */
    trn_engine_destroy(&e);
    pthread_join(t[2], NULL);
    cr_assert(v[2].status == 200 || v[2].status == 503, "%d %s", v[2].status,
              v[2].out);
    trn_backend_destroy(&b);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}
