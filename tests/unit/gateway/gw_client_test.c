/*
 * gw_client: the engine client's answer parser, and calls on a real loop
 * against real loopback servers (lisa_http_server, and a scripted socket
 * server for the shapes an engine may answer in).
 */
#include "gw_client.h"
#include "lisa/lisa_http_server.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- scaffolding ------------------------------------------------------- */

typedef struct {
    int calls;
    lisa_rc_t rc;
    int status;
    char body[4096];
    size_t body_len;
    char error[256];
} s_got_t;

static void
s_done(const gw_client_resp_t *r, void *arg)
{
    s_got_t *g = arg;
    g->calls++;
    g->rc = r->rc;
    g->status = r->status;
    g->body_len = r->body_len;
    snprintf(g->body, sizeof g->body, "%.*s", (int) r->body_len, r->body);
    snprintf(g->error, sizeof g->error, "%s", r->error);
}

static int
s_give_up(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    (void) arg;
    return -1;
}

static int
s_stop_when_done(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    s_got_t *g = arg;
    return g->calls ? -1 : 0;
}

/* Runs the loop until the call ended (or 5 s passed). */
static void
s_wait(zloop_t *loop, s_got_t *g)
{
    int t = zloop_timer(loop, 5, 0, s_stop_when_done, g);
    int guard = zloop_timer(loop, 5000, 1, s_give_up, NULL);
    if (!g->calls)
        zloop_start(loop);
    zloop_timer_end(loop, t);
    zloop_timer_end(loop, guard);
}

static void
s_echo(lisa_http_req_t *req, void *arg)
{
    int *n = arg;
    (*n)++;
    size_t len;
    const char *body = lisa_http_req_body(req, &len);
    char out[4200];
    int k = snprintf(out, sizeof out, "{\"path\":\"%s\",\"got\":%.*s}",
                     lisa_http_req_path(req), (int) len, body);
    (void) lisa_http_req_respond(req, 200, "application/json", out, (size_t) k);
}

/* ---- usage -------------------------------------------------------------- */

/* Usage: POST to an engine on a loop; the answer arrives in a callback;
 * the connection is kept and reused by the next call. */
Test(gw_client, usage)
{
    zloop_t *loop = zloop_new();
    int served = 0;
    lisa_http_server_config_t hc = {
        .address = "127.0.0.1", .handler = s_echo, .handler_arg = &served};
    lisa_http_server_t *srv = lisa_http_server_new(&hc);
    cr_assert_not_null(srv);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/v1/completions",
             lisa_http_server_port(srv));
    cr_assert(gw_client_url_ok(url));
    gw_client_t *c = gw_client_new(loop, 1 << 20);
    cr_assert_not_null(c);
    for (int i = 0; i < 3; i++) {
        s_got_t g = {0};
        const char body[] = "{\"prompt\":[1,2,3]}";
        cr_assert_eq(gw_client_post(c, url, body, strlen(body), 5000, 1000,
                                    s_done, &g, NULL),
                     LISA_OK);
        s_wait(loop, &g);
        cr_assert_eq(g.calls, 1);
        cr_assert_eq(g.rc, LISA_OK, "%s", g.error);
        cr_assert_eq(g.status, 200);
        cr_assert_str_eq(g.body, "{\"path\":\"/v1/completions\",\"got\":"
                                 "{\"prompt\":[1,2,3]}}");
        cr_assert_eq(gw_client_pending(c), 0);
        cr_assert_eq(gw_client_idle(c), 1); /* one connection, reused */
    }
    cr_assert_eq(served, 3);
    gw_client_destroy(&c);
    cr_assert_null(c);
    gw_client_destroy(&c);
    lisa_http_server_destroy(&srv);
    zloop_destroy(&loop);
}

/* ---- the parser --------------------------------------------------------- */

/* Parses `text` fed in pieces of `step` bytes; returns the result of the
 * last call and the body. */
static int
s_parse_steps(const char *text, size_t step, bool eof_at_end, size_t max,
              char *body, gw_client_parse_t *out)
{
    size_t n = strlen(text);
    char *buf = malloc(n + 1);
    gw_client_parse_t p = {0};
    int r = 0;
    size_t off = 0, blen = 0;
    for (size_t have = 0; have < n || (have == n && r == 0);) {
        size_t next = have + step < n ? have + step : n;
        memcpy(buf + have, text + have, next - have);
        have = next;
        r = gw_client_parse(&p, buf, have, eof_at_end && have == n, max, &off,
                            &blen);
        if (r != 0 || have == n)
            break;
    }
    if (r == 1) {
        memcpy(body, buf + off, blen);
        body[blen] = '\0';
    }
    if (out)
        *out = p;
    free(buf);
    return r;
}

