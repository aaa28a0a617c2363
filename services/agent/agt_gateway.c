/*
 * agt_gateway: HTTP/1.1 over a unix socket or TCP written out here (a
 * request, a bounded answer by Content-Length, chunks or close, one
 * kept-alive connection), JSON in and out. https:// goes through libcurl,
 * loaded only then: the agent starts once per sandbox, and loading
 * libcurl with its thirty-odd libraries cost more than the rest of a
 * short attempt.
 */
#define _DEFAULT_SOURCE /* getaddrinfo, struct sockaddr_un */
#include "agt_gateway.h"

#include "agt_text.h"
#include "lisa/lisa_clock.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define S_MAX_HEAD 65536 /* bytes of status line and headers */

struct agt_gateway {
    bool tls;     /* https: libcurl */
    char *base;   /* the URL as given, without trailing slashes */
    char *host;   /* TCP host ("" with a socket) */
    char *port;   /* TCP port */
    char *prefix; /* path of the base URL ("" when none) */
    char *socket;
    char *token;
    size_t max_reply;
    int fd; /* kept-alive connection; -1 when none */
};

agt_gateway_t *
agt_gateway_new(const agt_gateway_cfg_t *cfg)
{
    if (!cfg || !cfg->token || !cfg->max_reply_bytes)
        return NULL;
    bool sock = cfg->unix_socket && *cfg->unix_socket;
    if (!sock && (!cfg->base_url || !*cfg->base_url))
        return NULL;
    const char *base =
        cfg->base_url && *cfg->base_url ? cfg->base_url : "http://localhost";
    bool tls = strncmp(base, "https://", 8) == 0;
    if (!tls && strncmp(base, "http://", 7) != 0)
        return NULL;
    agt_gateway_t *gw = lisa_calloc(1, sizeof *gw);
    gw->fd = -1;
    gw->tls = tls && !sock;
    gw->base = lisa_strdup(base);
    size_t bl = strlen(gw->base);
    while (bl > 0 && gw->base[bl - 1] == '/')
        gw->base[--bl] = '\0';
    /* authority and path prefix of the base URL */
    const char *auth = gw->base + (tls ? 8 : 7);
    size_t al = strcspn(auth, "/");
    gw->prefix = lisa_strdup(auth + al);
    const char *colon = NULL;
    if (auth[0] == '[') { /* [v6]:port */
        const char *rb = memchr(auth, ']', al);
        gw->host = lisa_strndup(auth + 1, rb ? (size_t) (rb - auth - 1) : 0);
        colon = rb && rb + 1 < auth + al && rb[1] == ':' ? rb + 1 : NULL;
    } else {
        colon = memchr(auth, ':', al);
        gw->host = lisa_strndup(auth, colon ? (size_t) (colon - auth) : al);
    }
    gw->port = colon ? lisa_strndup(colon + 1, (size_t) (auth + al - colon - 1))
                     : lisa_strdup(tls ? "443" : "80");
    gw->socket = sock ? lisa_strdup(cfg->unix_socket) : NULL;
    gw->token = lisa_strdup(cfg->token);
    gw->max_reply = cfg->max_reply_bytes;
    if (!sock && !*gw->host) {
        agt_gateway_destroy(&gw);
        return NULL;
    }
    return gw;
}

void
agt_gateway_destroy(agt_gateway_t **gw)
{
    if (!gw || !*gw)
        return;
    if ((*gw)->fd >= 0)
        close((*gw)->fd);
    lisa_free(&(*gw)->base);
    lisa_free(&(*gw)->host);
    lisa_free(&(*gw)->port);
    lisa_free(&(*gw)->prefix);
    lisa_free(&(*gw)->socket);
    if ((*gw)->token) {
        memset((*gw)->token, 0, strlen((*gw)->token));
        lisa_free(&(*gw)->token);
    }
    lisa_free(gw);
}

