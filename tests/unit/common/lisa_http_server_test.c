/*
 * lisa_http_server tests: a real server on 127.0.0.1 ephemeral ports (and a
 * unix socket), driven by lisa_http_client and by raw sockets. The first
 * test is the usage example.
 */
#include "lisa/lisa_http_client.h"
#include "lisa/lisa_http_server.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* lisa_http_server_loop_test.c includes this file with the server driven
 * by a zloop (every test then runs against the loop-driven mode). */
#ifndef S_LOOP_DRIVEN
#define S_LOOP_DRIVEN false
#endif

static void
s_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static char *
s_url(lisa_http_server_t *srv, const char *path)
{
    size_t n = strlen(path) + 64;
    char *u = malloc(n);
    snprintf(u, n, "http://127.0.0.1:%u%s", lisa_http_server_port(srv), path);
    return u;
}

/* Waits until `*v` reaches `want` or `ms` pass; returns the last value. */
static uint64_t
s_wait_kept(lisa_http_server_t *srv, uint64_t want, long ms)
{
    uint64_t k = 0;
    for (long t = 0; t < ms; t += 5) {
        k = lisa_http_server_stats(srv).kept;
        if (k >= want)
            break;
        s_sleep_ms(5);
    }
    return k;
}

/* ------------------------------------------------------------------ */

/* An echo handler: answers at once with what it saw, as JSON. */
static void
s_echo(lisa_http_req_t *req, void *arg)
{
    (void) arg;
    size_t len = 0;
    const char *body = lisa_http_req_body(req, &len);
    const char *name = lisa_http_req_query(req, "name");
    const char *hdr = lisa_http_req_header(req, "x-lisa-test");
    /* iteration sees the same header, with the client's spelling */
    bool seen = false;
    const char *hn = NULL, *hv = NULL;
    for (size_t i = 0; lisa_http_req_header_at(req, i, &hn, &hv); i++)
        if (strcmp(hn, "X-Lisa-Test") == 0 && hdr && strcmp(hv, hdr) == 0)
            seen = true;
    cr_assert_eq(seen, hdr != NULL);
    cr_assert_geq(lisa_http_req_header_count(req), hdr ? 1 : 0);
    json_t *o = json_pack("{s:s, s:s, s:s?, s:s?, s:s%, s:s}", "method",
                          lisa_http_req_method(req), "path",
                          lisa_http_req_path(req), "name", name, "hdr", hdr,
                          "body", body, len, "peer", lisa_http_req_peer(req));
    char *js = json_dumps(o, JSON_COMPACT);
    lisa_http_req_add_header(req, "X-Served-By", "lisa-test");
    lisa_http_req_respond(req, 200, "application/json", js, strlen(js));
    free(js);
    json_decref(o);
}

Test(lisa_http_server, usage)
{
    /* A server on an ephemeral loopback port whose handler answers at once.
     */
    lisa_http_server_config_t cfg = {0};
    cfg.address = "127.0.0.1";
    cfg.port = 0;
    cfg.handler = s_echo;
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    cr_assert_not_null(srv);
    cr_assert_gt(lisa_http_server_port(srv), 0);

    /* Any HTTP client can call it; here the blocking lisa client. */
    char *url = s_url(srv, "/v1/echo?name=lisa");
    const char *hdrs[] = {"X-Lisa-Test: yes", NULL};
    lisa_http_request_t rq = {0};
    rq.method = "POST";
    rq.url = url;
    rq.headers = hdrs;
    rq.body = "hello";
    rq.body_len = 5;
    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK, "%s",
                 lisa_http_response_error(resp));
    cr_assert_eq(lisa_http_response_status(resp), 200);
    cr_assert_str_eq(lisa_http_response_header(resp, "x-served-by"),
                     "lisa-test");
    json_t *o = json_loads(lisa_http_response_body(resp, NULL), 0, NULL);
    cr_assert_not_null(o);
    cr_assert_str_eq(json_string_value(json_object_get(o, "method")), "POST");
    cr_assert_str_eq(json_string_value(json_object_get(o, "path")), "/v1/echo");
    cr_assert_str_eq(json_string_value(json_object_get(o, "name")), "lisa");
    cr_assert_str_eq(json_string_value(json_object_get(o, "hdr")), "yes");
    cr_assert_str_eq(json_string_value(json_object_get(o, "body")), "hello");
    cr_assert_eq(strncmp(json_string_value(json_object_get(o, "peer")),
                         "127.0.0.1:", 10),
                 0);
    json_decref(o);
    lisa_http_response_destroy(&resp);

    lisa_http_server_stats_t st = lisa_http_server_stats(srv);
    cr_assert_eq(st.requests, 1);
    cr_assert_eq(st.responses, 1);
    cr_assert_eq(st.kept, 0);
    free(url);
    lisa_http_server_destroy(&srv);
    cr_assert_null(srv);
    lisa_http_server_destroy(&srv); /* safe twice */
}

/* ------------------------------------------------------------------ */
/* deferred answers from another thread                                 */

typedef struct {
    pthread_mutex_t mtx;
    lisa_http_req_t *held[512];
    size_t n;
} s_keeper_t;

static void
s_keep(lisa_http_req_t *req, void *arg)
{
    s_keeper_t *k = arg;
    pthread_mutex_lock(&k->mtx);
    cr_assert_lt(k->n, 512);
    k->held[k->n++] = req;
    pthread_mutex_unlock(&k->mtx);
}

/* Requests the handler has finished with (held), waiting up to ms: the
 * server counts a request kept as its handler starts, before the handler
 * has done its work. */
static size_t
s_wait_held(s_keeper_t *k, size_t want, long ms)
{
    size_t n = 0;
    for (long t = 0; t < ms; t += 5) {
        pthread_mutex_lock(&k->mtx);
        n = k->n;
        pthread_mutex_unlock(&k->mtx);
        if (n >= want)
            break;
        s_sleep_ms(5);
    }
    return n;
}

