/*
 * gw_engine: one call shape over both clients, against real loopback
 * servers: a POST in parts through gw_client, a GET through libcurl, a
 * POST through libcurl to an engine named by host name, a refused
 * connection, and calls dropped (without callbacks) when the facade goes.
 */
#include "gw_engine.h"
#include "lisa/lisa_http_server.h"

#include <criterion/criterion.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int calls;
    lisa_rc_t rc;
    long status;
    char body[4096];
} s_got_t;

static void
s_done(const gw_engine_resp_t *r, void *arg)
{
    s_got_t *g = arg;
    g->calls++;
    g->rc = r->rc;
    g->status = r->status;
    snprintf(g->body, sizeof g->body, "%.*s", (int) r->len, r->body);
}

static int
s_stop_when_done(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    s_got_t *g = arg;
    return g->calls ? -1 : 0;
}

static int
s_give_up(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    (void) arg;
    return -1;
}

static void
s_wait(zloop_t *loop, s_got_t *g, int ms)
{
    int t = zloop_timer(loop, 5, 0, s_stop_when_done, g);
    int guard = zloop_timer(loop, (size_t) ms, 1, s_give_up, NULL);
    if (!g->calls)
        zloop_start(loop);
    zloop_timer_end(loop, t);
    zloop_timer_end(loop, guard);
}

static lisa_http_req_t *s_held;

static void
s_echo(lisa_http_req_t *req, void *arg)
{
    (void) arg;
    if (strcmp(lisa_http_req_path(req), "/hold") == 0) {
        s_held = req; /* answered by the test later */
        return;
    }
    size_t len;
    const char *body = lisa_http_req_body(req, &len);
    char out[4200];
    int k = snprintf(out, sizeof out, "{\"%s %s\":%.*s}",
                     lisa_http_req_method(req), lisa_http_req_path(req),
                     len ? (int) len : 4, len ? body : "null");
    (void) lisa_http_req_respond(req, 201, "application/json", out, (size_t) k);
}

static lisa_http_server_t *
s_server(zloop_t *loop)
{
    lisa_http_server_config_t hc = {.address = "127.0.0.1",
                                    .handler = s_echo,
                                    .loop = loop,
                                    .loop_driven = true};
    lisa_http_server_t *srv = lisa_http_server_new(&hc);
    cr_assert_not_null(srv);
    return srv;
}

/* Usage: a POST in parts and a GET, the same outcome shape. */
Test(gw_engine, usage)
{
    zloop_t *loop = zloop_new();
    lisa_http_server_t *srv = s_server(loop);
    gw_engine_t *e = gw_engine_new(loop, 1 << 20);
    cr_assert_not_null(e);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/v1/completions",
             lisa_http_server_port(srv));
    struct iovec parts[3] = {{.iov_base = "{\"prompt\":[", .iov_len = 11},
                             {.iov_base = "1,2,3", .iov_len = 5},
                             {.iov_base = "]}", .iov_len = 2}};
    s_got_t g = {0};
    cr_assert_eq(gw_engine_post(e, url, parts, 3, 5000, 1000, s_done, &g),
                 LISA_OK);
    cr_assert_eq(gw_engine_pending(e), 1);
    s_wait(loop, &g, 5000);
    cr_assert_eq(g.calls, 1);
    cr_assert_eq(g.rc, LISA_OK);
    cr_assert_eq(g.status, 201);
    cr_assert_str_eq(g.body, "{\"POST /v1/completions\":{\"prompt\":[1,2,3]}}");
    cr_assert_eq(gw_engine_pending(e), 0);
    snprintf(url, sizeof url, "http://127.0.0.1:%u/healthz",
             lisa_http_server_port(srv));
    s_got_t h = {0};
    cr_assert_eq(gw_engine_get(e, url, 2000, s_done, &h), LISA_OK);
    s_wait(loop, &h, 5000);
    cr_assert_eq(h.calls, 1);
    cr_assert_eq(h.status, 201);
    cr_assert_str_eq(h.body, "{\"GET /healthz\":null}");
    cr_assert_eq(gw_engine_pending(e), 0);
    gw_engine_destroy(&e);
    cr_assert_null(e);
    gw_engine_destroy(&e);
    lisa_http_server_destroy(&srv);
    zloop_destroy(&loop);
}

