/*
 * lisa_http_client: libcurl multi driven by a czmq zloop, plus a blocking
 * curl-easy call (see the header for the contract).
 *
 * Why this shape. libcurl's "socket action" interface tells us which
 * sockets to watch for what, and when it next wants a timeout call. The
 * sockets go into one epoll set of our own, and that single epoll
 * descriptor is the only thing the zloop polls: curl adding, changing or
 * dropping interest in a socket is one epoll_ctl, never a rebuild of the
 * zloop's poll set, so thousands of concurrent transfers stay cheap. curl's
 * timer becomes a one-shot zloop timer. Everything runs on the loop's
 * thread: no locks, no extra threads, and callbacks arrive where the
 * service's state lives.
 *
 * A request becomes a call: one curl easy handle with its header list,
 * a response being filled by curl's header and write callbacks (both
 * bounded), and the user's callbacks. Completions are collected with
 * curl_multi_info_read after every socket action; the call leaves the multi
 * handle before its done callback runs, so that callback may start or
 * cancel other requests freely.
 */
#include "lisa/lisa_http_client.h"

#include "lisa/lisa_epset.h"
#include "lisa/lisa_list.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef struct {
    char *name;
    char *value;
} s_hdr_t;

struct lisa_http_response {
    lisa_rc_t rc;
    long status;
    char *body;
    size_t body_len;
    size_t body_cap;
    size_t max_body;
    s_hdr_t *hdrs;
    size_t n_hdrs;
    size_t cap_hdrs;
    size_t header_bytes;
    bool too_large;
    bool chunk_aborted;
    double elapsed_ms;
    char error[CURL_ERROR_SIZE];
};

/* Easy handles kept for reuse: a call then costs a reset, not a new
 * handle and its allocations. Connections live in the multi handle's
 * cache either way. */
#define S_SPARE_EASY 64u

/* Idle connections the multi handle keeps for reuse (its default follows
 * the number of handles added, so a burst then a lull closes them). */
#define S_KEEP_CONNECTIONS 256L

typedef struct s_call {
    struct lisa_http_client *client;
    uint64_t id;
    CURL *easy;
    struct curl_slist *slist;
    lisa_http_response_t *resp;
    lisa_http_done_fn *done;
    lisa_http_chunk_fn *on_chunk;
    void *arg;
    struct s_call *prev, *next;
} s_call_t;

struct lisa_http_client {
    zloop_t *loop;
    CURLM *multi;
    lisa_epset_t *sockets; /* curl's sockets, polled by the loop */
    int timer_id;          /* -1: none */
    s_call_t *calls;
    size_t n_calls;
    uint64_t next_id;
    CURL *spare[S_SPARE_EASY]; /* finished handles, reset, for reuse */
    size_t n_spare;
};

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static CURLcode s_global_rc = CURLE_OK;