static void *
s_answer_later(void *arg)
{
    s_keeper_t *k = arg;
    (void) s_wait_held(k, 1, 2000);
    s_sleep_ms(50);
    pthread_mutex_lock(&k->mtx);
    lisa_http_req_t *req = k->held[0];
    k->n = 0;
    pthread_mutex_unlock(&k->mtx);
    char body[128];
    int n =
        snprintf(body, sizeof(body), "later:%s", lisa_http_req_body(req, NULL));
    lisa_http_req_respond(req, 201, "text/plain", body, (size_t) n);
    return NULL;
}

Test(lisa_http_server, deferred_answer_from_another_thread)
{
    s_keeper_t k = {.mtx = PTHREAD_MUTEX_INITIALIZER};
    lisa_http_server_config_t cfg = {
        .address = "127.0.0.1", .handler = s_keep, .handler_arg = &k};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    cr_assert_not_null(srv);
    pthread_t th;
    pthread_create(&th, NULL, s_answer_later, &k);
    char *url = s_url(srv, "/defer");
    lisa_http_request_t rq = {.url = url, .body = "abc", .body_len = 3};
    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK);
    cr_assert_eq(lisa_http_response_status(resp), 201);
    cr_assert_str_eq(lisa_http_response_body(resp, NULL), "later:abc");
    cr_assert_geq(lisa_http_response_elapsed_ms(resp), 40.0);
    lisa_http_response_destroy(&resp);
    pthread_join(th, NULL);
    cr_assert_eq(lisa_http_server_stats(srv).kept, 0);
    free(url);
    lisa_http_server_destroy(&srv);
}

/* ------------------------------------------------------------------ */
/* 200 concurrent kept requests, handled on a zloop, answered by another
 * thread once all of them are parked                                   */

#define S_CONC 200

typedef struct {
    s_keeper_t keeper;
    zloop_t *loop;
    pthread_t loop_thread_id;
    atomic_int wrong_thread;
    int done;
    int ok;
} s_conc_t;

static void
s_keep_on_loop(lisa_http_req_t *req, void *arg)
{
    s_conc_t *c = arg;
    if (!pthread_equal(pthread_self(), c->loop_thread_id))
        atomic_fetch_add(&c->wrong_thread, 1);
    s_keep(req, &c->keeper);
}

static void *
s_answer_all(void *arg)
{
    s_conc_t *c = arg;
    for (int i = 0; i < 2000; i++) {
        pthread_mutex_lock(&c->keeper.mtx);
        size_t n = c->keeper.n;
        pthread_mutex_unlock(&c->keeper.mtx);
        if (n == S_CONC)
            break;
        s_sleep_ms(5);
    }
    pthread_mutex_lock(&c->keeper.mtx);
    size_t n = c->keeper.n;
    c->keeper.n = 0;
    pthread_mutex_unlock(&c->keeper.mtx);
    /* answer in reverse arrival order */
    for (size_t i = n; i > 0; i--) {
        lisa_http_req_t *req = c->keeper.held[i - 1];
        char body[64];
        int len = snprintf(body, sizeof(body), "re:%s",
                           lisa_http_req_query(req, "i"));
        lisa_http_req_respond(req, 200, "text/plain", body, (size_t) len);
    }
    return NULL;
}

typedef struct {
    s_conc_t *c;
    int i;
} s_conc_call_t;

static void
s_conc_done(lisa_http_response_t *resp, void *arg)
{
    s_conc_call_t *cc = arg;
    char want[64];
    snprintf(want, sizeof(want), "re:%d", cc->i);
    if (lisa_http_response_rc(resp) == LISA_OK &&
        lisa_http_response_status(resp) == 200 &&
        strcmp(lisa_http_response_body(resp, NULL), want) == 0)
        cc->c->ok++;
    cc->c->done++;
}

static int
s_deadline(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    (void) arg;
    return -1;
}

typedef struct {
    int *count;
    int want;
    int reached;
} s_until_t;

static int
s_stop_at_count(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    s_until_t *u = arg;
    return *u->count >= u->want ? -1 : 0;
}

Test(lisa_http_server, concurrent_deferred_on_loop)
{
    s_conc_t c = {.keeper = {.mtx = PTHREAD_MUTEX_INITIALIZER}};
    c.loop = zloop_new();
    c.loop_thread_id = pthread_self();
    lisa_http_server_config_t cfg = {.address = "127.0.0.1",
                                     .handler = s_keep_on_loop,
                                     .handler_arg = &c,
                                     .loop = c.loop,
                                     .loop_driven = S_LOOP_DRIVEN,
                                     .threads = 2};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    cr_assert_not_null(srv);
    lisa_http_client_t *cli = lisa_http_client_new(c.loop, NULL);
    cr_assert_not_null(cli);
    static s_conc_call_t calls[S_CONC];
    for (int i = 0; i < S_CONC; i++) {
        calls[i] = (s_conc_call_t){&c, i};
        char path[64];
        snprintf(path, sizeof(path), "/conc?i=%d", i);
        char *url = s_url(srv, path);
        lisa_http_request_t rq = {.url = url, .timeout_ms = 20000};
        cr_assert_eq(
            lisa_http_client_send(cli, &rq, s_conc_done, &calls[i], NULL),
            LISA_OK);
        free(url);
    }
    cr_assert_eq(lisa_http_client_pending(cli), S_CONC);
    pthread_t th;
    pthread_create(&th, NULL, s_answer_all, &c);
    s_until_t u = {&c.done, S_CONC, 0};
    zloop_timer(c.loop, 5, 0, s_stop_at_count, &u);
    zloop_timer(c.loop, 20000, 1, s_deadline, NULL);
    zloop_start(c.loop);
    pthread_join(th, NULL);
    cr_assert_eq(c.done, S_CONC);
    cr_assert_eq(c.ok, S_CONC);
    cr_assert_eq(atomic_load(&c.wrong_thread), 0);
    lisa_http_server_stats_t st = lisa_http_server_stats(srv);
    cr_assert_eq(st.requests, S_CONC);
    cr_assert_eq(st.kept, 0);
    lisa_http_client_destroy(&cli);
    lisa_http_server_destroy(&srv);
    zloop_destroy(&c.loop);
}

