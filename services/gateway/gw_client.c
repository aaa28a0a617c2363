/*
 * gw_client: HTTP/1.1 engine calls on the loop (see the header).
 *
 * A call is a small state machine over one connection:
 *
 *   state      event                  next       action
 *   CONNECT    writable, connected    WRITE      write what fits
 *   CONNECT    writable, error        -          fail UNAVAILABLE
 *   WRITE      writable               WRITE/READ write what fits
 *   WRITE/READ readable               READ/-     read, parse; done when
 *                                                complete
 *   any        deadline passed        -          fail TIMEOUT
 *   any        broken before an answer byte, on a kept connection:
 *                                     CONNECT    once, on a new connection
 *
 * Connections live in the client's epoll set from creation to close,
 * registered for reading; EPOLLOUT is added only while a connect or a
 * write is pending. An idle kept connection that becomes readable was
 * closed by the engine (or sent junk): it is closed. A connection goes
 * back to its address's idle list only after the done callback returned,
 * because the body handed to the callback lives in its buffer.
 */
#include "gw_client.h"

#include "lisa/lisa_epset.h"
#include "lisa/lisa_list.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define S_SWEEP_MS       50
#define S_DEFAULT_MS     10000L
#define S_MAX_IDLE       256u  /* idle connections kept, all addresses */
#define S_MAX_ADDRS      4096u /* addresses remembered */
#define S_BUF_START      16384u
#define S_BUF_KEEP       (1u << 20) /* a larger buffer is freed when idle */
#define S_MAX_HEX_DIGITS 15

/* ---- the answer parser -------------------------------------------------- */

/* Case-insensitive compare of a header name of `n` bytes with `want`. */
static bool
s_name_is(const char *name, size_t n, const char *want)
{
    return strlen(want) == n && strncasecmp(name, want, n) == 0;
}

/* True when the comma-separated token list v[0, n) holds `tok`. */
static bool
s_has_token(const char *v, size_t n, const char *tok)
{
    size_t tl = strlen(tok), i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t b = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > b && (v[e - 1] == ' ' || v[e - 1] == '\t'))
            e--;
        if (e - b == tl && strncasecmp(v + b, tok, tl) == 0)
            return true;
    }
    return false;
}

/* The last token of a comma-separated list is `tok`. */
static bool
s_last_token_is(const char *v, size_t n, const char *tok)
{
    size_t e = n;
    while (e > 0 && (v[e - 1] == ' ' || v[e - 1] == '\t'))
        e--;
    size_t b = e;
    while (b > 0 && v[b - 1] != ',')
        b--;
    while (b < e && (v[b] == ' ' || v[b] == '\t'))
        b++;
    size_t tl = strlen(tok);
    return e - b == tl && strncasecmp(v + b, tok, tl) == 0;
}

/* Parses the head buf[p->start, end) (end: after "\r\n\r\n"). Returns 0
 * or -1 when malformed. */