void
agt_reply_clear(agt_reply_t *rep)
{
    if (!rep)
        return;
    json_decref(rep->body);
    rep->body = NULL;
}

/* Status code -> return code. */
static lisa_rc_t
s_rc_of_status(long st)
{
    static const struct {
        long lo, hi;
        lisa_rc_t rc;
    } map[] = {
        {200, 299, LISA_OK},           {401, 401, LISA_UNAUTHORIZED},
        {403, 403, LISA_UNAUTHORIZED}, {404, 404, LISA_NOTFOUND},
        {408, 408, LISA_UNAVAILABLE},  {409, 410, LISA_CONFLICT},
        {413, 413, LISA_TOOLARGE},     {429, 429, LISA_UNAVAILABLE},
        {400, 499, LISA_INVALID},      {500, 599, LISA_UNAVAILABLE},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (st >= map[i].lo && st <= map[i].hi)
            return map[i].rc;
    return LISA_UNAVAILABLE;
}

/* ---- plain HTTP/1.1 -------------------------------------------------- */

static int
s_left(long deadline)
{
    long left = deadline - lisa_clock_mono_ms();
    return left > 0 ? (int) left : 0;
}

/* Waits for `ev` on fd until the deadline: 1 ready, 0 timed out, -1 error. */
static int
s_wait(int fd, short ev, long deadline)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = ev};
        int r = poll(&p, 1, s_left(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        return r;
    }
}

/* Non-blocking connect to one address, finished before the deadline. A
 * local socket whose listen queue is full refuses a non-blocking connect
 * with EAGAIN and starts nothing (a flood from another process can fill
 * it): the connect is tried again, a little later each time, until the
 * deadline. */
static int
s_connect_to(const struct sockaddr *sa, socklen_t len, int family,
             long deadline, char *err, size_t errlen)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    int rc, pause_ms = 1;
    while ((rc = connect(fd, sa, len)) != 0 && family == AF_UNIX &&
           errno == EAGAIN && s_left(deadline) > 0) {
        int left = s_left(deadline);
        (void) poll(NULL, 0, pause_ms < left ? pause_ms : left);
        pause_ms = pause_ms < 64 ? 2 * pause_ms : 64;
    }
    if (rc == 0)
        return fd;
    if (family == AF_UNIX && errno == EAGAIN) {
        snprintf(err, errlen,
                 "cannot connect to the gateway: its socket's queue stayed "
                 "full");
        close(fd);
        return -2;
    }
    if (errno != EINPROGRESS) {
        snprintf(err, errlen, "cannot connect to the gateway: %s",
                 strerror(errno));
        close(fd);
        return -1;
    }
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    int r = s_wait(fd, POLLOUT, deadline);
    if (r <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 ||
        soerr != 0) {
        snprintf(err, errlen, "cannot connect to the gateway: %s",
                 r == 0 ? "timed out" : strerror(soerr ? soerr : errno));
        close(fd);
        return r == 0 ? -2 : -1;
    }
    return fd;
}

/* A new connection: -1 failed, -2 timed out. */
static int
s_connect(agt_gateway_t *gw, long deadline, char *err, size_t errlen)
{
    if (gw->socket) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(gw->socket) >= sizeof sa.sun_path) {
            snprintf(err, errlen, "socket path too long");
            return -1;
        }
        memcpy(sa.sun_path, gw->socket, strlen(gw->socket) + 1);
        return s_connect_to((struct sockaddr *) &sa, sizeof sa, AF_UNIX,
                            deadline, err, errlen);
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(gw->host, gw->port, &hints, &ai);
    if (g != 0) {
        snprintf(err, errlen, "cannot resolve %s: %s", gw->host,
                 gai_strerror(g));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = s_connect_to(a->ai_addr, a->ai_addrlen, a->ai_family, deadline,
                          err, errlen);
        if (fd == -2)
            break;
    }
    freeaddrinfo(ai);
    return fd;
}

