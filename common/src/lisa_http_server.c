/*
 * lisa_http_server: libmicrohttpd wrapper (see the header for the contract).
 *
 * How it works. Each listener (TCP, unix) is one MHD daemon with internal
 * polling thread(s), epoll and suspend/resume. MHD calls us at these points:
 *
 *   uri log         a request line arrived: allocate our request object
 *   access handler  first call: copy method, path, headers, query, peer and
 *                   check Content-Length; then body pieces; then "complete":
 *                   dispatch to the application; later calls happen only
 *                   after we resumed the connection: queue the answer
 *   content reader  a stream wants bytes: hand over the queue, or suspend
 *                   the connection until a push or close resumes it
 *   completed       the request is over (sent, aborted, timed out)
 *   notify conn     a connection opened / closed (watchdog bookkeeping)
 *
 * A request object is reference counted: one reference for MHD (dropped in
 * "completed"), one for the application while it holds the request (dropped
 * by respond / stream_close) and one for a stream's MHD response (dropped by
 * its free callback). Its mutex orders answers coming from any thread
 * against MHD's thread: whoever finds the connection suspended resumes it,
 * and the access handler queues the stored answer once resumed. Lock order:
 * server mutex, then request mutex.
 *
 * A watchdog thread enforces request_timeout_ms (MHD's own timeout is an
 * inactivity timeout that a client trickling one byte at a time never
 * trips): a connection still receiving its request after the deadline gets
 * shutdown(2) on its socket, which MHD sees as a closed peer. The deadline
 * runs from accept for a fresh connection, from the request line for a
 * later request on a kept-alive one, and is idle_timeout_s longer while a
 * kept-alive connection has not started its next request. The socket is
 * only touched while its entry is in our table, and MHD removes the entry
 * (notify "closed") before it closes the descriptor.
 *
 * Loop-driven mode (config.loop_driven): the daemons have no thread of
 * their own. Each daemon's epoll descriptor is a poller of the service's
 * zloop, which calls MHD_run when it is readable (new data, or an answer
 * resumed a connection: MHD's inter-thread channel is in that epoll set, so
 * a resume from any thread wakes the loop) and on a coarse timer for MHD's
 * timeouts. Handlers are called inline, exactly as with internal threads;
 * nothing is handed through the request pipe. Destroy drives the daemons
 * itself until the shutdown answers are out.
 */
#include "lisa/lisa_http_server.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_unicode.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define S_STREAM_BLOCK   16384u
#define S_MIN_HEADER     8192u
#define S_MAX_ERROR_TEXT 4096u

#define S_INC(srv, field)                                                      \
    __atomic_fetch_add(&(srv)->st.field, 1, __ATOMIC_RELAXED)
#define S_DEC(srv, field)                                                      \
    __atomic_fetch_sub(&(srv)->st.field, 1, __ATOMIC_RELAXED)

typedef struct {
    char *name;
    char *value;
} s_kv_t;

typedef struct {
    s_kv_t *v;
    size_t n;
    size_t cap;
} s_kvs_t;

/* One open connection, for the request-deadline watchdog. */
typedef struct s_conn {
    MHD_socket fd;
    int64_t since_ms; /* start of the current receiving phase */
    bool receiving;   /* waiting for a complete request */
    bool fresh;       /* no request completed on it yet */
    bool in_request;  /* a request line arrived, the request is not complete */
    bool cut;         /* already shut down by the watchdog */
    struct s_conn *prev, *next;
} s_conn_t;

typedef struct {
    lisa_http_server_t *server;
    struct MHD_Daemon *daemon;
    bool is_unix;
} s_listener_t;

struct lisa_http_req {
    pthread_mutex_t mtx;
    int refs;
    lisa_http_server_t *server;  /* never used after the server is gone */
    struct MHD_Connection *conn; /* NULL once MHD is done with it */
    uint64_t id;
    bool is_unix;
    bool started;         /* access handler saw the headers */
    bool dispatched;      /* the whole request was handed to the application */
    bool app_holds;       /* the application owes an answer */
    bool suspended;       /* we suspended the connection for the answer */
    bool answered;        /* resp (or stream) is ready to be queued */
    bool queued;          /* resp given to MHD */
    bool server_answered; /* answered 503 by the server at shutdown */
    bool kept_counted;    /* counted in the `kept` gauge */
    bool too_large;       /* answered 413 while the body was arriving */
    lisa_http_release_fn *on_release; /* called when app_holds ends */
    void *on_release_arg;
    unsigned status;
    struct MHD_Response *resp;
    s_kvs_t resp_headers;
    char *method;
    char *path;
    char *peer;
    s_kvs_t query;
    s_kvs_t headers;
    char *body;
    size_t body_len;
    size_t body_cap;
    /* streaming */
    bool is_stream;
    bool stream_closed;    /* application closed: end after draining */
    bool stream_suspended; /* content reader suspended for want of data */
    bool server_gone;      /* server shut down: end with error */
    char *sq;
    size_t sq_off;
    size_t sq_len;
    size_t sq_cap;
    lisa_http_req_t *prev, *next; /* server's live list */
};

struct lisa_http_server {
    lisa_http_server_config_t cfg;
    char *unix_path;
    char *address;
    s_listener_t tcp;
    s_listener_t unx;
    uint16_t port;
    pthread_mutex_t mtx;
    lisa_http_req_t *live;
    s_conn_t *conns;      /* newest first */
    s_conn_t *conns_tail; /* the oldest */
    atomic_bool stopping;
    uint64_t next_id;
    lisa_http_server_stats_t st;
    /* watchdog */
    pthread_t wd;
    bool wd_started;
    bool wd_stop;
    pthread_cond_t wd_cond;
    /* loop delivery */
    int pipe_r;
    int pipe_w;
    zmq_pollitem_t poll_item;
    /* loop-driven mode */
    bool driven;
    bool tcp_polled;
    bool unx_polled;
    zmq_pollitem_t tcp_item;
    zmq_pollitem_t unx_item;
    int tick_id;
    atomic_bool kick_pending;
    lisa_http_req_t **lq;
    size_t lq_n;
    size_t lq_cap;
};

static void s_mhd_drive(struct MHD_Daemon *d);

static int64_t
s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
s_kvs_add(s_kvs_t *kvs, const char *name, const char *value)
{
    if (kvs->n == kvs->cap) {
        kvs->cap = kvs->cap ? kvs->cap * 2 : 8;
        kvs->v = lisa_realloc(kvs->v, kvs->cap * sizeof(s_kv_t));
    }
    kvs->v[kvs->n].name = lisa_strdup(name ? name : "");
    kvs->v[kvs->n].value = lisa_strdup(value ? value : "");
    kvs->n++;
}