static int
s_parse_head(gw_client_parse_t *p, const char *buf, size_t end)
{
    const char *s = buf + p->start, *e = buf + end;
    /* status line: HTTP/1.x SP 3DIGIT [SP reason] CRLF */
    if (e - s < 14 || memcmp(s, "HTTP/1.", 7) != 0 ||
        (s[7] != '0' && s[7] != '1') || s[8] != ' ')
        return -1;
    bool http10 = s[7] == '0';
    int st = 0;
    for (int i = 9; i < 12; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        st = st * 10 + (s[i] - '0');
    }
    if (st < 100 || (s[12] != ' ' && s[12] != '\r'))
        return -1;
    const char *line = memchr(s, '\n', (size_t) (e - s));
    if (!line || line[-1] != '\r')
        return -1;
    line++;
    p->status = st;
    p->clen = -1;
    p->chunked = false;
    bool keep_alive = false, conn_close = false, te = false;
    while (line < e) {
        const char *nl = memchr(line, '\n', (size_t) (e - line));
        if (!nl || nl == line || nl[-1] != '\r')
            return -1;
        size_t n = (size_t) (nl - 1 - line);
        if (n == 0)
            break; /* the blank line */
        if (line[0] == ' ' || line[0] == '\t')
            return -1; /* obsolete line folding */
        const char *colon = memchr(line, ':', n);
        if (!colon || colon == line)
            return -1;
        size_t nn = (size_t) (colon - line);
        for (size_t i = 0; i < nn; i++)
            if (line[i] <= ' ' || line[i] >= 127)
                return -1;
        const char *v = colon + 1, *ve = line + n;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        size_t vn = (size_t) (ve - v);
        if (s_name_is(line, nn, "content-length")) {
            if (vn == 0 || vn > 18)
                return -1;
            long long c = 0;
            for (size_t i = 0; i < vn; i++) {
                if (v[i] < '0' || v[i] > '9')
                    return -1;
                c = c * 10 + (v[i] - '0');
            }
            if (p->clen >= 0 && p->clen != c)
                return -1;
            p->clen = c;
        } else if (s_name_is(line, nn, "transfer-encoding")) {
            if (te || !s_last_token_is(v, vn, "chunked"))
                return -1; /* a coding we cannot undo */
            te = true;
            p->chunked = true;
        } else if (s_name_is(line, nn, "connection")) {
            conn_close |= s_has_token(v, vn, "close");
            keep_alive |= s_has_token(v, vn, "keep-alive");
        }
        line = nl + 1;
    }
    if (p->chunked && p->clen >= 0) {
        p->clen = -1; /* chunked wins; do not trust the connection after */
        conn_close = true;
    }
    p->close = conn_close || (http10 && !keep_alive);
    p->head = end;
    p->in = p->out = end;
    p->left = 0;
    p->cstate = 0;
    return 0;
}

/* Decodes chunked data from p->in on, in place. 1 done, 0 more, -1 bad,
 * -2 too large. */
static int
s_chunked(gw_client_parse_t *p, char *buf, size_t len, size_t max_body)
{
    for (;;) {
        if (p->cstate == 1) {
            size_t avail = len - p->in;
            size_t take = p->left < avail ? (size_t) p->left : avail;
            if (take && p->out != p->in)
                memmove(buf + p->out, buf + p->in, take);
            p->out += take;
            p->in += take;
            p->left -= take;
            if (p->left)
                return 0;
            p->cstate = 2;
        }
        if (p->cstate == 2) {
            if (len - p->in < 2)
                return 0;
            if (buf[p->in] != '\r' || buf[p->in + 1] != '\n')
                return -1;
            p->in += 2;
            p->cstate = 0;
        }
        const char *s = buf + p->in;
        const char *nl = memchr(s, '\n', len - p->in);
        if (!nl) /* a size or trailer line longer than any sane one */
            return len - p->in > 4096 ? -1 : 0;
        if (nl == s || nl[-1] != '\r' || nl - s > 4096)
            return -1;
        size_t n = (size_t) (nl - 1 - s);
        p->in = (size_t) (nl + 1 - buf);
        if (p->cstate == 3) {
            if (n == 0)
                return 1; /* the blank line after the trailers */
            continue;     /* a trailer field: ignored */
        }
        unsigned long long sz = 0;
        size_t i = 0;
        for (; i < n; i++) {
            char c = s[i];
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0)
                break;
            if (i >= S_MAX_HEX_DIGITS)
                return -1;
            sz = sz * 16 + (unsigned) d;
        }
        if (i == 0 || (i < n && s[i] != ';' && s[i] != ' ' && s[i] != '\t'))
            return -1;
        if (sz == 0) {
            p->cstate = 3;
            continue;
        }
        if (sz > max_body || p->out - p->head + sz > max_body)
            return -2;
        p->left = sz;
        p->cstate = 1;
    }
}

