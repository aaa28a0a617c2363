/*
 * lisa_http_client tests: the asynchronous client on a zloop and the
 * blocking call, against a real lisa_http_server on 127.0.0.1 ephemeral
 * ports and against Python's http.server. The first test is the usage
 * example.
 */
#include "lisa/lisa_http_client.h"
#include "lisa/lisa_http_server.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* helpers                                                              */

static int
s_stop_at(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    int *flag = arg;
    return *flag ? -1 : 0;
}

static int
s_give_up(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    (void) arg;
    return -1;
}

/* Runs `loop` until *flag is set or `ms` pass. */
static void
s_run(zloop_t *loop, int *flag, long ms)
{
    int t1 = zloop_timer(loop, 2, 0, s_stop_at, flag);
    int t2 = zloop_timer(loop, (size_t) ms, 1, s_give_up, NULL);
    zloop_start(loop);
    zloop_timer_end(loop, t1);
    zloop_timer_end(loop, t2);
}

static char *
s_url(lisa_http_server_t *srv, const char *path)
{
    size_t n = strlen(path) + 64;
    char *u = malloc(n);
    snprintf(u, n, "http://127.0.0.1:%u%s", lisa_http_server_port(srv), path);
    return u;
}

/* A finished call as seen by the test. */
typedef struct {
    int done;
    lisa_rc_t rc;
    long status;
    char body[4096];
    size_t body_len;
    char error[256];
    char auth[128];
} s_result_t;

static void
s_on_done(lisa_http_response_t *resp, void *arg)
{
    s_result_t *r = arg;
    r->rc = lisa_http_response_rc(resp);
    r->status = lisa_http_response_status(resp);
    size_t len = 0;
    const char *b = lisa_http_response_body(resp, &len);
    r->body_len = len;
    snprintf(r->body, sizeof(r->body), "%.*s", (int) len, b);
    snprintf(r->error, sizeof(r->error), "%s", lisa_http_response_error(resp));
    const char *a = lisa_http_response_header(resp, "x-auth-seen");
    snprintf(r->auth, sizeof(r->auth), "%s", a ? a : "");
    r->done++;
}

/* Server side: echoes method, path and body; reports the auth header. */
static void
s_echo(lisa_http_req_t *req, void *arg)
{
    (void) arg;
    const char *auth = lisa_http_req_header(req, "authorization");
    if (auth)
        lisa_http_req_add_header(req, "X-Auth-Seen", auth);
    size_t len = 0;
    const char *body = lisa_http_req_body(req, &len);
    char out[4096];
    int n = snprintf(out, sizeof(out), "%s %s %.*s", lisa_http_req_method(req),
                     lisa_http_req_path(req), (int) len, body);
    lisa_http_req_respond(req, 200, "text/plain", out, (size_t) n);
}

static lisa_http_server_t *
s_server(lisa_http_handler_fn *fn, void *arg)
{
    lisa_http_server_config_t cfg = {
        .address = "127.0.0.1", .handler = fn, .handler_arg = arg};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    cr_assert_not_null(srv);
    return srv;
}

/* ------------------------------------------------------------------ */

Test(lisa_http_client, usage)
{
    lisa_http_server_t *srv = s_server(s_echo, NULL);
    char *url = s_url(srv, "/v1/completions");

    /* The client lives on the service's zloop; callbacks run there. */
    zloop_t *loop = zloop_new();
    lisa_http_client_t *cli = lisa_http_client_new(loop, NULL);
    cr_assert_not_null(cli);

    const char *hdrs[] = {"Content-Type: application/json", NULL};
    lisa_http_request_t rq = {.method = "POST",
                              .url = url,
                              .headers = hdrs,
                              .body = "{\"prompt\":[1,2,3]}",
                              .body_len = 18,
                              .timeout_ms = 5000,
                              .bearer_token = "tok-123"};
    s_result_t res = {0};
    uint64_t id = 0;
    cr_assert_eq(lisa_http_client_send(cli, &rq, s_on_done, &res, &id),
                 LISA_OK);
    cr_assert_gt(id, 0);
    cr_assert_eq(lisa_http_client_pending(cli), 1);
    s_run(loop, &res.done, 5000);

    cr_assert_eq(res.done, 1);
    cr_assert_eq(res.rc, LISA_OK, "%s", res.error);
    cr_assert_eq(res.status, 200);
    cr_assert_str_eq(res.body, "POST /v1/completions {\"prompt\":[1,2,3]}");
    cr_assert_str_eq(res.auth, "Bearer tok-123");
    cr_assert_eq(lisa_http_client_pending(cli), 0);

    lisa_http_client_destroy(&cli);
    cr_assert_null(cli);
    lisa_http_client_destroy(&cli); /* safe twice */
    zloop_destroy(&loop);
    free(url);
    lisa_http_server_destroy(&srv);
}