static void
s_kvs_clear(s_kvs_t *kvs)
{
    for (size_t i = 0; i < kvs->n; i++) {
        lisa_free(&kvs->v[i].name);
        lisa_free(&kvs->v[i].value);
    }
    lisa_free(&kvs->v);
    kvs->n = kvs->cap = 0;
}

/* ------------------------------------------------------------------ */
/* request objects                                                      */

static void
s_req_free(lisa_http_req_t *req)
{
    if (req->resp)
        MHD_destroy_response(req->resp);
    s_kvs_clear(&req->resp_headers);
    s_kvs_clear(&req->query);
    s_kvs_clear(&req->headers);
    lisa_free(&req->method);
    lisa_free(&req->path);
    lisa_free(&req->peer);
    lisa_free(&req->body);
    lisa_free(&req->sq);
    pthread_mutex_destroy(&req->mtx);
    free(req);
}

static void
s_req_unref(lisa_http_req_t *req)
{
    pthread_mutex_lock(&req->mtx);
    int left = --req->refs;
    pthread_mutex_unlock(&req->mtx);
    if (left == 0)
        s_req_free(req);
}

/* Under req->mtx: the application's hold ends (answered or released). The
 * gauge moves before any resume, so it is exact once the client has its
 * answer. The caller drops the application's reference after unlocking. */
static void
s_req_release_app_locked(lisa_http_req_t *req)
{
    lisa_http_release_fn *hook = req->app_holds ? req->on_release : NULL;
    req->on_release = NULL;
    if (hook)
        hook(req->on_release_arg);
    req->app_holds = false;
    if (req->kept_counted && req->server)
        S_DEC(req->server, kept);
    req->kept_counted = false;
}

static void
s_req_release_app(lisa_http_req_t *req)
{
    pthread_mutex_lock(&req->mtx);
    s_req_release_app_locked(req);
    pthread_mutex_unlock(&req->mtx);
    s_req_unref(req);
}

static struct MHD_Response *
s_make_response(const s_kvs_t *headers, const char *content_type,
                const void *body, size_t len)
{
    void *copy = lisa_malloc(len ? len : 1);
    if (len)
        memcpy(copy, body, len);
    struct MHD_Response *r =
        MHD_create_response_from_buffer_with_free_callback(len, copy, free);
    if (!r) {
        free(copy);
        return NULL;
    }
    for (size_t i = 0; headers && i < headers->n; i++)
        (void) MHD_add_response_header(r, headers->v[i].name,
                                       headers->v[i].value);
    if (content_type)
        (void) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                       content_type);
    return r;
}

char *
lisa_http_error_json(const char *message, const char *type, const char *code)
{
    /* messages quote requests: JSON text is valid UTF-8 */
    char *text = lisa_utf8_clean(message, message ? strlen(message) : 0,
                                 S_MAX_ERROR_TEXT, NULL);
    json_t *o = json_pack("{s:{s:s, s:s, s:s?}}", "error", "message", text,
                          "type", type ? type : "server_error", "code", code);
    lisa_free(&text);
    if (!o)
        return lisa_strdup("{\"error\":{\"message\":\"error\",\"type\":"
                           "\"server_error\",\"code\":null}}");
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        abort();
    return s;
}

static struct MHD_Response *
s_error_response(const char *message, const char *type, const char *code,
                 bool close)
{
    char *js = lisa_http_error_json(message, type, code);
    struct MHD_Response *r =
        s_make_response(NULL, "application/json", js, strlen(js));
    free(js);
    if (r && close)
        (void) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    return r;
}

/* Under req->mtx on MHD's thread: takes a ready answer out of req (NULL if
 * none) for s_queue, which hands it to MHD once the lock is dropped (MHD
 * locks a streaming response, whose reader takes req->mtx). */
static struct MHD_Response *
s_take_answer_locked(lisa_http_req_t *req, unsigned *status)
{
    if (!req->answered || req->queued || !req->resp || !req->conn)
        return NULL;
    struct MHD_Response *r = req->resp;
    req->resp = NULL;
    req->queued = true;
    *status = req->status;
    return r;
}

/* On MHD's thread, no lock held: queues a taken answer. */
static enum MHD_Result
s_queue(lisa_http_server_t *srv, struct MHD_Connection *conn, unsigned status,
        struct MHD_Response *r)
{
    if (!r)
        return MHD_YES;
    enum MHD_Result ok = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    if (ok == MHD_YES)
        S_INC(srv, responses);
    return ok;
}

/* ------------------------------------------------------------------ */
/* MHD callbacks                                                        */

static s_conn_t *
s_conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* Connection phases for the watchdog (see s_watchdog). */
typedef enum {
    S_PHASE_REQUEST_LINE, /* a request line arrived */
    S_PHASE_ANSWERING,    /* the request is complete */
    S_PHASE_IDLE          /* the answer ended; waiting for the next one */
} s_phase_t;

static void
s_conn_phase(lisa_http_server_t *srv, struct MHD_Connection *conn,
             s_phase_t phase)
{
    s_conn_t *cx = s_conn_of(conn);
    if (!cx)
        return;
    pthread_mutex_lock(&srv->mtx);
    switch (phase) {
    case S_PHASE_REQUEST_LINE:
        /* a fresh connection keeps its deadline from accept */
        if (!cx->fresh)
            cx->since_ms = s_now_ms();
        cx->in_request = true;
        break;
    case S_PHASE_ANSWERING:
        cx->receiving = false;
        cx->in_request = false;
        break;
    case S_PHASE_IDLE:
        cx->receiving = true;
        cx->in_request = false;
        cx->fresh = false;
        cx->since_ms = s_now_ms();
        break;
    }
    pthread_mutex_unlock(&srv->mtx);
}

static void *
s_uri_log(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void) uri;
    s_listener_t *l = cls;
    lisa_http_server_t *srv = l->server;
    lisa_http_req_t *req = lisa_calloc(1, sizeof(*req));
    pthread_mutex_init(&req->mtx, NULL);
    req->refs = 1; /* MHD's */
    req->server = srv;
    req->conn = conn;
    req->is_unix = l->is_unix;
    req->id = __atomic_add_fetch(&srv->next_id, 1, __ATOMIC_RELAXED);
    s_conn_phase(srv, conn, S_PHASE_REQUEST_LINE);
    pthread_mutex_lock(&srv->mtx);
    req->next = srv->live;
    if (srv->live)
        srv->live->prev = req;
    srv->live = req;
    pthread_mutex_unlock(&srv->mtx);
    return req;
}

static enum MHD_Result
s_collect(void *cls, enum MHD_ValueKind kind, const char *key,
          const char *value)
{
    (void) kind;
    s_kvs_add(cls, key, value);
    return MHD_YES;
}