Test(gw_client, parse_content_length_any_split)
{
    const char *a = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    "content-length: 11\r\n\r\n{\"ok\":true}";
    for (size_t step = 1; step < 80; step++) {
        char body[64];
        gw_client_parse_t p;
        cr_assert_eq(s_parse_steps(a, step, false, 1024, body, &p), 1, "%zu",
                     step);
        cr_assert_str_eq(body, "{\"ok\":true}");
        cr_assert_eq(p.status, 200);
        cr_assert_not(p.close);
    }
}

Test(gw_client, parse_chunked_in_place)
{
    const char *a = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "4\r\n{\"a\"\r\nA;ext=1\r\n:[1,2,3,4]\r\n1\r\n}\r\n"
                    "0\r\nX-Trailer: y\r\n\r\n";
    for (size_t step = 1; step < 100; step++) {
        char body[64];
        gw_client_parse_t p;
        cr_assert_eq(s_parse_steps(a, step, false, 1024, body, &p), 1, "%zu",
                     step);
        cr_assert_str_eq(body, "{\"a\":[1,2,3,4]}");
        cr_assert_not(p.close);
    }
}

Test(gw_client, parse_interim_close_delimited_and_empty)
{
    char body[64];
    gw_client_parse_t p;
    /* 100 Continue, then the answer */
    cr_assert_eq(s_parse_steps("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 503 "
                               "Busy\r\nContent-Length: 2\r\n\r\n{}",
                               7, false, 64, body, &p),
                 1);
    cr_assert_eq(p.status, 503);
    cr_assert_str_eq(body, "{}");
    /* HTTP/1.0 without a length: the body ends with the connection */
    cr_assert_eq(
        s_parse_steps("HTTP/1.0 200 OK\r\n\r\nabc", 3, false, 64, body, &p), 0);
    cr_assert_eq(
        s_parse_steps("HTTP/1.0 200 OK\r\n\r\nabc", 3, true, 64, body, &p), 1);
    cr_assert_str_eq(body, "abc");
    cr_assert(p.close);
    /* Connection: close on 1.1; 204 has no body */
    cr_assert_eq(s_parse_steps("HTTP/1.1 204 No Content\r\nConnection: "
                               "keep-alive, close\r\n\r\n",
                               5, false, 64, body, &p),
                 1);
    cr_assert_str_eq(body, "");
    cr_assert(p.close);
    /* bytes past the declared length: the connection is not reused */
    cr_assert_eq(s_parse_steps("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab",
                               100, false, 64, body, &p),
                 1);
    cr_assert_str_eq(body, "a");
    cr_assert(p.close);
}

Test(gw_client, parse_refuses_malformed_and_large)
{
    static const char *const bad[] = {
        "HTTP/2 200 OK\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",
        "HTTP/1.1 20x OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
        "HTTP/1.1 200 OK\r\nNoColon\r\n\r\n",
        "HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        "1000000000000000\r\n",
        "HTTP/1.1 101 Switching\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[64];
        cr_assert_eq(s_parse_steps(bad[i], 1000, false, 64, body, NULL), -1,
                     "%zu: %s", i, bad[i]);
    }
    char body[128];
    /* cut short by the end of the connection */
    cr_assert_eq(s_parse_steps("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab",
                               100, true, 64, body, NULL),
                 -1);
    /* over the bound, declared or chunked */
    cr_assert_eq(s_parse_steps("HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n",
                               100, false, 64, body, NULL),
                 -2);
    cr_assert_eq(s_parse_steps("HTTP/1.1 200 OK\r\nTransfer-Encoding: "
                               "chunked\r\n\r\n20\r\n",
                               100, false, 16, body, NULL),
                 -2);
}

