/*
 * ctl_server tests: the reconcile loop against a real ZeroMQ broker peer
 * (a ROUTER for calls and a PUB for events, in a thread) and a scripted
 * backend that records every call with its time.
 *
 * The broker here answers late on purpose: it holds its answer to the
 * cross-check query for seconds. The controller's loop must go on
 * meanwhile: it keeps listing its backend at its tick, and an event that
 * ends one of its attempts still removes that sandbox at once; the
 * sandbox that waits for the late answer is reported only after it.
 */
#include "ctl_server.h"
#include "lisa/lisa_clock.h"
#include "lisa/lisa_codec.h"

#include <criterion/criterion.h>
#include <czmq.h>
#include <pthread.h>
#include <string.h>

#define S_HOLD_MS 3000 /* how long the broker holds its query answer */

/* ---- the scripted backend -------------------------------------------- */

#define S_MAX_CALLS 4096

typedef struct {
    pthread_mutex_t mu;
    int64_t list_at[S_MAX_CALLS]; /* monotonic ms of each list call */
    int n_list;
    char removed[8][CTL_NAME_MAX];
    int64_t removed_at[8];
    int n_removed;
    char started[CTL_NAME_MAX];
    bool have_started;
} s_fake_t;

static s_fake_t s_fake;

static lisa_rc_t
s_fake_ping(void *impl)
{
    (void) impl;
    return LISA_OK;
}

static lisa_rc_t
s_fake_start(void *impl, const ctl_spec_t *spec)
{
    s_fake_t *f = impl;
    pthread_mutex_lock(&f->mu);
    snprintf(f->started, sizeof f->started, "%s", spec->name);
    f->have_started = true;
    pthread_mutex_unlock(&f->mu);
    return LISA_OK;
}

static bool
s_removed_locked(const s_fake_t *f, const char *name)
{
    for (int i = 0; i < f->n_removed; i++)
        if (strcmp(f->removed[i], name) == 0)
            return true;
    return false;
}

/* Lists the started sandbox (running) and a sandbox of an attempt this
 * controller does not know (exited with status 1: its outcome needs the
 * broker's word), until each is removed. */
static lisa_rc_t
s_fake_list(void *impl, ctl_sandbox_t **out, size_t *n)
{
    s_fake_t *f = impl;
    pthread_mutex_lock(&f->mu);
    if (f->n_list < S_MAX_CALLS)
        f->list_at[f->n_list++] = zclock_mono();
    ctl_sandbox_t *sb = calloc(2, sizeof *sb);
    size_t k = 0;
    uint64_t now = lisa_clock_wall_ms();
    if (f->have_started && !s_removed_locked(f, f->started)) {
        snprintf(sb[k].name, CTL_NAME_MAX, "%s", f->started);
        snprintf(sb[k].controller_id, CTL_ID_MAX, "ctl-t");
        snprintf(sb[k].rollout_id, CTL_ID_MAX, "r-run");
        sb[k].attempt = 1;
        sb[k].created_ms = now;
        sb[k].deadline_ms = now + 600000;
        sb[k].phase = CTL_PHASE_RUNNING;
        k++;
    }
    char old[CTL_NAME_MAX];
    ctl_backend_name("r-old", 1, old);
    if (!s_removed_locked(f, old)) {
        snprintf(sb[k].name, CTL_NAME_MAX, "%s", old);
        snprintf(sb[k].controller_id, CTL_ID_MAX, "ctl-t");
        snprintf(sb[k].rollout_id, CTL_ID_MAX, "r-old");
        sb[k].attempt = 1;
        sb[k].created_ms = now;
        sb[k].deadline_ms = now + 600000;
        sb[k].phase = CTL_PHASE_EXITED;
        sb[k].exit_code = 1;
        k++;
    }
    pthread_mutex_unlock(&f->mu);
    *out = sb;
    *n = k;
    return LISA_OK;
}

static lisa_rc_t
s_fake_remove(void *impl, const char *name)
{
    s_fake_t *f = impl;
    pthread_mutex_lock(&f->mu);
    if (f->n_removed < 8 && !s_removed_locked(f, name)) {
        snprintf(f->removed[f->n_removed], CTL_NAME_MAX, "%s", name);
        f->removed_at[f->n_removed++] = zclock_mono();
    }
    pthread_mutex_unlock(&f->mu);
    return LISA_OK;
}

static void
s_fake_destroy(void *impl)
{
    (void) impl;
}

static const ctl_backend_ops_t s_fake_ops = {
    .name = "fake",
    .ping = s_fake_ping,
    .start = s_fake_start,
    .list = s_fake_list,
    .remove = s_fake_remove,
    .destroy = s_fake_destroy,
};

/* ---- the late broker ------------------------------------------------- */