Test(lisa_http_client, methods_and_sync)
{
    /* proxy variables in the environment are ignored (this one is dead) */
    setenv("http_proxy", "http://127.0.0.1:1", 1);
    setenv("HTTP_PROXY", "http://127.0.0.1:1", 1);
    lisa_http_server_t *srv = s_server(s_echo, NULL);
    char *url = s_url(srv, "/containers/abc");
    struct {
        const char *method;
        const char *body;
        const char *want;
    } cases[] = {
        {"PUT", "p", "PUT /containers/abc p"},
        {"DELETE", NULL, "DELETE /containers/abc "},
        {"PATCH", "{}", "PATCH /containers/abc {}"},
        {NULL, NULL, "GET /containers/abc "},
        {NULL, "x=1", "POST /containers/abc x=1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        lisa_http_request_t rq = {
            .method = cases[i].method,
            .url = url,
            .body = cases[i].body,
            .body_len = cases[i].body ? strlen(cases[i].body) : 0};
        lisa_http_response_t *resp = NULL;
        cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK);
        cr_assert_eq(lisa_http_response_status(resp), 200);
        cr_assert_str_eq(lisa_http_response_body(resp, NULL), cases[i].want);
        lisa_http_response_destroy(&resp);
    }
    /* HEAD: status and headers, no body */
    lisa_http_request_t head = {.method = "HEAD", .url = url};
    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&head, &resp), LISA_OK);
    cr_assert_eq(lisa_http_response_status(resp), 200);
    cr_assert_str_eq(lisa_http_response_body(resp, NULL), "");
    lisa_http_response_destroy(&resp);
    /* only http and https: a file URL is refused, not read */
    lisa_http_request_t file = {.url = "file:///etc/hostname"};
    cr_assert_eq(lisa_http_request_sync(&file, &resp), LISA_INVALID);
    cr_assert_str_eq(lisa_http_response_body(resp, NULL), "");
    lisa_http_response_destroy(&resp);
    lisa_http_request_t junk = {.url = "http://[::1"};
    cr_assert_eq(lisa_http_request_sync(&junk, &resp), LISA_INVALID);
    lisa_http_response_destroy(&resp);
    /* a request without a URL is refused before anything is sent */
    lisa_http_request_t bad = {0};
    cr_assert_eq(lisa_http_request_sync(&bad, &resp), LISA_INVALID);
    lisa_http_response_destroy(&resp);
    free(url);
    lisa_http_server_destroy(&srv);
}

/* ------------------------------------------------------------------ */
/* failures                                                             */

typedef struct {
    pthread_mutex_t mtx;
    lisa_http_req_t *held[64];
    int n;
} s_keeper_t;

static void
s_keep(lisa_http_req_t *req, void *arg)
{
    s_keeper_t *k = arg;
    pthread_mutex_lock(&k->mtx);
    k->held[k->n++] = req;
    pthread_mutex_unlock(&k->mtx);
}

static void
s_release_all(s_keeper_t *k)
{
    for (int i = 0; i < k->n; i++)
        (void) lisa_http_req_respond(k->held[i], 200, NULL, "", 0);
    k->n = 0;
}