/* ------------------------------------------------------------------ */
/* Server-Sent Events                                                   */

typedef struct {
    lisa_http_req_t *req;
    atomic_int opened;
} s_sse_t;

static void
s_sse_handler(lisa_http_req_t *req, void *arg)
{
    s_sse_t *s = arg;
    cr_assert_eq(lisa_http_req_stream_open(req, 200, "text/event-stream"),
                 LISA_OK);
    s->req = req;
    atomic_store(&s->opened, 1);
}

static void *
s_sse_pusher(void *arg)
{
    s_sse_t *s = arg;
    while (!atomic_load(&s->opened))
        s_sleep_ms(2);
    for (int i = 0; i < 5; i++) {
        char ev[64];
        int n = snprintf(ev, sizeof(ev), "data: {\"i\":%d}\n\n", i);
        cr_assert_eq(lisa_http_req_stream_push(s->req, ev, (size_t) n),
                     LISA_OK);
        s_sleep_ms(30);
    }
    const char *end = "data: [DONE]\n\n";
    cr_assert_eq(lisa_http_req_stream_push(s->req, end, strlen(end)), LISA_OK);
    lisa_http_req_stream_close(s->req);
    return NULL;
}

typedef struct {
    char buf[4096];
    size_t len;
    int chunks;
    double first_ms;
    struct timespec t0;
} s_collect_t;

static double
s_since_ms(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) (t.tv_sec - t0->tv_sec) * 1e3 +
           (double) (t.tv_nsec - t0->tv_nsec) / 1e6;
}

static bool
s_collect_chunk(const char *data, size_t len, long status, void *arg)
{
    s_collect_t *c = arg;
    cr_assert_eq(status, 200);
    if (c->chunks++ == 0)
        c->first_ms = s_since_ms(&c->t0);
    cr_assert_lt(c->len + len, sizeof(c->buf));
    memcpy(c->buf + c->len, data, len);
    c->len += len;
    return true;
}

Test(lisa_http_server, sse_stream)
{
    s_sse_t s = {0};
    lisa_http_server_config_t cfg = {
        .address = "127.0.0.1", .handler = s_sse_handler, .handler_arg = &s};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    cr_assert_not_null(srv);
    pthread_t th;
    pthread_create(&th, NULL, s_sse_pusher, &s);
    char *url = s_url(srv, "/v1/chat/completions");
    s_collect_t col = {0};
    clock_gettime(CLOCK_MONOTONIC, &col.t0);
    lisa_http_request_t rq = {
        .url = url, .on_chunk = s_collect_chunk, .chunk_arg = &col};
    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK, "%s",
                 lisa_http_response_error(resp));
    double total = s_since_ms(&col.t0);
    pthread_join(th, NULL);
    cr_assert_eq(lisa_http_response_status(resp), 200);
    cr_assert_str_eq(lisa_http_response_header(resp, "content-type"),
                     "text/event-stream");
    cr_assert_str_eq(lisa_http_response_header(resp, "transfer-encoding"),
                     "chunked");
    col.buf[col.len] = '\0';
    cr_assert_str_eq(col.buf, "data: {\"i\":0}\n\ndata: {\"i\":1}\n\n"
                              "data: {\"i\":2}\n\ndata: {\"i\":3}\n\n"
                              "data: {\"i\":4}\n\ndata: [DONE]\n\n");
    /* events arrived as they were pushed, not all at the end */
    cr_assert_geq(col.chunks, 3);
    cr_assert_lt(col.first_ms + 60.0, total, "first %.1f total %.1f",
                 col.first_ms, total);
    lisa_http_response_destroy(&resp);
    free(url);
    lisa_http_server_destroy(&srv);
}

static void
s_tiny_stream(lisa_http_req_t *req, void *arg)
{
    (void) arg;
    cr_assert_eq(lisa_http_req_stream_open(req, 200, "text/plain"), LISA_OK);
    char big[600];
    memset(big, 'x', sizeof(big));
    /* the queue holds 1000 bytes: the second push does not fit */
    cr_assert_eq(lisa_http_req_stream_push(req, big, sizeof(big)), LISA_OK);
    cr_assert_eq(lisa_http_req_stream_push(req, big, sizeof(big)), LISA_AGAIN);
    cr_assert_eq(lisa_http_req_stream_push(req, "end", 3), LISA_OK);
    lisa_http_req_stream_close(req);
}

Test(lisa_http_server, stream_queue_is_bounded)
{
    lisa_http_server_config_t cfg = {.address = "127.0.0.1",
                                     .handler = s_tiny_stream,
                                     .stream_queue_max = 1000};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    char *url = s_url(srv, "/s");
    lisa_http_request_t rq = {.url = url};
    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK);
    size_t len = 0;
    const char *b = lisa_http_response_body(resp, &len);
    cr_assert_eq(len, 603);
    cr_assert_str_eq(b + 600, "end");
    cr_assert_eq(lisa_http_server_stats(srv).stream_overflows, 1);
    lisa_http_response_destroy(&resp);
    free(url);
    lisa_http_server_destroy(&srv);
}

/* ------------------------------------------------------------------ */
/* limits                                                               */

