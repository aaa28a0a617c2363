/*
 * ctl_http: libcurl easy with bounded answers; batches through one curl
 * multi handle whose connection cache outlives each batch.
 */
#include "ctl_http.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

struct ctl_http {
    CURL *curl;
    CURLM *multi; /* batches (ctl_http_many); NULL until the first */
    char *socket;
    char *ca;
    char *auth;
    size_t max;
};

typedef struct {
    char *data;
    size_t len, cap, max;
    int over;
} s_buf_t;

static size_t
s_on_data(char *p, size_t size, size_t nmemb, void *ud)
{
    s_buf_t *b = ud;
    size_t n = size * nmemb;
    if (b->len + n > b->max) {
        b->over = 1;
        return 0;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->data = lisa_realloc(b->data, cap);
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

ctl_http_t *
ctl_http_new(const char *unix_socket, const char *ca_file, size_t max_reply)
{
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    ctl_http_t *h = lisa_calloc(1, sizeof *h);
    h->curl = c;
    h->socket = unix_socket && *unix_socket ? lisa_strdup(unix_socket) : NULL;
    h->ca = ca_file && *ca_file ? lisa_strdup(ca_file) : NULL;
    h->max = max_reply ? max_reply : 16u * 1024u * 1024u;
    return h;
}

void
ctl_http_destroy(ctl_http_t **h)
{
    if (!h || !*h)
        return;
    curl_easy_cleanup((*h)->curl);
    if ((*h)->multi)
        curl_multi_cleanup((*h)->multi);
    lisa_free(&(*h)->socket);
    lisa_free(&(*h)->ca);
    lisa_free(&(*h)->auth);
    lisa_free(h);
}

void
ctl_http_set_bearer(ctl_http_t *h, const char *token)
{
    lisa_free(&h->auth);
    if (!token || !*token)
        return;
    size_t n = strlen(token) + 32;
    h->auth = lisa_malloc(n);
    snprintf(h->auth, n, "Authorization: Bearer %s", token);
}

/* Sets up `c` for one request; the header list and answer buffer are
 * the caller's until the transfer ends. */
static void
s_setup(ctl_http_t *h, CURL *c, const char *method, const char *url,
        const char *content_type, const char *body, long timeout_ms,
        struct curl_slist **hdr, s_buf_t *b)
{
    char ct[128];
    *hdr = NULL;
    memset(b, 0, sizeof *b);
    b->max = h->max;
    curl_easy_setopt(c, CURLOPT_URL, url);
    if (h->socket)
        curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, h->socket);
    if (h->ca)
        curl_easy_setopt(c, CURLOPT_CAINFO, h->ca);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        snprintf(ct, sizeof ct, "Content-Type: %s",
                 content_type ? content_type : "application/json");
        *hdr = curl_slist_append(*hdr, ct);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t) strlen(body));
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
    }
    if (h->auth)
        *hdr = curl_slist_append(*hdr, h->auth);
    *hdr = curl_slist_append(*hdr, "Accept: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                     timeout_ms > 0 && timeout_ms < 5000 ? timeout_ms : 5000L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
}

/* Turns a finished transfer into rc and *rep; frees the buffer on error. */
static lisa_rc_t
s_finish(ctl_http_t *h, CURL *c, CURLcode cc, const char *method,
         const char *url, s_buf_t *b, ctl_http_rep_t *rep)
{
    if (cc != CURLE_OK) {
        lisa_free(&b->data);
        if (b->over) {
            lisa_log_warn("http %s %s: answer over %zu bytes", method, url,
                          h->max);
            return LISA_TOOLARGE;
        }
        lisa_log_debug("http %s %s: %s", method, url, curl_easy_strerror(cc));
        return cc == CURLE_OPERATION_TIMEDOUT ? LISA_TIMEOUT : LISA_UNAVAILABLE;
    }
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &rep->status);
    rep->body = b->data ? b->data : lisa_strdup("");
    rep->len = b->len;
    return LISA_OK;
}

lisa_rc_t
ctl_http_call(ctl_http_t *h, const char *method, const char *url,
              const char *content_type, const char *body, long timeout_ms,
              ctl_http_rep_t *rep)
{
    memset(rep, 0, sizeof *rep);
    CURL *c = h->curl;
    curl_easy_reset(c);
    struct curl_slist *hdr = NULL;
    s_buf_t b;
    s_setup(h, c, method, url, content_type, body, timeout_ms, &hdr, &b);
    CURLcode cc = curl_easy_perform(c);
    curl_slist_free_all(hdr);
    return s_finish(h, c, cc, method, url, &b, rep);
}

