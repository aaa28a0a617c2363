/*
 * gw_proxy: the package proxy (see the header).
 *
 * A connection goes through phases: HEAD (reading the client's request
 * head), RESOLVE (a host name on a resolver thread), CONNECTING (a
 * non-blocking connect, address after address), RELAY (bytes both ways
 * through one bounded buffer per direction) and ANSWER (an answer of the
 * proxy's own being written, then the close). One request per client
 * connection: a GET goes upstream with "Connection: close", and the
 * connection ends with the origin's answer. Descriptors sit in the
 * module's epoll set only while the phase wants something from them, so
 * a hung-up socket never spins the loop.
 */
#define _GNU_SOURCE /* accept4 */
#include "gw_proxy.h"

#include "gw_proxyhead.h"
#include "lisa/lisa_epset.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_token.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define S_BUF             65536u
#define S_TICK_MS         1000
#define S_ATTEMPT_CONNS   32u    /* open connections of one attempt */
#define S_MAX_ATTEMPTS    65536u /* attempts with counters in memory */
#define S_ATTEMPT_IDLE_MS (6ull * 3600ull * 1000ull)
#define S_LOG_TARGET      300 /* bytes of a target in a log line */

typedef enum {
    S_TAG_LISTEN,
    S_TAG_RESOLVER,
    S_TAG_CLIENT,
    S_TAG_ORIGIN
} s_kind_t;

typedef struct {
    s_kind_t kind;
    void *ptr; /* the connection (client, origin) or the listener's fd */
    int fd;
    uint32_t armed; /* events in the set; 0: not in it */
} s_tag_t;

typedef struct {
    uint64_t requests, bytes, last_ms;
    unsigned open;
} s_attempt_t;

typedef enum { S_HEAD, S_RESOLVE, S_CONNECTING, S_RELAY, S_ANSWER } s_phase_t;

typedef struct s_conn s_conn_t;

struct s_conn {
    gw_proxy_t *px;
    s_conn_t *prev, *next;
    uint64_t id;
    s_phase_t phase;
    s_tag_t client, origin; /* fd -1 when closed */
    char *head;
    size_t head_n;
    gw_proxyhead_t h;
    char key[LISA_TOKEN_MAX_ROLLOUT_ID + 16]; /* "rollout#attempt" */
    lisa_token_claims_t who;
    s_attempt_t *att; /* NULL until the token is checked */
    struct addrinfo *ai, *ai_cur;
    char *c2u, *u2c; /* S_BUF each, from the relay (u2c: or an answer) */
    size_t c2u_off, c2u_n, u2c_off, u2c_n;
    bool c_eof, u_eof, u_shut;
    bool lingering; /* ANSWER sent: draining the client before the close */
    size_t drained; /* bytes dropped while lingering */
    uint64_t sent, received; /* relayed to and from the origin */
    int status;              /* origin's (GET) or the proxy's own answer */
    const char *outcome;
    uint64_t t0_ms, last_ms;
};

struct gw_proxy_t {
    gw_proxy_cfg_t cfg;
    char *allow, *unix_path;
    zloop_t *loop;
    gw_auth_t *auth;
    gw_metrics_t *m;
    lisa_epset_t *ep;

    s_tag_t tcp, unx, res; /* listeners and the resolvers' socket */
    int res_wr;            /* resolvers' end (each thread dups it) */
    uint16_t port;
    s_conn_t *conns;
    size_t n_conns;
    uint64_t next_id;
    zhashx_t *attempts; /* key -> s_attempt_t */
    int timer;
};

/* A lookup on its own thread; handed back through the resolvers' socket
 * as a pointer, or freed by the thread when nobody listens any more. */
typedef struct {
    uint64_t conn_id;
    int fd;
    char host[GW_PROXYHEAD_HOST];
    char port[8];
    struct addrinfo *res;
    int gai;
} s_lookup_t;

static void s_conn_close(s_conn_t *c);
static void s_connect(s_conn_t *c);

/* ---- epoll -------------------------------------------------------------- */

