/*
 * gw_engine: the engine-call facade over gw_client and lisa_http_client
 * (see the header). A call carries a small record (the caller's callback)
 * that the facade keeps in a list, so destroying it frees the records of
 * the calls the two clients drop.
 */
#include "gw_engine.h"

#include "gw_client.h"
#include "lisa/lisa_http_client.h"
#include "lisa/lisa_mem.h"

#include <string.h>

struct gw_engine_t {
    gw_client_t *gc;        /* literal addresses */
    lisa_http_client_t *hc; /* host names, https, health checks */
    zlistx_t *calls;        /* s_call_t of calls in flight */
    size_t max_body;
};

typedef struct {
    gw_engine_t *self;
    gw_engine_done_fn *done;
    void *arg;
    void *handle; /* its node in calls */
} s_call_t;

gw_engine_t *
gw_engine_new(zloop_t *loop, size_t max_body)
{
    gw_engine_t *self = lisa_calloc(1, sizeof *self);
    lisa_http_client_config_t hcc = {0};
    self->hc = lisa_http_client_new(loop, &hcc);
    self->gc = gw_client_new(loop, max_body);
    self->calls = zlistx_new();
    self->max_body = max_body;
    if (!self->hc || !self->gc || !self->calls)
        gw_engine_destroy(&self);
    return self;
}

void
gw_engine_destroy(gw_engine_t **self)
{
    if (!self || !*self)
        return;
    gw_engine_t *e = *self;
    lisa_http_client_destroy(&e->hc); /* drops calls, no callbacks */
    gw_client_destroy(&e->gc);
    if (e->calls) {
        s_call_t *c;
        while ((c = zlistx_first(e->calls))) {
            zlistx_delete(e->calls, zlistx_cursor(e->calls));
            lisa_free(&c);
        }
        zlistx_destroy(&e->calls);
    }
    lisa_free(self);
}

size_t
gw_engine_pending(const gw_engine_t *self)
{
    return zlistx_size(self->calls);
}

static void
s_gc_done(const gw_client_resp_t *r, void *arg)
{
    s_call_t *c = arg;
    zlistx_delete(c->self->calls, c->handle);
    gw_engine_resp_t out = {r->rc, r->status, r->body, r->body_len, r->error};
    gw_engine_done_fn *done = c->done;
    void *darg = c->arg;
    lisa_free(&c);
    done(&out, darg);
}

static void
s_curl_done(lisa_http_response_t *resp, void *arg)
{
    s_call_t *c = arg;
    zlistx_delete(c->self->calls, c->handle);
    gw_engine_resp_t out = {.rc = lisa_http_response_rc(resp),
                            .status = lisa_http_response_status(resp),
                            .error = lisa_http_response_error(resp)};
    out.body = lisa_http_response_body(resp, &out.len);
    if (!out.body)
        out.body = "";
    gw_engine_done_fn *done = c->done;
    void *darg = c->arg;
    lisa_free(&c);
    done(&out, darg);
}

static s_call_t *
s_record(gw_engine_t *self, gw_engine_done_fn *done, void *arg)
{
    s_call_t *c = lisa_calloc(1, sizeof *c);
    c->self = self;
    c->done = done;
    c->arg = arg;
    c->handle = zlistx_add_end(self->calls, c);
    return c;
}

static lisa_rc_t
s_curl_send(gw_engine_t *self, const lisa_http_request_t *r,
            gw_engine_done_fn *done, void *arg)
{
    s_call_t *c = s_record(self, done, arg);
    if (lisa_http_client_send(self->hc, r, s_curl_done, c, NULL) != LISA_OK) {
        zlistx_delete(self->calls, c->handle);
        lisa_free(&c);
        return LISA_ERR;
    }
    return LISA_OK;
}

lisa_rc_t
gw_engine_post(gw_engine_t *self, const char *url, const struct iovec *parts,
               size_t n, long timeout_ms, long connect_ms,
               gw_engine_done_fn *done, void *arg)
{
    if (n > GW_ENGINE_MAX_PARTS)
        return LISA_INVALID;
    if (gw_client_url_ok(url)) {
        s_call_t *c = s_record(self, done, arg);
        lisa_rc_t rc = gw_client_postv(self->gc, url, parts, n, timeout_ms,
                                       connect_ms, s_gc_done, c, NULL);
        if (rc != LISA_OK) {
            zlistx_delete(self->calls, c->handle);
            lisa_free(&c);
        }
        return rc;
    }
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += parts[i].iov_len;
    char *body = lisa_malloc(len + 1);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(body + at, parts[i].iov_base, parts[i].iov_len);
        at += parts[i].iov_len;
    }
    body[len] = '\0';
    /* no "Expect: 100-continue" round trip before the body */
    static const char *const hdrs[] = {"Content-Type: application/json",
                                       "Expect:", NULL};
    lisa_http_request_t r = {.method = "POST",
                             .url = url,
                             .headers = hdrs,
                             .body = body,
                             .body_len = len,
                             .timeout_ms = timeout_ms,
                             .connect_timeout_ms = connect_ms,
                             .max_response = self->max_body};
    lisa_rc_t rc = s_curl_send(self, &r, done, arg); /* the body is copied */
    lisa_free(&body);
    return rc;
}

lisa_rc_t
gw_engine_get(gw_engine_t *self, const char *url, long timeout_ms,
              gw_engine_done_fn *done, void *arg)
{
    lisa_http_request_t r = {
        .url = url, .timeout_ms = timeout_ms, .connect_timeout_ms = timeout_ms};
    return s_curl_send(self, &r, done, arg);
}