static bool
s_send_all(int fd, const char *p, size_t n, long deadline)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t) w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
            s_wait(fd, POLLOUT, deadline) > 0)
            continue;
        return false;
    }
    return true;
}

/* An answer being read: the raw bytes, then the body decoded. */
typedef struct {
    char *raw;
    size_t len, cap, max;
    size_t head; /* bytes of the head, with the blank line; 0 until seen */
    long status;
    long long clen; /* Content-Length, -1 when none */
    bool chunked, close;
    size_t ci;    /* chunked: where the next chunk's size line starts */
    bool trailer; /* chunked: the last chunk is in, trailers follow */
} s_ans_t;

static void
s_ans_free(s_ans_t *a)
{
    lisa_free(&a->raw);
}

/* Reads more bytes: 1 got some, 0 end of stream, -1 error, -2 timeout,
 * -3 over the bound. */
static int
s_read_more(int fd, s_ans_t *a, long deadline)
{
    if (a->len >= a->max)
        return -3;
    if (a->cap - a->len < 4096 + 1) {
        size_t cap = a->cap ? a->cap * 2 : 16384;
        while (cap - a->len < 4096 + 1)
            cap *= 2;
        a->raw = lisa_realloc(a->raw, cap);
        a->cap = cap;
    }
    for (;;) {
        ssize_t r = recv(fd, a->raw + a->len, a->cap - a->len - 1, 0);
        if (r > 0) {
            a->len += (size_t) r;
            a->raw[a->len] = '\0';
            return 1;
        }
        if (r == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        int w = s_wait(fd, POLLIN, deadline);
        if (w == 0)
            return -2;
        if (w < 0)
            return -1;
    }
}

/* Value of header `name` in the head (NUL-terminated copy in out). */
static bool
s_header(const char *head, size_t n, const char *name, char *out, size_t outlen)
{
    size_t nl = strlen(name);
    const char *p = memchr(head, '\n', n);
    const char *end = head + n;
    while (p && p + 1 < end) {
        const char *line = p + 1;
        const char *eol = memchr(line, '\n', (size_t) (end - line));
        if (!eol)
            break;
        if ((size_t) (eol - line) > nl && strncasecmp(line, name, nl) == 0 &&
            line[nl] == ':') {
            const char *v = line + nl + 1;
            while (v < eol && (*v == ' ' || *v == '\t'))
                v++;
            size_t vl = (size_t) (eol - v);
            while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == ' '))
                vl--;
            snprintf(out, outlen, "%.*s", (int) vl, v);
            return true;
        }
        p = eol;
    }
    return false;
}

/* Parses the head once it is complete. false: malformed. */
static bool
s_parse_head(s_ans_t *a)
{
    char *blank = strstr(a->raw, "\r\n\r\n");
    if (!blank)
        return true; /* not complete yet */
    a->head = (size_t) (blank - a->raw) + 4;
    int minor = 0;
    if (sscanf(a->raw, "HTTP/1.%d %ld", &minor, &a->status) != 2 ||
        a->status < 100 || a->status > 999)
        return false;
    char v[64];
    a->clen = -1;
    if (s_header(a->raw, a->head, "Content-Length", v, sizeof v)) {
        char *e = NULL;
        a->clen = strtoll(v, &e, 10);
        if (!*v || *e || a->clen < 0)
            return false;
    }
    a->chunked = s_header(a->raw, a->head, "Transfer-Encoding", v, sizeof v) &&
                 strcasecmp(v, "chunked") == 0;
    a->close =
        minor == 0 || (s_header(a->raw, a->head, "Connection", v, sizeof v) &&
                       strcasecmp(v, "close") == 0);
    return true;
}

/* Decodes the chunks complete so far (from a->ci on) into sb. 1 the last
 * chunk and trailers are in, 0 needs more bytes, -1 malformed. */