static void
s_arm_tag(gw_proxy_t *px, s_tag_t *t, uint32_t want)
{
    if (t->fd < 0 || t->armed == want)
        return;
    epoll_data_t d = {.ptr = t};
    if (!want)
        lisa_epset_del(px->ep, t->fd);
    else if ((t->armed ? lisa_epset_mod(px->ep, t->fd, want, d)
                       : lisa_epset_add(px->ep, t->fd, want, d)) != LISA_OK)
        lisa_log_warn("proxy: epoll_ctl: %s", strerror(errno));
    t->armed = want;
}

/* What each side of `c` is waited for, from its phase and buffers. */
static void
s_arm(s_conn_t *c)
{
    uint32_t cw = 0, uw = 0;
    switch (c->phase) {
    case S_HEAD:
        cw = EPOLLIN;
        break;
    case S_RESOLVE:
        break;
    case S_CONNECTING:
        uw = EPOLLOUT;
        break;
    case S_RELAY:
        if (!c->c_eof && c->c2u_n == 0)
            cw |= EPOLLIN | EPOLLRDHUP;
        if (c->u2c_n)
            cw |= EPOLLOUT;
        if (!c->u_eof && c->u2c_n == 0)
            uw |= EPOLLIN;
        if (c->c2u_n)
            uw |= EPOLLOUT;
        break;
    case S_ANSWER:
        cw = c->lingering ? EPOLLIN | EPOLLRDHUP : EPOLLOUT;
        break;
    }
    s_arm_tag(c->px, &c->client, cw);
    s_arm_tag(c->px, &c->origin, uw);
}

static int
s_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -1 : 0;
}

/* ---- attempts ----------------------------------------------------------- */

static void
s_attempt_free(void **item)
{
    lisa_free(item);
}

static s_attempt_t *
s_attempt(gw_proxy_t *px, const char *key, uint64_t now)
{
    s_attempt_t *a = zhashx_lookup(px->attempts, key);
    if (a || zhashx_size(px->attempts) >= S_MAX_ATTEMPTS)
        return a;
    a = lisa_calloc(1, sizeof *a);
    a->last_ms = now;
    zhashx_insert(px->attempts, key, a);
    return a;
}

/* ---- answers, logs, the end of a connection ----------------------------- */

static const char *
s_reason(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 403:
        return "Forbidden";
    case 405:
        return "Method Not Allowed";
    case 407:
        return "Proxy Authentication Required";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 502:
        return "Bad Gateway";
    default:
        return "Service Unavailable";
    }
}

/* Answers the client with the proxy's own `status` and closes after. */
static void
s_answer(s_conn_t *c, int status, const char *outcome, const char *why)
{
    char body[512];
    if (!c->u2c)
        c->u2c = lisa_malloc(S_BUF);
    int bl = snprintf(body, sizeof body, "lisa package proxy: %s\n", why);
    if (bl < 0 || (size_t) bl >= sizeof body)
        bl = (int) sizeof body - 1;
    int n =
        snprintf(c->u2c, S_BUF,
                 "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n"
                 "Content-Length: %d\r\nConnection: close\r\n%s\r\n%s",
                 status, s_reason(status), bl,
                 status == 407 ? "Proxy-Authenticate: Bearer\r\n" : "", body);
    c->u2c_off = 0;
    c->u2c_n = n > 0 ? (size_t) n : 0;
    c->status = status;
    c->outcome = outcome;
    c->phase = S_ANSWER;
    if (c->origin.fd >= 0) {
        s_arm_tag(c->px, &c->origin, 0);
        close(c->origin.fd);
        c->origin.fd = -1;
    }
    s_arm(c);
}

