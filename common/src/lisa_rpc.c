/*
 * lisa_rpc: DEALER client for the broker's RPC socket.
 *
 * The frames are [empty, Request] out and [empty, Reply] in, the same shape
 * a REQ socket would use, so scripts may use REQ while services use this
 * DEALER client with many requests in flight. Request ids make every reply
 * attributable: a reply whose id is not open (late after a timeout, or a
 * duplicate after a retry) is counted and dropped.
 *
 * The open async requests live in a small array scanned linearly: a client
 * has at most a few hundred requests open, and a scan over a few hundred
 * cache-resident entries costs less than maintaining a hash.
 */
#include "lisa/lisa_rpc.h"

#include "lisa/lisa_codec.h"
#include "lisa/lisa_curve.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t id;
    int64_t deadline; /* zclock_mono ms */
    lisa_rpc_cb_fn *cb;
    void *arg;
} s_open_t;

struct lisa_rpc_t {
    char *endpoint;
    char *caller;
    zsock_t *sock;
    unsigned tries;
    uint64_t next_id;
    s_open_t *open;
    size_t n_open;
    size_t cap_open;
    uint64_t dropped;
    zloop_t *loop;
    int timer_id;
    const volatile sig_atomic_t *interrupt; /* lisa_rpc_set_interrupt */
};

static zsock_t *
s_socket(const char *endpoint)
{
    zsock_t *s = zsock_new(ZMQ_DEALER);
    if (!s)
        return NULL;
    zsock_set_linger(s, 0);
    zsock_set_rcvhwm(s, 100000);
    zsock_set_sndhwm(s, 100000);
    lisa_curve_client(s);
    if (zsock_connect(s, "%s", endpoint) != 0) {
        zsock_destroy(&s);
        return NULL;
    }
    return s;
}

lisa_rpc_t *
lisa_rpc_new(const char *endpoint, const char *caller)
{
    if (!endpoint || !*endpoint)
        return NULL;
    zsock_t *s = s_socket(endpoint);
    if (!s) {
        lisa_log_error("rpc: cannot connect to '%s'", endpoint);
        return NULL;
    }
    lisa_rpc_t *self = lisa_calloc(1, sizeof *self);
    self->endpoint = lisa_strdup(endpoint);
    self->caller = lisa_strdup(caller ? caller : "");
    self->sock = s;
    self->tries = LISA_RPC_DEFAULT_TRIES;
    /* Ids start at a time-derived value so two lives of one process do not
     * reuse the same ids while old replies may still be in flight. */
    self->next_id = ((uint64_t) zclock_time() << 16) | 1u;
    self->timer_id = -1;
    return self;
}

void
lisa_rpc_destroy(lisa_rpc_t **pself)
{
    if (!pself || !*pself)
        return;
    lisa_rpc_t *self = *pself;
    lisa_rpc_detach(self);
    /* Callbacks may not add requests while we tear down: take the list. */
    s_open_t *open = self->open;
    size_t n = self->n_open;
    self->open = NULL;
    self->n_open = self->cap_open = 0;
    for (size_t i = 0; i < n; i++)
        open[i].cb(open[i].arg, open[i].id, LISA_ERR, NULL);
    lisa_free(&open);
    zsock_destroy(&self->sock);
    lisa_free(&self->endpoint);
    lisa_free(&self->caller);
    lisa_free(pself);
}

void
lisa_rpc_set_tries(lisa_rpc_t *self, unsigned tries)
{
    self->tries = tries ? tries : 1;
}

void
lisa_rpc_set_interrupt(lisa_rpc_t *self, const volatile sig_atomic_t *flag)
{
    if (self)
        self->interrupt = flag;
}

const char *
lisa_rpc_endpoint(const lisa_rpc_t *self)
{
    return self->endpoint;
}