static void
s_global_init(void)
{
    s_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static bool
s_curl_ready(void)
{
    pthread_once(&s_once, s_global_init);
    if (s_global_rc != CURLE_OK) {
        lisa_log_error("http client: curl_global_init failed: %s",
                       curl_easy_strerror(s_global_rc));
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------ */
/* responses                                                            */

static lisa_http_response_t *
s_resp_new(size_t max_body)
{
    lisa_http_response_t *r = lisa_calloc(1, sizeof(*r));
    r->max_body = max_body;
    r->rc = LISA_ERR;
    return r;
}

static void
s_resp_clear_headers(lisa_http_response_t *r)
{
    for (size_t i = 0; i < r->n_hdrs; i++) {
        lisa_free(&r->hdrs[i].name);
        lisa_free(&r->hdrs[i].value);
    }
    r->n_hdrs = 0;
}

void
lisa_http_response_destroy(lisa_http_response_t **r_p)
{
    if (!r_p || !*r_p)
        return;
    lisa_http_response_t *r = *r_p;
    *r_p = NULL;
    s_resp_clear_headers(r);
    lisa_free(&r->hdrs);
    lisa_free(&r->body);
    free(r);
}

lisa_rc_t
lisa_http_response_rc(const lisa_http_response_t *r)
{
    return r->rc;
}

long
lisa_http_response_status(const lisa_http_response_t *r)
{
    return r->status;
}

const char *
lisa_http_response_body(const lisa_http_response_t *r, size_t *len)
{
    if (len)
        *len = r->body_len;
    return r->body ? r->body : "";
}

char *
lisa_http_response_take_body(lisa_http_response_t *r, size_t *len)
{
    char *b = r->body ? r->body : lisa_strdup("");
    if (len)
        *len = r->body_len;
    r->body = NULL;
    r->body_len = r->body_cap = 0;
    return b;
}

const char *
lisa_http_response_header(const lisa_http_response_t *r, const char *name)
{
    for (size_t i = r->n_hdrs; i > 0; i--)
        if (strcasecmp(r->hdrs[i - 1].name, name) == 0)
            return r->hdrs[i - 1].value;
    return NULL;
}

const char *
lisa_http_response_error(const lisa_http_response_t *r)
{
    return r->error;
}

double
lisa_http_response_elapsed_ms(const lisa_http_response_t *r)
{
    return r->elapsed_ms;
}

/* ------------------------------------------------------------------ */
/* curl callbacks shared by the async and the blocking path             */

typedef struct {
    lisa_http_response_t *resp;
    CURL *easy;
    lisa_http_chunk_fn *on_chunk;
    void *arg;
} s_sink_t;

static size_t
s_on_header(char *buf, size_t size, size_t nitems, void *userdata)
{
    s_sink_t *sink = userdata;
    lisa_http_response_t *r = sink->resp;
    size_t n = size * nitems;
    r->header_bytes += n;
    if (r->header_bytes > LISA_HTTP_CLIENT_MAX_HEADER_BYTES) {
        r->too_large = true;
        return 0;
    }
    if (n >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
        /* a new response begins (after 1xx or a redirect) */
        s_resp_clear_headers(r);
        return n;
    }
    const char *colon = memchr(buf, ':', n);
    if (!colon)
        return n;
    size_t nl = (size_t) (colon - buf);
    const char *v = colon + 1;
    const char *end = buf + n;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    if (r->n_hdrs == r->cap_hdrs) {
        r->cap_hdrs = r->cap_hdrs ? r->cap_hdrs * 2 : 16;
        r->hdrs = lisa_realloc(r->hdrs, r->cap_hdrs * sizeof(s_hdr_t));
    }
    r->hdrs[r->n_hdrs].name = lisa_strndup(buf, nl);
    r->hdrs[r->n_hdrs].value = lisa_strndup(v, (size_t) (end - v));
    r->n_hdrs++;
    return n;
}

static size_t
s_on_write(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    s_sink_t *sink = userdata;
    lisa_http_response_t *r = sink->resp;
    size_t n = size * nmemb;
    if (sink->on_chunk) {
        long status = 0;
        (void) curl_easy_getinfo(sink->easy, CURLINFO_RESPONSE_CODE, &status);
        if (status >= 200 && status < 300) {
            if (!sink->on_chunk(ptr, n, status, sink->arg)) {
                r->chunk_aborted = true;
                return 0;
            }
            return n;
        }
    }
    if (n > r->max_body - r->body_len) {
        r->too_large = true;
        return 0;
    }
    if (r->body_len + n + 1 > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 1024;
        while (cap < r->body_len + n + 1)
            cap *= 2;
        r->body = lisa_realloc(r->body, cap);
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, ptr, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return n;
}

/* Configures `easy` for `req`; the header list is returned in *slist. */
static lisa_rc_t
s_setup(CURL *easy, const lisa_http_request_t *req, s_sink_t *sink,
        struct curl_slist **slist)
{
    if (!req || !req->url || !*req->url)
        return LISA_INVALID;
    const char *method = req->method;
    if (!method)
        method = req->body ? "POST" : "GET";
    curl_easy_setopt(easy, CURLOPT_URL, req->url);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, sink->resp->error);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, s_on_header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, sink);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, s_on_write);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, sink);
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_PROXY, req->proxy ? req->proxy : "");
    long timeout = req->timeout_ms;
    if (timeout == 0)
        timeout = LISA_HTTP_CLIENT_DEFAULT_TIMEOUT_MS;
    if (timeout < 0)
        timeout = 0; /* none */
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, timeout);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     req->connect_timeout_ms > 0
                         ? req->connect_timeout_ms
                         : (long) LISA_HTTP_CLIENT_DEFAULT_CONNECT_MS);
    if (!req->on_chunk)
        curl_easy_setopt(easy, CURLOPT_MAXFILESIZE_LARGE,
                         (curl_off_t) sink->resp->max_body);
    if (req->unix_socket)
        curl_easy_setopt(easy, CURLOPT_UNIX_SOCKET_PATH, req->unix_socket);
    if (req->ca_file)
        curl_easy_setopt(easy, CURLOPT_CAINFO, req->ca_file);
    if (req->cert_file)
        curl_easy_setopt(easy, CURLOPT_SSLCERT, req->cert_file);
    if (req->key_file)
        curl_easy_setopt(easy, CURLOPT_SSLKEY, req->key_file);

    if (strcmp(method, "GET") == 0 && !req->body) {
        curl_easy_setopt(easy, CURLOPT_HTTPGET, 1L);
    } else if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
    } else {
        if (req->body || strcmp(method, "POST") == 0 ||
            strcmp(method, "PUT") == 0 || strcmp(method, "PATCH") == 0) {
            curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE,
                             (curl_off_t) (req->body ? req->body_len : 0));
            curl_easy_setopt(easy, CURLOPT_COPYPOSTFIELDS,
                             req->body ? req->body : "");
        }
        if (strcmp(method, "POST") != 0)
            curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method);
    }
    struct curl_slist *l = NULL;
    for (const char *const *h = req->headers; h && *h; h++)
        l = curl_slist_append(l, *h);
    if (req->bearer_token) {
        size_t n = strlen(req->bearer_token) + 32;
        char *auth = lisa_malloc(n);
        snprintf(auth, n, "Authorization: Bearer %s", req->bearer_token);
        l = curl_slist_append(l, auth);
        free(auth);
    }
    if (l)
        curl_easy_setopt(easy, CURLOPT_HTTPHEADER, l);
    *slist = l;
    return LISA_OK;
}