Test(lisa_http_client, timeout_against_a_server_that_never_answers)
{
    s_keeper_t k = {.mtx = PTHREAD_MUTEX_INITIALIZER};
    lisa_http_server_t *srv = s_server(s_keep, &k);
    char *url = s_url(srv, "/never");
    zloop_t *loop = zloop_new();
    lisa_http_client_t *cli = lisa_http_client_new(loop, NULL);
    lisa_http_request_t rq = {.url = url, .timeout_ms = 200};
    s_result_t res = {0};
    cr_assert_eq(lisa_http_client_send(cli, &rq, s_on_done, &res, NULL),
                 LISA_OK);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    s_run(loop, &res.done, 5000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double) (t1.tv_sec - t0.tv_sec) * 1e3 +
                (double) (t1.tv_nsec - t0.tv_nsec) / 1e6;
    cr_assert_eq(res.done, 1);
    cr_assert_eq(res.rc, LISA_TIMEOUT, "rc %d: %s", res.rc, res.error);
    cr_assert_eq(res.status, 0);
    cr_assert_geq(ms, 190.0);
    cr_assert_lt(ms, 2000.0);
    cr_assert_eq(k.n, 1, "the server did receive and keep it");

    /* the blocking call times out the same way */
    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_TIMEOUT);
    cr_assert_str_neq(lisa_http_response_error(resp), "");
    lisa_http_response_destroy(&resp);

    lisa_http_client_destroy(&cli);
    zloop_destroy(&loop);
    lisa_http_server_destroy(&srv);
    s_release_all(&k);
    free(url);
}

static uint16_t
s_dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr *) &sa, &sl);
    close(fd); /* nothing listens there now */
    return ntohs(sa.sin_port);
}

Test(lisa_http_client, connection_refused)
{
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/x", s_dead_port());
    zloop_t *loop = zloop_new();
    lisa_http_client_t *cli = lisa_http_client_new(loop, NULL);
    lisa_http_request_t rq = {.url = url, .timeout_ms = 2000};
    s_result_t res = {0};
    cr_assert_eq(lisa_http_client_send(cli, &rq, s_on_done, &res, NULL),
                 LISA_OK);
    s_run(loop, &res.done, 5000);
    cr_assert_eq(res.done, 1);
    cr_assert_eq(res.rc, LISA_UNAVAILABLE, "rc %d: %s", res.rc, res.error);
    cr_assert_str_neq(res.error, "");

    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_UNAVAILABLE);
    lisa_http_response_destroy(&resp);
    /* an unresolvable unix socket path fails the same way */
    lisa_http_request_t ux = {.url = "http://docker/v1.43/info",
                              .unix_socket = "/nonexistent/docker.sock"};
    cr_assert_neq(lisa_http_request_sync(&ux, &resp), LISA_OK);
    lisa_http_response_destroy(&resp);
    lisa_http_client_destroy(&cli);
    zloop_destroy(&loop);
}

static void
s_big(lisa_http_req_t *req, void *arg)
{
    (void) arg;
    size_t n = 100000;
    char *b = malloc(n);
    memset(b, 'q', n);
    if (strcmp(lisa_http_req_path(req), "/stream") == 0) {
        /* no Content-Length: only the running count can stop it */
        cr_assert_eq(lisa_http_req_stream_open(req, 200, "text/plain"),
                     LISA_OK);
        for (size_t off = 0; off < n; off += 10000)
            (void) lisa_http_req_stream_push(req, b + off, 10000);
        lisa_http_req_stream_close(req);
    } else {
        lisa_http_req_respond(req, 200, "text/plain", b, n);
    }
    free(b);
}

Test(lisa_http_client, max_response_size)
{
    lisa_http_server_t *srv = s_server(s_big, NULL);
    char *u1 = s_url(srv, "/fixed");
    char *u2 = s_url(srv, "/stream");
    zloop_t *loop = zloop_new();
    lisa_http_client_t *cli = lisa_http_client_new(loop, NULL);
    s_result_t r1 = {0}, r2 = {0}, r3 = {0};
    lisa_http_request_t a = {.url = u1, .max_response = 10000};
    lisa_http_request_t b = {.url = u2, .max_response = 10000};
    lisa_http_request_t c = {.url = u1, .max_response = 100000};
    cr_assert_eq(lisa_http_client_send(cli, &a, s_on_done, &r1, NULL), LISA_OK);
    cr_assert_eq(lisa_http_client_send(cli, &b, s_on_done, &r2, NULL), LISA_OK);
    cr_assert_eq(lisa_http_client_send(cli, &c, s_on_done, &r3, NULL), LISA_OK);
    int all = 0;
    for (int i = 0; i < 500 && r1.done + r2.done + r3.done < 3; i++)
        s_run(loop, &all, 10);
    cr_assert_eq(r1.rc, LISA_TOOLARGE, "rc %d: %s", r1.rc, r1.error);
    cr_assert_eq(r2.rc, LISA_TOOLARGE, "rc %d: %s", r2.rc, r2.error);
    cr_assert_eq(r3.rc, LISA_OK, "rc %d: %s", r3.rc, r3.error);
    cr_assert_eq(r3.body_len, 100000);

    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&b, &resp), LISA_TOOLARGE);
    cr_assert_leq(strlen(lisa_http_response_body(resp, NULL)), 10000);
    lisa_http_response_destroy(&resp);
    lisa_http_client_destroy(&cli);
    zloop_destroy(&loop);
    free(u1);
    free(u2);
    lisa_http_server_destroy(&srv);
}

