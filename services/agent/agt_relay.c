/*
 * agt_relay: 127.0.0.1:<port> in the sandbox to the gateway's package
 * proxy, with the attempt token added (see the header).
 */
#define _GNU_SOURCE /* accept4, pipe2 */
#include "agt_relay.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define S_HEAD_MAX 16384u /* bytes read before the request line must end */
#define S_BUF      65536u
#define S_AUTH_MAX 600u

struct agt_relay {
    int lfd;
    int stop[2]; /* a pipe: written to stop the accepting thread */
    pthread_t thread;
    bool running;
    char *socket, *host, *port;
    uint16_t listen_port;  /* the bound port (cfg->port, or the kernel's) */
    char auth[S_AUTH_MAX]; /* "Proxy-Authorization: Bearer ...\r\n" */
};

/* One connection; owns a copy of what it needs (it may outlive the
 * relay). */
typedef struct {
    int cfd;
    char socket[108];
    char host[256], port[8];
    char auth[S_AUTH_MAX];
} s_conn_t;

static atomic_int s_open;

static int
s_connect_gateway(const s_conn_t *c)
{
    if (c->socket[0]) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        memcpy(sa.sun_path, c->socket, sizeof c->socket);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *) &sa, sizeof sa) != 0) {
            close(fd);
            fd = -1;
        }
        return fd;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(c->host, c->port, &hints, &ai) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    return fd;
}

static bool
s_send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t) w;
    }
    return true;
}

/* Reads until the request line is complete; bytes read, 0 on failure. */
static size_t
s_read_line(int fd, char *buf, size_t cap, size_t *eol)
{
    size_t n = 0;
    while (n < cap) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, AGT_RELAY_IDLE_MS) <= 0)
            return 0;
        ssize_t r = recv(fd, buf + n, cap - n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        char *nl = memchr(buf + n, '\n', (size_t) r);
        n += (size_t) r;
        if (nl) {
            *eol = (size_t) (nl - buf) + 1;
            return n;
        }
    }
    return 0;
}

/* Copies both ways until both sides are done or it is quiet too long. */
static void
s_pump(int a, int b)
{
    char *buf = lisa_malloc(S_BUF);
    bool a_open = true, b_open = true;
    while (a_open || b_open) {
        struct pollfd p[2] = {{.fd = a_open ? a : -1, .events = POLLIN},
                              {.fd = b_open ? b : -1, .events = POLLIN}};
        int r = poll(p, 2, AGT_RELAY_IDLE_MS);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        for (int i = 0; i < 2; i++) {
            if (!p[i].revents)
                continue;
            int from = i ? b : a, to = i ? a : b;
            ssize_t n = recv(from, buf, S_BUF, 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                (void) shutdown(to, SHUT_WR);
                if (i)
                    b_open = false;
                else
                    a_open = false;
                continue;
            }
            if (!s_send_all(to, buf, (size_t) n)) {
                a_open = b_open = false;
                break;
            }
        }
        /* the gateway ended its side: the answer is complete */
        if (!b_open)
            break;
    }
    lisa_free(&buf);
}

static void *
s_conn_main(void *arg)
{
    s_conn_t *c = arg;
    char *head = lisa_malloc(S_HEAD_MAX);
    size_t eol = 0;
    size_t n = s_read_line(c->cfd, head, S_HEAD_MAX, &eol);
    int gfd = n ? s_connect_gateway(c) : -1;
    if (gfd < 0) {
        if (n) {
            static const char busy[] =
                "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n"
                "Connection: close\r\n\r\n";
            (void) s_send_all(c->cfd, busy, sizeof busy - 1);
            lisa_log_warn("relay: cannot reach the package proxy");
        }
    } else if (s_send_all(gfd, head, eol) &&
               s_send_all(gfd, c->auth, strlen(c->auth)) &&
               s_send_all(gfd, head + eol, n - eol)) {
        s_pump(c->cfd, gfd);
    }
    if (gfd >= 0)
        close(gfd);
    close(c->cfd);
    memset(c->auth, 0, sizeof c->auth);
    lisa_free(&head);
    lisa_free(&c);
    atomic_fetch_sub(&s_open, 1);
    return NULL;
}

static void
s_spawn(agt_relay_t *r, int cfd)
{
    if (atomic_fetch_add(&s_open, 1) >= AGT_RELAY_MAX_CONNS) {
        atomic_fetch_sub(&s_open, 1);
        close(cfd);
        return;
    }
    s_conn_t *c = lisa_calloc(1, sizeof *c);
    c->cfd = cfd;
    snprintf(c->socket, sizeof c->socket, "%s", r->socket ? r->socket : "");
    snprintf(c->host, sizeof c->host, "%s", r->host ? r->host : "");
    snprintf(c->port, sizeof c->port, "%s", r->port ? r->port : "");
    memcpy(c->auth, r->auth, sizeof c->auth);
    pthread_attr_t at;
    pthread_t t;
    bool ok = pthread_attr_init(&at) == 0;
    if (ok) {
        (void) pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        ok = pthread_create(&t, &at, s_conn_main, c) == 0;
        pthread_attr_destroy(&at);
    }
    if (!ok) {
        close(cfd);
        memset(c->auth, 0, sizeof c->auth);
        lisa_free(&c);
        atomic_fetch_sub(&s_open, 1);
    }
}