static void
s_log(const s_conn_t *c)
{
    char target[S_LOG_TARGET + 1];
    bool v6 = strchr(c->h.host, ':') != NULL;
    if (!c->h.host[0])
        snprintf(target, sizeof target, "-");
    else if (c->h.connect)
        snprintf(target, sizeof target, "%s%s%s:%u", v6 ? "[" : "", c->h.host,
                 v6 ? "]" : "", (unsigned) c->h.port);
    else
        snprintf(
            target, sizeof target, "http://%s%s%s:%u%.*s", v6 ? "[" : "",
            c->h.host, v6 ? "]" : "", (unsigned) c->h.port,
            (int) (c->h.path_len < S_LOG_TARGET ? c->h.path_len : S_LOG_TARGET),
            c->h.path);
    /* control bytes of a target never reach the log */
    for (char *p = target; *p; p++)
        if ((unsigned char) *p < 0x20 || *p == 0x7f)
            *p = '?';
    uint64_t ms = c->last_ms - c->t0_ms;
    lisa_log_info("proxy: rollout=%s attempt=%u %s %s outcome=%s status=%d "
                  "sent=%llu received=%llu ms=%llu",
                  c->att ? c->who.rollout_id : "-",
                  c->att ? (unsigned) c->who.attempt : 0u,
                  c->h.method[0] ? c->h.method : "-", target,
                  c->outcome ? c->outcome : "closed", c->status,
                  (unsigned long long) c->sent,
                  (unsigned long long) c->received, (unsigned long long) ms);
}

static void
s_conn_close(s_conn_t *c)
{
    gw_proxy_t *px = c->px;
    if (c->head_n || c->h.method[0]) {
        s_log(c);
        char labels[64];
        snprintf(labels, sizeof labels, "outcome=\"%s\"",
                 c->outcome ? c->outcome : "closed");
        gw_metrics_add(px->m, "lisa_gateway_proxy_requests_total", labels, 1);
        gw_metrics_add(px->m, "lisa_gateway_proxy_bytes_total", NULL,
                       (double) (c->sent + c->received));
    }
    s_tag_t *tags[2] = {&c->client, &c->origin};
    for (int i = 0; i < 2; i++) {
        if (tags[i]->fd < 0)
            continue;
        s_arm_tag(px, tags[i], 0);
        close(tags[i]->fd);
        tags[i]->fd = -1;
    }
    if (c->att)
        c->att->open--;
    if (c->ai)
        freeaddrinfo(c->ai);
    if (c->prev)
        c->prev->next = c->next;
    else
        px->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    px->n_conns--;
    lisa_free(&c->head);
    lisa_free(&c->c2u);
    lisa_free(&c->u2c);
    lisa_free(&c);
}

/* ---- the request -------------------------------------------------------- */

static void *
s_resolve_main(void *arg)
{
    s_lookup_t *l = arg;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    l->gai = getaddrinfo(l->host, l->port, &hints, &l->res);
    int fd = l->fd;
    if (send(fd, &l, sizeof l, MSG_NOSIGNAL) != (ssize_t) sizeof l) {
        if (l->res)
            freeaddrinfo(l->res);
        lisa_free(&l);
    }
    close(fd);
    return NULL;
}

/* Resolves the target: at once when numeric, else on a thread. */
static void
s_resolve(s_conn_t *c)
{
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned) c->h.port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    if (getaddrinfo(c->h.host, port, &hints, &c->ai) == 0) {
        c->ai_cur = c->ai;
        s_connect(c);
        return;
    }
    c->ai = NULL;
    s_lookup_t *l = lisa_calloc(1, sizeof *l);
    l->conn_id = c->id;
    snprintf(l->host, sizeof l->host, "%s", c->h.host);
    snprintf(l->port, sizeof l->port, "%s", port);
    l->fd = fcntl(c->px->res_wr, F_DUPFD_CLOEXEC, 0);
    pthread_attr_t at;
    pthread_t t;
    bool ok = l->fd >= 0 && pthread_attr_init(&at) == 0;
    if (ok) {
        (void) pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        ok = pthread_create(&t, &at, s_resolve_main, l) == 0;
        pthread_attr_destroy(&at);
    }
    if (!ok) {
        if (l->fd >= 0)
            close(l->fd);
        lisa_free(&l);
        s_answer(c, 503, "busy", "cannot start a lookup now");
        return;
    }
    c->phase = S_RESOLVE;
    s_arm(c);
}

static void
s_on_lookups(gw_proxy_t *px)
{
    s_lookup_t *l;
    while (recv(px->res.fd, &l, sizeof l, MSG_DONTWAIT) == (ssize_t) sizeof l) {
        s_conn_t *c = px->conns;
        while (c && !(c->id == l->conn_id && c->phase == S_RESOLVE))
            c = c->next;
        if (c && l->gai == 0) {
            c->ai = l->res;
            c->ai_cur = c->ai;
            l->res = NULL;
            s_connect(c);
        } else if (c) {
            s_answer(c, 502, "unresolved", gai_strerror(l->gai));
        }
        if (l->res)
            freeaddrinfo(l->res);
        lisa_free(&l);
    }
}

