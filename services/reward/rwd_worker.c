/*
 * rwd_worker: broker protocol (main thread) + scoring pool (threads). See
 * rwd_worker.h for the protocol.
 *
 * Threads: the thread that calls rwd_worker_run owns the DEALER socket and
 * is the only one that talks to the broker. Requests go to the pool through
 * a mutex/condition queue; each pool thread sends its encoded ScoreReply
 * frame back over its own inproc PUSH socket to the main thread's PULL, so
 * the main loop wakes on results and forwards them unchanged. Nothing in
 * the main loop blocks: the poll timeout is the time to the next heartbeat
 * and sends to the broker have a short send timeout.
 */
#include "rwd_worker.h"

#include "lisa/lisa_curve.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <czmq.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RWD_SEND_TIMEOUT_MS 200
#define RWD_DRAIN_MS        1000

typedef struct s_job {
    struct s_job *next;
    uint64_t job_id;
    char *data_source;
    char *answer;
    size_t answer_len;
    char *truth;
    size_t truth_len;
    char *extra;
    int64_t budget_ms;
} s_job_t;

struct rwd_worker {
    /* settings */
    char *endpoint;
    char *worker_id;
    size_t threads;
    uint32_t capacity;
    int64_t heartbeat_ms;
    int64_t liveness;
    int64_t reconnect_ms;
    int64_t reconnect_max_ms;
    int64_t budget_ms;
    const rwd_scorer_t *scorer;
    char results_ep[64];
    /* main-thread state */
    zsock_t *dealer;
    zsock_t *results;
    uint32_t in_flight;
    int64_t last_recv;
    int64_t last_send;
    int64_t backoff;
    lisa_codec_stats_t codec;
    /* shared: smu guards the main-thread state against rwd_worker_stats,
     * mu guards the job queue; lock order is smu then mu. */
    pthread_mutex_t smu;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    s_job_t *head, *tail;
    bool quit;
    pthread_t *pool;
    atomic_bool stop;
    rwd_worker_stats_t stats;
};

/* ---------------------------------------------------------------------------
 * Jobs */

static void
s_job_free(s_job_t **j)
{
    if (!j || !*j)
        return;
    lisa_free(&(*j)->data_source);
    lisa_free(&(*j)->answer);
    lisa_free(&(*j)->truth);
    lisa_free(&(*j)->extra);
    lisa_free(j);
}