static void
s_fill_peer(lisa_http_req_t *req, struct MHD_Connection *conn)
{
    if (req->is_unix) {
        req->peer = lisa_strdup("unix");
        return;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char host[INET6_ADDRSTRLEN + 8] = "?";
    char serv[16] = "?";
    if (ci && ci->client_addr && ci->client_addr->sa_family == AF_INET) {
        /* what getnameinfo writes for IPv4, without its overhead */
        const struct sockaddr_in *in =
            (const struct sockaddr_in *) (const void *) ci->client_addr;
        if (inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host)))
            snprintf(serv, sizeof(serv), "%u", (unsigned) ntohs(in->sin_port));
    } else if (ci && ci->client_addr) {
        socklen_t sl = ci->client_addr->sa_family == AF_INET6
                           ? (socklen_t) sizeof(struct sockaddr_in6)
                           : (socklen_t) sizeof(struct sockaddr_in);
        (void) getnameinfo(ci->client_addr, sl, host, sizeof(host), serv,
                           sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV);
    }
    char buf[sizeof(host) + sizeof(serv) + 2];
    snprintf(buf, sizeof(buf), "%s:%s", host, serv);
    req->peer = lisa_strdup(buf);
}

/* Answers right away from MHD's thread (first call or complete request). */
static enum MHD_Result
s_answer_now(lisa_http_req_t *req, unsigned status, struct MHD_Response *r)
{
    if (!r)
        return MHD_NO;
    enum MHD_Result ok = MHD_queue_response(req->conn, status, r);
    MHD_destroy_response(r);
    pthread_mutex_lock(&req->mtx);
    req->answered = req->queued = true;
    pthread_mutex_unlock(&req->mtx);
    if (ok == MHD_YES)
        S_INC(req->server, responses);
    return ok;
}

/* The request is complete: give it to the application. */
static enum MHD_Result
s_dispatch(s_listener_t *l, lisa_http_req_t *req)
{
    lisa_http_server_t *srv = l->server;
    s_conn_phase(srv, req->conn, S_PHASE_ANSWERING);
    if (atomic_load(&srv->stopping))
        return s_answer_now(req, MHD_HTTP_SERVICE_UNAVAILABLE,
                            s_error_response("server is shutting down",
                                             "server_error", "shutdown", true));
    S_INC(srv, requests);
    if (srv->cfg.loop && !srv->driven) {
        /* Park the connection and hand the request to the loop thread. */
        bool wake = false;
        bool stopping = false;
        pthread_mutex_lock(&srv->mtx);
        pthread_mutex_lock(&req->mtx);
        stopping = atomic_load(&srv->stopping);
        if (!stopping) {
            req->refs++;
            req->app_holds = true;
            req->kept_counted = true;
            S_INC(srv, kept);
            req->suspended = true;
            MHD_suspend_connection(req->conn);
            if (srv->lq_n == srv->lq_cap) {
                srv->lq_cap = srv->lq_cap ? srv->lq_cap * 2 : 64;
                srv->lq = lisa_realloc(srv->lq, srv->lq_cap * sizeof(*srv->lq));
            }
            srv->lq[srv->lq_n++] = req;
            wake = srv->lq_n == 1;
        }
        pthread_mutex_unlock(&req->mtx);
        pthread_mutex_unlock(&srv->mtx);
        if (stopping)
            return s_answer_now(req, MHD_HTTP_SERVICE_UNAVAILABLE,
                                s_error_response("server is shutting down",
                                                 "server_error", "shutdown",
                                                 true));
        if (wake) {
            char b = 1;
            ssize_t w = write(srv->pipe_w, &b, 1);
            (void) w; /* a full pipe already wakes the loop */
        }
        return MHD_YES;
    }

    pthread_mutex_lock(&req->mtx);
    req->refs++;
    req->app_holds = true;
    req->kept_counted = true;
    S_INC(srv, kept);
    pthread_mutex_unlock(&req->mtx);
    srv->cfg.handler(req, srv->cfg.handler_arg);

    struct MHD_Response *done = NULL;
    unsigned status = 0;
    pthread_mutex_lock(&req->mtx);
    if (!req->answered && atomic_load(&srv->stopping)) {
        req->resp = s_error_response("server is shutting down", "server_error",
                                     "shutdown", true);
        req->status = MHD_HTTP_SERVICE_UNAVAILABLE;
        req->answered = req->server_answered = true;
        S_INC(srv, shutdown_answered);
    }
    if (req->answered) {
        done = s_take_answer_locked(req, &status);
    } else {
        req->suspended = true;
        MHD_suspend_connection(req->conn);
    }
    struct MHD_Connection *conn = req->conn;
    pthread_mutex_unlock(&req->mtx);
    return s_queue(srv, conn, status, done);
}

/* Request framing (RFC 9112, section 6): the end of a body must be found
 * one way only, or a proxy in front and this server could disagree about
 * where the next request starts. NULL when sound; else why not. *len and
 * *has_len give a declared Content-Length. */