/* Connects to the current address or the next that takes it. */
static void
s_connect(s_conn_t *c)
{
    for (; c->ai_cur; c->ai_cur = c->ai_cur->ai_next) {
        struct addrinfo *a = c->ai_cur;
        int fd =
            socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 ||
            errno == EINPROGRESS) {
            c->origin.fd = fd;
            c->origin.armed = 0;
            c->phase = S_CONNECTING;
            s_arm(c);
            return;
        }
        close(fd);
    }
    s_answer(c, 502, "unreachable", "cannot connect to the origin");
}

/* The origin took the connection: the tunnel is open, or the GET goes. */
static void
s_connected(s_conn_t *c)
{
    c->phase = S_RELAY;
    c->c2u = lisa_malloc(S_BUF);
    c->u2c = lisa_malloc(S_BUF);
    size_t extra = c->head_n - c->h.head_len;
    if (c->h.connect) {
        static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
        memcpy(c->u2c, ok, sizeof ok - 1);
        c->u2c_n = sizeof ok - 1;
        c->status = 200;
        memcpy(c->c2u, c->head + c->h.head_len, extra);
        c->c2u_n = extra; /* the tunnel's first bytes, sent with the head */
        c->sent += extra;
        c->att->bytes += extra;
    } else {
        size_t n;
        char *up = gw_proxyhead_upstream(c->head, &c->h, &n);
        if (n > S_BUF) {
            lisa_free(&up);
            s_answer(c, 431, "refused", "the request head is too large");
            return;
        }
        memcpy(c->c2u, up, n);
        c->c2u_n = n;
        lisa_free(&up);
    }
    s_arm(c);
}

/* A complete head: the token, the allow list, the caps, then the origin. */
static void
s_begin(s_conn_t *c)
{
    gw_proxy_t *px = c->px;
    gw_err_t err;
    if (gw_auth_check_header(px->auth, c->h.auth[0] ? c->h.auth : NULL, &c->who,
                             &err) != LISA_OK) {
        s_answer(c, 407, "unauthorized",
                 "send Proxy-Authorization: Bearer <attempt token>");
        return;
    }
    snprintf(c->key, sizeof c->key, "%s#%u", c->who.rollout_id,
             (unsigned) c->who.attempt);
    s_attempt_t *a = s_attempt(px, c->key, c->last_ms);
    if (!a) {
        s_answer(c, 503, "busy", "too many attempts use the proxy");
        return;
    }
    c->att = a;
    a->open++;
    a->last_ms = c->last_ms;
    if (!gw_proxyhead_allowed(px->allow, c->h.host, c->h.port)) {
        s_answer(c, 403, "forbidden",
                 "that host and port are not on the allow list");
        return;
    }
    if (a->requests >= px->cfg.max_requests) {
        s_answer(c, 429, "request_cap",
                 "this attempt has made all the requests it may");
        return;
    }
    if (a->bytes >= px->cfg.max_bytes) {
        s_answer(c, 429, "byte_cap",
                 "this attempt has fetched all the bytes it may");
        return;
    }
    if (a->open > S_ATTEMPT_CONNS) {
        s_answer(c, 429, "busy", "too many open connections");
        return;
    }
    a->requests++;
    s_resolve(c);
}

/* ---- events ------------------------------------------------------------- */

static void
s_read_head(s_conn_t *c)
{
    ssize_t n = recv(c->client.fd, c->head + c->head_n,
                     GW_PROXYHEAD_MAX - c->head_n, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        c->outcome = "client_gone";
        s_conn_close(c);
        return;
    }
    if (n < 0)
        return;
    c->head_n += (size_t) n;
    int status = 0;
    char why[200];
    lisa_rc_t rc =
        gw_proxyhead_parse(c->head, c->head_n, &c->h, &status, why, sizeof why);
    if (rc == LISA_AGAIN)
        return;
    if (rc != LISA_OK) {
        s_answer(c, status, "refused", why);
        return;
    }
    s_begin(c);
}