typedef struct {
    int64_t query_at;  /* when the query came (monotonic ms; 0: not yet) */
    int64_t answer_at; /* when its answer went out */
    int64_t fail_at;   /* when the AttemptFail of r-old came */
    int claims;
} s_broker_log_t;

static s_broker_log_t s_blog;
static pthread_mutex_t s_blog_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
    zmsg_t *msg; /* the whole reply, envelope included */
    int64_t due;
} s_held_t;

static zmsg_t *
s_reply_to(zframe_t **id, zframe_t **empty, Lisa__Reply *rep)
{
    zmsg_t *out = zmsg_new();
    zmsg_append(out, id);
    zmsg_append(out, empty);
    lisa_codec_append(out, &rep->base);
    return out;
}

/* Builds the reply to one request; *hold_ms > 0 holds it back. */
static zmsg_t *
s_answer(const Lisa__Request *req, zframe_t **id, zframe_t **empty,
         int *hold_ms)
{
    Lisa__Reply rep = LISA__REPLY__INIT;
    rep.request_id = req->request_id;
    rep.code = LISA__CODE__CODE_OK;
    *hold_ms = 0;
    Lisa__ClaimRep cr = LISA__CLAIM_REP__INIT;
    Lisa__ClaimedAttempt ca = LISA__CLAIMED_ATTEMPT__INIT;
    Lisa__ClaimedAttempt *cas[1] = {&ca};
    Lisa__Rollout ro = LISA__ROLLOUT__INIT;
    Lisa__QueryRep qr = LISA__QUERY_REP__INIT;
    Lisa__Rollout old = LISA__ROLLOUT__INIT;
    Lisa__Rollout *olds[1] = {&old};
    Lisa__AttemptFailRep fr = LISA__ATTEMPT_FAIL_REP__INIT;
    Lisa__AttemptStartRep sr = LISA__ATTEMPT_START_REP__INIT;
    pthread_mutex_lock(&s_blog_mu);
    switch (req->body_case) {
    case LISA__REQUEST__BODY_CLAIM:
        rep.body_case = LISA__REPLY__BODY_CLAIM;
        rep.claim = &cr;
        if (s_blog.claims++ == 0) { /* one attempt, the first time */
            ro.rollout_id = "r-run";
            ro.run_id = "run";
            ro.state = LISA__ROLLOUT_STATE__ROLLOUT_RUNNING;
            ro.attempts = 1;
            ca.rollout = &ro;
            ca.attempt = 1;
            ca.token = "tok";
            cr.n_attempts = 1;
            cr.attempts = cas;
        }
        break;
    case LISA__REQUEST__BODY_QUERY:
        /* r-old's attempt 1 is still open: the exit is to be reported */
        old.rollout_id = "r-old";
        old.state = LISA__ROLLOUT_STATE__ROLLOUT_RUNNING;
        old.attempts = 1;
        qr.n_rollouts = 1;
        qr.rollouts = olds;
        rep.body_case = LISA__REPLY__BODY_QUERY;
        rep.query = &qr;
        if (!s_blog.query_at) {
            s_blog.query_at = zclock_mono();
            *hold_ms = S_HOLD_MS;
        }
        break;
    case LISA__REQUEST__BODY_ATTEMPT_FAIL:
        if (req->attempt_fail && req->attempt_fail->rollout_id &&
            strcmp(req->attempt_fail->rollout_id, "r-old") == 0 &&
            !s_blog.fail_at)
            s_blog.fail_at = zclock_mono();
        rep.body_case = LISA__REPLY__BODY_ATTEMPT_FAIL;
        rep.attempt_fail = &fr;
        break;
    default:
        rep.body_case = LISA__REPLY__BODY_ATTEMPT_START;
        rep.attempt_start = &sr;
        break;
    }
    pthread_mutex_unlock(&s_blog_mu);
    return s_reply_to(id, empty, &rep);
}

/* The pipe's "END <rollout>" publishes that the rollout's attempt 1
 * failed. */
static void
s_publish(zsock_t *pub, const char *rollout_id, uint64_t seq)
{
    Lisa__Event ev = LISA__EVENT__INIT;
    Lisa__RolloutEvent re = LISA__ROLLOUT_EVENT__INIT;
    re.rollout_id = (char *) (uintptr_t) rollout_id;
    re.attempt = 1;
    re.state = LISA__ROLLOUT_STATE__ROLLOUT_FAILED;
    re.attempt_state = LISA__ATTEMPT_STATE__ATTEMPT_FAILED;
    ev.seq = seq;
    ev.body_case = LISA__EVENT__BODY_ROLLOUT;
    ev.rollout = &re;
    zmsg_t *m = zmsg_new();
    zmsg_addstr(m, "rollout");
    lisa_codec_append(m, &ev.base);
    zmsg_send(&m, pub);
}