static int
s_dechunk(s_ans_t *a, lisa_buf_t *sb)
{
    if (!a->ci)
        a->ci = a->head;
    for (;;) {
        size_t i = a->ci;
        const char *eol = memchr(a->raw + i, '\n', a->len - i);
        if (!eol)
            return 0;
        if (a->trailer) { /* trailers end with a blank line */
            bool blank = eol == a->raw + i ||
                         (eol == a->raw + i + 1 && a->raw[i] == '\r');
            a->ci = (size_t) (eol - a->raw) + 1;
            if (blank)
                return 1;
            continue;
        }
        char *e = NULL;
        unsigned long long n = strtoull(a->raw + i, &e, 16);
        if (e == a->raw + i)
            return -1;
        size_t data = (size_t) (eol - a->raw) + 1;
        if (n == 0) {
            a->trailer = true;
            a->ci = data;
            continue;
        }
        if (n > a->len - data || a->len - data - (size_t) n < 2)
            return 0; /* the chunk and its CRLF are not all here yet */
        lisa_buf_put(sb, a->raw + data, (size_t) n);
        size_t j = data + (size_t) n;
        if (a->raw[j] == '\r')
            j++;
        if (a->raw[j] != '\n')
            return -1;
        a->ci = j + 1;
    }
}

/* One exchange on gw->fd. rc as agt_gateway_call; *fresh_fail is set when
 * the connection gave no byte back (a kept-alive one the peer closed). */
static lisa_rc_t
s_exchange(agt_gateway_t *gw, const char *req, size_t req_len, long deadline,
           lisa_buf_t *body, long *status, char *err, size_t errlen,
           bool *no_answer)
{
    *no_answer = false;
    if (!s_send_all(gw->fd, req, req_len, deadline)) {
        *no_answer = true;
        snprintf(err, errlen, "cannot send to the gateway: %s",
                 strerror(errno));
        return LISA_UNAVAILABLE;
    }
    s_ans_t a = {.max = S_MAX_HEAD + gw->max_reply + 65536, .clen = -1};
    lisa_rc_t rc = LISA_UNAVAILABLE;
    for (;;) {
        bool done = false;
        if (a.head && a.chunked) {
            int d = s_dechunk(&a, body);
            if (d < 0) {
                snprintf(err, errlen, "malformed chunked answer");
                goto out;
            }
            done = d == 1;
        } else if (a.head && a.clen >= 0) {
            done = a.len - a.head >= (size_t) a.clen;
        }
        if (a.head &&
            (body->full || (a.clen > 0 && (size_t) a.clen > gw->max_reply))) {
            snprintf(err, errlen, "answer larger than %zu bytes",
                     gw->max_reply);
            rc = LISA_TOOLARGE;
            goto out;
        }
        if (done)
            break;
        int r = s_read_more(gw->fd, &a, deadline);
        if (r == 0 && a.head && !a.chunked && a.clen < 0) {
            a.close = true; /* the body ends with the connection */
            break;
        }
        if (r <= 0 || r == -3) {
            if (r == -3 && a.head) {
                snprintf(err, errlen, "answer larger than %zu bytes",
                         gw->max_reply);
                rc = LISA_TOOLARGE;
            } else if (r == -2) {
                snprintf(err, errlen, "timed out waiting for the gateway");
                rc = LISA_TIMEOUT;
            } else {
                *no_answer = a.len == 0;
                snprintf(err, errlen, "%s",
                         r == -3  ? "answer head too large"
                         : r == 0 ? "the gateway closed the connection"
                                  : strerror(errno));
            }
            goto out;
        }
        if (!a.head) {
            if (!s_parse_head(&a)) {
                snprintf(err, errlen, "malformed answer from the gateway");
                goto out;
            }
            if (!a.head && a.len > S_MAX_HEAD) {
                snprintf(err, errlen, "answer head too large");
                goto out;
            }
        }
    }
    if (!a.chunked) {
        size_t n = a.len - a.head;
        if (a.clen >= 0 && n > (size_t) a.clen)
            n = (size_t) a.clen;
        lisa_buf_put(body, a.raw + a.head, n);
        if (body->full) {
            snprintf(err, errlen, "answer larger than %zu bytes",
                     gw->max_reply);
            rc = LISA_TOOLARGE;
            goto out;
        }
    }
    *status = a.status;
    rc = LISA_OK;
out:
    if (rc != LISA_OK || a.close) {
        close(gw->fd);
        gw->fd = -1;
    }
    s_ans_free(&a);
    return rc;
}