static void
s_push_job(rwd_worker_t *w, s_job_t *j)
{
    pthread_mutex_lock(&w->mu);
    if (w->tail)
        w->tail->next = j;
    else
        w->head = j;
    w->tail = j;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static s_job_t *
s_pop_job(rwd_worker_t *w)
{
    pthread_mutex_lock(&w->mu);
    while (!w->head && !w->quit)
        pthread_cond_wait(&w->cv, &w->mu);
    s_job_t *j = w->head;
    if (j) {
        w->head = j->next;
        if (!w->head)
            w->tail = NULL;
    }
    pthread_mutex_unlock(&w->mu);
    return j;
}

/* protobuf-c's string fields are `char *` but only read when packing. */
static char *
s_mut(const char *s)
{
    union {
        const char *c;
        char *m;
    } u = {s};
    return u.m;
}

/* Encodes a ScoreReply frame for a job. */
static zframe_t *
s_reply_frame(const rwd_worker_t *w, uint64_t job_id, lisa_rc_t rc,
              const char *error, const rwd_result_t *r)
{
    Lisa__WorkerMsg msg;
    lisa__worker_msg__init(&msg);
    Lisa__ScoreReply rep;
    lisa__score_reply__init(&rep);
    Lisa__Reward rew;
    lisa__reward__init(&rew);
    rep.job_id = job_id;
    rep.code = (Lisa__Code) lisa_rc_to_code(rc);
    rep.error = s_mut(error ? error : "");
    if (rc == LISA_OK && r) {
        rew.value = r->reward;
        rew.rule = s_mut(r->rule ? r->rule : "");
        rew.extracted = r->extracted ? r->extracted : s_mut("");
        rew.explanation_json =
            r->explanation_json ? r->explanation_json : s_mut("{}");
        rew.worker_id = w->worker_id;
        rew.scored_ms = (uint64_t) zclock_time();
        rep.reward = &rew;
    }
    msg.body_case = LISA__WORKER_MSG__BODY_REPLY;
    msg.reply = &rep;
    return lisa_codec_encode(&msg.base);
}

static void *
s_pool_main(void *arg)
{
    rwd_worker_t *w = arg;
    zsock_t *push = zsock_new_push(w->results_ep);
    if (!push) {
        lisa_log_error("worker: pool thread cannot connect %s", w->results_ep);
        return NULL;
    }
    s_job_t *j;
    while ((j = s_pop_job(w)) != NULL) {
        rwd_input_t in = {
            .data_source = j->data_source,
            .answer = j->answer,
            .answer_len = j->answer_len,
            .ground_truth = j->truth,
            .truth_len = j->truth_len,
            .extra_info_json = j->extra,
            .deadline_ms = zclock_mono() + j->budget_ms,
        };
        rwd_result_t r;
        lisa_rc_t rc = rwd_score(w->scorer, &in, &r);
        if (rc != LISA_OK)
            lisa_log_info("worker: job %llu: %s: %s",
                          (unsigned long long) j->job_id, lisa_rc_str(rc),
                          r.error);
        zframe_t *f = s_reply_frame(w, j->job_id, rc, r.error, &r);
        rwd_result_clear(&r);
        if (zframe_send(&f, push, 0) != 0)
            zframe_destroy(&f);
        s_job_free(&j);
    }
    zsock_destroy(&push);
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Broker side */

static char *
s_copy(const char *s, size_t *len)
{
    size_t n = s ? strlen(s) : 0;
    if (len)
        *len = n;
    return lisa_memdup(s ? s : "", n);
}

static void
s_send(rwd_worker_t *w, ProtobufCMessage *msg)
{
    if (!w->dealer)
        return;
    if (lisa_codec_send(w->dealer, NULL, msg) != LISA_OK)
        lisa_log_warn("worker: send to broker failed (%s)",
                      zmq_strerror(zmq_errno()));
    w->last_send = zclock_mono();
}

static void
s_send_frame(rwd_worker_t *w, zframe_t **f)
{
    if (w->dealer && zframe_send(f, w->dealer, 0) == 0) {
        w->last_send = zclock_mono();
        return;
    }
    lisa_log_warn("worker: reply dropped (no broker connection)");
    zframe_destroy(f);
}

static void
s_send_ready(rwd_worker_t *w)
{
    Lisa__WorkerMsg msg;
    lisa__worker_msg__init(&msg);
    Lisa__WorkerReady ready;
    lisa__worker_ready__init(&ready);
    char *sources[16];
    size_t n_sources = 0;
    for (const char *p; n_sources < sizeof sources / sizeof sources[0] &&
                        (p = rwd_score_prefix(n_sources)) != NULL;)
        sources[n_sources++] = s_mut(p);
    ready.worker_id = w->worker_id;
    ready.capacity = w->capacity;
    ready.n_data_sources = n_sources;
    ready.data_sources = sources;
    msg.body_case = LISA__WORKER_MSG__BODY_READY;
    msg.ready = &ready;
    s_send(w, &msg.base);
}

static void
s_send_heartbeat(rwd_worker_t *w)
{
    Lisa__WorkerMsg msg;
    lisa__worker_msg__init(&msg);
    Lisa__WorkerHeartbeat hb;
    lisa__worker_heartbeat__init(&hb);
    msg.body_case = LISA__WORKER_MSG__BODY_HEARTBEAT;
    msg.heartbeat = &hb;
    s_send(w, &msg.base);
    w->stats.heartbeats_out++;
}

static void
s_send_disconnect(rwd_worker_t *w, const char *reason)
{
    Lisa__WorkerMsg msg;
    lisa__worker_msg__init(&msg);
    Lisa__WorkerDisconnect d;
    lisa__worker_disconnect__init(&d);
    d.reason = s_mut(reason);
    msg.body_case = LISA__WORKER_MSG__BODY_DISCONNECT;
    msg.disconnect = &d;
    s_send(w, &msg.base);
}

static void
s_reply_error(rwd_worker_t *w, uint64_t job_id, lisa_rc_t rc, const char *why)
{
    zframe_t *f = s_reply_frame(w, job_id, rc, why, NULL);
    s_send_frame(w, &f);
    w->stats.replies++;
}

static bool
s_connect(rwd_worker_t *w)
{
    w->dealer = zsock_new(ZMQ_DEALER);
    if (!w->dealer)
        return false;
    zsock_set_sndtimeo(w->dealer, RWD_SEND_TIMEOUT_MS);
    zsock_set_linger(w->dealer, 500);
    zsock_set_rcvhwm(w->dealer, 10000);
    lisa_curve_client(w->dealer);
    if (zsock_connect(w->dealer, "%s", w->endpoint) != 0) {
        lisa_log_error("worker: cannot connect to %s", w->endpoint);
        zsock_destroy(&w->dealer);
        return false;
    }
    w->last_recv = zclock_mono();
    s_send_ready(w);
    lisa_log_info("worker %s: ready on %s (capacity %u)", w->worker_id,
                  w->endpoint, w->capacity);
    return true;
}

/* Handlers of the broker's messages, one row per WorkerMsg body. */
typedef void (*s_handler_t)(rwd_worker_t *w, Lisa__WorkerMsg *m);

static void
s_on_request(rwd_worker_t *w, Lisa__WorkerMsg *m)
{
    Lisa__ScoreRequest *q = m->request;
    w->stats.requests++;
    if (w->in_flight >= w->capacity) {
        w->stats.busy++;
        s_reply_error(w, q->job_id, LISA_AGAIN, "worker at capacity");
        return;
    }
    s_job_t *j = lisa_calloc(1, sizeof *j);
    j->job_id = q->job_id;
    j->data_source = s_copy(q->data_source, NULL);
    j->answer = s_copy(q->answer, &j->answer_len);
    j->truth = s_copy(q->ground_truth, &j->truth_len);
    j->extra = s_copy(q->extra_info_json, NULL);
    j->budget_ms = q->budget_ms > 0 && q->budget_ms < (uint64_t) INT64_MAX
                       ? (int64_t) q->budget_ms
                       : w->budget_ms;
    w->in_flight++;
    s_push_job(w, j);
}

static void
s_on_heartbeat(rwd_worker_t *w, Lisa__WorkerMsg *m)
{
    (void) m;
    w->stats.heartbeats_in++;
}

static void s_reconnect(rwd_worker_t *w, const char *why);

static void
s_on_disconnect(rwd_worker_t *w, Lisa__WorkerMsg *m)
{
    lisa_log_info("worker: broker says disconnect (%s)",
                  m->disconnect->reason ? m->disconnect->reason : "");
    s_reconnect(w, "broker asked");
}

static void
s_on_unexpected(rwd_worker_t *w, Lisa__WorkerMsg *m)
{
    (void) m;
    w->stats.bad_frames++;
    lisa_log_warn("worker: unexpected message from broker (body %d)",
                  (int) m->body_case);
    s_reply_error(w, 0, LISA_UNSUPPORTED, "message not expected by a worker");
}

static const struct {
    Lisa__WorkerMsg__BodyCase body;
    s_handler_t fn;
} s_handlers[] = {
    {LISA__WORKER_MSG__BODY_REQUEST, s_on_request},
    {LISA__WORKER_MSG__BODY_HEARTBEAT, s_on_heartbeat},
    {LISA__WORKER_MSG__BODY_DISCONNECT, s_on_disconnect},
    {LISA__WORKER_MSG__BODY_READY, s_on_unexpected},
    {LISA__WORKER_MSG__BODY_REPLY, s_on_unexpected},
};

static void
s_on_broker(rwd_worker_t *w)
{
    zmsg_t *zm = zmsg_recv(w->dealer);
    if (!zm)
        return;
    w->last_recv = zclock_mono();
    w->backoff = w->reconnect_ms;
    /* Tolerate empty delimiter frames in front of the payload. */
    zframe_t *f = zmsg_pop(zm);
    while (f && zframe_size(f) == 0 && zmsg_size(zm) > 0) {
        zframe_destroy(&f);
        f = zmsg_pop(zm);
    }
    ProtobufCMessage *pm = NULL;
    const char *why = NULL;
    lisa_rc_t rc = LISA_INVALID;
    if (zmsg_size(zm) != 0) {
        w->codec.bad_shape++;
        why = "more than one frame";
    } else {
        rc = lisa_codec_decode_frame(&lisa__worker_msg__descriptor, f,
                                     LISA_MAX_WORKER_FRAME, &w->codec, &pm,
                                     &why);
    }
    zframe_destroy(&f);
    zmsg_destroy(&zm);
    if (rc != LISA_OK || !pm) {
        w->stats.bad_frames++;
        lisa_log_warn("worker: bad frame from broker: %s", why ? why : "?");
        s_reply_error(w, 0, rc == LISA_OK ? LISA_INVALID : rc,
                      why ? why : "bad frame");
        return;
    }
    Lisa__WorkerMsg *m = (Lisa__WorkerMsg *) pm;
    for (size_t i = 0; i < sizeof s_handlers / sizeof s_handlers[0]; i++) {
        if (s_handlers[i].body == m->body_case) {
            s_handlers[i].fn(w, m);
            break;
        }
    }
    lisa_codec_free(&pm);
}

static void
s_on_result(rwd_worker_t *w)
{
    zframe_t *f = zframe_recv(w->results);
    if (!f)
        return;
    if (w->in_flight > 0)
        w->in_flight--;
    w->stats.replies++;
    s_send_frame(w, &f);
}

/* Sleeps ms in small steps, returning early when asked to stop. */
static void
s_nap(rwd_worker_t *w, int64_t ms)
{
    int64_t until = zclock_mono() + ms;
    while (!atomic_load(&w->stop) && !zsys_interrupted) {
        int64_t left = until - zclock_mono();
        if (left <= 0)
            break;
        zclock_sleep((int) (left < 50 ? left : 50));
    }
}

static void
s_reconnect(rwd_worker_t *w, const char *why)
{
    lisa_log_warn("worker: reconnecting to %s in %lld ms (%s)", w->endpoint,
                  (long long) w->backoff, why);
    zsock_destroy(&w->dealer);
    w->stats.reconnects++;
    s_nap(w, w->backoff);
    w->backoff *= 2;
    if (w->backoff > w->reconnect_max_ms)
        w->backoff = w->reconnect_max_ms;
    if (!atomic_load(&w->stop) && !zsys_interrupted)
        (void) s_connect(w);
}

/* ---------------------------------------------------------------------------
 * Lifecycle */

/* reward-<host>-<pid>-<8 random hex digits>. Host name and pid alone are
 * not unique: replicas sharing the host's network (one host name) each run
 * in their own pid namespace, where the worker is one of the first pids. */
static char *
s_default_id(void)
{
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    uint32_t salt = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&salt, sizeof salt, 1, f) != 1) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        salt = (uint32_t) ts.tv_nsec ^ (uint32_t) ts.tv_sec ^
               ((uint32_t) getpid() << 16);
    }
    if (f)
        fclose(f);
    char *id = lisa_malloc(128);
    snprintf(id, 128, "reward-%s-%ld-%08" PRIx32, host, (long) getpid(), salt);
    return id;
}