Test(lisa_http_client, cancel)
{
    s_keeper_t k = {.mtx = PTHREAD_MUTEX_INITIALIZER};
    lisa_http_server_t *srv = s_server(s_keep, &k);
    char *url = s_url(srv, "/slow");
    zloop_t *loop = zloop_new();
    lisa_http_client_t *cli = lisa_http_client_new(loop, NULL);
    lisa_http_request_t rq = {.url = url};
    s_result_t res = {0};
    uint64_t id = 0;
    cr_assert_eq(lisa_http_client_send(cli, &rq, s_on_done, &res, &id),
                 LISA_OK);
    int never = 0;
    for (int i = 0; i < 300 && k.n == 0; i++)
        s_run(loop, &never, 10);
    cr_assert_eq(k.n, 1);
    cr_assert_eq(lisa_http_client_cancel(cli, id), LISA_OK);
    cr_assert_eq(lisa_http_client_pending(cli), 0);
    cr_assert_eq(lisa_http_client_cancel(cli, id), LISA_NOTFOUND);
    /* the server answers after all: nobody listens any more */
    s_release_all(&k);
    s_run(loop, &never, 100);
    cr_assert_eq(res.done, 0);
    /* pending calls are dropped without callbacks on destroy */
    cr_assert_eq(lisa_http_client_send(cli, &rq, s_on_done, &res, NULL),
                 LISA_OK);
    lisa_http_client_destroy(&cli);
    cr_assert_eq(res.done, 0);
    zloop_destroy(&loop);
    lisa_http_server_destroy(&srv);
    s_release_all(&k);
    free(url);
}

/* ------------------------------------------------------------------ */
/* streaming bodies                                                     */

static void
s_events(lisa_http_req_t *req, void *arg)
{
    (void) arg;
    if (strcmp(lisa_http_req_path(req), "/missing") == 0) {
        lisa_http_req_respond_error(req, 404, "not_found_error", "no_model",
                                    "model %s does not exist", "m");
        return;
    }
    cr_assert_eq(lisa_http_req_stream_open(req, 200, "text/event-stream"),
                 LISA_OK);
    for (int i = 0; i < 20; i++) {
        char ev[32];
        int n = snprintf(ev, sizeof(ev), "data: %d\n\n", i);
        cr_assert_eq(lisa_http_req_stream_push(req, ev, (size_t) n), LISA_OK);
    }
    lisa_http_req_stream_close(req);
}

typedef struct {
    s_result_t res;
    char seen[1024];
    size_t len;
    int chunks;
    size_t stop_after; /* abort once this many bytes arrived (0: never) */
} s_stream_t;

static bool
s_on_chunk(const char *data, size_t len, long status, void *arg)
{
    s_stream_t *s = arg;
    cr_assert_eq(status, 200);
    cr_assert_lt(s->len + len, sizeof(s->seen));
    memcpy(s->seen + s->len, data, len);
    s->len += len;
    s->chunks++;
    return !(s->stop_after && s->len >= s->stop_after);
}

static void
s_stream_done(lisa_http_response_t *resp, void *arg)
{
    s_stream_t *s = arg;
    s_on_done(resp, &s->res);
}