bool
lisa_rpc_idempotent(const Lisa__Request *req)
{
    switch (req->body_case) {
    case LISA__REQUEST__BODY_ENQUEUE:
        /* Only a keyed enqueue is answered again instead of repeated. */
        return req->enqueue && req->enqueue->idempotency_key &&
               req->enqueue->idempotency_key[0];
    case LISA__REQUEST__BODY_CLAIM:
        return false; /* each call creates attempts */
    case LISA__REQUEST__BODY_EXPORT:
        return req->export && !req->export->prune;
    case LISA__REQUEST__BODY_POLICY:
        return req->policy && !req->policy->set;
    case LISA__REQUEST__BODY_ATTEMPT_START:
    case LISA__REQUEST__BODY_HEARTBEAT:
    case LISA__REQUEST__BODY_ATTEMPT_COMPLETE:
    case LISA__REQUEST__BODY_ATTEMPT_FAIL:
    case LISA__REQUEST__BODY_GET_TASK:
    case LISA__REQUEST__BODY_WAIT:
    case LISA__REQUEST__BODY_QUERY:
    case LISA__REQUEST__BODY_CANCEL:
    case LISA__REQUEST__BODY_STATS:
    case LISA__REQUEST__BODY_SPAN_PUT:
    case LISA__REQUEST__BODY_SPAN_STATUS:
    case LISA__REQUEST__BODY_ENGINE_REGISTER:
    case LISA__REQUEST__BODY_ENGINE_LIST:
        return true;
    default:
        return false;
    }
}

/* Sends req on sock, waiting at most timeout_ms for the socket to take
 * it: a DEALER with no connected peer (the broker down, or refusing the
 * CURVE handshake) blocks its sends, and a call must not outlive its
 * deadline. LISA_TIMEOUT when the socket did not take it in time. */
static lisa_rc_t
s_send(zsock_t *sock, Lisa__Request *req, int timeout_ms)
{
    zsock_set_sndtimeo(sock, timeout_ms);
    zmsg_t *m = zmsg_new();
    zmsg_addmem(m, NULL, 0);
    lisa_codec_append(m, &req->base);
    if (zmsg_send(&m, sock) != 0) {
        int e = zmq_errno();
        zmsg_destroy(&m);
        return e == EAGAIN ? LISA_TIMEOUT : LISA_ERR;
    }
    return LISA_OK;
}

/* Replaces reply r (consumed) by an error reply to the same request: a
 * string field of r is not valid UTF-8. Allocated as protobuf-c's default
 * allocator does, so lisa_rpc_reply_free releases it the same way. */
static Lisa__Reply *
s_undecodable(Lisa__Reply *r)
{
    const char *field = "?";
    (void) lisa_codec_utf8_ok(&r->base, &field);
    char msg[160];
    snprintf(msg, sizeof msg,
             "the reply's field '%s' is not valid UTF-8: the broker holds a "
             "record that cannot be decoded",
             field);
    Lisa__Reply *e = malloc(sizeof *e);
    char *text = strdup(msg);
    if (!e || !text)
        abort();
    lisa__reply__init(e);
    e->version = r->version;
    e->request_id = r->request_id;
    e->code = LISA__CODE__CODE_INVALID;
    e->error = text;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    lisa_log_error("rpc: %s", msg);
    return e;
}