static lisa_rc_t
s_plain_call(agt_gateway_t *gw, const char *method, const char *path,
             const char *payload, unsigned turn, long timeout_ms,
             lisa_buf_t *body, long *status, char *err, size_t errlen)
{
    long deadline = lisa_clock_mono_ms() + (timeout_ms > 0 ? timeout_ms : 1);
    lisa_buf_t req;
    req = LISA_BUF_CUT(64u * 1024u * 1024u);
    bool v6 = strchr(gw->host, ':') != NULL;
    bool dflt = strcmp(gw->port, "80") == 0;
    lisa_buf_printf(&req, "%s %s%s HTTP/1.1\r\n", method, gw->prefix, path);
    if (gw->socket)
        lisa_buf_puts(&req, "Host: localhost\r\n");
    else
        lisa_buf_printf(&req, "Host: %s%s%s%s%s\r\n", v6 ? "[" : "", gw->host,
                        v6 ? "]" : "", dflt ? "" : ":", dflt ? "" : gw->port);
    lisa_buf_printf(&req,
                    "Authorization: Bearer %s\r\nAccept: application/json\r\n",
                    gw->token);
    if (turn)
        lisa_buf_printf(&req, "X-Lisa-Turn: %u\r\n", turn);
    if (payload)
        lisa_buf_printf(&req,
                        "Content-Type: application/json\r\n"
                        "Content-Length: %zu\r\n\r\n",
                        strlen(payload));
    else
        lisa_buf_puts(&req, "\r\n");
    if (payload)
        lisa_buf_puts(&req, payload);
    lisa_rc_t rc = LISA_UNAVAILABLE;
    if (req.full) {
        snprintf(err, errlen, "request too large");
        rc = LISA_INVALID;
        goto out;
    }
    /* A kept-alive connection the gateway closed meanwhile gives no
     * answer at all: then once more on a new one. */
    for (int round = 0; round < 2; round++) {
        bool reused = gw->fd >= 0;
        if (!reused) {
            int fd = s_connect(gw, deadline, err, errlen);
            if (fd < 0) {
                rc = fd == -2 ? LISA_TIMEOUT : LISA_UNAVAILABLE;
                goto out;
            }
            gw->fd = fd;
        }
        bool no_answer = false;
        rc = s_exchange(gw, req.p, req.len, deadline, body, status, err, errlen,
                        &no_answer);
        if (rc == LISA_OK || !reused || !no_answer)
            break;
        lisa_buf_free(body);
        *body = LISA_BUF_CUT(gw->max_reply);
    }
out:
    /* The request holds the token. */
    if (req.p)
        memset(req.p, 0, req.len);
    lisa_buf_free(&req);
    return rc;
}

/* ---- https through libcurl, loaded on first use ----------------------- */

static struct {
    bool ok;
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_perform)(CURL *);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
    CURLcode (*global_init)(long);
} s_curl;