Test(lisa_http_server, body_over_limit_is_413)
{
    lisa_http_server_config_t cfg = {
        .address = "127.0.0.1", .handler = s_echo, .max_body = 1024};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    char *url = s_url(srv, "/v1/chat/completions");
    char *big = calloc(1, 4096);
    memset(big, 'a', 4095);
    lisa_http_request_t rq = {.url = url, .body = big, .body_len = 4095};
    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK, "%s",
                 lisa_http_response_error(resp));
    cr_assert_eq(lisa_http_response_status(resp), 413);
    json_t *o = json_loads(lisa_http_response_body(resp, NULL), 0, NULL);
    cr_assert_not_null(o);
    json_t *e = json_object_get(o, "error");
    cr_assert_str_eq(json_string_value(json_object_get(e, "type")),
                     "invalid_request_error");
    cr_assert_str_eq(json_string_value(json_object_get(e, "code")),
                     "body_too_large");
    cr_assert_not_null(
        strstr(json_string_value(json_object_get(e, "message")), "1024"));
    json_decref(o);
    cr_assert_str_eq(lisa_http_response_header(resp, "connection"), "close");
    lisa_http_response_destroy(&resp);

    /* a body at the limit is fine */
    rq.body_len = 1024;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK);
    cr_assert_eq(lisa_http_response_status(resp), 200);
    lisa_http_response_destroy(&resp);

    lisa_http_server_stats_t st = lisa_http_server_stats(srv);
    cr_assert_eq(st.body_too_large, 1);
    cr_assert_eq(st.requests, 1);
    free(big);
    free(url);
    lisa_http_server_destroy(&srv);
}

static int
s_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
    return fd;
}

/* True when the peer closed `fd` within `ms`. */
static bool
s_closed_within(int fd, long ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (long t = 0; t < ms; t += 10) {
        if (poll(&p, 1, 10) > 0) {
            char b[256];
            ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
            if (n <= 0)
                return true;
        }
    }
    return false;
}

/* Reads what the server sends on `fd` until it closes or `ms` pass;
 * returns the status code of the first response (0: none). */
static int
s_read_status(int fd, char *buf, size_t cap, long ms)
{
    size_t got = 0;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (long t = 0; t < ms && got + 1 < cap; t += 10) {
        if (poll(&p, 1, 10) <= 0)
            continue;
        ssize_t n = recv(fd, buf + got, cap - 1 - got, MSG_DONTWAIT);
        if (n <= 0)
            break;
        got += (size_t) n;
    }
    buf[got] = '\0';
    int status = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        return 0;
    return status;
}

Test(lisa_http_server, chunked_body_over_limit_is_413)
{
    lisa_http_server_config_t cfg = {
        .address = "127.0.0.1", .handler = s_echo, .max_body = 100};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    int fd = s_connect(lisa_http_server_port(srv));
    const char *head = "POST /x HTTP/1.1\r\nHost: a\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n";
    cr_assert(send(fd, head, strlen(head), MSG_NOSIGNAL) > 0);
    char chunk[80];
    memset(chunk, 'z', sizeof(chunk));
    for (int i = 0; i < 3; i++) {
        const char *sz = "50\r\n"; /* 0x50 = 80 bytes */
        (void) send(fd, sz, strlen(sz), MSG_NOSIGNAL);
        (void) send(fd, chunk, sizeof(chunk), MSG_NOSIGNAL);
        (void) send(fd, "\r\n", 2, MSG_NOSIGNAL);
    }
    (void) send(fd, "0\r\n\r\n", 5, MSG_NOSIGNAL);
    char buf[2048];
    cr_assert_eq(s_read_status(fd, buf, sizeof buf, 2000), 413, "%s", buf);
    cr_assert_not_null(strstr(buf, "body_too_large"), "%s", buf);
    cr_assert(s_closed_within(fd, 2000));
    close(fd);
    cr_assert_eq(lisa_http_server_stats(srv).body_too_large, 1);
    cr_assert_eq(lisa_http_server_stats(srv).requests, 0);
    lisa_http_server_destroy(&srv);
}

Test(lisa_http_server, ambiguous_framing_is_400)
{
    lisa_http_server_config_t cfg = {.address = "127.0.0.1", .handler = s_echo};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    static const char *const bad[] = {
        /* duplicate, equal */
        "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n"
        "Content-Length: 2\r\n\r\n{}",
        /* conflicting */
        "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n"
        "content-length: 40\r\n\r\n{}",
        /* Content-Length with Transfer-Encoding, either order */
        "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n"
        "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
        "Content-Length: 30\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        /* two Transfer-Encoding headers */
        "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
        "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        /* a signed length */
        "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: +2\r\n\r\n{}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int fd = s_connect(lisa_http_server_port(srv));
        cr_assert(send(fd, bad[i], strlen(bad[i]), MSG_NOSIGNAL) > 0);
        char buf[2048];
        cr_assert_eq(s_read_status(fd, buf, sizeof buf, 2000), 400,
                     "case %zu: %s", i, buf);
        cr_assert(s_closed_within(fd, 2000), "case %zu: not closed", i);
        close(fd);
    }
    lisa_http_server_stats_t st = lisa_http_server_stats(srv);
    cr_assert_eq(st.requests, 0, "the handler saw an ambiguous request");
    cr_assert_geq(st.bad_framing, 4);
    /* a sound chunked request and a sound sized one are served */
    static const char *const good[] = {
        "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        "POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n"
        "Connection: close\r\n\r\n{}",
    };
    for (size_t i = 0; i < 2; i++) {
        int fd = s_connect(lisa_http_server_port(srv));
        cr_assert(send(fd, good[i], strlen(good[i]), MSG_NOSIGNAL) > 0);
        char buf[2048];
        cr_assert_eq(s_read_status(fd, buf, sizeof buf, 2000), 200, "%s", buf);
        close(fd);
    }
    cr_assert_eq(lisa_http_server_stats(srv).requests, 2);
    lisa_http_server_destroy(&srv);
}

typedef struct {
    uint16_t port;
    int ok;
} s_served_t;

static void *
s_normal_clients(void *arg)
{
    s_served_t *s = arg;
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/ok", s->port);
    for (int i = 0; i < 10; i++) {
        lisa_http_request_t rq = {.url = url, .timeout_ms = 2000};
        lisa_http_response_t *resp = NULL;
        if (lisa_http_request_sync(&rq, &resp) == LISA_OK &&
            lisa_http_response_status(resp) == 200)
            s->ok++;
        lisa_http_response_destroy(&resp);
        s_sleep_ms(30);
    }
    return NULL;
}