static void *
s_accept_main(void *arg)
{
    agt_relay_t *r = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = r->lfd, .events = POLLIN},
                              {.fd = r->stop[0], .events = POLLIN}};
        int n = poll(p, 2, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || p[1].revents)
            break;
        int cfd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (cfd >= 0)
            s_spawn(r, cfd);
    }
    return NULL;
}

/* host and port of "http://host:port[/]" into r; false when malformed. */
static bool
s_parse_url(agt_relay_t *r, const char *url)
{
    if (strncmp(url, "http://", 7) != 0)
        return false;
    const char *a = url + 7;
    size_t al = strcspn(a, "/");
    const char *colon = NULL;
    if (a[0] == '[') {
        const char *rb = memchr(a, ']', al);
        if (!rb)
            return false;
        r->host = lisa_strndup(a + 1, (size_t) (rb - a - 1));
        colon = rb[1] == ':' ? rb + 1 : NULL;
    } else {
        colon = memchr(a, ':', al);
        r->host = lisa_strndup(a, colon ? (size_t) (colon - a) : al);
    }
    r->port = colon ? lisa_strndup(colon + 1, al - (size_t) (colon + 1 - a))
                    : lisa_strdup("80");
    return *r->host && *r->port;
}

agt_relay_t *
agt_relay_start(const agt_relay_cfg_t *cfg)
{
    if (!cfg || !cfg->token || !*cfg->token)
        return NULL;
    agt_relay_t *r = lisa_calloc(1, sizeof *r);
    r->lfd = -1;
    r->stop[0] = r->stop[1] = -1;
    if (cfg->socket && *cfg->socket) {
        if (strlen(cfg->socket) >= sizeof((s_conn_t *) 0)->socket) {
            lisa_log_error("relay: proxy socket path too long");
            goto fail;
        }
        r->socket = lisa_strdup(cfg->socket);
    } else if (!cfg->url || !s_parse_url(r, cfg->url)) {
        lisa_log_error("relay: the proxy URL must be http://host:port");
        goto fail;
    }
    int an = snprintf(r->auth, sizeof r->auth,
                      "Proxy-Authorization: Bearer %s\r\n", cfg->token);
    if (an < 0 || (size_t) an >= sizeof r->auth) {
        lisa_log_error("relay: the attempt token is too long");
        goto fail;
    }
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(cfg->port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (r->lfd >= 0)
        (void) setsockopt(r->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *) &sa, sizeof sa) != 0 ||
        listen(r->lfd, 64) != 0) {
        lisa_log_error("relay: cannot listen on 127.0.0.1:%u: %s",
                       (unsigned) cfg->port, strerror(errno));
        goto fail;
    }
    socklen_t sl = sizeof sa;
    if (getsockname(r->lfd, (struct sockaddr *) &sa, &sl) != 0) {
        lisa_log_error("relay: cannot read the listening port: %s",
                       strerror(errno));
        goto fail;
    }
    r->listen_port = ntohs(sa.sin_port);
    if (pipe2(r->stop, O_CLOEXEC) != 0 ||
        pthread_create(&r->thread, NULL, s_accept_main, r) != 0) {
        lisa_log_error("relay: cannot start: %s", strerror(errno));
        goto fail;
    }
    r->running = true;
    lisa_log_info("relay: package proxy on 127.0.0.1:%u -> %s%s%s%s",
                  (unsigned) r->listen_port, r->socket ? "unix:" : "http://",
                  r->socket ? r->socket : r->host, r->socket ? "" : ":",
                  r->socket ? "" : r->port);
    return r;
fail:
    agt_relay_stop(&r);
    return NULL;
}

void
agt_relay_stop(agt_relay_t **self)
{
    if (!self || !*self)
        return;
    agt_relay_t *r = *self;
    if (r->running) {
        (void) !write(r->stop[1], "x", 1);
        pthread_join(r->thread, NULL);
    }
    for (int i = 0; i < 2; i++)
        if (r->stop[i] >= 0)
            close(r->stop[i]);
    if (r->lfd >= 0)
        close(r->lfd);
    memset(r->auth, 0, sizeof r->auth);
    lisa_free(&r->socket);
    lisa_free(&r->host);
    lisa_free(&r->port);
    lisa_free(self);
}

uint16_t
agt_relay_port(const agt_relay_t *self)
{
    return self ? self->listen_port : 0;
}

void
agt_relay_env(uint16_t port)
{
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u", (unsigned) port);
    static const char *const vars[] = {"http_proxy", "https_proxy",
                                       "HTTP_PROXY", "HTTPS_PROXY"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        (void) setenv(vars[i], url, 1);
    (void) unsetenv("no_proxy");
    (void) unsetenv("NO_PROXY");
}