/* The origin's status code from the start of its answer (GET). */
static void
s_status(s_conn_t *c)
{
    if (c->status || c->h.connect || c->u2c_n < 12 ||
        strncmp(c->u2c, "HTTP/1.", 7) != 0)
        return;
    int v = 0;
    for (int i = 9; i < 12; i++)
        v = v * 10 +
            (c->u2c[i] >= '0' && c->u2c[i] <= '9' ? c->u2c[i] - '0' : 0);
    c->status = v;
}

/* Moves what it can; false when the connection was closed. */
static bool
s_relay(s_conn_t *c, s_tag_t *t, uint32_t ev)
{
    gw_proxy_t *px = c->px;
    bool client = t == &c->client;
    if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        char *dst = client ? c->c2u : c->u2c;
        size_t *dn = client ? &c->c2u_n : &c->u2c_n;
        bool want = client ? !c->c_eof && !*dn : !c->u_eof && !*dn;
        if (want) {
            ssize_t n = recv(t->fd, dst, S_BUF, 0);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                if (client)
                    c->c_eof = true;
                else
                    c->u_eof = true;
            } else if (n > 0) {
                if (client && !c->h.connect)
                    n = 0; /* one request a connection: the rest is dropped */
                *dn = (size_t) n;
                if (client)
                    c->c2u_off = 0;
                else
                    c->u2c_off = 0;
                if (!client) {
                    c->received += (uint64_t) n;
                    s_status(c);
                }
                c->att->bytes += (uint64_t) n;
                if (client)
                    c->sent += (uint64_t) n;
                if (c->att->bytes > px->cfg.max_bytes) {
                    c->outcome = "byte_cap";
                    s_conn_close(c);
                    return false;
                }
            }
        }
    }
    if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR)) {
        char *src = client ? c->u2c : c->c2u;
        size_t *off = client ? &c->u2c_off : &c->c2u_off;
        size_t *sn = client ? &c->u2c_n : &c->c2u_n;
        if (*sn) {
            ssize_t n = send(t->fd, src + *off, *sn, MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN && errno != EINTR) {
                c->outcome = client ? "client_gone" : "origin_gone";
                s_conn_close(c);
                return false;
            }
            if (n > 0) {
                *off += (size_t) n;
                *sn -= (size_t) n;
            }
        }
    }
    if (c->u_eof && !c->u2c_n) {
        c->outcome = c->outcome ? c->outcome : "done";
        s_conn_close(c);
        return false;
    }
    if (c->h.connect && c->c_eof && !c->c2u_n && !c->u_shut) {
        (void) shutdown(c->origin.fd, SHUT_WR);
        c->u_shut = true;
    }
    s_arm(c);
    return true;
}

/* Reads and drops what a client sends after its answer; closes at its
 * end, on an error, or past a bound. */
static void
s_linger(s_conn_t *c)
{
    ssize_t n = recv(c->client.fd, c->head, GW_PROXYHEAD_MAX, 0);
    if (n > 0)
        c->drained += (size_t) n;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) ||
        c->drained > S_BUF)
        s_conn_close(c);
}

static void
s_on_conn(s_conn_t *c, s_tag_t *t, uint32_t ev)
{
    c->last_ms = lisa_token_now_ms();
    switch (c->phase) {
    case S_HEAD:
        s_read_head(c);
        return;
    case S_RESOLVE:
        return;
    case S_CONNECTING: {
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(c->origin.fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
            err = errno;
        if (err) {
            s_arm_tag(c->px, &c->origin, 0);
            close(c->origin.fd);
            c->origin.fd = -1;
            c->ai_cur = c->ai_cur->ai_next;
            s_connect(c);
            return;
        }
        s_connected(c);
        return;
    }
    case S_RELAY:
        (void) s_relay(c, t, ev);
        return;
    case S_ANSWER: {
        if (c->lingering) {
            s_linger(c);
            return;
        }
        ssize_t n =
            send(c->client.fd, c->u2c + c->u2c_off, c->u2c_n, MSG_NOSIGNAL);
        if (n > 0) {
            c->u2c_off += (size_t) n;
            c->u2c_n -= (size_t) n;
        }
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
            s_conn_close(c);
        } else if (c->u2c_n == 0) {
            /* what the client still sends is read and dropped before the
             * close, so that the answer is not lost to a reset */
            (void) shutdown(c->client.fd, SHUT_WR);
            c->lingering = true;
            s_arm(c);
        }
        return;
    }
    }
}