static const char *
s_framing_error(const lisa_http_req_t *req, unsigned long long *len,
                bool *has_len)
{
    const char *cl = NULL, *te = NULL;
    size_t n_cl = 0, n_te = 0;
    for (size_t i = 0; i < req->headers.n; i++) {
        const s_kv_t *h = &req->headers.v[i];
        if (strcasecmp(h->name, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
            if (cl && strcmp(cl, h->value) != 0)
                return "conflicting Content-Length headers";
            cl = h->value;
            n_cl++;
        } else if (strcasecmp(h->name, MHD_HTTP_HEADER_TRANSFER_ENCODING) ==
                   0) {
            te = h->value;
            n_te++;
        }
    }
    if (n_cl > 1)
        return "duplicate Content-Length headers";
    if (n_cl && n_te)
        return "Content-Length together with Transfer-Encoding";
    if (n_te > 1)
        return "more than one Transfer-Encoding header";
    if (te && strcasecmp(te, "chunked") != 0)
        return "Transfer-Encoding other than chunked";
    if (!cl)
        return NULL;
    size_t digits = strspn(cl, "0123456789");
    if (digits == 0 || cl[digits] != '\0' || digits > 19)
        return "Content-Length is not a decimal number";
    *len = strtoull(cl, NULL, 10);
    *has_len = true;
    return NULL;
}

/* Answers 413 (body over max_body; `n`: bytes declared, or at least that
 * many seen) and closes the connection after it. */
static enum MHD_Result
s_too_large(lisa_http_req_t *req, unsigned long long n)
{
    lisa_http_server_t *srv = req->server;
    S_INC(srv, body_too_large);
    lisa_log_warn("http: request %llu from %s: body of %llu bytes over the "
                  "%zu limit",
                  (unsigned long long) req->id, req->peer, n,
                  srv->cfg.max_body);
    char msg[96];
    snprintf(msg, sizeof(msg), "request body exceeds the limit of %zu bytes",
             srv->cfg.max_body);
    return s_answer_now(
        req, MHD_HTTP_CONTENT_TOO_LARGE,
        s_error_response(msg, "invalid_request_error", "body_too_large", true));
}

static enum MHD_Result
s_access(void *cls, struct MHD_Connection *conn, const char *url,
         const char *method, const char *version, const char *upload_data,
         size_t *upload_data_size, void **con_cls)
{
    (void) version;
    s_listener_t *l = cls;
    lisa_http_server_t *srv = l->server;
    lisa_http_req_t *req = *con_cls;
    if (!req) {
        req = s_uri_log(l, url, conn);
        *con_cls = req;
    }
    if (!req->started) {
        req->started = true;
        req->method = lisa_strdup(method);
        req->path = lisa_strdup(url);
        MHD_get_connection_values(conn, MHD_HEADER_KIND, s_collect,
                                  &req->headers);
        MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, s_collect,
                                  &req->query);
        s_fill_peer(req, conn);
        req->body = lisa_malloc(1);
        req->body[0] = '\0';
        if (atomic_load(&srv->stopping))
            return s_answer_now(req, MHD_HTTP_SERVICE_UNAVAILABLE,
                                s_error_response("server is shutting down",
                                                 "server_error", "shutdown",
                                                 true));
        unsigned long long n = 0;
        bool has_len = false;
        const char *bad = s_framing_error(req, &n, &has_len);
        if (bad) {
            S_INC(srv, bad_framing);
            lisa_log_warn("http: request %llu from %s: %s",
                          (unsigned long long) req->id, req->peer, bad);
            return s_answer_now(req, MHD_HTTP_BAD_REQUEST,
                                s_error_response(bad, "invalid_request_error",
                                                 "bad_framing", true));
        }
        if (has_len && n > srv->cfg.max_body)
            return s_too_large(req, n);
        if (has_len && n > 0) {
            /* the declared size is within max_body: one buffer, no
             * regrowth while the pieces arrive */
            req->body = lisa_realloc(req->body, (size_t) n + 1);
            req->body_cap = (size_t) n + 1;
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        if (req->dispatched)
            return MHD_NO; /* cannot happen: MHD reads no body after */
        if (req->too_large || n > srv->cfg.max_body - req->body_len) {
            /* a chunked body grew past the bound: the rest is read and
             * dropped (the request deadline bounds how long), then it is
             * answered 413 (libmicrohttpd takes no answer mid-body) */
            req->too_large = true;
            *upload_data_size = 0;
            return MHD_YES;
        }
        if (req->body_len + n + 1 > req->body_cap) {
            size_t cap = req->body_cap ? req->body_cap : 1024;
            while (cap < req->body_len + n + 1)
                cap *= 2;
            req->body = lisa_realloc(req->body, cap);
            req->body_cap = cap;
        }
        memcpy(req->body + req->body_len, upload_data, n);
        req->body_len += n;
        req->body[req->body_len] = '\0';
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (req->too_large && !req->answered) /* chunked body over the bound */
        return s_too_large(req, (unsigned long long) req->body_len + 1);
    if (!req->dispatched) {
        req->dispatched = true;
        return s_dispatch(l, req);
    }
    /* Resumed: queue the answer that woke us. */
    unsigned status = 0;
    pthread_mutex_lock(&req->mtx);
    struct MHD_Response *done = s_take_answer_locked(req, &status);
    pthread_mutex_unlock(&req->mtx);
    return s_queue(srv, conn, status, done);
}

static void
s_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
            enum MHD_RequestTerminationCode toe)
{
    s_listener_t *l = cls;
    lisa_http_server_t *srv = l->server;
    lisa_http_req_t *req = *con_cls;
    *con_cls = NULL;
    s_conn_phase(srv, conn, S_PHASE_IDLE);
    if (!req)
        return;
    switch (toe) {
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
        S_INC(srv, idle_timeouts);
        break;
    case MHD_REQUEST_TERMINATED_WITH_ERROR:
        if (!req->started)
            S_INC(srv, bad_requests);
        else if (req->dispatched)
            S_INC(srv, client_aborts);
        break;
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
        if (req->dispatched)
            S_INC(srv, client_aborts);
        break;
    default:
        break;
    }
    pthread_mutex_lock(&srv->mtx);
    if (req->prev)
        req->prev->next = req->next;
    else if (srv->live == req)
        srv->live = req->next;
    if (req->next)
        req->next->prev = req->prev;
    req->prev = req->next = NULL;
    pthread_mutex_unlock(&srv->mtx);

    pthread_mutex_lock(&req->mtx);
    if (req->kept_counted)
        S_DEC(srv, kept);
    req->kept_counted = false;
    req->server = NULL; /* the server may go before the application lets go */
    req->conn = NULL;
    req->suspended = req->stream_suspended = false;
    struct MHD_Response *never = req->resp; /* answered, never queued */
    req->resp = NULL;
    pthread_mutex_unlock(&req->mtx);
    if (never)
        MHD_destroy_response(never);
    s_req_unref(req);
}

static void
s_notify_conn(void *cls, struct MHD_Connection *conn, void **socket_context,
              enum MHD_ConnectionNotificationCode code)
{
    s_listener_t *l = cls;
    lisa_http_server_t *srv = l->server;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        s_conn_t *cx = lisa_calloc(1, sizeof(*cx));
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        cx->fd = ci ? ci->connect_fd : MHD_INVALID_SOCKET;
        cx->since_ms = s_now_ms();
        cx->receiving = true;
        cx->fresh = true;
        pthread_mutex_lock(&srv->mtx);
        cx->next = srv->conns;
        if (srv->conns)
            srv->conns->prev = cx;
        else
            srv->conns_tail = cx;
        srv->conns = cx;
        pthread_mutex_unlock(&srv->mtx);
        *socket_context = cx;
        S_INC(srv, connections_open);
        S_INC(srv, connections_accepted);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        s_conn_t *cx = *socket_context;
        *socket_context = NULL;
        if (!cx)
            return;
        pthread_mutex_lock(&srv->mtx);
        if (cx->prev)
            cx->prev->next = cx->next;
        else if (srv->conns == cx)
            srv->conns = cx->next;
        if (cx->next)
            cx->next->prev = cx->prev;
        else if (srv->conns_tail == cx)
            srv->conns_tail = cx->prev;
        pthread_mutex_unlock(&srv->mtx);
        free(cx);
        S_DEC(srv, connections_open);
    }
}

/* Connections admitted over max_connections while evicted ones close. */
#define S_EVICT_SLACK 32u

/* Under srv->mtx: cuts the oldest connection still waiting for a complete
 * request (a fresh one, a trickling one or a kept-alive idle one); false
 * when every open connection is being answered. A client that sends its
 * request at once is answered before it could be the oldest, so a flood of
 * idle connections displaces only itself. */