Test(lisa_http_client, streaming_chunks)
{
    lisa_http_server_t *srv = s_server(s_events, NULL);
    char *url = s_url(srv, "/events");
    char *missing = s_url(srv, "/missing");
    zloop_t *loop = zloop_new();
    lisa_http_client_t *cli = lisa_http_client_new(loop, NULL);

    s_stream_t s = {0};
    lisa_http_request_t rq = {.url = url, .on_chunk = s_on_chunk};
    cr_assert_eq(lisa_http_client_send(cli, &rq, s_stream_done, &s, NULL),
                 LISA_OK);
    s_run(loop, &s.res.done, 5000);
    cr_assert_eq(s.res.rc, LISA_OK, "%s", s.res.error);
    cr_assert_eq(s.res.body_len, 0, "streamed bodies are not kept");
    s.seen[s.len] = '\0';
    cr_assert_eq(strncmp(s.seen, "data: 0\n\ndata: 1\n\n", 18), 0);
    cr_assert_not_null(strstr(s.seen, "data: 19\n\n"));

    /* the chunk callback can stop a stream */
    s_stream_t stop = {.stop_after = 1};
    cr_assert_eq(lisa_http_client_send(cli, &rq, s_stream_done, &stop, NULL),
                 LISA_OK);
    s_run(loop, &stop.res.done, 5000);
    cr_assert_eq(stop.res.rc, LISA_ERR);
    cr_assert_str_eq(stop.res.error, "aborted by the chunk callback");

    /* an error status is kept as a body for the done callback */
    s_stream_t err = {0};
    lisa_http_request_t rq404 = {.url = missing, .on_chunk = s_on_chunk};
    cr_assert_eq(lisa_http_client_send(cli, &rq404, s_stream_done, &err, NULL),
                 LISA_OK);
    s_run(loop, &err.res.done, 5000);
    cr_assert_eq(err.res.rc, LISA_OK);
    cr_assert_eq(err.res.status, 404);
    cr_assert_eq(err.chunks, 0);
    json_t *o = json_loads(err.res.body, 0, NULL);
    cr_assert_not_null(o);
    json_t *e = json_object_get(o, "error");
    cr_assert_str_eq(json_string_value(json_object_get(e, "message")),
                     "model m does not exist");
    cr_assert_str_eq(json_string_value(json_object_get(e, "code")), "no_model");
    json_decref(o);

    lisa_http_client_destroy(&cli);
    zloop_destroy(&loop);
    free(url);
    free(missing);
    lisa_http_server_destroy(&srv);
}

/* ------------------------------------------------------------------ */
/* many requests, and requests started from a done callback             */

#define S_MANY 1000

typedef struct {
    int done;
    int ok;
} s_many_t;

static void
s_many_done(lisa_http_response_t *resp, void *arg)
{
    s_many_t *m = arg;
    if (lisa_http_response_rc(resp) == LISA_OK &&
        lisa_http_response_status(resp) == 200)
        m->ok++;
    m->done++;
}

typedef struct {
    int *count;
    int want;
} s_until_t;

static int
s_until(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    s_until_t *u = arg;
    return *u->count >= u->want ? -1 : 0;
}

Test(lisa_http_client, one_thousand_concurrent)
{
    lisa_http_server_config_t cfg = {
        .address = "127.0.0.1", .handler = s_echo, .threads = 2};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    char *url = s_url(srv, "/many");
    zloop_t *loop = zloop_new();
    lisa_http_client_config_t ccfg = {.max_host_connections = 64};
    lisa_http_client_t *cli = lisa_http_client_new(loop, &ccfg);
    s_many_t m = {0};
    for (int i = 0; i < S_MANY; i++) {
        lisa_http_request_t rq = {.url = url, .body = "b", .body_len = 1};
        cr_assert_eq(lisa_http_client_send(cli, &rq, s_many_done, &m, NULL),
                     LISA_OK);
    }
    s_until_t u = {&m.done, S_MANY};
    int t = zloop_timer(loop, 2, 0, s_until, &u);
    int g = zloop_timer(loop, 30000, 1, s_give_up, NULL);
    zloop_start(loop);
    zloop_timer_end(loop, t);
    zloop_timer_end(loop, g);
    cr_assert_eq(m.done, S_MANY);
    cr_assert_eq(m.ok, S_MANY);
    /* connections were reused: far fewer than requests */
    cr_assert_leq(lisa_http_server_stats(srv).connections_accepted, 64 + 8);
    lisa_http_client_destroy(&cli);
    zloop_destroy(&loop);
    free(url);
    lisa_http_server_destroy(&srv);
}

typedef struct {
    lisa_http_client_t *cli;
    const char *url;
    int hops;
    int finished;
} s_chain_t;

static void
s_chain_done(lisa_http_response_t *resp, void *arg)
{
    s_chain_t *c = arg;
    cr_assert_eq(lisa_http_response_rc(resp), LISA_OK);
    if (++c->hops < 5) {
        lisa_http_request_t rq = {.url = c->url};
        cr_assert_eq(lisa_http_client_send(c->cli, &rq, s_chain_done, c, NULL),
                     LISA_OK);
    } else {
        c->finished = 1;
    }
}