rwd_worker_t *
rwd_worker_new(const rwd_config_t *cfg, const rwd_scorer_t *scorer)
{
    if (!cfg || !scorer || !cfg->broker || !*cfg->broker)
        return NULL;
    rwd_worker_t *w = lisa_calloc(1, sizeof *w);
    w->endpoint = lisa_strdup(cfg->broker);
    w->worker_id = cfg->worker_id && *cfg->worker_id
                       ? lisa_strndup(cfg->worker_id, 128)
                       : s_default_id();
    w->threads = (size_t) cfg->threads;
    w->capacity = (uint32_t) (cfg->capacity > 0 ? cfg->capacity : cfg->threads);
    w->heartbeat_ms = cfg->heartbeat_ms;
    w->liveness = cfg->liveness;
    w->reconnect_ms = cfg->reconnect_ms;
    w->reconnect_max_ms = cfg->reconnect_max_ms < cfg->reconnect_ms
                              ? cfg->reconnect_ms
                              : cfg->reconnect_max_ms;
    w->budget_ms = cfg->budget_ms;
    w->backoff = w->reconnect_ms;
    w->scorer = scorer;
    snprintf(w->results_ep, sizeof w->results_ep, "inproc://rwd-results-%p",
             (void *) w);
    pthread_mutex_init(&w->smu, NULL);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    atomic_init(&w->stop, false);
    return w;
}