static bool
s_evict_oldest_locked(lisa_http_server_t *srv)
{
    for (s_conn_t *cx = srv->conns_tail; cx; cx = cx->prev) {
        if (!cx->receiving || cx->cut || cx->fd == MHD_INVALID_SOCKET)
            continue;
        cx->cut = true;
        S_INC(srv, evicted_connections);
        (void) shutdown(cx->fd, SHUT_RDWR);
        return true;
    }
    return false;
}

static enum MHD_Result
s_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    (void) addr;
    (void) addrlen;
    s_listener_t *l = cls;
    lisa_http_server_t *srv = l->server;
    uint64_t open =
        __atomic_load_n(&srv->st.connections_open, __ATOMIC_RELAXED);
    if (open < srv->cfg.max_connections)
        return MHD_YES;
    bool room = false;
    if (open < (uint64_t) srv->cfg.max_connections + S_EVICT_SLACK) {
        pthread_mutex_lock(&srv->mtx);
        room = s_evict_oldest_locked(srv);
        pthread_mutex_unlock(&srv->mtx);
    }
    if (!room) {
        S_INC(srv, refused_connections);
        return MHD_NO;
    }
    return MHD_YES;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static void
s_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void) cls;
    if (!lisa_log_enabled(LISA_LOG_DEBUG))
        return;
    char buf[512];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    lisa_log_debug("http: mhd: %s", buf);
}
#pragma GCC diagnostic pop

/* Resumes req's parked connection (req->mtx held, req->conn set). In
 * loop-driven mode the loop is also told to run MHD, through the request
 * pipe (one byte while none is pending), so the answer goes out on its next
 * turn whichever thread resumed. */
static void
s_resume(lisa_http_req_t *req)
{
    MHD_resume_connection(req->conn);
    lisa_http_server_t *srv = req->server;
    if (srv && srv->driven && !atomic_exchange(&srv->kick_pending, true)) {
        char b = 1;
        ssize_t w = write(srv->pipe_w, &b, 1);
        (void) w; /* a full pipe already wakes the loop */
    }
}

/* ------------------------------------------------------------------ */
/* streaming                                                            */

/* A status MHD cannot send would drop the connection: answer 500. */
static unsigned
s_valid_status(const lisa_http_req_t *req, unsigned status)
{
    if (status >= 100 && status <= 599)
        return status;
    lisa_log_error("http: request %llu: invalid status %u, answering 500",
                   (unsigned long long) req->id, status);
    return 500;
}

static ssize_t
s_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void) pos;
    lisa_http_req_t *req = cls;
    ssize_t n = 0;
    pthread_mutex_lock(&req->mtx);
    if (req->sq_len > req->sq_off) {
        size_t k = req->sq_len - req->sq_off;
        if (k > max)
            k = max;
        memcpy(buf, req->sq + req->sq_off, k);
        req->sq_off += k;
        if (req->sq_off == req->sq_len)
            req->sq_off = req->sq_len = 0;
        n = (ssize_t) k;
    } else if (req->server_gone || !req->conn) {
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (req->stream_closed) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        req->stream_suspended = true;
        MHD_suspend_connection(req->conn);
        n = 0;
    }
    pthread_mutex_unlock(&req->mtx);
    return n;
}

static void
s_stream_free(void *cls)
{
    s_req_unref(cls);
}

lisa_rc_t
lisa_http_req_stream_open(lisa_http_req_t *req, unsigned status,
                          const char *content_type)
{
    status = s_valid_status(req, status);
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, S_STREAM_BLOCK, s_stream_read, req, s_stream_free);
    if (!r) {
        s_req_release_app(req);
        return LISA_ERR;
    }
    pthread_mutex_lock(&req->mtx);
    req->refs++; /* the response's, dropped by s_stream_free */
    for (size_t i = 0; i < req->resp_headers.n; i++)
        (void) MHD_add_response_header(r, req->resp_headers.v[i].name,
                                       req->resp_headers.v[i].value);
    if (content_type) {
        (void) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                       content_type);
        if (strncmp(content_type, "text/event-stream", 17) == 0)
            (void) MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL,
                                           "no-cache");
    }
    if (req->answered || !req->conn) {
        pthread_mutex_unlock(&req->mtx);
        MHD_destroy_response(r);
        s_req_release_app(req);
        return LISA_UNAVAILABLE;
    }
    req->is_stream = true;
    req->resp = r;
    req->status = status;
    req->answered = true;
    if (req->suspended) {
        req->suspended = false;
        s_resume(req);
    }
    pthread_mutex_unlock(&req->mtx);
    return LISA_OK;
}

lisa_rc_t
lisa_http_req_stream_push(lisa_http_req_t *req, const void *data, size_t len)
{
    lisa_rc_t rc = LISA_OK;
    pthread_mutex_lock(&req->mtx);
    if (!req->is_stream || !req->conn || req->server_gone ||
        req->stream_closed) {
        rc = LISA_UNAVAILABLE;
        goto out;
    }
    size_t queued = req->sq_len - req->sq_off;
    size_t max = req->server ? req->server->cfg.stream_queue_max : 0;
    if (len > max - queued) {
        if (req->server)
            S_INC(req->server, stream_overflows);
        rc = LISA_AGAIN;
        goto out;
    }
    if (req->sq_off > 0) {
        memmove(req->sq, req->sq + req->sq_off, queued);
        req->sq_off = 0;
        req->sq_len = queued;
    }
    if (req->sq_len + len > req->sq_cap) {
        size_t cap = req->sq_cap ? req->sq_cap : 4096;
        while (cap < req->sq_len + len)
            cap *= 2;
        req->sq = lisa_realloc(req->sq, cap);
        req->sq_cap = cap;
    }
    if (len) /* an empty push has nothing to copy (sq may be NULL) */
        memcpy(req->sq + req->sq_len, data, len);
    req->sq_len += len;
    if (req->stream_suspended) {
        req->stream_suspended = false;
        s_resume(req);
    }
out:
    pthread_mutex_unlock(&req->mtx);
    return rc;
}

void
lisa_http_req_stream_close(lisa_http_req_t *req)
{
    pthread_mutex_lock(&req->mtx);
    s_req_release_app_locked(req);
    req->stream_closed = true;
    if (req->stream_suspended && req->conn && !req->server_gone) {
        req->stream_suspended = false;
        s_resume(req);
    }
    pthread_mutex_unlock(&req->mtx);
    s_req_unref(req);
}

/* ------------------------------------------------------------------ */
/* answering                                                            */

void
lisa_http_req_on_release(lisa_http_req_t *req, lisa_http_release_fn *fn,
                         void *arg)
{
    pthread_mutex_lock(&req->mtx);
    req->on_release = fn;
    req->on_release_arg = arg;
    pthread_mutex_unlock(&req->mtx);
}