/* One transfer of a batch in flight. */
typedef struct {
    CURL *easy;
    struct curl_slist *hdr;
    s_buf_t buf;
    ctl_http_req_t *req;
} s_xfer_t;

/* The transfers of one batch, to free whatever is left. */
typedef struct {
    s_xfer_t **v;
    size_t n, cap;
} s_xfers_t;

/* Adds req to the batch; false when it could not be. */
static bool
s_add(ctl_http_t *h, s_xfers_t *all, ctl_http_req_t *req, long timeout_ms)
{
    memset(&req->rep, 0, sizeof req->rep);
    req->rc = LISA_UNAVAILABLE;
    s_xfer_t *x = lisa_calloc(1, sizeof *x);
    x->req = req;
    x->easy = curl_easy_init();
    if (!x->easy) {
        lisa_free(&x);
        return false;
    }
    s_setup(h, x->easy, req->method, req->url, NULL, req->body, timeout_ms,
            &x->hdr, &x->buf);
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, (void *) x);
    if (curl_multi_add_handle(h->multi, x->easy) != CURLM_OK) {
        curl_easy_cleanup(x->easy);
        curl_slist_free_all(x->hdr);
        lisa_free(&x);
        return false;
    }
    if (all->n == all->cap) {
        all->cap = all->cap ? all->cap * 2 : 16;
        all->v = lisa_realloc(all->v, all->cap * sizeof *all->v);
    }
    all->v[all->n++] = x;
    return true;
}

/* Frees a transfer and forgets it in `all`. */
static void
s_drop(ctl_http_t *h, s_xfers_t *all, s_xfer_t *x)
{
    for (size_t i = 0; i < all->n; i++)
        if (all->v[i] == x)
            all->v[i] = NULL;
    curl_multi_remove_handle(h->multi, x->easy);
    curl_easy_cleanup(x->easy);
    curl_slist_free_all(x->hdr);
    lisa_free(&x->buf.data); /* NULL once s_finish took it */
    lisa_free(&x);
}

void
ctl_http_many(ctl_http_t *h, ctl_http_req_t *reqs, size_t n, size_t parallel,
              long timeout_ms)
{
    for (size_t i = 0; i < n; i++)
        for (ctl_http_req_t *r = reqs[i].next; r; r = r->next) {
            memset(&r->rep, 0, sizeof r->rep);
            r->rc = LISA_AGAIN; /* not sent */
        }
    if (n == 0)
        return;
    if (!h->multi && !(h->multi = curl_multi_init())) {
        for (size_t i = 0; i < n; i++)
            reqs[i].rc = ctl_http_call(h, reqs[i].method, reqs[i].url, NULL,
                                       reqs[i].body, timeout_ms, &reqs[i].rep);
        return;
    }
    curl_multi_setopt(h->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                      (long) (parallel ? parallel : 1));
    curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS,
                      (long) (parallel ? parallel : 1));
    s_xfers_t all = {0};
    size_t open = 0;
    for (size_t i = 0; i < n; i++)
        open += s_add(h, &all, &reqs[i], timeout_ms);
    while (open > 0) {
        int running = 0;
        if (curl_multi_perform(h->multi, &running) != CURLM_OK)
            break;
        CURLMsg *m;
        int left = 0;
        while ((m = curl_multi_info_read(h->multi, &left)) != NULL) {
            if (m->msg != CURLMSG_DONE)
                continue;
            s_xfer_t *x = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **) &x);
            if (!x)
                continue;
            ctl_http_req_t *r = x->req;
            r->rc = s_finish(h, x->easy, m->data.result, r->method, r->url,
                             &x->buf, &r->rep);
            x->buf.data = NULL; /* the answer's now, or freed */
            s_drop(h, &all, x);
            open--;
            /* Its follow-up goes out at once after a 2xx answer. */
            if (r->next && r->rc == LISA_OK && r->rep.status >= 200 &&
                r->rep.status < 300)
                open += s_add(h, &all, r->next, timeout_ms);
        }
        if (open > 0 && running > 0)
            (void) curl_multi_poll(h->multi, NULL, 0, 100, NULL);
    }
    for (size_t i = 0; i < all.n; i++)
        if (all.v[i]) /* never finished: the multi handle failed */
            s_drop(h, &all, all.v[i]);
    lisa_free(&all.v);
}

void
ctl_http_rep_clear(ctl_http_rep_t *rep)
{
    if (rep)
        lisa_free(&rep->body);
}

char *
ctl_http_escape(const char *s)
{
    size_t n = strlen(s);
    char *out = lisa_malloc(3 * n + 1);
    size_t o = 0;
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
            c == '~') {
            out[o++] = (char) c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
    return out;
}