/* Fills rc/status/error/elapsed of `r` after a transfer ended with `res`. */
static void
s_finish_resp(CURL *easy, CURLcode res, lisa_http_response_t *r)
{
    long status = 0;
    (void) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    double secs = 0;
    (void) curl_easy_getinfo(easy, CURLINFO_TOTAL_TIME, &secs);
    r->elapsed_ms = secs * 1000.0;
    r->status = status;
    switch (res) {
    case CURLE_OK:
        r->rc = LISA_OK;
        r->error[0] = '\0';
        return;
    case CURLE_OPERATION_TIMEDOUT:
        r->rc = LISA_TIMEOUT;
        break;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
        r->rc = LISA_UNAVAILABLE;
        break;
    case CURLE_FILESIZE_EXCEEDED:
        r->rc = LISA_TOOLARGE;
        break;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
        r->rc = LISA_INVALID;
        break;
    case CURLE_WRITE_ERROR:
        r->rc = r->too_large ? LISA_TOOLARGE : LISA_ERR;
        if (r->chunk_aborted)
            snprintf(r->error, sizeof(r->error), "%s",
                     "aborted by the chunk callback");
        break;
    default:
        r->rc = r->too_large ? LISA_TOOLARGE : LISA_ERR;
        break;
    }
    if (r->too_large)
        snprintf(r->error, sizeof(r->error), "%s",
                 "response exceeds its size limit");
    if (!r->error[0])
        snprintf(r->error, sizeof(r->error), "%s", curl_easy_strerror(res));
}

/* ------------------------------------------------------------------ */
/* blocking                                                             */

lisa_rc_t
lisa_http_request_sync(const lisa_http_request_t *req,
                       lisa_http_response_t **out)
{
    size_t max = req && req->max_response
                     ? req->max_response
                     : LISA_HTTP_CLIENT_DEFAULT_MAX_RESPONSE;
    lisa_http_response_t *r = s_resp_new(max);
    if (out)
        *out = NULL;
    CURL *easy = NULL;
    struct curl_slist *slist = NULL;
    if (!s_curl_ready() || !(easy = curl_easy_init())) {
        snprintf(r->error, sizeof(r->error), "%s", "curl is not available");
        goto out;
    }
    s_sink_t sink = {r, easy, req ? req->on_chunk : NULL,
                     req ? req->chunk_arg : NULL};
    if (s_setup(easy, req, &sink, &slist) != LISA_OK) {
        r->rc = LISA_INVALID;
        snprintf(r->error, sizeof(r->error), "%s", "invalid request");
        goto out;
    }
    CURLcode res = curl_easy_perform(easy);
    s_finish_resp(easy, res, r);
out:
    if (easy)
        curl_easy_cleanup(easy);
    curl_slist_free_all(slist);
    lisa_rc_t rc = r->rc;
    if (out)
        *out = r;
    else
        lisa_http_response_destroy(&r);
    return rc;
}