void
lisa_http_req_add_header(lisa_http_req_t *req, const char *name,
                         const char *value)
{
    s_kvs_add(&req->resp_headers, name, value);
}

lisa_rc_t
lisa_http_req_respond(lisa_http_req_t *req, unsigned status,
                      const char *content_type, const void *body, size_t len)
{
    status = s_valid_status(req, status);
    struct MHD_Response *r =
        s_make_response(&req->resp_headers, content_type, body, len);
    lisa_rc_t rc = LISA_OK;
    pthread_mutex_lock(&req->mtx);
    s_req_release_app_locked(req);
    if (!r) {
        rc = LISA_ERR;
    } else if (req->answered || !req->conn) {
        rc = LISA_UNAVAILABLE;
    } else {
        req->resp = r;
        r = NULL;
        req->status = status;
        req->answered = true;
        if (req->suspended) {
            req->suspended = false;
            s_resume(req);
        }
    }
    pthread_mutex_unlock(&req->mtx);
    if (r)
        MHD_destroy_response(r);
    s_req_unref(req);
    return rc;
}

lisa_rc_t
lisa_http_req_respond_error(lisa_http_req_t *req, unsigned status,
                            const char *type, const char *code, const char *fmt,
                            ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    char *js = lisa_http_error_json(msg, type, code);
    lisa_rc_t rc =
        lisa_http_req_respond(req, status, "application/json", js, strlen(js));
    free(js);
    return rc;
}

/* ------------------------------------------------------------------ */
/* request accessors                                                    */

const char *
lisa_http_req_method(const lisa_http_req_t *req)
{
    return req->method ? req->method : "";
}

const char *
lisa_http_req_path(const lisa_http_req_t *req)
{
    return req->path ? req->path : "";
}

const char *
lisa_http_req_query(const lisa_http_req_t *req, const char *name)
{
    for (size_t i = 0; i < req->query.n; i++)
        if (strcmp(req->query.v[i].name, name) == 0)
            return req->query.v[i].value;
    return NULL;
}

const char *
lisa_http_req_header(const lisa_http_req_t *req, const char *name)
{
    for (size_t i = 0; i < req->headers.n; i++)
        if (strcasecmp(req->headers.v[i].name, name) == 0)
            return req->headers.v[i].value;
    return NULL;
}

size_t
lisa_http_req_header_count(const lisa_http_req_t *req)
{
    return req->headers.n;
}

bool
lisa_http_req_header_at(const lisa_http_req_t *req, size_t i, const char **name,
                        const char **value)
{
    if (i >= req->headers.n)
        return false;
    if (name)
        *name = req->headers.v[i].name;
    if (value)
        *value = req->headers.v[i].value;
    return true;
}

const char *
lisa_http_req_body(const lisa_http_req_t *req, size_t *len)
{
    if (len)
        *len = req->body_len;
    return req->body ? req->body : "";
}

const char *
lisa_http_req_peer(const lisa_http_req_t *req)
{
    return req->peer ? req->peer : "";
}

bool
lisa_http_req_is_unix(const lisa_http_req_t *req)
{
    return req->is_unix;
}

uint64_t
lisa_http_req_id(const lisa_http_req_t *req)
{
    return req->id;
}

/* ------------------------------------------------------------------ */
/* loop delivery                                                        */

static int
s_loop_readable(zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    (void) loop;
    (void) item;
    lisa_http_server_t *srv = arg;
    char buf[64];
    while (read(srv->pipe_r, buf, sizeof(buf)) > 0) {
    }
    if (srv->driven) {
        atomic_store(&srv->kick_pending, false);
        if (srv->tcp.daemon)
            s_mhd_drive(srv->tcp.daemon);
        if (srv->unx.daemon)
            s_mhd_drive(srv->unx.daemon);
        return 0;
    }
    for (;;) {
        pthread_mutex_lock(&srv->mtx);
        lisa_http_req_t **batch = srv->lq;
        size_t n = srv->lq_n;
        srv->lq = NULL;
        srv->lq_n = srv->lq_cap = 0;
        pthread_mutex_unlock(&srv->mtx);
        if (n == 0)
            break;
        for (size_t i = 0; i < n; i++)
            srv->cfg.handler(batch[i], srv->cfg.handler_arg);
        free(batch);
    }
    return 0;
}

/* Loop-driven mode: runs one daemon until it has nothing ready at once
 * (MHD keeps connections it could not finish in one pass on its own ready
 * list, which the epoll descriptor does not report). */
static void
s_mhd_drive(struct MHD_Daemon *d)
{
    for (int i = 0; i < 64; i++) {
        (void) MHD_run(d);
        MHD_UNSIGNED_LONG_LONG t = 1;
        if (MHD_get_timeout(d, &t) != MHD_YES || t != 0)
            return;
    }
}

static int
s_loop_mhd(zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    (void) loop;
    (void) item;
    s_listener_t *l = arg;
    s_mhd_drive(l->daemon);
    return 0;
}

/* Loop-driven mode: MHD's timeouts (idle connections) and a safety net. */
static int
s_loop_tick(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    lisa_http_server_t *srv = arg;
    if (srv->tcp.daemon)
        s_mhd_drive(srv->tcp.daemon);
    if (srv->unx.daemon)
        s_mhd_drive(srv->unx.daemon);
    return 0;
}

/* Loop-driven mode, on destroy: drives the daemons (no loop runs them now)
 * until every live request has ended (the shutdown answers are sent) or a
 * short grace period has passed. */
static void
s_drain_driven(lisa_http_server_t *srv)
{
    int64_t until = s_now_ms() + 2000;
    for (;;) {
        if (srv->tcp.daemon)
            s_mhd_drive(srv->tcp.daemon);
        if (srv->unx.daemon)
            s_mhd_drive(srv->unx.daemon);
        pthread_mutex_lock(&srv->mtx);
        bool busy = srv->live != NULL;
        pthread_mutex_unlock(&srv->mtx);
        if (!busy || s_now_ms() >= until)
            return;
        zmq_pollitem_t items[2];
        int n = 0;
        if (srv->tcp_polled)
            items[n++] = srv->tcp_item;
        if (srv->unx_polled)
            items[n++] = srv->unx_item;
        (void) zmq_poll(items, n, 5);
    }
}

/* Threaded mode, on destroy: waits until every answer given (the shutdown
 * 503s, and the application's from before destroy) has been sent, its
 * request ended, or a short grace period has passed, so stopping the
 * daemons does not cut an answer that is still on its way. Streams are cut
 * anyway and are not waited for. */