static void
s_accept(gw_proxy_t *px, int lfd)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        if (px->n_conns >= px->cfg.max_conns) {
            gw_metrics_add(px->m, "lisa_gateway_proxy_requests_total",
                           "outcome=\"busy\"", 1);
            close(fd);
            continue;
        }
        s_conn_t *c = lisa_calloc(1, sizeof *c);
        c->px = px;
        c->id = ++px->next_id;
        c->client = (s_tag_t){.kind = S_TAG_CLIENT, .ptr = c, .fd = fd};
        c->origin = (s_tag_t){.kind = S_TAG_ORIGIN, .ptr = c, .fd = -1};
        c->head = lisa_malloc(GW_PROXYHEAD_MAX);
        c->t0_ms = c->last_ms = lisa_token_now_ms();
        c->next = px->conns;
        if (px->conns)
            px->conns->prev = c;
        px->conns = c;
        px->n_conns++;
        c->phase = S_HEAD;
        s_arm(c);
    }
}

/* Whether registered data is a side of connection key. */
static bool
s_same_conn(epoll_data_t d, const void *key)
{
    const s_tag_t *o = d.ptr;
    return (o->kind == S_TAG_CLIENT || o->kind == S_TAG_ORIGIN) &&
           o->ptr == key;
}

static void
s_on_event(epoll_data_t d, uint32_t events, void *arg)
{
    gw_proxy_t *px = arg;
    s_tag_t *t = d.ptr;
    if (t->kind == S_TAG_LISTEN) {
        s_accept(px, t->fd);
    } else if (t->kind == S_TAG_RESOLVER) {
        s_on_lookups(px);
    } else {
        /* one event a connection a round, as an event may close it (the
         * descriptors are level-triggered: what is left fires again) */
        s_conn_t *c = t->ptr;
        lisa_epset_skip(px->ep, s_same_conn, c);
        s_on_conn(c, t, events);
    }
}

static int
s_on_tick(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    gw_proxy_t *px = arg;
    uint64_t now = lisa_token_now_ms();
    for (s_conn_t *c = px->conns, *next; c; c = next) {
        next = c->next;
        if (now - c->last_ms >= px->cfg.idle_ms) {
            c->last_ms = now;
            c->outcome = c->outcome ? c->outcome : "idle";
            s_conn_close(c);
        }
    }
    /* counters of attempts quiet for hours go (a cap reached stays while
     * the attempt can still run) */
    zlistx_t *gone = zlistx_new();
    for (s_attempt_t *a = zhashx_first(px->attempts); a;
         a = zhashx_next(px->attempts))
        if (!a->open && now - a->last_ms > S_ATTEMPT_IDLE_MS)
            zlistx_add_end(gone,
                           (void *) (uintptr_t) zhashx_cursor(px->attempts));
    for (const char *k = zlistx_first(gone); k; k = zlistx_next(gone))
        zhashx_delete(px->attempts, k);
    zlistx_destroy(&gone);
    return 0;
}

/* ---- life cycle --------------------------------------------------------- */