Test(gw_client, url_shapes)
{
    cr_assert(gw_client_url_ok("http://127.0.0.1:8000/v1/completions"));
    cr_assert(gw_client_url_ok("http://localhost/v1/completions"));
    cr_assert(gw_client_url_ok("HTTP://[::1]:9/x"));
    cr_assert(gw_client_url_ok("http://10.0.0.7:65535"));
    cr_assert_not(gw_client_url_ok("https://127.0.0.1/v1"));
    cr_assert_not(gw_client_url_ok("http://engine-0:8000/v1"));
    cr_assert_not(gw_client_url_ok("http://127.0.0.1:0/v1"));
    cr_assert_not(gw_client_url_ok("http://127.0.0.1:65536/v1"));
    cr_assert_not(gw_client_url_ok("http://u@127.0.0.1/v1"));
    cr_assert_not(gw_client_url_ok("http://127.0.0.1/a b"));
    cr_assert_not(gw_client_url_ok("http:///v1"));
    cr_assert_not(gw_client_url_ok(NULL));
}

/* ---- against a scripted socket server ----------------------------------- */

/* Accepts connections; for each request read, writes answers[k] (k counts
 * requests over all connections) in pieces of `step` bytes, then closes
 * the connection when close_after[k]. An answer NULL means: close without
 * answering; "" means: never answer. */
typedef struct {
    int lfd;
    uint16_t port;
    const char *answers[8];
    bool close_after[8];
    size_t step;
    int served;
    int accepted;
    pthread_t th;
} s_script_t;

static bool
s_read_request(int fd)
{
    char buf[65536];
    size_t n = 0;
    for (;;) {
        ssize_t r = recv(fd, buf + n, sizeof buf - n - 1, 0);
        if (r <= 0)
            return false;
        n += (size_t) r;
        buf[n] = '\0';
        char *h = strstr(buf, "\r\n\r\n");
        if (!h)
            continue;
        char *cl = strstr(buf, "Content-Length: ");
        size_t want = cl ? (size_t) atol(cl + 16) : 0;
        if (n >= (size_t) (h + 4 - buf) + want)
            return true;
    }
}

static void *
s_script_main(void *arg)
{
    s_script_t *s = arg;
    for (;;) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            return NULL;
        s->accepted++;
        for (;;) {
            if (!s_read_request(fd))
                break;
            int k = s->served++;
            const char *a = k < 8 ? s->answers[k] : NULL;
            if (!a)
                break;
            if (!*a) {
                sleep(1);
                break;
            }
            size_t n = strlen(a), step = s->step ? s->step : n;
            for (size_t off = 0; off < n; off += step) {
                size_t m = n - off < step ? n - off : step;
                if (send(fd, a + off, m, MSG_NOSIGNAL) < 0)
                    break;
                if (s->step)
                    usleep(1000);
            }
            if (k < 8 && s->close_after[k])
                break;
        }
        close(fd);
    }
}

static void
s_script_start(s_script_t *s)
{
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(s->lfd, (struct sockaddr *) &a, sizeof a), 0);
    socklen_t l = sizeof a;
    getsockname(s->lfd, (struct sockaddr *) &a, &l);
    s->port = ntohs(a.sin_port);
    cr_assert_eq(listen(s->lfd, 16), 0);
    pthread_create(&s->th, NULL, s_script_main, s);
}

static void
s_script_stop(s_script_t *s)
{
    shutdown(s->lfd, SHUT_RDWR);
    close(s->lfd);
    pthread_join(s->th, NULL);
}

static void
s_call(gw_client_t *c, zloop_t *loop, uint16_t port, long timeout_ms,
       s_got_t *g)
{
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/v1/completions", port);
    memset(g, 0, sizeof *g);
    cr_assert_eq(
        gw_client_post(c, url, "{}", 2, timeout_ms, 1000, s_done, g, NULL),
        LISA_OK);
    s_wait(loop, g);
    cr_assert_eq(g->calls, 1);
}

Test(gw_client, answers_in_pieces_and_chunked)
{
    s_script_t s = {
        .answers = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
                    "HTTP/1.1 429 Too Many\r\nContent-Length: 4\r\n\r\nbusy"},
        .step = 5};
    s_script_start(&s);
    zloop_t *loop = zloop_new();
    gw_client_t *c = gw_client_new(loop, 1024);
    s_got_t g;
    s_call(c, loop, s.port, 5000, &g);
    cr_assert_eq(g.rc, LISA_OK, "%s", g.error);
    cr_assert_str_eq(g.body, "abcde");
    s_call(c, loop, s.port, 5000, &g);
    cr_assert_eq(g.rc, LISA_OK);
    cr_assert_eq(g.status, 429);
    cr_assert_str_eq(g.body, "busy");
    cr_assert_eq(s.accepted, 1); /* both on one kept connection */
    gw_client_destroy(&c);
    zloop_destroy(&loop);
    s_script_stop(&s);
}