Test(lisa_http_server, slow_loris_is_cut_while_others_are_served)
{
    lisa_http_server_config_t cfg = {.address = "127.0.0.1",
                                     .handler = s_echo,
                                     .request_timeout_ms = 300,
                                     .idle_timeout_s = 60};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    s_served_t served = {.port = lisa_http_server_port(srv)};
    pthread_t th;
    pthread_create(&th, NULL, s_normal_clients, &served);

    /* A client that trickles its header one byte every 40 ms: never idle
     * long enough for an inactivity timeout, never done. */
    int fd = s_connect(lisa_http_server_port(srv));
    const char *req = "GET /slow HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool cut = false;
    for (size_t i = 0; i < strlen(req); i++) {
        if (send(fd, req + i, 1, MSG_NOSIGNAL) != 1) {
            cut = true;
            break;
        }
        if (s_closed_within(fd, 40)) {
            cut = true;
            break;
        }
    }
    double at = s_since_ms(&t0);
    close(fd);
    pthread_join(th, NULL);
    cr_assert(cut, "the slow client was never cut");
    cr_assert_geq(at, 250.0);
    cr_assert_lt(at, 2000.0, "cut after %.0f ms", at);
    cr_assert_eq(served.ok, 10);
    lisa_http_server_stats_t st = lisa_http_server_stats(srv);
    cr_assert_eq(st.request_timeouts, 1);
    cr_assert_eq(st.requests, 10);
    lisa_http_server_destroy(&srv);
}

static atomic_int s_released;

static void
s_count_release(void *arg)
{
    (void) arg;
    atomic_fetch_add(&s_released, 1);
}

/* Sets a release hook, then keeps the request (answered by the test). */
static void
s_keep_hooked(lisa_http_req_t *req, void *arg)
{
    lisa_http_req_on_release(req, s_count_release, NULL);
    s_keep(req, arg);
}

Test(lisa_http_server, release_hook_runs_once_per_answer)
{
    s_keeper_t k = {.mtx = PTHREAD_MUTEX_INITIALIZER};
    atomic_store(&s_released, 0);
    lisa_http_server_config_t cfg = {
        .address = "127.0.0.1", .handler = s_keep_hooked, .handler_arg = &k};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    int fd = s_connect(lisa_http_server_port(srv));
    const char *rq = "GET /k HTTP/1.1\r\nHost: a\r\n\r\n";
    cr_assert(send(fd, rq, strlen(rq), MSG_NOSIGNAL) > 0);
    cr_assert_eq(s_wait_kept(srv, 1, 2000), 1);
    cr_assert_eq(s_wait_held(&k, 1, 2000), 1);
    cr_assert_eq(atomic_load(&s_released), 0); /* held: not yet */
    pthread_mutex_lock(&k.mtx);
    lisa_http_req_t *r = k.held[0];
    pthread_mutex_unlock(&k.mtx);
    cr_assert_eq(lisa_http_req_respond(r, 200, "text/plain", "ok", 2), LISA_OK);
    cr_assert_eq(atomic_load(&s_released), 1);
    char buf[512];
    cr_assert_eq(s_read_status(fd, buf, sizeof buf, 300), 200, "%s", buf);
    close(fd);
    lisa_http_server_destroy(&srv);
    cr_assert_eq(atomic_load(&s_released), 1);
}

Test(lisa_http_server, max_connections_evicts_idle_then_refuses)
{
    s_keeper_t k = {.mtx = PTHREAD_MUTEX_INITIALIZER};
    lisa_http_server_config_t cfg = {.address = "127.0.0.1",
                                     .handler = s_keep,
                                     .handler_arg = &k,
                                     .max_connections = 2};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    uint16_t port = lisa_http_server_port(srv);
    int a = s_connect(port);
    int b = s_connect(port);
    /* wait until both are admitted */
    for (int i = 0; i < 200 && lisa_http_server_stats(srv).connections_open < 2;
         i++)
        s_sleep_ms(5);
    cr_assert_eq(lisa_http_server_stats(srv).connections_open, 2);
    /* full of idle connections: a new one displaces the oldest (a) */
    int c = s_connect(port);
    cr_assert(s_closed_within(a, 2000), "the oldest idle one stayed");
    lisa_http_server_stats_t st = lisa_http_server_stats(srv);
    cr_assert_eq(st.evicted_connections, 1, "evicted %llu, refused %llu",
                 (unsigned long long) st.evicted_connections,
                 (unsigned long long) st.refused_connections);
    cr_assert_eq(st.refused_connections, 0);
    close(a);
    for (int i = 0; i < 200 && lisa_http_server_stats(srv).connections_open > 2;
         i++)
        s_sleep_ms(5);
    /* b and c send requests the handler keeps: nothing idle to displace */
    const char *rq = "GET /k HTTP/1.1\r\nHost: a\r\n\r\n";
    cr_assert(send(b, rq, strlen(rq), MSG_NOSIGNAL) > 0);
    cr_assert(send(c, rq, strlen(rq), MSG_NOSIGNAL) > 0);
    cr_assert_eq(s_wait_kept(srv, 2, 2000), 2);
    cr_assert_eq(s_wait_held(&k, 2, 2000), 2);
    int d = s_connect(port);
    cr_assert(s_closed_within(d, 2000));
    cr_assert_eq(lisa_http_server_stats(srv).refused_connections, 1);
    close(d);
    /* the kept ones are answered */
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&k.mtx);
        lisa_http_req_t *r = k.held[i];
        pthread_mutex_unlock(&k.mtx);
        cr_assert_eq(lisa_http_req_respond(r, 200, "text/plain", "ok", 2),
                     LISA_OK);
    }
    char buf[512];
    cr_assert_eq(s_read_status(b, buf, sizeof buf, 300), 200, "%s", buf);
    close(b);
    close(c);
    /* after they close, new connections are served */
    for (int i = 0; i < 200 && lisa_http_server_stats(srv).connections_open > 0;
         i++)
        s_sleep_ms(5);
    lisa_http_server_destroy(&srv);
}