/* An engine named by host name goes through libcurl, parts joined. */
Test(gw_engine, host_names_through_libcurl)
{
    char host[256];
    struct addrinfo *ai = NULL, hints = {.ai_family = AF_INET};
    if (gethostname(host, sizeof host) != 0 ||
        getaddrinfo(host, NULL, &hints, &ai) != 0)
        cr_skip_test("this machine's name does not resolve");
    bool loopback = ((const struct sockaddr_in *) (const void *) ai->ai_addr)
                        ->sin_addr.s_addr == htonl(INADDR_LOOPBACK);
    freeaddrinfo(ai);
    if (!loopback)
        cr_skip_test("this machine's name is not a loopback address");
    zloop_t *loop = zloop_new();
    lisa_http_server_t *srv = s_server(loop);
    gw_engine_t *e = gw_engine_new(loop, 1 << 20);
    char url[512];
    snprintf(url, sizeof url, "http://%s:%u/v1/completions", host,
             lisa_http_server_port(srv));
    struct iovec parts[2] = {{.iov_base = "[1,", .iov_len = 3},
                             {.iov_base = "2]", .iov_len = 2}};
    s_got_t g = {0};
    cr_assert_eq(gw_engine_post(e, url, parts, 2, 5000, 1000, s_done, &g),
                 LISA_OK);
    s_wait(loop, &g, 5000);
    cr_assert_eq(g.rc, LISA_OK);
    cr_assert_str_eq(g.body, "{\"POST /v1/completions\":[1,2]}");
    gw_engine_destroy(&e);
    lisa_http_server_destroy(&srv);
    zloop_destroy(&loop);
}

/* A refused connection is one callback with a connection error; calls in
 * flight when the facade goes are dropped without theirs. */
Test(gw_engine, refused_and_dropped)
{
    zloop_t *loop = zloop_new();
    lisa_http_server_t *srv = s_server(loop);
    gw_engine_t *e = gw_engine_new(loop, 1 << 20);
    /* a port nothing listens on: bind one, learn it, close it */
    lisa_http_server_config_t hc = {.address = "127.0.0.1", .handler = s_echo};
    lisa_http_server_t *gone = lisa_http_server_new(&hc);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/v1/completions",
             lisa_http_server_port(gone));
    lisa_http_server_destroy(&gone);
    struct iovec one = {.iov_base = "{}", .iov_len = 2};
    s_got_t g = {0};
    cr_assert_eq(gw_engine_post(e, url, &one, 1, 2000, 1000, s_done, &g),
                 LISA_OK);
    s_wait(loop, &g, 5000);
    cr_assert_eq(g.calls, 1);
    cr_assert(g.rc == LISA_UNAVAILABLE || g.rc == LISA_ERR, "rc %d", g.rc);
    cr_assert_eq(g.status, 0);
    /* both clients hold a call the server has not answered */
    snprintf(url, sizeof url, "http://127.0.0.1:%u/hold",
             lisa_http_server_port(srv));
    s_got_t a = {0}, b = {0};
    cr_assert_eq(gw_engine_post(e, url, &one, 1, 5000, 1000, s_done, &a),
                 LISA_OK);
    s_wait(loop, &a, 300);
    cr_assert_not_null(s_held);
    lisa_http_req_t *first = s_held;
    s_held = NULL;
    cr_assert_eq(gw_engine_get(e, url, 5000, s_done, &b), LISA_OK);
    s_wait(loop, &b, 300);
    cr_assert_not_null(s_held);
    cr_assert_eq(gw_engine_pending(e), 2);
    gw_engine_destroy(&e);
    cr_assert_eq(a.calls + b.calls, 0);
    (void) lisa_http_req_respond(first, 200, NULL, "", 0);
    (void) lisa_http_req_respond(s_held, 200, NULL, "", 0);
    lisa_http_server_destroy(&srv);
    zloop_destroy(&loop);
    cr_assert_eq(a.calls + b.calls, 0);
}