/* ------------------------------------------------------------------ */
/* asynchronous: calls                                                  */

typedef struct {
    s_sink_t sink;
    s_call_t call;
} s_call_box_t;

static s_call_box_t *
s_box_of(s_call_t *call)
{
    return (s_call_box_t *) ((char *) call - offsetof(s_call_box_t, call));
}

static void
s_call_unlink(lisa_http_client_t *self, s_call_t *call)
{
    LISA_LIST_UNLINK(self->calls, call);
    self->n_calls--;
}

static void
s_call_free(lisa_http_client_t *self, s_call_t *call)
{
    curl_multi_remove_handle(self->multi, call->easy);
    if (self->n_spare < S_SPARE_EASY) {
        curl_easy_reset(call->easy);
        self->spare[self->n_spare++] = call->easy;
    } else
        curl_easy_cleanup(call->easy);
    curl_slist_free_all(call->slist);
    lisa_http_response_destroy(&call->resp);
    free(s_box_of(call));
}

static void
s_check_done(lisa_http_client_t *self)
{
    CURLMsg *m;
    int left = 0;
    while ((m = curl_multi_info_read(self->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURL *easy = m->easy_handle;
        CURLcode res = m->data.result;
        s_call_t *call = NULL;
        (void) curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **) &call);
        if (!call)
            continue;
        curl_multi_remove_handle(self->multi, easy);
        s_call_unlink(self, call);
        s_finish_resp(easy, res, call->resp);
        call->done(call->resp, call->arg);
        s_call_free(self, call);
    }
}

static void
s_on_socket(epoll_data_t data, uint32_t events, void *arg)
{
    lisa_http_client_t *self = arg;
    int flags = 0;
    if (events & EPOLLIN)
        flags |= CURL_CSELECT_IN;
    if (events & EPOLLOUT)
        flags |= CURL_CSELECT_OUT;
    if (events & (EPOLLERR | EPOLLHUP))
        flags |= CURL_CSELECT_ERR;
    int running = 0;
    curl_multi_socket_action(self->multi, (curl_socket_t) data.fd, flags,
                             &running);
}

static void
s_on_batch(void *arg)
{
    s_check_done(arg);
}

static int
s_on_timer(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    lisa_http_client_t *self = arg;
    if (timer_id == self->timer_id)
        self->timer_id = -1; /* one-shot: zloop drops it after we return */
    int running = 0;
    curl_multi_socket_action(self->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    s_check_done(self);
    return 0;
}

static int
s_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    (void) multi;
    lisa_http_client_t *self = userp;
    if (self->timer_id >= 0) {
        zloop_timer_end(self->loop, self->timer_id);
        self->timer_id = -1;
    }
    if (timeout_ms >= 0) {
        self->timer_id =
            zloop_timer(self->loop, (size_t) timeout_ms, 1, s_on_timer, self);
        if (self->timer_id < 0)
            return -1;
    }
    return 0;
}