void
rwd_worker_destroy(rwd_worker_t **wp)
{
    if (!wp || !*wp)
        return;
    rwd_worker_t *w = *wp;
    s_job_t *j = w->head;
    while (j) {
        s_job_t *n = j->next;
        s_job_free(&j);
        j = n;
    }
    pthread_mutex_destroy(&w->smu);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    lisa_free(&w->endpoint);
    lisa_free(&w->worker_id);
    lisa_free(wp);
}

void
rwd_worker_stop(rwd_worker_t *w)
{
    atomic_store(&w->stop, true);
}

void
rwd_worker_stats(rwd_worker_t *w, rwd_worker_stats_t *out)
{
    pthread_mutex_lock(&w->smu);
    *out = w->stats;
    pthread_mutex_unlock(&w->smu);
}

/* Waits up to ms for a reply from the pool and forwards it. */
static void
s_drain_one(rwd_worker_t *w, int ms)
{
    zmq_pollitem_t it = {zsock_resolve(w->results), 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, ms) > 0 && (it.revents & ZMQ_POLLIN)) {
        pthread_mutex_lock(&w->smu);
        s_on_result(w);
        pthread_mutex_unlock(&w->smu);
    }
}

lisa_rc_t
rwd_worker_run(rwd_worker_t *w)
{
    lisa_rc_t rc = LISA_ERR;
    w->results = zsock_new(ZMQ_PULL);
    if (!w->results || zsock_bind(w->results, "%s", w->results_ep) != 0) {
        lisa_log_error("worker: cannot bind %s", w->results_ep);
        zsock_destroy(&w->results);
        return LISA_ERR;
    }
    w->quit = false;
    w->pool = lisa_calloc(w->threads, sizeof *w->pool);
    size_t started = 0;
    for (; started < w->threads; started++)
        if (pthread_create(&w->pool[started], NULL, s_pool_main, w) != 0)
            break;
    if (started == 0)
        goto out;
    if (!s_connect(w))
        goto out;
    w->last_send = zclock_mono();
    int64_t next_hb = zclock_mono() + w->heartbeat_ms;
    while (!atomic_load(&w->stop) && !zsys_interrupted) {
        int64_t now = zclock_mono();
        int timeout = (int) (next_hb > now ? next_hb - now : 0);
        zmq_pollitem_t items[2] = {
            {zsock_resolve(w->results), 0, ZMQ_POLLIN, 0},
            {w->dealer ? zsock_resolve(w->dealer) : NULL, 0, ZMQ_POLLIN, 0},
        };
        int n =
            zmq_poll(items, w->dealer ? 2 : 1, timeout < 100 ? timeout : 100);
        if (n < 0 && zmq_errno() != EINTR)
            break;
        pthread_mutex_lock(&w->smu);
        if (n > 0 && (items[0].revents & ZMQ_POLLIN))
            s_on_result(w);
        if (n > 0 && w->dealer && (items[1].revents & ZMQ_POLLIN))
            s_on_broker(w);
        pthread_mutex_unlock(&w->smu);
        now = zclock_mono();
        if (!w->dealer) {
            /* A failed reconnect: back off and try again. */
            pthread_mutex_lock(&w->smu);
            s_reconnect(w, "no connection");
            pthread_mutex_unlock(&w->smu);
            continue;
        }
        if (now - w->last_recv > w->liveness * w->heartbeat_ms) {
            pthread_mutex_lock(&w->smu);
            s_reconnect(w, "broker silent");
            pthread_mutex_unlock(&w->smu);
            next_hb = zclock_mono() + w->heartbeat_ms;
            continue;
        }
        if (now >= next_hb) {
            if (now - w->last_send >= w->heartbeat_ms) {
                pthread_mutex_lock(&w->smu);
                s_send_heartbeat(w);
                pthread_mutex_unlock(&w->smu);
            }
            next_hb = now + w->heartbeat_ms;
        }
    }
    /* Drain: forward replies of requests already being scored. */
    int64_t until = zclock_mono() + RWD_DRAIN_MS;
    while (w->in_flight > 0 && zclock_mono() < until)
        s_drain_one(w, 50);
    pthread_mutex_lock(&w->smu);
    s_send_disconnect(w, "shutting down");
    pthread_mutex_unlock(&w->smu);
    rc = LISA_OK;
out:
    pthread_mutex_lock(&w->mu);
    while (w->head) {
        s_job_t *j = w->head;
        w->head = j->next;
        s_job_free(&j);
    }
    w->tail = NULL;
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; i < started; i++)
        pthread_join(w->pool[i], NULL);
    lisa_free(&w->pool);
    zsock_destroy(&w->dealer);
    zsock_destroy(&w->results);
    lisa_log_info("worker %s: stopped", w->worker_id);
    return rc;
}