static void
s_curl_load_once(void)
{
    void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return;
        /* POSIX: a function pointer travels through dlsym's void *. */
#define S_SYM(field, name) *(void **) (&s_curl.field) = dlsym(h, name)
    S_SYM(easy_init, "curl_easy_init");
    S_SYM(easy_setopt, "curl_easy_setopt");
    S_SYM(easy_perform, "curl_easy_perform");
    S_SYM(easy_getinfo, "curl_easy_getinfo");
    S_SYM(easy_cleanup, "curl_easy_cleanup");
    S_SYM(easy_strerror, "curl_easy_strerror");
    S_SYM(slist_append, "curl_slist_append");
    S_SYM(slist_free_all, "curl_slist_free_all");
    S_SYM(global_init, "curl_global_init");
#undef S_SYM
    s_curl.ok = s_curl.easy_init && s_curl.easy_setopt && s_curl.easy_perform &&
                s_curl.easy_getinfo && s_curl.easy_cleanup &&
                s_curl.easy_strerror && s_curl.slist_append &&
                s_curl.slist_free_all && s_curl.global_init &&
                s_curl.global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

/* libcurl, loaded once for the process (the heartbeat thread too). */
static bool
s_curl_load(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    (void) pthread_once(&once, s_curl_load_once);
    return s_curl.ok;
}

static size_t
s_on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    lisa_buf_t *sb = ud;
    size_t n = size * nmemb;
    lisa_buf_put(sb, ptr, n);
    /* Returning less than n makes curl abort the transfer. */
    return sb->full ? 0 : n;
}

static lisa_rc_t
s_tls_call(agt_gateway_t *gw, const char *method, const char *path,
           const char *payload, unsigned turn, long timeout_ms,
           lisa_buf_t *body, long *status, char *err, size_t errlen)
{
    if (!s_curl_load()) {
        snprintf(err, errlen, "https needs libcurl, which cannot be loaded");
        return LISA_UNAVAILABLE;
    }
    CURL *c = s_curl.easy_init();
    if (!c) {
        snprintf(err, errlen, "curl_easy_init failed");
        return LISA_UNAVAILABLE;
    }
    struct curl_slist *hdr = NULL;
    size_t n = strlen(gw->base) + strlen(path) + 1;
    char *url = lisa_malloc(n);
    snprintf(url, n, "%s%s", gw->base, path);
    size_t an = strlen(gw->token) + 32;
    char *auth = lisa_malloc(an);
    snprintf(auth, an, "Authorization: Bearer %s", gw->token);
    char turn_hdr[48];
    hdr = s_curl.slist_append(hdr, auth);
    hdr = s_curl.slist_append(hdr, "Accept: application/json");
    if (turn) {
        snprintf(turn_hdr, sizeof turn_hdr, "X-Lisa-Turn: %u", turn);
        hdr = s_curl.slist_append(hdr, turn_hdr);
    }
    s_curl.easy_setopt(c, CURLOPT_URL, url);
    s_curl.easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (payload) {
        hdr = s_curl.slist_append(hdr, "Content-Type: application/json");
        s_curl.easy_setopt(c, CURLOPT_POSTFIELDS, payload);
        s_curl.easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                           (curl_off_t) strlen(payload));
    }
    s_curl.easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    s_curl.easy_setopt(c, CURLOPT_WRITEFUNCTION, s_on_data);
    s_curl.easy_setopt(c, CURLOPT_WRITEDATA, body);
    s_curl.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    s_curl.easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    s_curl.easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    s_curl.easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https");
    CURLcode cc = s_curl.easy_perform(c);
    lisa_rc_t rc = LISA_OK;
    if (cc != CURLE_OK) {
        if (body->full) {
            snprintf(err, errlen, "answer larger than %zu bytes",
                     gw->max_reply);
            rc = LISA_TOOLARGE;
        } else {
            snprintf(err, errlen, "%s", s_curl.easy_strerror(cc));
            rc = cc == CURLE_OPERATION_TIMEDOUT ? LISA_TIMEOUT
                                                : LISA_UNAVAILABLE;
        }
    } else {
        s_curl.easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    }
    s_curl.slist_free_all(hdr);
    s_curl.easy_cleanup(c);
    memset(auth, 0, strlen(auth));
    lisa_free(&auth);
    lisa_free(&url);
    return rc;
}