int
gw_client_parse(gw_client_parse_t *p, char *buf, size_t len, bool eof,
                size_t max_body, size_t *off, size_t *blen)
{
    for (;;) {
        if (!p->head) {
            size_t from = p->start;
            const char *hit = NULL;
            for (const char *q = buf + from;
                 (q = memchr(q, '\r', len - (size_t) (q - buf)));) {
                if ((size_t) (buf + len - q) >= 4 &&
                    memcmp(q, "\r\n\r\n", 4) == 0) {
                    hit = q;
                    break;
                }
                q++;
                if ((size_t) (q - buf) >= len)
                    break;
            }
            if (!hit) {
                if (len - p->start > GW_CLIENT_MAX_HEAD)
                    return -2;
                return eof ? -1 : 0;
            }
            size_t end = (size_t) (hit - buf) + 4;
            if (end - p->start > GW_CLIENT_MAX_HEAD)
                return -2;
            if (s_parse_head(p, buf, end) != 0)
                return -1;
            if (p->status < 200) {
                if (p->status == 101)
                    return -1;  /* no protocol switch was asked for */
                p->start = end; /* an interim answer: the real one follows */
                p->head = 0;
                continue;
            }
        }
        *off = p->head;
        if (p->status == 204 || p->status == 304) {
            *blen = 0;
            if (len > p->head)
                p->close = true;
            return 1;
        }
        if (p->chunked) {
            int r = s_chunked(p, buf, len, max_body);
            if (r == 0 && eof)
                return -1;
            if (r == 1) {
                *blen = p->out - p->head;
                if (p->in < len)
                    p->close = true; /* bytes nobody asked for */
            }
            return r;
        }
        if (p->clen >= 0) {
            if ((unsigned long long) p->clen > max_body)
                return -2;
            if (len - p->head < (size_t) p->clen)
                return eof ? -1 : 0;
            *blen = (size_t) p->clen;
            if (len - p->head > (size_t) p->clen)
                p->close = true;
            return 1;
        }
        /* delimited by the end of the connection */
        p->close = true;
        if (len - p->head > max_body)
            return -2;
        if (!eof)
            return 0;
        *blen = len - p->head;
        return 1;
    }
}

/* ---- addresses, connections, calls -------------------------------------- */

typedef struct s_conn s_conn_t;
typedef struct s_call s_call_t;

/* One engine address and its idle connections. */
typedef struct {
    char key[GW_CLIENT_MAX_URL]; /* "host:port" as written in the URL */
    struct sockaddr_storage sa;
    socklen_t sa_len;
    s_conn_t *idle; /* most recently used first */
    size_t n_idle;
    size_t n_busy;
} s_addr_t;

struct s_conn {
    int fd;
    s_addr_t *addr;
    s_call_t *call; /* NULL when idle */
    char *buf;
    size_t len, cap;
    uint32_t events;       /* registered epoll events */
    bool reused;           /* carried an earlier request */
    bool dead;             /* closed, waiting to be freed */
    s_conn_t *prev, *next; /* the address's idle list, or the dead list */
};

enum { S_CONNECT = 1, S_WRITE, S_READ };

struct s_call {
    gw_client_t *client;
    uint64_t id;
    s_conn_t *conn;
    s_addr_t *addr;
    int state;
    struct iovec part[1 + GW_CLIENT_MAX_PARTS]; /* the head, then the body */
    size_t n_part;
    size_t total; /* bytes of head + body */
    size_t sent;  /* bytes of them written */
    int64_t deadline_ms, connect_ms, connect_deadline_ms;
    gw_client_parse_t parse;
    bool retried;
    bool expired; /* marked by the sweep */
    gw_client_done_fn *done;
    void *arg;
    s_call_t *prev, *next;              /* in flight */
    char head[GW_CLIENT_MAX_URL + 256]; /* last: not zeroed on creation */
};