Test(lisa_http_server, oversized_header_is_refused)
{
    lisa_http_server_config_t cfg = {
        .address = "127.0.0.1", .handler = s_echo, .max_header_bytes = 8192};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    char *url = s_url(srv, "/h");
    size_t n = 20000;
    char *h = malloc(n + 16);
    strcpy(h, "X-Big: ");
    memset(h + 7, 'b', n);
    h[7 + n] = '\0';
    const char *hdrs[] = {h, NULL};
    lisa_http_request_t rq = {.url = url, .headers = hdrs};
    lisa_http_response_t *resp = NULL;
    lisa_rc_t rc = lisa_http_request_sync(&rq, &resp);
    /* libmicrohttpd answers 431 (or closes); the handler never runs */
    if (rc == LISA_OK)
        cr_assert_eq(lisa_http_response_status(resp), 431);
    lisa_http_response_destroy(&resp);
    /* the counter moves once MHD has finished with the connection */
    for (int i = 0; i < 200 && lisa_http_server_stats(srv).bad_requests == 0;
         i++)
        s_sleep_ms(5);
    cr_assert_eq(lisa_http_server_stats(srv).requests, 0);
    cr_assert_eq(lisa_http_server_stats(srv).bad_requests, 1);
    free(h);
    free(url);
    lisa_http_server_destroy(&srv);
}

/* ------------------------------------------------------------------ */
/* unix socket                                                          */

Test(lisa_http_server, unix_socket)
{
    char dir[] = "/tmp/lisa-http-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/gw.sock", dir);
    lisa_http_server_config_t cfg = {.unix_path = path, .handler = s_echo};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    cr_assert_not_null(srv);
    cr_assert_eq(lisa_http_server_port(srv), 0);
    lisa_http_request_t rq = {.url = "http://gateway/v1/models?name=u",
                              .unix_socket = path};
    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK, "%s",
                 lisa_http_response_error(resp));
    cr_assert_eq(lisa_http_response_status(resp), 200);
    json_t *o = json_loads(lisa_http_response_body(resp, NULL), 0, NULL);
    cr_assert_str_eq(json_string_value(json_object_get(o, "peer")), "unix");
    cr_assert_str_eq(json_string_value(json_object_get(o, "path")),
                     "/v1/models");
    cr_assert_str_eq(json_string_value(json_object_get(o, "name")), "u");
    json_decref(o);
    lisa_http_response_destroy(&resp);
    lisa_http_server_destroy(&srv);
    cr_assert_neq(access(path, F_OK), 0, "socket file removed on destroy");
    rmdir(dir);
}

Test(lisa_http_server, tcp_and_unix_together)
{
    char dir[] = "/tmp/lisa-http-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/gw.sock", dir);
    /* a stale socket file from an earlier run is replaced */
    int stale = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    strcpy(sa.sun_path, path);
    cr_assert_eq(bind(stale, (struct sockaddr *) &sa, sizeof(sa)), 0);
    close(stale);
    lisa_http_server_config_t cfg = {
        .address = "127.0.0.1", .unix_path = path, .handler = s_echo};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    cr_assert_not_null(srv);
    char *url = s_url(srv, "/both");
    lisa_http_request_t rq = {.url = url};
    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK);
    lisa_http_response_destroy(&resp);
    rq.unix_socket = path;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK);
    cr_assert_eq(lisa_http_response_status(resp), 200);
    lisa_http_response_destroy(&resp);
    cr_assert_eq(lisa_http_server_stats(srv).requests, 2);
    free(url);
    lisa_http_server_destroy(&srv);
    rmdir(dir);
}

/* ------------------------------------------------------------------ */
/* shutdown with kept requests and open streams                         */

typedef struct {
    char url[96];
    lisa_rc_t rc;
    long status;
    size_t body_len;
} s_bg_t;

static void *
s_bg_request(void *arg)
{
    s_bg_t *b = arg;
    lisa_http_request_t rq = {.url = b->url, .timeout_ms = 5000};
    lisa_http_response_t *resp = NULL;
    b->rc = lisa_http_request_sync(&rq, &resp);
    b->status = lisa_http_response_status(resp);
    if (b->rc == LISA_OK)
        (void) lisa_http_response_body(resp, &b->body_len);
    lisa_http_response_destroy(&resp);
    return NULL;
}

/* n background GETs of `path` on srv (the last of `last` when given). */
static void
s_bg_start(lisa_http_server_t *srv, s_bg_t *bg, pthread_t *th, int n,
           const char *path, const char *last)
{
    for (int i = 0; i < n; i++) {
        memset(&bg[i], 0, sizeof bg[i]);
        snprintf(bg[i].url, sizeof(bg[i].url), "http://127.0.0.1:%u/%s",
                 lisa_http_server_port(srv), last && i == n - 1 ? last : path);
        pthread_create(&th[i], NULL, s_bg_request, &bg[i]);
    }
}

Test(lisa_http_server, answers_given_before_destroy_arrive_whole)
{
    /* sixteen kept requests answered with 1 MiB each, the server destroyed
     * right after the last answer: every client gets all of its answer */
    enum { N = 16, LEN = 1 << 20 };
    s_keeper_t k = {.mtx = PTHREAD_MUTEX_INITIALIZER};
    lisa_http_server_config_t cfg = {
        .address = "127.0.0.1", .handler = s_keep, .handler_arg = &k};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    s_bg_t bg[N];
    pthread_t th[N];
    s_bg_start(srv, bg, th, N, "big", NULL);
    cr_assert_eq(s_wait_held(&k, N, 3000), N);
    char *body = malloc(LEN);
    memset(body, 'x', LEN);
    for (size_t i = 0; i < k.n; i++)
        cr_assert_eq(
            lisa_http_req_respond(k.held[i], 200, "text/plain", body, LEN),
            LISA_OK);
    free(body);
    lisa_http_server_destroy(&srv);
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        cr_assert(bg[i].rc == LISA_OK && bg[i].status == 200 &&
                      bg[i].body_len == LEN,
                  "request %d: rc %d status %ld, %zu bytes", i, bg[i].rc,
                  bg[i].status, bg[i].body_len);
    }
}