Test(lisa_http_client, send_from_done_callback)
{
    lisa_http_server_t *srv = s_server(s_echo, NULL);
    char *url = s_url(srv, "/hop");
    zloop_t *loop = zloop_new();
    s_chain_t c = {lisa_http_client_new(loop, NULL), url, 0, 0};
    lisa_http_request_t rq = {.url = url};
    cr_assert_eq(lisa_http_client_send(c.cli, &rq, s_chain_done, &c, NULL),
                 LISA_OK);
    s_run(loop, &c.finished, 5000);
    cr_assert_eq(c.hops, 5);
    lisa_http_client_destroy(&c.cli);
    zloop_destroy(&loop);
    free(url);
    lisa_http_server_destroy(&srv);
}

/* ------------------------------------------------------------------ */
/* a third-party server: Python's http.server                           */

/* Spawns argv (under timeout(1), so it cannot outlive a failed test by
 * long) and reads "... port N ..." from its first stdout line. posix_spawn:
 * nothing runs in a forked copy of this threaded process. */
static pid_t
s_spawn_peer(char *const argv[], uint16_t *port)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    posix_spawn_file_actions_addclose(&fa, p[1]);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    extern char **environ;
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    close(p[1]);
    /* "Serving HTTP on 127.0.0.1 port 43210 (http://...) ..." */
    char line[256] = {0};
    size_t n = 0;
    while (n < sizeof(line) - 1) {
        ssize_t k = read(p[0], line + n, 1);
        if (k <= 0 || line[n] == '\n')
            break;
        n++;
    }
    close(p[0]);
    const char *at = strstr(line, "port ");
    if (!at) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return -1;
    }
    *port = (uint16_t) atoi(at + 5);
    return pid;
}

static pid_t
s_python_server(const char *dir, uint16_t *port)
{
    char *argv[] = {"timeout",   "60",          "python3",    "-u",
                    "-m",        "http.server", "0",          "--bind",
                    "127.0.0.1", "--directory", (char *) dir, NULL};
    return s_spawn_peer(argv, port);
}

Test(lisa_http_client, against_python_http_server)
{
    char dir[] = "/tmp/lisa-http-py-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char file[128];
    snprintf(file, sizeof(file), "%s/task.json", dir);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    for (int i = 0; i < 2000; i++)
        fprintf(f, "{\"line\":%d}\n", i);
    fclose(f);

    uint16_t port = 0;
    pid_t pid = s_python_server(dir, &port);
    if (pid < 0) {
        unlink(file);
        rmdir(dir);
        cr_skip_test("python3 http.server is not available");
    }
    char url[128], url404[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/task.json", port);
    snprintf(url404, sizeof(url404), "http://127.0.0.1:%u/nope.json", port);

    lisa_http_request_t rq = {.url = url};
    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK, "%s",
                 lisa_http_response_error(resp));
    cr_assert_eq(lisa_http_response_status(resp), 200);
    size_t len = 0;
    const char *body = lisa_http_response_body(resp, &len);
    cr_assert_eq(strncmp(body, "{\"line\":0}\n{\"line\":1}\n", 22), 0);
    cr_assert_not_null(strstr(body, "{\"line\":1999}\n"));
    char cl[32];
    snprintf(cl, sizeof(cl), "%zu", len);
    cr_assert_str_eq(lisa_http_response_header(resp, "content-length"), cl);
    cr_assert_not_null(
        strstr(lisa_http_response_header(resp, "server"), "Python"));
    lisa_http_response_destroy(&resp);

    zloop_t *loop = zloop_new();
    lisa_http_client_t *cli = lisa_http_client_new(loop, NULL);
    s_result_t r404 = {0};
    lisa_http_request_t rq404 = {.url = url404};
    cr_assert_eq(lisa_http_client_send(cli, &rq404, s_on_done, &r404, NULL),
                 LISA_OK);
    s_run(loop, &r404.done, 5000);
    cr_assert_eq(r404.rc, LISA_OK, "%s", r404.error);
    cr_assert_eq(r404.status, 404);
    /* and a size bound against a Content-Length it did not choose */
    s_result_t small = {0};
    lisa_http_request_t rqs = {.url = url, .max_response = 1000};
    cr_assert_eq(lisa_http_client_send(cli, &rqs, s_on_done, &small, NULL),
                 LISA_OK);
    s_run(loop, &small.done, 5000);
    cr_assert_eq(small.rc, LISA_TOOLARGE, "rc %d", small.rc);
    lisa_http_client_destroy(&cli);
    zloop_destroy(&loop);

    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    unlink(file);
    rmdir(dir);
}