static int
s_listen_unix(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof sa.sun_path) {
        lisa_log_error("proxy: unix socket path too long: %s", path);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        (void) unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* sandboxes connect as users of their own: anyone may connect, and
     * every request still needs an attempt token */
    if (bind(fd, (struct sockaddr *) &sa, sizeof sa) != 0 ||
        chmod(path, 0666) != 0 || listen(fd, SOMAXCONN) != 0 ||
        s_nonblock(fd) != 0) {
        lisa_log_error("proxy: cannot listen on unix:%s: %s", path,
                       strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int
s_listen_tcp(const char *address, uint16_t port, uint16_t *bound)
{
    char ps[8];
    snprintf(ps, sizeof ps, "%u", (unsigned) port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(address, ps, &hints, &res) != 0) {
        lisa_log_error("proxy: cannot resolve listen address %s", address);
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int one = 1;
        (void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
            listen(fd, SOMAXCONN) != 0 || s_nonblock(fd) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        lisa_log_error("proxy: cannot listen on %s:%u: %s", address,
                       (unsigned) port, strerror(errno));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *) &ss, &sl) == 0)
        *bound = ntohs(ss.ss_family == AF_INET6
                           ? ((struct sockaddr_in6 *) &ss)->sin6_port
                           : ((struct sockaddr_in *) &ss)->sin_port);
    return fd;
}

gw_proxy_t *
gw_proxy_new(const gw_proxy_cfg_t *cfg, zloop_t *loop, gw_auth_t *auth,
             gw_metrics_t *m)
{
    gw_proxy_t *px = lisa_calloc(1, sizeof *px);
    px->cfg = *cfg;
    px->allow = lisa_strdup(cfg->allow ? cfg->allow : "");
    px->unix_path = lisa_strdup(cfg->unix_path ? cfg->unix_path : "");
    px->cfg.allow = px->allow;
    px->cfg.unix_path = px->unix_path;
    px->cfg.address = NULL;
    if (!px->cfg.max_conns)
        px->cfg.max_conns = 1024;
    if (!px->cfg.idle_ms)
        px->cfg.idle_ms = 60000;
    px->loop = loop;
    px->auth = auth;
    px->m = m;
    px->tcp = (s_tag_t){.kind = S_TAG_LISTEN, .fd = -1};
    px->unx = (s_tag_t){.kind = S_TAG_LISTEN, .fd = -1};
    px->res = (s_tag_t){.kind = S_TAG_RESOLVER, .fd = -1};
    px->res_wr = -1;
    px->attempts = zhashx_new();
    zhashx_set_destructor(px->attempts, s_attempt_free);
    px->ep = lisa_epset_new(loop, s_on_event, NULL, px);
    int sp[2];
    if (!px->ep || socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp) != 0) {
        lisa_log_error("proxy: %s", strerror(errno));
        goto fail;
    }
    px->res.fd = sp[0];
    px->res_wr = sp[1];
    s_arm_tag(px, &px->res, EPOLLIN);
    if (*px->unix_path) {
        px->unx.fd = s_listen_unix(px->unix_path);
        if (px->unx.fd < 0)
            goto fail;
        s_arm_tag(px, &px->unx, EPOLLIN);
    }
    if (cfg->address && *cfg->address) {
        px->tcp.fd = s_listen_tcp(cfg->address, cfg->port, &px->port);
        if (px->tcp.fd < 0)
            goto fail;
        s_arm_tag(px, &px->tcp, EPOLLIN);
    }
    px->timer = zloop_timer(loop, S_TICK_MS, 0, s_on_tick, px);
    lisa_log_info("proxy: listening on unix:%s, port %u; allowing %s",
                  *px->unix_path ? px->unix_path : "-", (unsigned) px->port,
                  *px->allow ? px->allow : "(nothing)");
    return px;
fail:
    gw_proxy_destroy(&px);
    return NULL;
}

void
gw_proxy_destroy(gw_proxy_t **self)
{
    if (!self || !*self)
        return;
    gw_proxy_t *px = *self;
    while (px->conns) {
        px->conns->outcome = "shutdown";
        s_conn_close(px->conns);
    }
    if (px->timer > 0)
        zloop_timer_end(px->loop, px->timer);
    lisa_epset_destroy(&px->ep);
    s_tag_t *tags[3] = {&px->tcp, &px->unx, &px->res};
    for (int i = 0; i < 3; i++)
        if (tags[i]->fd >= 0)
            close(tags[i]->fd);
    if (px->unx.fd >= 0)
        (void) unlink(px->unix_path);
    /* lookups still running hold their own copy of this end: their
     * answer fails to send and they free it themselves */
    if (px->res_wr >= 0)
        close(px->res_wr);
    zhashx_destroy(&px->attempts);
    lisa_free(&px->allow);
    lisa_free(&px->unix_path);
    lisa_free(self);
}

uint16_t
gw_proxy_port(const gw_proxy_t *self)
{
    return self ? self->port : 0;
}