static void
s_drain_threaded(lisa_http_server_t *srv)
{
    int64_t until = s_now_ms() + 2000;
    for (;;) {
        bool busy = false;
        pthread_mutex_lock(&srv->mtx);
        for (lisa_http_req_t *req = srv->live; req && !busy; req = req->next) {
            pthread_mutex_lock(&req->mtx);
            busy = req->answered && !req->is_stream;
            pthread_mutex_unlock(&req->mtx);
        }
        pthread_mutex_unlock(&srv->mtx);
        if (!busy || s_now_ms() >= until)
            return;
        struct timespec ts = {.tv_nsec = 2 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* ------------------------------------------------------------------ */
/* watchdog                                                             */

static void *
s_watchdog(void *arg)
{
    lisa_http_server_t *srv = arg;
    int64_t tick = srv->cfg.request_timeout_ms / 4;
    if (tick > 250)
        tick = 250;
    if (tick < 5)
        tick = 5;
    pthread_mutex_lock(&srv->mtx);
    while (!srv->wd_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + tick * 1000000;
        ts.tv_sec += (time_t) (ns / 1000000000);
        ts.tv_nsec = (long) (ns % 1000000000);
        (void) pthread_cond_timedwait(&srv->wd_cond, &srv->mtx, &ts);
        if (srv->wd_stop)
            break;
        int64_t now = s_now_ms();
        int64_t req_ms = (int64_t) srv->cfg.request_timeout_ms;
        int64_t idle_ms = (int64_t) srv->cfg.idle_timeout_s * 1000 + req_ms;
        for (s_conn_t *cx = srv->conns; cx; cx = cx->next) {
            if (!cx->receiving || cx->cut || cx->fd == MHD_INVALID_SOCKET)
                continue;
            bool strict = cx->fresh || cx->in_request;
            if (now - cx->since_ms < (strict ? req_ms : idle_ms))
                continue;
            cx->cut = true;
            if (strict)
                S_INC(srv, request_timeouts);
            else
                S_INC(srv, idle_timeouts);
            (void) shutdown(cx->fd, SHUT_RDWR);
            lisa_log_info("http: cut a connection that sent no complete "
                          "request within %u ms",
                          srv->cfg.request_timeout_ms);
        }
    }
    pthread_mutex_unlock(&srv->mtx);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* listeners                                                            */

static int
s_nonblock_cloexec(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -1;
    int fd_fl = fcntl(fd, F_GETFD);
    if (fd_fl < 0 || fcntl(fd, F_SETFD, fd_fl | FD_CLOEXEC) < 0)
        return -1;
    return 0;
}

static int
s_listen_tcp(const char *address, uint16_t port)
{
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", (unsigned) port);
    struct addrinfo hints = {0};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(address, ps, &hints, &res);
    if (gai != 0) {
        lisa_log_error("http: cannot resolve listen address %s: %s", address,
                       gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0)
            continue;
        int one = 1;
        (void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd, SOMAXCONN) == 0 && s_nonblock_cloexec(fd) == 0)
            break;
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        lisa_log_error("http: cannot listen on %s:%u: %s", address,
                       (unsigned) port, strerror(errno));
    freeaddrinfo(res);
    return fd;
}

static int
s_listen_unix(const char *path)
{
    struct sockaddr_un sa = {0};
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        lisa_log_error("http: unix socket path too long: %s", path);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    struct stat stt;
    if (lstat(path, &stt) == 0 && S_ISSOCK(stt.st_mode))
        (void) unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0 ||
        listen(fd, SOMAXCONN) != 0 || s_nonblock_cloexec(fd) != 0) {
        lisa_log_error("http: cannot listen on unix:%s: %s", path,
                       strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static bool
s_start_daemon(lisa_http_server_t *srv, s_listener_t *l, int fd)
{
    l->server = srv;
    unsigned flags =
        MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (!srv->driven)
        flags |= MHD_USE_INTERNAL_POLLING_THREAD;
    unsigned threads =
        !srv->driven && srv->cfg.threads > 1 ? srv->cfg.threads : 0;
    l->daemon = MHD_start_daemon(
        flags, 0, s_policy, l, s_access, l, MHD_OPTION_EXTERNAL_LOGGER,
        s_mhd_log, l, MHD_OPTION_LISTEN_SOCKET, (MHD_socket) fd,
        MHD_OPTION_CONNECTION_LIMIT, srv->cfg.max_connections + 64u,
        MHD_OPTION_CONNECTION_TIMEOUT, srv->cfg.idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, srv->cfg.max_header_bytes,
        MHD_OPTION_NOTIFY_COMPLETED, s_completed, l,
        MHD_OPTION_NOTIFY_CONNECTION, s_notify_conn, l,
        MHD_OPTION_URI_LOG_CALLBACK, s_uri_log, l, MHD_OPTION_THREAD_POOL_SIZE,
        threads, MHD_OPTION_END);
    if (!l->daemon) {
        lisa_log_error("http: libmicrohttpd failed to start");
        close(fd);
        return false;
    }
    if (srv->driven) {
        const union MHD_DaemonInfo *di =
            MHD_get_daemon_info(l->daemon, MHD_DAEMON_INFO_EPOLL_FD);
        if (!di || di->epoll_fd < 0) {
            lisa_log_error("http: libmicrohttpd has no epoll descriptor");
            return false;
        }
        zmq_pollitem_t *it = l->is_unix ? &srv->unx_item : &srv->tcp_item;
        it->socket = NULL;
        it->fd = di->epoll_fd;
        it->events = ZMQ_POLLIN;
        if (zloop_poller(srv->cfg.loop, it, s_loop_mhd, l) != 0) {
            lisa_log_error("http: cannot watch libmicrohttpd's descriptor");
            return false;
        }
        if (l->is_unix)
            srv->unx_polled = true;
        else
            srv->tcp_polled = true;
    }
    return true;
}

lisa_http_server_t *
lisa_http_server_new(const lisa_http_server_config_t *cfg)
{
    if (!cfg || !cfg->handler || (!cfg->address && !cfg->unix_path)) {
        lisa_log_error("http: server config needs a handler and a listener");
        return NULL;
    }
    lisa_http_server_t *srv = lisa_calloc(1, sizeof(*srv));
    srv->cfg = *cfg;
    srv->pipe_r = srv->pipe_w = -1;
    srv->tick_id = -1;
    srv->driven = cfg->loop && cfg->loop_driven;
    if (!srv->cfg.max_body)
        srv->cfg.max_body = LISA_HTTP_DEFAULT_MAX_BODY;
    if (!srv->cfg.max_connections)
        srv->cfg.max_connections = LISA_HTTP_DEFAULT_MAX_CONNECTIONS;
    if (!srv->cfg.request_timeout_ms)
        srv->cfg.request_timeout_ms = LISA_HTTP_DEFAULT_REQUEST_TIMEOUT;
    if (!srv->cfg.idle_timeout_s)
        srv->cfg.idle_timeout_s = LISA_HTTP_DEFAULT_IDLE_TIMEOUT;
    if (!srv->cfg.max_header_bytes)
        srv->cfg.max_header_bytes = LISA_HTTP_DEFAULT_MAX_HEADER_BYTES;
    if (srv->cfg.max_header_bytes < S_MIN_HEADER)
        srv->cfg.max_header_bytes = S_MIN_HEADER;
    if (!srv->cfg.stream_queue_max)
        srv->cfg.stream_queue_max = LISA_HTTP_DEFAULT_STREAM_QUEUE_MAX;
    if (!srv->cfg.threads)
        srv->cfg.threads = LISA_HTTP_DEFAULT_THREADS;
    srv->address = lisa_strdup(cfg->address);
    srv->unix_path = lisa_strdup(cfg->unix_path);
    srv->cfg.address = srv->address;
    srv->cfg.unix_path = srv->unix_path;
    pthread_mutex_init(&srv->mtx, NULL);
    pthread_cond_init(&srv->wd_cond, NULL);

    if (srv->cfg.loop) {
        int p[2];
        if (pipe(p) != 0) {
            lisa_log_error("http: pipe: %s", strerror(errno));
            goto fail;
        }
        srv->pipe_r = p[0];
        srv->pipe_w = p[1];
        if (s_nonblock_cloexec(p[0]) != 0 || s_nonblock_cloexec(p[1]) != 0)
            goto fail;
        srv->poll_item.fd = srv->pipe_r;
        srv->poll_item.events = ZMQ_POLLIN;
        if (zloop_poller(srv->cfg.loop, &srv->poll_item, s_loop_readable,
                         srv) != 0)
            goto fail;
    }
    if (srv->address) {
        int fd = s_listen_tcp(srv->address, cfg->port);
        if (fd < 0)
            goto fail;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        if (getsockname(fd, (struct sockaddr *) &ss, &sl) == 0) {
            if (ss.ss_family == AF_INET)
                srv->port = ntohs(((struct sockaddr_in *) &ss)->sin_port);
            else if (ss.ss_family == AF_INET6)
                srv->port = ntohs(((struct sockaddr_in6 *) &ss)->sin6_port);
        }
        if (!s_start_daemon(srv, &srv->tcp, fd))
            goto fail;
    }
    if (srv->unix_path) {
        int fd = s_listen_unix(srv->unix_path);
        if (fd < 0)
            goto fail;
        srv->unx.is_unix = true;
        if (!s_start_daemon(srv, &srv->unx, fd))
            goto fail;
    }
    if (srv->driven) {
        srv->tick_id = zloop_timer(srv->cfg.loop, 250, 0, s_loop_tick, srv);
        if (srv->tick_id < 0)
            goto fail;
    }
    if (pthread_create(&srv->wd, NULL, s_watchdog, srv) != 0)
        goto fail;
    srv->wd_started = true;
    return srv;
fail:
    lisa_http_server_destroy(&srv);
    return NULL;
}

uint16_t
lisa_http_server_port(const lisa_http_server_t *self)
{
    return self ? self->port : 0;
}

lisa_http_server_stats_t
lisa_http_server_stats(lisa_http_server_t *self)
{
    lisa_http_server_stats_t s = {0};
    if (!self)
        return s;
#define S_LD(f) s.f = __atomic_load_n(&self->st.f, __ATOMIC_RELAXED)
    S_LD(connections_open);
    S_LD(connections_accepted);
    S_LD(refused_connections);
    S_LD(requests);
    S_LD(responses);
    S_LD(body_too_large);
    S_LD(request_timeouts);
    S_LD(idle_timeouts);
    S_LD(bad_requests);
    S_LD(bad_framing);
    S_LD(evicted_connections);
    S_LD(client_aborts);
    S_LD(stream_overflows);
    S_LD(shutdown_answered);
    S_LD(kept);
#undef S_LD
    return s;
}

void
lisa_http_server_destroy(lisa_http_server_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    lisa_http_server_t *srv = *self_p;
    *self_p = NULL;
    atomic_store(&srv->stopping, true);

    /* Answer every kept request and end every stream, so no connection
     * stays suspended when MHD stops. */
    pthread_mutex_lock(&srv->mtx);
    for (lisa_http_req_t *req = srv->live; req; req = req->next) {
        pthread_mutex_lock(&req->mtx);
        if (req->app_holds && !req->answered) {
            req->resp = s_error_response("server is shutting down",
                                         "server_error", "shutdown", true);
            req->status = MHD_HTTP_SERVICE_UNAVAILABLE;
            req->answered = req->server_answered = true;
            S_INC(srv, shutdown_answered);
        }
        if (req->is_stream)
            req->server_gone = true;
        if (req->conn && (req->suspended || req->stream_suspended)) {
            req->suspended = req->stream_suspended = false;
            MHD_resume_connection(req->conn);
        }
        pthread_mutex_unlock(&req->mtx);
    }
    pthread_mutex_unlock(&srv->mtx);

    if (srv->driven) {
        if (srv->tick_id >= 0)
            zloop_timer_end(srv->cfg.loop, srv->tick_id);
        if (srv->tcp_polled)
            zloop_poller_end(srv->cfg.loop, &srv->tcp_item);
        if (srv->unx_polled)
            zloop_poller_end(srv->cfg.loop, &srv->unx_item);
        s_drain_driven(srv);
    } else {
        s_drain_threaded(srv);
    }

    if (srv->wd_started) {
        pthread_mutex_lock(&srv->mtx);
        srv->wd_stop = true;
        pthread_cond_signal(&srv->wd_cond);
        pthread_mutex_unlock(&srv->mtx);
        pthread_join(srv->wd, NULL);
    }
    if (srv->tcp.daemon)
        MHD_stop_daemon(srv->tcp.daemon);
    if (srv->unx.daemon)
        MHD_stop_daemon(srv->unx.daemon);

    /* Requests given to the loop but not yet handled were answered above;
     * the loop will never see them, so release them here. */
    if (srv->cfg.loop && srv->pipe_r >= 0)
        zloop_poller_end(srv->cfg.loop, &srv->poll_item);
    for (size_t i = 0; i < srv->lq_n; i++)
        s_req_release_app(srv->lq[i]);
    lisa_free(&srv->lq);
    if (srv->pipe_r >= 0)
        close(srv->pipe_r);
    if (srv->pipe_w >= 0)
        close(srv->pipe_w);
    if (srv->unix_path && srv->unx.daemon)
        (void) unlink(srv->unix_path);
    pthread_cond_destroy(&srv->wd_cond);
    pthread_mutex_destroy(&srv->mtx);
    lisa_free(&srv->address);
    lisa_free(&srv->unix_path);
    free(srv);
}