static void
s_send_due(zsock_t *router, s_held_t *held, int *n_held)
{
    int64_t now = zclock_mono();
    for (int i = 0; i < *n_held;) {
        if (held[i].due > now) {
            i++;
            continue;
        }
        pthread_mutex_lock(&s_blog_mu);
        if (s_blog.query_at && !s_blog.answer_at)
            s_blog.answer_at = now;
        pthread_mutex_unlock(&s_blog_mu);
        zmsg_send(&held[i].msg, router);
        held[i] = held[--*n_held];
    }
}

static void
s_request(zsock_t *router, s_held_t *held, int *n_held)
{
    zmsg_t *m = zmsg_recv(router);
    zframe_t *id = zmsg_pop(m);
    zframe_t *empty = zmsg_pop(m);
    zframe_t *body = zmsg_pop(m);
    ProtobufCMessage *msg = NULL;
    if (body && lisa_codec_decode_frame(&lisa__request__descriptor, body,
                                        LISA_MAX_RPC_FRAME, NULL, &msg,
                                        NULL) == LISA_OK) {
        int hold = 0;
        zmsg_t *out = s_answer((Lisa__Request *) msg, &id, &empty, &hold);
        if (hold > 0 && *n_held < 16)
            held[(*n_held)++] = (s_held_t){out, zclock_mono() + hold};
        else
            zmsg_send(&out, router);
    }
    lisa_codec_free(&msg);
    zframe_destroy(&id);
    zframe_destroy(&empty);
    zframe_destroy(&body);
    zmsg_destroy(&m);
}

static void
s_broker(zsock_t *pipe, void *arg)
{
    (void) arg;
    zsock_t *router = zsock_new(ZMQ_ROUTER);
    zsock_t *pub = zsock_new(ZMQ_PUB);
    int rport = zsock_bind(router, "tcp://127.0.0.1:*");
    int pport = zsock_bind(pub, "tcp://127.0.0.1:*");
    zsock_signal(pipe, 0);
    zstr_sendf(pipe, "%d %d", rport, pport);
    zpoller_t *p = zpoller_new(pipe, router, NULL);
    s_held_t held[16];
    int n_held = 0;
    uint64_t seq = 1;
    for (;;) {
        void *which = zpoller_wait(p, 20);
        if (which == pipe) {
            char *cmd = zstr_recv(pipe);
            bool end = !cmd || strncmp(cmd, "END ", 4) != 0;
            if (!end)
                s_publish(pub, cmd + 4, seq++);
            zstr_free(&cmd);
            if (end)
                break;
        } else if (which == router) {
            s_request(router, held, &n_held);
        }
        s_send_due(router, held, &n_held);
    }
    for (int i = 0; i < n_held; i++)
        zmsg_destroy(&held[i].msg);
    zpoller_destroy(&p);
    zsock_destroy(&pub);
    zsock_destroy(&router);
}

/* ---- the test -------------------------------------------------------- */

static volatile sig_atomic_t s_stop;

static void *
s_run(void *arg)
{
    (void) ctl_server_run(arg, &s_stop);
    return NULL;
}

static int64_t
s_blog_get(const int64_t *field)
{
    pthread_mutex_lock(&s_blog_mu);
    int64_t v = *field;
    pthread_mutex_unlock(&s_blog_mu);
    return v;
}

/* Waits until *field is set (or timeout_ms passed); returns it. */
static int64_t
s_wait_for(const int64_t *field, int timeout_ms)
{
    int64_t end = zclock_mono() + timeout_ms;
    while (!s_blog_get(field) && zclock_mono() < end)
        zclock_sleep(10);
    return s_blog_get(field);
}

/* When sandbox `name` was removed (0: not yet). */
static int64_t
s_removed_at(const char *name)
{
    int64_t at = 0;
    pthread_mutex_lock(&s_fake.mu);
    for (int i = 0; i < s_fake.n_removed; i++)
        if (strcmp(s_fake.removed[i], name) == 0)
            at = s_fake.removed_at[i];
    pthread_mutex_unlock(&s_fake.mu);
    return at;
}

/* The longest gap between list calls made in [from, to]. */
static int64_t
s_longest_list_gap(int64_t from, int64_t to, int *calls)
{
    pthread_mutex_lock(&s_fake.mu);
    int64_t prev = from, gap = 0;
    *calls = 0;
    for (int i = 0; i < s_fake.n_list; i++) {
        int64_t t = s_fake.list_at[i];
        if (t < from || t > to)
            continue;
        (*calls)++;
        if (t - prev > gap)
            gap = t - prev;
        prev = t;
    }
    if (to - prev > gap)
        gap = to - prev;
    pthread_mutex_unlock(&s_fake.mu);
    return gap;
}