/* ------------------------------------------------------------------ */
/* HTTPS with a private CA and a bearer token (the Kubernetes shape)    */

/* Runs argv to completion, quietly; returns its exit status or -1. */
static int
s_run_cmd(char *const argv[])
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    extern char **environ;
    pid_t pid = -1;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(lisa_http_client, https_with_ca_file_and_bearer_token)
{
    char dir[] = "/tmp/lisa-http-tls-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cert[128], key[128];
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    char *gen[] = {"timeout",  "60",
                   "openssl",  "req",
                   "-x509",    "-newkey",
                   "rsa:2048", "-nodes",
                   "-keyout",  key,
                   "-out",     cert,
                   "-days",    "1",
                   "-subj",    "/CN=127.0.0.1",
                   "-addext",  "subjectAltName=IP:127.0.0.1",
                   NULL};
    if (s_run_cmd(gen) != 0) {
        rmdir(dir);
        cr_skip_test("openssl is not available");
    }
    char *argv[] = {"timeout",
                    "60",
                    "python3",
                    "-u",
                    LISA_SOURCE_DIR "/tests/unit/common/lisa_http_tls_peer.py",
                    cert,
                    key,
                    NULL};
    uint16_t port = 0;
    pid_t pid = s_spawn_peer(argv, &port);
    cr_assert_gt(pid, 0, "TLS peer did not start");
    char url[64];
    snprintf(url, sizeof(url), "https://127.0.0.1:%u/api/v1/pods", port);

    /* verified against the private CA, token sent */
    lisa_http_request_t rq = {.url = url,
                              .ca_file = cert,
                              .bearer_token = "k8s-token",
                              .timeout_ms = 5000};
    lisa_http_response_t *resp = NULL;
    cr_assert_eq(lisa_http_request_sync(&rq, &resp), LISA_OK, "%s",
                 lisa_http_response_error(resp));
    cr_assert_eq(lisa_http_response_status(resp), 200);
    cr_assert_str_eq(lisa_http_response_body(resp, NULL), "Bearer k8s-token");
    lisa_http_response_destroy(&resp);

    /* the same through the loop */
    zloop_t *loop = zloop_new();
    lisa_http_client_t *cli = lisa_http_client_new(loop, NULL);
    s_result_t res = {0};
    cr_assert_eq(lisa_http_client_send(cli, &rq, s_on_done, &res, NULL),
                 LISA_OK);
    s_run(loop, &res.done, 5000);
    cr_assert_eq(res.rc, LISA_OK, "%s", res.error);
    cr_assert_str_eq(res.body, "Bearer k8s-token");
    lisa_http_client_destroy(&cli);
    zloop_destroy(&loop);

    /* without the CA the server is not trusted */
    lisa_http_request_t untrusted = {
        .url = url, .ca_file = "/dev/null", .timeout_ms = 5000};
    cr_assert_neq(lisa_http_request_sync(&untrusted, &resp), LISA_OK);
    cr_assert_str_neq(lisa_http_response_error(resp), "");
    cr_assert_eq(lisa_http_response_status(resp), 0);
    lisa_http_response_destroy(&resp);

    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    unlink(cert);
    unlink(key);
    rmdir(dir);
}

/* ------------------------------------------------------------------ */
/* the gateway's shape: a loop-mode server whose handler calls upstream
 * through the client on the same loop and relays the streamed answer    */

typedef struct {
    lisa_http_client_t *cli;
    char upstream[96];
    int relayed;
    int finished;
} s_proxy_t;

typedef struct {
    s_proxy_t *proxy;
    lisa_http_req_t *req;
} s_relay_t;

static bool
s_relay_chunk(const char *data, size_t len, long status, void *arg)
{
    s_relay_t *r = arg;
    (void) status;
    /* pushing into the server stream is allowed from inside on_chunk */
    return lisa_http_req_stream_push(r->req, data, len) == LISA_OK;
}

static void
s_relay_done(lisa_http_response_t *resp, void *arg)
{
    s_relay_t *r = arg;
    if (lisa_http_response_rc(resp) == LISA_OK)
        r->proxy->relayed++;
    lisa_http_req_stream_close(r->req);
    free(r);
}