struct gw_client_t {
    zloop_t *loop;
    lisa_epset_t *conns; /* every open connection, polled by the loop */
    int timer;
    size_t max_body;
    s_addr_t **addrs;
    size_t n_addrs;
    s_call_t *calls;
    size_t n_calls;
    size_t n_idle;
    s_conn_t *dead; /* closed connections, freed after the epoll batch */
    uint64_t next_id;
};

static int64_t
s_now_ms(void)
{
    return zclock_mono();
}

/* Splits an http URL into its authority "host[:port]" (copied to key),
 * the socket address and the path (the rest, "/" when empty). */
static bool
s_parse_url(const char *url, char *key, size_t keylen,
            struct sockaddr_storage *sa, socklen_t *sa_len, const char **path)
{
    if (!url || strncasecmp(url, "http://", 7) != 0 ||
        strlen(url) >= GW_CLIENT_MAX_URL)
        return false;
    const char *a = url + 7, *slash = strchr(a, '/');
    size_t an = slash ? (size_t) (slash - a) : strlen(a);
    if (an == 0 || an >= keylen || memchr(a, '@', an) || memchr(a, '?', an) ||
        memchr(a, '#', an))
        return false;
    memcpy(key, a, an);
    key[an] = '\0';
    *path = slash ? slash : "/";
    for (const char *q = *path; *q; q++)
        if ((unsigned char) *q <= ' ' || *q == 127)
            return false;
    char host[64];
    const char *port = NULL;
    if (key[0] == '[') {
        const char *rb = strchr(key, ']');
        if (!rb || (size_t) (rb - key - 1) >= sizeof host)
            return false;
        memcpy(host, key + 1, (size_t) (rb - key - 1));
        host[rb - key - 1] = '\0';
        if (rb[1] == ':')
            port = rb + 2;
        else if (rb[1])
            return false;
    } else {
        const char *colon = strchr(key, ':');
        size_t hn = colon ? (size_t) (colon - key) : an;
        if (hn == 0 || hn >= sizeof host)
            return false;
        memcpy(host, key, hn);
        host[hn] = '\0';
        if (colon)
            port = colon + 1;
    }
    long pn = 80;
    if (port) {
        if (!*port || strlen(port) > 5)
            return false;
        pn = 0;
        for (const char *q = port; *q; q++) {
            if (*q < '0' || *q > '9')
                return false;
            pn = pn * 10 + (*q - '0');
        }
        if (pn < 1 || pn > 65535)
            return false;
    }
    memset(sa, 0, sizeof *sa);
    struct sockaddr_in *v4 = (struct sockaddr_in *) (void *) sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *) (void *) sa;
    if (key[0] == '[') {
        if (inet_pton(AF_INET6, host, &v6->sin6_addr) != 1)
            return false;
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t) pn);
        *sa_len = sizeof *v6;
        return true;
    }
    if (strcasecmp(host, "localhost") == 0)
        snprintf(host, sizeof host, "127.0.0.1");
    if (inet_pton(AF_INET, host, &v4->sin_addr) != 1)
        return false;
    v4->sin_family = AF_INET;
    v4->sin_port = htons((uint16_t) pn);
    *sa_len = sizeof *v4;
    return true;
}

bool
gw_client_url_ok(const char *url)
{
    char key[GW_CLIENT_MAX_URL];
    struct sockaddr_storage sa;
    socklen_t sl;
    const char *path;
    return s_parse_url(url, key, sizeof key, &sa, &sl, &path);
}