lisa_rc_t
agt_gateway_call(agt_gateway_t *gw, const char *method, const char *path,
                 json_t *body, unsigned turn, long timeout_ms, agt_reply_t *rep)
{
    memset(rep, 0, sizeof *rep);
    lisa_rc_t rc = LISA_OK;
    char *payload = NULL;
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(gw->max_reply);
    if (body) {
        payload = json_dumps(body, JSON_COMPACT);
        if (!payload) {
            snprintf(rep->error, sizeof rep->error, "cannot encode body");
            rc = LISA_ERR;
            goto out;
        }
    } else if (strcmp(method, "POST") == 0) {
        payload = strdup("{}");
    }
    rc = (gw->tls ? s_tls_call : s_plain_call)(gw, method, path, payload, turn,
                                               timeout_ms, &sb, &rep->status,
                                               rep->error, sizeof rep->error);
    if (rc != LISA_OK) {
        rep->status = 0;
        goto out;
    }
    rc = s_rc_of_status(rep->status);
    if (sb.len) {
        json_error_t jerr;
        json_t *j = json_loadb(sb.p, sb.len, 0, &jerr);
        if (json_is_object(j)) {
            rep->body = j;
        } else {
            json_decref(j);
            if (rc == LISA_OK) {
                snprintf(rep->error, sizeof rep->error,
                         "answer is not a JSON object");
                rc = LISA_INVALID;
                goto out;
            }
        }
    } else if (rc == LISA_OK) {
        rep->body = json_object();
    }
    if (rc != LISA_OK) {
        json_t *e = json_object_get(rep->body, "error");
        const char *msg = json_string_value(json_object_get(e, "message"));
        const char *code = json_string_value(json_object_get(e, "code"));
        snprintf(rep->error, sizeof rep->error, "HTTP %ld: %.200s", rep->status,
                 msg ? msg : "(no message)");
        snprintf(rep->err_code, sizeof rep->err_code, "%s", code ? code : "");
    }
out:
    free(payload); /* json_dumps/strdup allocate with malloc */
    lisa_buf_free(&sb);
    return rc;
}

lisa_rc_t
agt_gateway_call_retry(agt_gateway_t *gw, const char *method, const char *path,
                       json_t *body, unsigned turn, long timeout_ms,
                       unsigned attempts, long deadline_ms,
                       const atomic_bool *cancel, agt_reply_t *rep)
{
    long backoff = 250;
    lisa_rc_t rc = LISA_UNAVAILABLE;
    memset(rep, 0, sizeof *rep);
    for (unsigned i = 0; i < (attempts ? attempts : 1); i++) {
        long t = timeout_ms;
        if (deadline_ms) {
            long left = deadline_ms - lisa_clock_mono_ms();
            if (left <= 0) {
                if (i == 0)
                    snprintf(rep->error, sizeof rep->error,
                             "deadline passed before the call");
                return i == 0 ? LISA_TIMEOUT : rc;
            }
            if (left < t)
                t = left;
        }
        if (i > 0)
            agt_reply_clear(rep);
        rc = agt_gateway_call(gw, method, path, body, turn, t, rep);
        if (rc != LISA_UNAVAILABLE && rc != LISA_TIMEOUT)
            return rc;
        if (i + 1 >= attempts)
            break;
        lisa_log_warn("gateway %s %s: %s (try %u of %u)", method, path,
                      rep->error, i + 1, attempts);
        long sleep_until = lisa_clock_mono_ms() + backoff;
        if (deadline_ms && sleep_until > deadline_ms)
            break;
        while (lisa_clock_mono_ms() < sleep_until) {
            if (cancel && atomic_load(cancel))
                return rc;
            struct timespec ts = {0, 20 * 1000000L};
            nanosleep(&ts, NULL);
        }
        backoff = backoff * 2 > 8000 ? 8000 : backoff * 2;
    }
    return rc;
}