typedef struct {
    s_keeper_t keeper;
} s_mixed_t;

static void
s_keep_or_stream(lisa_http_req_t *req, void *arg)
{
    if (strcmp(lisa_http_req_path(req), "/stream") == 0) {
        cr_assert_eq(lisa_http_req_stream_open(req, 200, "text/event-stream"),
                     LISA_OK);
        cr_assert_eq(lisa_http_req_stream_push(req, "data: 1\n\n", 9), LISA_OK);
    }
    s_keep(req, arg);
}

Test(lisa_http_server, shutdown_answers_kept_requests)
{
    /* fifteen kept requests and a stream: the server stops right after it
     * resumes them, and every kept one still gets its 503 on the wire */
    enum { N = 16 };
    s_keeper_t k = {.mtx = PTHREAD_MUTEX_INITIALIZER};
    lisa_http_server_config_t cfg = {
        .address = "127.0.0.1", .handler = s_keep_or_stream, .handler_arg = &k};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    s_bg_t bg[N];
    pthread_t th[N];
    s_bg_start(srv, bg, th, N, "kept", "stream");
    cr_assert_eq(s_wait_kept(srv, N, 3000), N);
    /* and every handler is done (the stream opened and pushed) before the
     * server goes */
    cr_assert_eq(s_wait_held(&k, N, 3000), N);
    lisa_http_server_destroy(&srv);
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    /* kept requests were answered 503, not cut */
    for (int i = 0; i < N - 1; i++)
        cr_assert(bg[i].rc == LISA_OK && bg[i].status == 503,
                  "request %d: rc %d status %ld", i, bg[i].rc, bg[i].status);
    /* the stream was cut, not ended cleanly */
    cr_assert_neq(bg[N - 1].rc, LISA_OK);
    /* the application still owes its answers; they only free now */
    for (size_t i = 0; i < k.n; i++) {
        if (strcmp(lisa_http_req_path(k.held[i]), "/stream") == 0) {
            cr_assert_eq(lisa_http_req_stream_push(k.held[i], "x", 1),
                         LISA_UNAVAILABLE);
            lisa_http_req_stream_close(k.held[i]);
        } else {
            cr_assert_eq(lisa_http_req_respond(k.held[i], 200, NULL, "late", 4),
                         LISA_UNAVAILABLE);
        }
    }
}

Test(lisa_http_server, loop_mode_shutdown_before_dispatch)
{
    /* Requests queued for a loop that never runs are answered and freed. */
    s_keeper_t k = {.mtx = PTHREAD_MUTEX_INITIALIZER};
    zloop_t *loop = zloop_new();
    lisa_http_server_config_t cfg = {.address = "127.0.0.1",
                                     .handler = s_keep,
                                     .handler_arg = &k,
                                     .loop = loop};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    s_bg_t bg[2];
    pthread_t th[2];
    s_bg_start(srv, bg, th, 2, "q", NULL);
    cr_assert_eq(s_wait_kept(srv, 2, 3000), 2);
    cr_assert_eq(k.n, 0, "the loop never ran, so no handler did");
    lisa_http_server_destroy(&srv);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        cr_assert(bg[i].rc == LISA_OK && bg[i].status == 503,
                  "request %d: rc %d status %ld", i, bg[i].rc, bg[i].status);
    }
    zloop_destroy(&loop);
}

Test(lisa_http_server, error_json_shape)
{
    char *js =
        lisa_http_error_json("bad \"thing\"", "invalid_request_error", NULL);
    json_t *o = json_loads(js, 0, NULL);
    cr_assert_not_null(o);
    json_t *e = json_object_get(o, "error");
    cr_assert_str_eq(json_string_value(json_object_get(e, "message")),
                     "bad \"thing\"");
    cr_assert_str_eq(json_string_value(json_object_get(e, "type")),
                     "invalid_request_error");
    cr_assert(json_is_null(json_object_get(e, "code")));
    json_decref(o);
    free(js);
    /* a message quoting bytes that are not UTF-8 stays JSON, replaced */
    js = lisa_http_error_json("no route /\xff\xfe", "invalid_request_error",
                              "x");
    o = json_loads(js, 0, NULL);
    cr_assert_not_null(o, "%s", js);
    e = json_object_get(o, "error");
    cr_assert_str_eq(json_string_value(json_object_get(e, "message")),
                     "no route /\xef\xbf\xbd\xef\xbf\xbd");
    json_decref(o);
    free(js);
}

/* ------------------------------------------------------------------ */
/* a streaming client that goes away                                    */

static void
s_stream_and_keep(lisa_http_req_t *req, void *arg)
{
    cr_assert_eq(lisa_http_req_stream_open(req, 200, "text/event-stream"),
                 LISA_OK);
    cr_assert_eq(lisa_http_req_stream_push(req, "data: hi\n\n", 10), LISA_OK);
    s_keep(req, arg);
}

Test(lisa_http_server, stream_push_fails_once_the_client_is_gone)
{
    s_keeper_t k = {.mtx = PTHREAD_MUTEX_INITIALIZER};
    lisa_http_server_config_t cfg = {.address = "127.0.0.1",
                                     .handler = s_stream_and_keep,
                                     .handler_arg = &k};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    int fd = s_connect(lisa_http_server_port(srv));
    const char *rq = "GET /v1/chat/completions HTTP/1.1\r\nHost: a\r\n\r\n";
    cr_assert(send(fd, rq, strlen(rq), MSG_NOSIGNAL) > 0);
    char buf[1024];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    cr_assert_gt(poll(&p, 1, 2000), 0);
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    cr_assert_gt(n, 0);
    buf[n] = '\0';
    cr_assert_not_null(strstr(buf, "200 OK"));
    close(fd);
    cr_assert_eq(s_wait_kept(srv, 1, 2000), 1);
    cr_assert_eq(s_wait_held(&k, 1, 2000), 1);
    /* pushes succeed until the server notices; then they are refused */
    lisa_rc_t rc = LISA_OK;
    for (int i = 0; i < 400 && rc == LISA_OK; i++) {
        rc = lisa_http_req_stream_push(k.held[0], "data: more\n\n", 12);
        s_sleep_ms(5);
    }
    cr_assert_eq(rc, LISA_UNAVAILABLE);
    lisa_http_req_stream_close(k.held[0]);
    for (int i = 0; i < 200 && lisa_http_server_stats(srv).client_aborts == 0;
         i++)
        s_sleep_ms(5);
    cr_assert_eq(lisa_http_server_stats(srv).client_aborts, 1);
    cr_assert_eq(lisa_http_server_stats(srv).kept, 0);
    lisa_http_server_destroy(&srv);
}

