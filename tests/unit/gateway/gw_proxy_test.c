/*
 * gw_proxy: the package proxy on a real zloop, a client on its unix
 * socket and an origin on loopback, both on threads of the test. The
 * first test is the usage example; the integration suite
 * (tests/integration/gateway/test_proxy.py) drives it with curl.
 */
#include "gw_auth.h"
#include "gw_metrics.h"
#include "gw_proxy.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_token.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <czmq.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define KEYHEX                                                                 \
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

typedef struct {
    int lfd;
    uint16_t port;
    char seen[2048]; /* the head the origin got */
} s_origin_t;

typedef struct {
    char path[108];
    char request[4096];
    char answer[4096];
    atomic_bool done;
} s_client_t;

static void *
s_origin_main(void *arg)
{
    s_origin_t *o = arg;
    int c = accept(o->lfd, NULL, NULL);
    if (c < 0)
        return NULL;
    size_t n = 0;
    while (n + 1 < sizeof o->seen && !strstr(o->seen, "\r\n\r\n")) {
        ssize_t r = recv(c, o->seen + n, sizeof o->seen - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t) r;
        o->seen[n] = '\0';
    }
    static const char rep[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
                              "hello";
    (void) !send(c, rep, sizeof rep - 1, MSG_NOSIGNAL);
    close(c);
    return NULL;
}

static void *
s_client_main(void *arg)
{
    s_client_t *k = arg;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", k->path);
    if (connect(fd, (struct sockaddr *) &sa, sizeof sa) == 0 &&
        send(fd, k->request, strlen(k->request), MSG_NOSIGNAL) > 0) {
        size_t n = 0;
        ssize_t r;
        while (n + 1 < sizeof k->answer &&
               (r = recv(fd, k->answer + n, sizeof k->answer - 1 - n, 0)) > 0)
            n += (size_t) r;
        k->answer[n] = '\0';
    }
    close(fd);
    atomic_store(&k->done, true);
    return NULL;
}

static int
s_check(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    return atomic_load(&((s_client_t *) arg)->done) ? -1 : 0;
}

static void
s_origin_listen(s_origin_t *o)
{
    o->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(o->lfd, (struct sockaddr *) &sa, sizeof sa), 0);
    cr_assert_eq(listen(o->lfd, 4), 0);
    socklen_t sl = sizeof sa;
    cr_assert_eq(getsockname(o->lfd, (struct sockaddr *) &sa, &sl), 0);
    o->port = ntohs(sa.sin_port);
}

/* Runs the proxy on a loop until the client is done; the client's answer
 * in k->answer. `allow` NULL: the origin's address. */
static void
s_run(s_client_t *k, s_origin_t *o, const char *allow, uint64_t max_bytes)
{
    char err[128];
    gw_metrics_t *m = gw_metrics_new();
    gw_auth_t *auth = gw_auth_new(KEYHEX, NULL, m, err, sizeof err);
    cr_assert_not_null(auth, "%s", err);
    char allow_buf[64];
    snprintf(allow_buf, sizeof allow_buf, "127.0.0.1:%u", (unsigned) o->port);
    snprintf(k->path, sizeof k->path, "/tmp/gw-proxy-test-%d.sock",
             (int) getpid());
    gw_proxy_cfg_t cfg = {.unix_path = k->path,
                          .allow = allow ? allow : allow_buf,
                          .max_requests = 10,
                          .max_bytes = max_bytes,
                          .idle_ms = 5000};
    zloop_t *loop = zloop_new();
    gw_proxy_t *px = gw_proxy_new(&cfg, loop, auth, m);
    cr_assert_not_null(px);
    pthread_t ot, ct;
    pthread_create(&ot, NULL, s_origin_main, o);
    pthread_create(&ct, NULL, s_client_main, k);
    zloop_timer(loop, 10, 0, s_check, k);
    zloop_start(loop);
    pthread_join(ct, NULL);
    /* the origin thread may still wait for a connection that never came */
    shutdown(o->lfd, SHUT_RDWR);
    pthread_join(ot, NULL);
    close(o->lfd);
    gw_proxy_destroy(&px);
    cr_assert_null(px);
    cr_assert_eq(access(k->path, F_OK), -1); /* the socket file is gone */
    zloop_destroy(&loop);
    gw_auth_destroy(&auth);
    gw_metrics_destroy(&m);
}

static char *
s_token(const char *rid)
{
    uint8_t key[32];
    for (size_t i = 0; i < sizeof key; i++)
        key[i] = (uint8_t) i;
    return lisa_token_issue(key, sizeof key, rid, 1,
                            lisa_token_now_ms() + 60000);
}

Test(gw_proxy, usage)
{
    s_origin_t o = {0};
    s_origin_listen(&o);
    s_client_t k = {0};
    char *tok = s_token("r-unit");
    snprintf(k.request, sizeof k.request,
             "GET http://127.0.0.1:%u/simple/ HTTP/1.1\r\n"
             "Host: 127.0.0.1\r\nProxy-Authorization: Bearer %s\r\n\r\n",
             (unsigned) o.port, tok);
    lisa_free(&tok);
    s_run(&k, &o, NULL, 1u << 20);
    cr_assert(strncmp(k.answer, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s",
              k.answer);
    cr_assert(strstr(k.answer, "\r\n\r\nhello"));
    cr_assert(strncmp(o.seen, "GET /simple/ HTTP/1.1\r\n", 23) == 0, "%s",
              o.seen);
    cr_assert_null(strstr(o.seen, "Proxy-Authorization"));
    cr_assert(strstr(o.seen, "Connection: close\r\n"));
}

Test(gw_proxy, refusals)
{
    static const struct {
        const char *allow;
        bool token;
        const char *status;
    } cases[] = {
        {NULL, false, "HTTP/1.1 407 "},
        {"pypi.org", true, "HTTP/1.1 403 "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        s_origin_t o = {0};
        s_origin_listen(&o);
        s_client_t k = {0};
        char *tok = s_token("r-unit");
        snprintf(k.request, sizeof k.request,
                 "GET http://127.0.0.1:%u/ HTTP/1.1\r\n%s%s%s\r\n",
                 (unsigned) o.port,
                 cases[i].token ? "Proxy-Authorization: Bearer " : "",
                 cases[i].token ? tok : "", cases[i].token ? "\r\n" : "");
        lisa_free(&tok);
        s_run(&k, &o, cases[i].allow, 1u << 20);
        cr_assert(strncmp(k.answer, cases[i].status, 13) == 0, "%zu: %s", i,
                  k.answer);
        cr_assert_str_eq(o.seen, ""); /* the origin was never reached */
    }
}

Test(gw_proxy, connect_tunnel)
{
    s_origin_t o = {0};
    s_origin_listen(&o);
    s_client_t k = {0};
    char *tok = s_token("r-unit");
    /* the tunnel's first bytes come with the CONNECT head */
    snprintf(k.request, sizeof k.request,
             "CONNECT 127.0.0.1:%u HTTP/1.1\r\n"
             "Proxy-Authorization: Bearer %s\r\n\r\n"
             "GET /t HTTP/1.1\r\nHost: x\r\n\r\n",
             (unsigned) o.port, tok);
    lisa_free(&tok);
    s_run(&k, &o, NULL, 1u << 20);
    cr_assert(strncmp(k.answer,
                      "HTTP/1.1 200 Connection established\r\n\r\n"
                      "HTTP/1.1 200 OK",
                      54) == 0,
              "%s", k.answer);
    cr_assert_str_eq(o.seen, "GET /t HTTP/1.1\r\nHost: x\r\n\r\n");
}