static s_addr_t *
s_addr_get(gw_client_t *self, const char *key,
           const struct sockaddr_storage *sa, socklen_t sl)
{
    for (size_t i = 0; i < self->n_addrs; i++)
        if (strcmp(self->addrs[i]->key, key) == 0)
            return self->addrs[i];
    if (self->n_addrs == S_MAX_ADDRS) {
        /* forget an address nothing uses (engines come and go) */
        for (size_t i = 0; i < self->n_addrs; i++) {
            s_addr_t *a = self->addrs[i];
            if (!a->n_idle && !a->n_busy) {
                lisa_free(&a);
                self->addrs[i] = self->addrs[--self->n_addrs];
                break;
            }
        }
        if (self->n_addrs == S_MAX_ADDRS)
            return NULL;
    }
    if (self->n_addrs % 16 == 0)
        self->addrs = lisa_realloc(self->addrs,
                                   (self->n_addrs + 16) * sizeof *self->addrs);
    s_addr_t *a = lisa_calloc(1, sizeof *a);
    snprintf(a->key, sizeof a->key, "%s", key);
    a->sa = *sa;
    a->sa_len = sl;
    self->addrs[self->n_addrs++] = a;
    return a;
}

static void
s_idle_unlink(gw_client_t *self, s_conn_t *c)
{
    LISA_LIST_UNLINK(c->addr->idle, c);
    c->addr->n_idle--;
    self->n_idle--;
}

/* Closes a connection. Its struct is freed later (s_bury), outside the
 * epoll batch, so a later event of the same batch that names it finds it
 * marked dead instead of freed. */
static void
s_conn_close(gw_client_t *self, s_conn_t *c)
{
    lisa_epset_del(self->conns, c->fd);
    close(c->fd);
    c->fd = -1;
    c->dead = true;
    lisa_free(&c->buf);
    c->next = self->dead;
    self->dead = c;
}

static void
s_bury(gw_client_t *self)
{
    while (self->dead) {
        s_conn_t *c = self->dead;
        self->dead = c->next;
        lisa_free(&c);
    }
}

static bool
s_conn_events(gw_client_t *self, s_conn_t *c, uint32_t ev)
{
    if (c->events == ev)
        return true;
    if (lisa_epset_mod(self->conns, c->fd, ev, (epoll_data_t){.ptr = c}) !=
        LISA_OK)
        return false;
    c->events = ev;
    return true;
}

/* A new non-blocking connection to `a`; *now is true when it connected at
 * once. NULL (errno set) when the socket or its connect failed. */