/* A pool of server threads answering directly, many clients at once. */
static void *
s_hammer(void *arg)
{
    uint16_t port = *(uint16_t *) arg;
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/h?name=x", port);
    int ok = 0;
    for (int i = 0; i < 50; i++) {
        lisa_http_request_t rq = {.url = url, .body = "b", .body_len = 1};
        lisa_http_response_t *resp = NULL;
        if (lisa_http_request_sync(&rq, &resp) == LISA_OK &&
            lisa_http_response_status(resp) == 200)
            ok++;
        lisa_http_response_destroy(&resp);
    }
    return (void *) (intptr_t) ok;
}

Test(lisa_http_server, thread_pool)
{
    lisa_http_server_config_t cfg = {
        .address = "127.0.0.1", .handler = s_echo, .threads = 4};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    uint16_t port = lisa_http_server_port(srv);
    pthread_t th[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, s_hammer, &port);
    int ok = 0;
    for (int i = 0; i < 8; i++) {
        void *r = NULL;
        pthread_join(th[i], &r);
        ok += (int) (intptr_t) r;
    }
    cr_assert_eq(ok, 400);
    cr_assert_eq(lisa_http_server_stats(srv).requests, 400);
    lisa_http_server_destroy(&srv);
}

/* A kept-alive connection that idles between requests is not a slow
 * client: it keeps its connection past request_timeout_ms. */
typedef struct {
    int done;
    int ok;
} s_seq_t;

static void
s_seq_done(lisa_http_response_t *resp, void *arg)
{
    s_seq_t *s = arg;
    if (lisa_http_response_rc(resp) == LISA_OK &&
        lisa_http_response_status(resp) == 200)
        s->ok++;
    s->done++;
}

static int
s_seq_stop(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    s_seq_t *s = arg;
    return s->done ? -1 : 0;
}

Test(lisa_http_server, keep_alive_idle_is_not_slow_loris)
{
    lisa_http_server_config_t cfg = {.address = "127.0.0.1",
                                     .handler = s_echo,
                                     .request_timeout_ms = 100,
                                     .idle_timeout_s = 10};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    char *url = s_url(srv, "/again");
    zloop_t *loop = zloop_new();
    lisa_http_client_t *cli = lisa_http_client_new(loop, NULL);
    for (int i = 0; i < 2; i++) {
        s_seq_t s = {0};
        lisa_http_request_t rq = {.url = url};
        cr_assert_eq(lisa_http_client_send(cli, &rq, s_seq_done, &s, NULL),
                     LISA_OK);
        int t = zloop_timer(loop, 2, 0, s_seq_stop, &s);
        int g = zloop_timer(loop, 5000, 1, s_deadline, NULL);
        zloop_start(loop);
        zloop_timer_end(loop, t);
        zloop_timer_end(loop, g);
        cr_assert_eq(s.ok, 1);
        if (i == 0)
            s_sleep_ms(400); /* four request deadlines of idling */
    }
    lisa_http_server_stats_t st = lisa_http_server_stats(srv);
    cr_assert_eq(st.connections_accepted, 1, "the connection was reused");
    cr_assert_eq(st.request_timeouts, 0);
    cr_assert_eq(st.idle_timeouts, 0);
    lisa_http_client_destroy(&cli);
    zloop_destroy(&loop);
    free(url);
    lisa_http_server_destroy(&srv);
}

static void
s_bad_status(lisa_http_req_t *req, void *arg)
{
    (void) arg;
    lisa_http_req_respond(req, 42, "text/plain", "x", 1);
}

Test(lisa_http_server, invalid_status_becomes_500)
{
    lisa_http_server_config_t cfg = {.address = "127.0.0.1",
                                     .handler = s_bad_status};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    char *url = s_url(srv, "/bad");
    lisa_http_request_t rq = {.url = url};
    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK);
    cr_assert_eq(lisa_http_response_status(resp), 500);
    lisa_http_response_destroy(&resp);
    free(url);
    lisa_http_server_destroy(&srv);
}

Test(lisa_http_server, bad_config_is_refused)
{
    lisa_http_server_config_t none = {.address = "127.0.0.1"};
    cr_assert_null(lisa_http_server_new(&none), "no handler");
    lisa_http_server_config_t nolisten = {.handler = s_echo};
    cr_assert_null(lisa_http_server_new(&nolisten), "no listener");
    char longpath[200];
    memset(longpath, 'p', sizeof(longpath) - 1);
    longpath[0] = '/';
    longpath[sizeof(longpath) - 1] = '\0';
    lisa_http_server_config_t badpath = {.unix_path = longpath,
                                         .handler = s_echo};
    cr_assert_null(lisa_http_server_new(&badpath), "unix path too long");
    /* a port in use is reported, not ignored */
    lisa_http_server_config_t a = {.address = "127.0.0.1", .handler = s_echo};
    lisa_http_server_t *first = lisa_http_server_new(&a);
    lisa_http_server_config_t b = {.address = "127.0.0.1",
                                   .port = lisa_http_server_port(first),
                                   .handler = s_echo};
    lisa_http_server_t *second = lisa_http_server_new(&b);
    cr_assert_null(second);
    lisa_http_server_destroy(&first);
}