/* Reads one message; returns the decoded reply or NULL (counted). */
static Lisa__Reply *
s_recv(lisa_rpc_t *self, zsock_t *sock)
{
    zmsg_t *m = zmsg_recv(sock);
    if (!m)
        return NULL;
    zframe_t *f = zmsg_last(m);
    if (zmsg_size(m) == 2 && zframe_size(zmsg_first(m)) != 0)
        f = NULL;
    /* Decoded here rather than with lisa_codec_decode: an error reply may
     * carry no body (the request it answers could not be read), which the
     * codec's body check would refuse. The bounds and version are the
     * same. */
    Lisa__Reply *r = NULL;
    const char *why = "bad frames";
    if (f && zmsg_size(m) <= 2) {
        if (zframe_size(f) > LISA_RPC_MAX_REPLY)
            why = "reply exceeds the size limit";
        else if (!(r = lisa__reply__unpack(NULL, zframe_size(f),
                                           zframe_data(f))))
            why = "not a valid Reply";
        else if (r->version != LISA_PROTOCOL_VERSION) {
            why = "unsupported protocol version";
            protobuf_c_message_free_unpacked(&r->base, NULL);
            r = NULL;
        } else if (r->body_case == LISA__REPLY__BODY__NOT_SET &&
                   r->code == LISA__CODE__CODE_OK) {
            why = "an OK reply without a body";
            protobuf_c_message_free_unpacked(&r->base, NULL);
            r = NULL;
        } else if (!lisa_codec_utf8_ok(&r->base, NULL)) {
            /* a record the caller could not hand on: its call fails now,
             * loudly, rather than with a string cut or dropped later */
            r = s_undecodable(r);
        }
    }
    zmsg_destroy(&m);
    if (!r) {
        self->dropped++;
        lisa_log_warn("rpc: dropped a malformed reply from %s (%s)",
                      self->endpoint, why);
    }
    return r;
}

static void
s_stamp(lisa_rpc_t *self, Lisa__Request *req)
{
    req->request_id = self->next_id++;
    req->caller = self->caller;
}

lisa_rc_t
lisa_rpc_call(lisa_rpc_t *self, Lisa__Request *req, int timeout_ms,
              Lisa__Reply **reply)
{
    *reply = NULL;
    if (timeout_ms <= 0)
        return LISA_INVALID;
    unsigned tries = lisa_rpc_idempotent(req) ? self->tries : 1;
    s_stamp(self, req);
    for (unsigned t = 0; t < tries; t++) {
        if (t > 0) {
            /* Lazy Pirate: a fresh socket drops whatever the old one had
             * queued or half-received. */
            zsock_destroy(&self->sock);
            self->sock = s_socket(self->endpoint);
            if (!self->sock)
                return LISA_ERR;
            lisa_log_info("rpc: retry %u of request %llu to %s", t,
                          (unsigned long long) req->request_id, self->endpoint);
        }
        int64_t deadline = zclock_mono() + timeout_ms;
        lisa_rc_t sent = s_send(self->sock, req, timeout_ms);
        if (sent == LISA_TIMEOUT)
            continue; /* this try's time went waiting for a peer */
        if (sent != LISA_OK)
            return LISA_ERR;
        for (;;) {
            if (self->interrupt && *self->interrupt)
                return LISA_AGAIN;
            int64_t left = deadline - zclock_mono();
            if (left <= 0)
                break;
            int64_t slice = self->interrupt && left > 100 ? 100 : left;
            zmq_pollitem_t it = {zsock_resolve(self->sock), 0, ZMQ_POLLIN, 0};
            int rc = zmq_poll(&it, 1, (long) slice);
            if (rc < 0) {
                if (zmq_errno() == EINTR)
                    continue;
                return LISA_ERR;
            }
            if (rc == 0) {
                if (slice < left)
                    continue;
                break;
            }
            Lisa__Reply *r = s_recv(self, self->sock);
            if (!r)
                continue;
            if (r->request_id != req->request_id) {
                self->dropped++;
                protobuf_c_message_free_unpacked(&r->base, NULL);
                continue;
            }
            *reply = r;
            return LISA_OK;
        }
    }
    return LISA_TIMEOUT;
}

void
lisa_rpc_reply_free(Lisa__Reply **reply)
{
    if (reply && *reply) {
        protobuf_c_message_free_unpacked(&(*reply)->base, NULL);
        *reply = NULL;
    }
}

lisa_rc_t
lisa_rpc_reply_rc(const Lisa__Reply *reply)
{
    return lisa_rc_from_code((int) reply->code);
}