static int
s_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void) easy;
    lisa_http_client_t *self = userp;
    if (what == CURL_POLL_REMOVE) {
        if (socketp) {
            lisa_epset_del(self->sockets, s);
            curl_multi_assign(self->multi, s, NULL);
        }
        return 0;
    }
    epoll_data_t data = {.fd = s};
    uint32_t events = 0;
    if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
        events |= EPOLLIN;
    if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
        events |= EPOLLOUT;
    if (!socketp) {
        if (lisa_epset_add(self->sockets, s, events, data) != LISA_OK &&
            !(errno == EEXIST &&
              lisa_epset_mod(self->sockets, s, events, data) == LISA_OK)) {
            lisa_log_error("http client: epoll add: %s", strerror(errno));
            return -1;
        }
        curl_multi_assign(self->multi, s, self);
    } else if (lisa_epset_mod(self->sockets, s, events, data) != LISA_OK) {
        lisa_log_error("http client: epoll mod: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* asynchronous: public API                                             */

lisa_http_client_t *
lisa_http_client_new(zloop_t *loop, const lisa_http_client_config_t *cfg)
{
    if (!loop || !s_curl_ready())
        return NULL;
    lisa_http_client_t *self = lisa_calloc(1, sizeof(*self));
    self->loop = loop;
    self->timer_id = -1;
    self->sockets = lisa_epset_new(loop, s_on_socket, s_on_batch, self);
    self->multi = curl_multi_init();
    if (!self->sockets || !self->multi) {
        lisa_log_error("http client: cannot create epoll or curl multi");
        goto fail;
    }
    curl_multi_setopt(self->multi, CURLMOPT_SOCKETFUNCTION, s_curl_socket);
    curl_multi_setopt(self->multi, CURLMOPT_SOCKETDATA, self);
    curl_multi_setopt(self->multi, CURLMOPT_TIMERFUNCTION, s_curl_timer);
    curl_multi_setopt(self->multi, CURLMOPT_TIMERDATA, self);
    curl_multi_setopt(self->multi, CURLMOPT_MAXCONNECTS, S_KEEP_CONNECTIONS);
    if (cfg && cfg->max_connections > 0)
        curl_multi_setopt(self->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                          cfg->max_connections);
    if (cfg && cfg->max_host_connections > 0)
        curl_multi_setopt(self->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                          cfg->max_host_connections);
    return self;
fail:
    lisa_http_client_destroy(&self);
    return NULL;
}

void
lisa_http_client_destroy(lisa_http_client_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    lisa_http_client_t *self = *self_p;
    *self_p = NULL;
    while (self->calls) {
        s_call_t *call = self->calls;
        s_call_unlink(self, call);
        s_call_free(self, call);
    }
    while (self->n_spare)
        curl_easy_cleanup(self->spare[--self->n_spare]);
    if (self->multi)
        curl_multi_cleanup(self->multi);
    if (self->timer_id >= 0)
        zloop_timer_end(self->loop, self->timer_id);
    lisa_epset_destroy(&self->sockets);
    free(self);
}

lisa_rc_t
lisa_http_client_send(lisa_http_client_t *self, const lisa_http_request_t *req,
                      lisa_http_done_fn *done, void *arg, uint64_t *id)
{
    if (!self || !req || !done)
        return LISA_INVALID;
    s_call_box_t *box = lisa_calloc(1, sizeof(*box));
    s_call_t *call = &box->call;
    call->client = self;
    call->done = done;
    call->on_chunk = req->on_chunk;
    call->arg = arg;
    call->resp =
        s_resp_new(req->max_response ? req->max_response
                                     : LISA_HTTP_CLIENT_DEFAULT_MAX_RESPONSE);
    call->easy =
        self->n_spare ? self->spare[--self->n_spare] : curl_easy_init();
    if (!call->easy) {
        lisa_http_response_destroy(&call->resp);
        free(box);
        return LISA_ERR;
    }
    box->sink.resp = call->resp;
    box->sink.easy = call->easy;
    box->sink.on_chunk = req->on_chunk;
    box->sink.arg = arg;
    lisa_rc_t rc = s_setup(call->easy, req, &box->sink, &call->slist);
    if (rc != LISA_OK) {
        curl_easy_cleanup(call->easy);
        curl_slist_free_all(call->slist);
        lisa_http_response_destroy(&call->resp);
        free(box);
        return rc;
    }
    curl_easy_setopt(call->easy, CURLOPT_PRIVATE, (char *) call);
    call->id = ++self->next_id;
    LISA_LIST_PUSH(self->calls, call);
    self->n_calls++;
    if (curl_multi_add_handle(self->multi, call->easy) != CURLM_OK) {
        s_call_unlink(self, call);
        s_call_free(self, call);
        return LISA_ERR;
    }
    if (id)
        *id = call->id;
    return LISA_OK;
}

lisa_rc_t
lisa_http_client_cancel(lisa_http_client_t *self, uint64_t id)
{
    for (s_call_t *call = self ? self->calls : NULL; call; call = call->next)
        if (call->id == id) {
            s_call_unlink(self, call);
            s_call_free(self, call);
            return LISA_OK;
        }
    return LISA_NOTFOUND;
}

size_t
lisa_http_client_pending(const lisa_http_client_t *self)
{
    return self ? self->n_calls : 0;
}