static void
s_proxy_handler(lisa_http_req_t *req, void *arg)
{
    s_proxy_t *p = arg;
    if (lisa_http_req_stream_open(req, 200, "text/event-stream") != LISA_OK)
        return;
    s_relay_t *r = calloc(1, sizeof(*r));
    r->proxy = p;
    r->req = req;
    lisa_http_request_t up = {.url = p->upstream, .on_chunk = s_relay_chunk};
    if (lisa_http_client_send(p->cli, &up, s_relay_done, r, NULL) != LISA_OK) {
        lisa_http_req_stream_close(req);
        free(r);
    }
}

typedef struct {
    char url[96];
    lisa_rc_t rc;
    char body[1024];
} s_fetch_t;

static void *
s_fetch(void *arg)
{
    s_fetch_t *f = arg;
    lisa_http_request_t rq = {.url = f->url, .timeout_ms = 5000};
    lisa_http_response_t *resp = NULL;
    f->rc = lisa_http_request_sync(&rq, &resp);
    snprintf(f->body, sizeof(f->body), "%s",
             lisa_http_response_body(resp, NULL));
    lisa_http_response_destroy(&resp);
    return NULL;
}

Test(lisa_http_client, relay_stream_through_a_loop_mode_server)
{
    lisa_http_server_t *upstream = s_server(s_events, NULL);
    zloop_t *loop = zloop_new();
    s_proxy_t p = {.cli = lisa_http_client_new(loop, NULL)};
    snprintf(p.upstream, sizeof(p.upstream), "http://127.0.0.1:%u/events",
             lisa_http_server_port(upstream));
    lisa_http_server_config_t cfg = {.address = "127.0.0.1",
                                     .handler = s_proxy_handler,
                                     .handler_arg = &p,
                                     .loop = loop};
    lisa_http_server_t *gw = lisa_http_server_new(&cfg);
    cr_assert_not_null(gw);
    s_fetch_t f[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        snprintf(f[i].url, sizeof(f[i].url),
                 "http://127.0.0.1:%u/v1/chat/completions",
                 lisa_http_server_port(gw));
        pthread_create(&th[i], NULL, s_fetch, &f[i]);
    }
    s_until_t u = {&p.relayed, 3};
    int t = zloop_timer(loop, 2, 0, s_until, &u);
    int g = zloop_timer(loop, 10000, 1, s_give_up, NULL);
    zloop_start(loop);
    zloop_timer_end(loop, t);
    zloop_timer_end(loop, g);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(f[i].rc, LISA_OK);
        cr_assert_eq(strncmp(f[i].body, "data: 0\n\n", 9), 0);
        cr_assert_not_null(strstr(f[i].body, "data: 19\n\n"));
    }
    cr_assert_eq(p.relayed, 3);
    lisa_http_server_destroy(&gw);
    lisa_http_client_destroy(&p.cli);
    zloop_destroy(&loop);
    lisa_http_server_destroy(&upstream);
}

Test(lisa_http_client, unix_socket_through_the_loop)
{
    char dir[] = "/tmp/lisa-http-ux-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/docker.sock", dir);
    lisa_http_server_config_t cfg = {.unix_path = path, .handler = s_echo};
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    cr_assert_not_null(srv);
    zloop_t *loop = zloop_new();
    lisa_http_client_t *cli = lisa_http_client_new(loop, NULL);
    const char *hdrs[] = {"Content-Type: application/json", NULL};
    lisa_http_request_t rq = {.method = "POST",
                              .url = "http://docker/v1.43/containers/create",
                              .unix_socket = path,
                              .headers = hdrs,
                              .body = "{\"Image\":\"x\"}",
                              .body_len = 13};
    s_result_t res = {0};
    cr_assert_eq(lisa_http_client_send(cli, &rq, s_on_done, &res, NULL),
                 LISA_OK);
    s_run(loop, &res.done, 5000);
    cr_assert_eq(res.rc, LISA_OK, "%s", res.error);
    cr_assert_str_eq(res.body,
                     "POST /v1.43/containers/create {\"Image\":\"x\"}");
    lisa_http_client_destroy(&cli);
    zloop_destroy(&loop);
    lisa_http_server_destroy(&srv);
    rmdir(dir);
}