lisa_rc_t
lisa_rpc_send(lisa_rpc_t *self, Lisa__Request *req, int timeout_ms,
              lisa_rpc_cb_fn *cb, void *arg, uint64_t *request_id)
{
    if (timeout_ms <= 0 || !cb)
        return LISA_INVALID;
    s_stamp(self, req);
    lisa_rc_t sent = s_send(self->sock, req, timeout_ms);
    if (sent != LISA_OK)
        return sent;
    if (self->n_open == self->cap_open) {
        self->cap_open = self->cap_open ? self->cap_open * 2 : 16;
        self->open =
            lisa_realloc(self->open, self->cap_open * sizeof *self->open);
    }
    self->open[self->n_open++] =
        (s_open_t){req->request_id, zclock_mono() + timeout_ms, cb, arg};
    if (request_id)
        *request_id = req->request_id;
    return LISA_OK;
}

zsock_t *
lisa_rpc_socket(lisa_rpc_t *self)
{
    return self->sock;
}

/* Removes entry i (order is not kept) and returns it. */
static s_open_t
s_take(lisa_rpc_t *self, size_t i)
{
    s_open_t e = self->open[i];
    self->open[i] = self->open[--self->n_open];
    return e;
}

size_t
lisa_rpc_dispatch(lisa_rpc_t *self)
{
    size_t ran = 0;
    while (zsock_events(self->sock) & ZMQ_POLLIN) {
        Lisa__Reply *r = s_recv(self, self->sock);
        if (!r)
            continue;
        size_t i = 0;
        while (i < self->n_open && self->open[i].id != r->request_id)
            i++;
        if (i == self->n_open) {
            self->dropped++;
        } else {
            s_open_t e = s_take(self, i);
            e.cb(e.arg, e.id, LISA_OK, r);
            ran++;
        }
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }
    return ran;
}

size_t
lisa_rpc_expire(lisa_rpc_t *self)
{
    size_t ran = 0;
    int64_t now = zclock_mono();
    size_t i = 0;
    while (i < self->n_open) {
        if (self->open[i].deadline <= now) {
            s_open_t e = s_take(self, i);
            e.cb(e.arg, e.id, LISA_TIMEOUT, NULL);
            ran++;
            i = 0; /* the callback may have changed the array */
            now = zclock_mono();
        } else {
            i++;
        }
    }
    return ran;
}

int64_t
lisa_rpc_next_deadline_ms(const lisa_rpc_t *self)
{
    if (self->n_open == 0)
        return -1;
    int64_t best = self->open[0].deadline;
    for (size_t i = 1; i < self->n_open; i++)
        if (self->open[i].deadline < best)
            best = self->open[i].deadline;
    int64_t left = best - zclock_mono();
    return left < 0 ? 0 : left;
}

size_t
lisa_rpc_pending(const lisa_rpc_t *self)
{
    return self->n_open;
}

static int
s_on_readable(zloop_t *loop, zsock_t *sock, void *arg)
{
    (void) loop;
    (void) sock;
    lisa_rpc_dispatch((lisa_rpc_t *) arg);
    return 0;
}

static int
s_on_timer(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    lisa_rpc_expire((lisa_rpc_t *) arg);
    return 0;
}

lisa_rc_t
lisa_rpc_attach(lisa_rpc_t *self, zloop_t *loop, int tick_ms)
{
    if (self->loop || tick_ms <= 0)
        return LISA_ERR;
    if (zloop_reader(loop, self->sock, s_on_readable, self) != 0)
        return LISA_ERR;
    int id = zloop_timer(loop, (size_t) tick_ms, 0, s_on_timer, self);
    if (id < 0) {
        zloop_reader_end(loop, self->sock);
        return LISA_ERR;
    }
    self->loop = loop;
    self->timer_id = id;
    return LISA_OK;
}

void
lisa_rpc_detach(lisa_rpc_t *self)
{
    if (!self->loop)
        return;
    zloop_reader_end(self->loop, self->sock);
    zloop_timer_end(self->loop, self->timer_id);
    self->loop = NULL;
    self->timer_id = -1;
}

uint64_t
lisa_rpc_dropped(const lisa_rpc_t *self)
{
    return self->dropped;
}