static s_conn_t *
s_conn_new(gw_client_t *self, s_addr_t *a, bool *now)
{
    int fd =
        socket(a->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    int one = 1;
    (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int r = connect(fd, (const struct sockaddr *) &a->sa, a->sa_len);
    if (r != 0 && errno != EINPROGRESS) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    *now = r == 0;
    s_conn_t *c = lisa_calloc(1, sizeof *c);
    c->fd = fd;
    c->addr = a;
    c->events = EPOLLIN | (r == 0 ? 0u : (uint32_t) EPOLLOUT);
    if (lisa_epset_add(self->conns, fd, c->events, (epoll_data_t){.ptr = c}) !=
        LISA_OK) {
        int err = errno;
        close(fd);
        lisa_free(&c);
        errno = err;
        return NULL;
    }
    return c;
}

static void
s_call_unlink(gw_client_t *self, s_call_t *call)
{
    LISA_LIST_UNLINK(self->calls, call);
    self->n_calls--;
}

/* Detaches the call's connection: back to the idle list when `keep`,
 * else closed. */
static void
s_release(gw_client_t *self, s_call_t *call, bool keep)
{
    s_conn_t *c = call->conn;
    call->conn = NULL;
    if (!c)
        return;
    c->call = NULL;
    c->addr->n_busy--;
    if (!keep || self->n_idle >= S_MAX_IDLE ||
        !s_conn_events(self, c, EPOLLIN)) {
        s_conn_close(self, c);
        return;
    }
    c->len = 0;
    c->reused = true;
    if (c->cap > S_BUF_KEEP) {
        lisa_free(&c->buf);
        c->cap = 0;
    }
    LISA_LIST_PUSH(c->addr->idle, c);
    c->addr->n_idle++;
    self->n_idle++;
}

/* Ends a call: unlinks it, runs its callback, then releases its
 * connection (the body lives in the connection's buffer until then). */
static void
s_finish(gw_client_t *self, s_call_t *call, lisa_rc_t rc, const char *error,
         size_t off, size_t blen)
{
    s_call_unlink(self, call);
    gw_client_resp_t r = {.rc = rc,
                          .status = call->parse.head ? call->parse.status : 0,
                          .body = "",
                          .body_len = 0,
                          .error = error ? error : ""};
    bool keep = false;
    if (rc == LISA_OK) {
        if (blen) {
            call->conn->buf[off + blen] = '\0';
            r.body = call->conn->buf + off;
            r.body_len = blen;
        }
        keep = !call->parse.close;
    }
    call->done(&r, call->arg);
    s_release(self, call, keep);
    lisa_free(&call);
}

static void s_start(gw_client_t *self, s_call_t *call);
static void s_step(gw_client_t *self, s_call_t *call, uint32_t ev);

/* The connection broke. A request sent on a kept connection that got no
 * answer byte goes once more on a new connection; else the call fails. */
static void
s_broken(gw_client_t *self, s_call_t *call, const char *why)
{
    s_conn_t *c = call->conn;
    if (c && c->reused && c->len == 0 && !call->retried) {
        s_release(self, call, false);
        call->retried = true;
        call->sent = 0;
        memset(&call->parse, 0, sizeof call->parse);
        s_start(self, call);
        return;
    }
    s_finish(self, call, LISA_ERR, why, 0, 0);
}

/* Writes what the socket takes; moves to S_READ when all is out. */
static void
s_write(gw_client_t *self, s_call_t *call)
{
    s_conn_t *c = call->conn;
    while (call->sent < call->total) {
        struct iovec iov[1 + GW_CLIENT_MAX_PARTS];
        size_t n = 0, skip = call->sent;
        for (size_t i = 0; i < call->n_part; i++) {
            size_t l = call->part[i].iov_len;
            if (skip >= l) {
                skip -= l;
                continue;
            }
            iov[n].iov_base = (char *) call->part[i].iov_base + skip;
            iov[n++].iov_len = l - skip;
            skip = 0;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (!s_conn_events(self, c, EPOLLIN | EPOLLOUT))
                    s_finish(self, call, LISA_ERR, "epoll", 0, 0);
                return;
            }
            s_broken(self, call, strerror(errno));
            return;
        }
        call->sent += (size_t) w;
    }
    call->state = S_READ;
    if (!s_conn_events(self, c, EPOLLIN))
        s_finish(self, call, LISA_ERR, "epoll", 0, 0);
}

/* Reads what arrived and parses it; finishes the call when complete. */
static void
s_read(gw_client_t *self, s_call_t *call)
{
    s_conn_t *c = call->conn;
    for (;;) {
        if (c->cap - c->len < 4096) {
            size_t limit = self->max_body + GW_CLIENT_MAX_HEAD + 65536;
            size_t cap = c->cap ? c->cap * 2 : S_BUF_START;
            if (cap > limit)
                cap = limit;
            if (cap <= c->len + 1) {
                s_finish(self, call, LISA_TOOLARGE,
                         "response exceeds its size limit", 0, 0);
                return;
            }
            c->buf = lisa_realloc(c->buf, cap);
            c->cap = cap;
        }
        ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len - 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (r < 0 || (r == 0 && c->len == 0)) {
            s_broken(self, call, r < 0 ? strerror(errno) : "connection closed");
            return;
        }
        bool eof = r == 0;
        c->len += (size_t) r;
        size_t off = 0, blen = 0;
        int p = gw_client_parse(&call->parse, c->buf, c->len, eof,
                                self->max_body, &off, &blen);
        if (p == 1) {
            s_finish(self, call, LISA_OK, NULL, off, blen);
            return;
        }
        if (p == -2) {
            s_finish(self, call, LISA_TOOLARGE,
                     "response exceeds its size limit", 0, 0);
            return;
        }
        if (p < 0) {
            s_finish(self, call, LISA_ERR,
                     eof ? "connection closed before the answer ended"
                         : "malformed answer",
                     0, 0);
            return;
        }
        if (eof)
            return; /* not reached: parse answers at eof */
    }
}

static void
s_step(gw_client_t *self, s_call_t *call, uint32_t ev)
{
    if (call->state == S_CONNECT) {
        if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        int err = 0;
        socklen_t el = sizeof err;
        if (getsockopt(call->conn->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
            err = errno;
        if (err) {
            char why[128];
            snprintf(why, sizeof why, "could not connect: %s", strerror(err));
            s_finish(self, call, LISA_UNAVAILABLE, why, 0, 0);
            return;
        }
        call->state = S_WRITE;
        s_write(self, call);
        return;
    }
    if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        s_read(self, call);
        return; /* the call may be gone */
    }
    if (call->state == S_WRITE && (ev & EPOLLOUT))
        s_write(self, call);
}

/* Puts the call on a kept connection of its address, or a new one. */
static void
s_start(gw_client_t *self, s_call_t *call)
{
    s_addr_t *a = call->addr;
    s_conn_t *c = a->idle;
    bool now = true;
    if (c && !call->retried)
        s_idle_unlink(self, c);
    else {
        c = s_conn_new(self, a, &now);
        if (!c) {
            char why[128];
            snprintf(why, sizeof why, "could not connect: %s", strerror(errno));
            s_finish(self, call, LISA_UNAVAILABLE, why, 0, 0);
            return;
        }
        call->connect_deadline_ms = s_now_ms() + call->connect_ms;
    }
    c->call = call;
    a->n_busy++;
    call->conn = c;
    if (!now) {
        call->state = S_CONNECT;
        return;
    }
    call->state = S_WRITE;
    s_write(self, call);
}

/* ---- the loop's side ---------------------------------------------------- */

static void
s_on_conn(epoll_data_t data, uint32_t events, void *arg)
{
    gw_client_t *self = arg;
    s_conn_t *c = data.ptr;
    if (c->dead)
        return; /* closed by an earlier event of this batch */
    if (c->call)
        s_step(self, c->call, events);
    else {
        /* idle: the engine closed it (or sent bytes nobody asked for);
         * either way it cannot carry another request */
        s_idle_unlink(self, c);
        s_conn_close(self, c);
    }
}

static void
s_on_batch(void *arg)
{
    s_bury(arg);
}

static int
s_on_sweep(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    gw_client_t *self = arg;
    int64_t now = s_now_ms();
    bool any = false;
    for (s_call_t *c = self->calls; c; c = c->next) {
        c->expired = now >= c->deadline_ms ||
                     (c->state == S_CONNECT && now >= c->connect_deadline_ms);
        any |= c->expired;
    }
    while (any) {
        any = false;
        for (s_call_t *c = self->calls; c; c = c->next)
            if (c->expired) {
                c->expired = false;
                any = true;
                s_finish(self, c, LISA_TIMEOUT,
                         c->state == S_CONNECT ? "connect timed out"
                                               : "timed out",
                         0, 0);
                break;
            }
    }
    s_bury(self);
    return 0;
}

gw_client_t *
gw_client_new(zloop_t *loop, size_t max_body)
{
    if (!loop || max_body == 0)
        return NULL;
    gw_client_t *self = lisa_calloc(1, sizeof *self);
    self->loop = loop;
    self->max_body = max_body;
    self->timer = -1;
    self->conns = lisa_epset_new(loop, s_on_conn, s_on_batch, self);
    if (!self->conns)
        goto fail;
    self->timer = zloop_timer(loop, S_SWEEP_MS, 0, s_on_sweep, self);
    if (self->timer < 0)
        goto fail;
    return self;
fail:
    gw_client_destroy(&self);
    return NULL;
}

void
gw_client_destroy(gw_client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    gw_client_t *self = *self_p;
    *self_p = NULL;
    while (self->calls) {
        s_call_t *call = self->calls;
        s_call_unlink(self, call);
        s_release(self, call, false);
        lisa_free(&call);
    }
    for (size_t i = 0; i < self->n_addrs; i++) {
        s_addr_t *a = self->addrs[i];
        while (a->idle) {
            s_conn_t *c = a->idle;
            s_idle_unlink(self, c);
            s_conn_close(self, c);
        }
        lisa_free(&a);
    }
    lisa_free(&self->addrs);
    s_bury(self);
    if (self->timer >= 0)
        zloop_timer_end(self->loop, self->timer);
    lisa_epset_destroy(&self->conns);
    lisa_free(&self);
}

lisa_rc_t
gw_client_post(gw_client_t *self, const char *url, const void *body, size_t len,
               long timeout_ms, long connect_ms, gw_client_done_fn *done,
               void *arg, uint64_t *id)
{
    if (!body && len)
        return LISA_INVALID;
    struct iovec part = {.iov_base = (void *) (uintptr_t) body, .iov_len = len};
    return gw_client_postv(self, url, &part, len ? 1 : 0, timeout_ms,
                           connect_ms, done, arg, id);
}

lisa_rc_t
gw_client_postv(gw_client_t *self, const char *url, const struct iovec *parts,
                size_t n, long timeout_ms, long connect_ms,
                gw_client_done_fn *done, void *arg, uint64_t *id)
{
    if (!self || !done || n > GW_CLIENT_MAX_PARTS || (n && !parts))
        return LISA_INVALID;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (!parts[i].iov_base && parts[i].iov_len)
            return LISA_INVALID;
        len += parts[i].iov_len;
    }
    char key[GW_CLIENT_MAX_URL];
    struct sockaddr_storage sa;
    socklen_t sl;
    const char *path;
    if (!s_parse_url(url, key, sizeof key, &sa, &sl, &path))
        return LISA_INVALID;
    s_addr_t *a = s_addr_get(self, key, &sa, sl);
    if (!a)
        return LISA_ERR;
    s_call_t *call = lisa_malloc(sizeof *call);
    memset(call, 0, offsetof(s_call_t, head));
    int hn = snprintf(call->head, sizeof call->head,
                      "POST %s HTTP/1.1\r\nHost: %s\r\n"
                      "Content-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      path, key, len);
    if (hn < 0 || (size_t) hn >= sizeof call->head) {
        lisa_free(&call);
        return LISA_INVALID;
    }
    call->client = self;
    call->id = ++self->next_id;
    call->addr = a;
    call->part[0].iov_base = call->head;
    call->part[0].iov_len = (size_t) hn;
    call->n_part = 1;
    for (size_t i = 0; i < n; i++)
        if (parts[i].iov_len)
            call->part[call->n_part++] = parts[i];
    call->total = (size_t) hn + len;
    call->done = done;
    call->arg = arg;
    int64_t now = s_now_ms();
    call->deadline_ms = now + (timeout_ms > 0 ? timeout_ms : S_DEFAULT_MS);
    call->connect_ms = connect_ms > 0 ? connect_ms : S_DEFAULT_MS;
    LISA_LIST_PUSH(self->calls, call);
    self->n_calls++;
    if (id)
        *id = call->id;
    s_start(self, call); /* may finish (and free) the call at once */
    return LISA_OK;
}

lisa_rc_t
gw_client_cancel(gw_client_t *self, uint64_t id)
{
    for (s_call_t *call = self ? self->calls : NULL; call; call = call->next)
        if (call->id == id) {
            s_call_unlink(self, call);
            s_release(self, call, false);
            lisa_free(&call);
            return LISA_OK;
        }
    return LISA_NOTFOUND;
}

size_t
gw_client_pending(const gw_client_t *self)
{
    return self ? self->n_calls : 0;
}

size_t
gw_client_idle(const gw_client_t *self)
{
    return self ? self->n_idle : 0;
}