Test(gw_client, kept_connection_closed_by_the_engine_is_retried_once)
{
    /* the first answer keeps the connection open from the client's view,
     * but the server closes it right after; the second request finds it
     * dead (or reads its end first) and goes on a new connection */
    s_script_t s = {
        .answers = {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1",
                    "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2"},
        .close_after = {true}};
    s_script_start(&s);
    zloop_t *loop = zloop_new();
    gw_client_t *c = gw_client_new(loop, 1024);
    s_got_t g;
    s_call(c, loop, s.port, 5000, &g);
    cr_assert_str_eq(g.body, "1");
    usleep(20000);
    s_call(c, loop, s.port, 5000, &g);
    cr_assert_eq(g.rc, LISA_OK, "%s", g.error);
    cr_assert_str_eq(g.body, "2");
    cr_assert_eq(s.accepted, 2);
    gw_client_destroy(&c);
    zloop_destroy(&loop);
    s_script_stop(&s);
}

Test(gw_client, broken_answers_and_errors)
{
    s_script_t s = {
        .answers = {NULL, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab",
                    "garbage\r\n\r\n",
                    "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n", ""},
        .close_after = {false, true}};
    s_script_start(&s);
    zloop_t *loop = zloop_new();
    gw_client_t *c = gw_client_new(loop, 1024);
    s_got_t g;
    /* closed without an answer on a new connection: no retry */
    s_call(c, loop, s.port, 5000, &g);
    cr_assert_eq(g.rc, LISA_ERR);
    cr_assert_eq(g.status, 0);
    /* cut short */
    s_call(c, loop, s.port, 5000, &g);
    cr_assert_eq(g.rc, LISA_ERR);
    /* not HTTP */
    s_call(c, loop, s.port, 5000, &g);
    cr_assert_eq(g.rc, LISA_ERR);
    cr_assert_str_eq(g.error, "malformed answer");
    /* over the bound */
    s_call(c, loop, s.port, 5000, &g);
    cr_assert_eq(g.rc, LISA_TOOLARGE);
    /* never answered: the deadline */
    s_call(c, loop, s.port, 150, &g);
    cr_assert_eq(g.rc, LISA_TIMEOUT);
    cr_assert_eq(gw_client_pending(c), 0);
    gw_client_destroy(&c);
    zloop_destroy(&loop);
    s_script_stop(&s);
}

Test(gw_client, refused_connection_and_cancel)
{
    /* a port nobody listens on */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, (struct sockaddr *) &a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *) &a, &l);
    close(fd);
    zloop_t *loop = zloop_new();
    gw_client_t *c = gw_client_new(loop, 1024);
    s_got_t g;
    s_call(c, loop, ntohs(a.sin_port), 5000, &g);
    cr_assert_eq(g.rc, LISA_UNAVAILABLE, "%s", g.error);
    /* a call cancelled before its answer never calls back */
    s_script_t s = {.answers = {""}};
    s_script_start(&s);
    char url[96];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/", s.port);
    memset(&g, 0, sizeof g);
    uint64_t id = 0;
    cr_assert_eq(gw_client_post(c, url, "{}", 2, 5000, 1000, s_done, &g, &id),
                 LISA_OK);
    cr_assert_eq(gw_client_pending(c), 1);
    cr_assert_eq(gw_client_cancel(c, id), LISA_OK);
    cr_assert_eq(gw_client_cancel(c, id), LISA_NOTFOUND);
    cr_assert_eq(gw_client_pending(c), 0);
    /* a call still running at destroy is dropped without its callback */
    cr_assert_eq(gw_client_post(c, url, "{}", 2, 5000, 1000, s_done, &g, NULL),
                 LISA_OK);
    cr_assert_eq(
        gw_client_post(c, "https://x/", "{}", 2, 5000, 1000, s_done, &g, NULL),
        LISA_INVALID);
    gw_client_destroy(&c);
    cr_assert_eq(g.calls, 0);
    zloop_destroy(&loop);
    s_script_stop(&s);
}