Test(ctl_server, loop_keeps_serving_while_the_broker_answers_late,
     .timeout = 60)
{
    memset(&s_fake, 0, sizeof s_fake);
    pthread_mutex_init(&s_fake.mu, NULL);
    memset(&s_blog, 0, sizeof s_blog);
    zactor_t *broker = zactor_new(s_broker, NULL);
    char *ports = zstr_recv(broker);
    int rport = 0, pport = 0;
    cr_assert_eq(sscanf(ports, "%d %d", &rport, &pport), 2);
    zstr_free(&ports);
    char a_rpc[64], a_ev[64];
    snprintf(a_rpc, sizeof a_rpc, "--broker-rpc=tcp://127.0.0.1:%d", rport);
    snprintf(a_ev, sizeof a_ev, "--broker-events=tcp://127.0.0.1:%d", pport);
    char *argv[] = {"x",
                    a_rpc,
                    a_ev,
                    "--controller-id=ctl-t",
                    "--tick-ms=50",
                    "--verify-ms=60s",
                    "--rpc-timeout-ms=10s",
                    "--log-level=warn",
                    NULL};
    ctl_config_t cfg;
    char err[256];
    cr_assert_eq(ctl_config_load(&cfg, 8, argv, NULL, err, sizeof err), LISA_OK,
                 "%s", err);
    ctl_backend_t be = {.ops = &s_fake_ops, .impl = &s_fake};
    ctl_server_t *srv = ctl_server_new(&cfg, &be);
    cr_assert_not_null(srv);
    s_stop = 0;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, s_run, srv), 0);

    /* the adopted, exited sandbox makes the controller ask the broker,
     * which holds its answer */
    int64_t asked = s_wait_for(&s_blog.query_at, 10000);
    cr_assert(asked, "the controller never cross-checked r-old");
    char run_name[CTL_NAME_MAX], old_name[CTL_NAME_MAX];
    ctl_backend_name("r-run", 1, run_name);
    ctl_backend_name("r-old", 1, old_name);
    /* the claimed attempt's sandbox is started meanwhile */
    int64_t end = zclock_mono() + 5000;
    bool started = false;
    while (!started && zclock_mono() < end) {
        pthread_mutex_lock(&s_fake.mu);
        started = s_fake.have_started;
        pthread_mutex_unlock(&s_fake.mu);
        zclock_sleep(10);
    }
    cr_assert(started, "the claimed attempt was not started");
    cr_assert_eq(s_blog_get(&s_blog.answer_at), 0,
                 "the claim was handled only after the late answer: the "
                 "loop waited on the broker");

    /* while the answer is held, an event ends r-run's attempt: its
     * sandbox goes at once */
    zclock_sleep(300);
    int64_t published = zclock_mono();
    cr_assert_lt(published - asked, S_HOLD_MS - 1000,
                 "the test itself was too slow");
    zstr_sendf(broker, "END r-run");
    end = published + 2000;
    while (!s_removed_at(run_name) && zclock_mono() < end)
        zclock_sleep(10);
    int64_t removed = s_removed_at(run_name);
    cr_assert(removed, "an event during the broker's delay was not acted on");
    cr_assert_lt(removed - published, 1000, "took %lld ms",
                 (long long) (removed - published));
    cr_assert_eq(s_blog_get(&s_blog.answer_at), 0,
                 "the broker answered before the event was handled");

    /* the late answer comes: only then is r-old reported and removed */
    int64_t answered = s_wait_for(&s_blog.answer_at, 10000);
    cr_assert(answered);
    int64_t failed = s_wait_for(&s_blog.fail_at, 5000);
    cr_assert(failed, "r-old's exit was never reported");
    cr_assert_geq(failed, answered);
    cr_assert_lt(failed - answered, 1500);
    end = zclock_mono() + 2000;
    while (!s_removed_at(old_name) && zclock_mono() < end)
        zclock_sleep(10);
    cr_assert(s_removed_at(old_name) >= answered,
              "r-old's sandbox went before the broker's answer");

    /* the loop listed its backend at its tick all through the delay */
    int calls = 0;
    int64_t gap = s_longest_list_gap(asked, answered, &calls);
    cr_assert_lt(gap, 600, "the loop stood still for %lld ms", (long long) gap);
    cr_assert_gt(calls, (S_HOLD_MS / 50) / 4, "only %d listings", calls);

    s_stop = 1;
    pthread_join(th, NULL);
    const ctl_stats_t *st = ctl_server_stats(srv);
    cr_assert_eq(st->adopted, 1);
    cr_assert_geq(st->events, 1);
    cr_assert_eq(st->stopped, 1);
    ctl_server_destroy(&srv);
    ctl_config_clear(&cfg);
    zstr_send(broker, "STOP");
    zactor_destroy(&broker);
    pthread_mutex_destroy(&s_fake.mu);
}
