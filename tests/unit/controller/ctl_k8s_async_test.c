/*
 * The k8s backend's asynchronous face against a real HTTP server
 * (libmicrohttpd on 127.0.0.1, a thread per connection) that plays a slow
 * API server: every answer comes after S_DELAY_MS. The backend runs on a
 * zloop beside a 20 ms ticker; the ticker keeps ticking while answers are
 * awaited (the loop never waits on HTTP), a batch of creates goes out at
 * once, and an unreachable server is an error, not a hang. The first test
 * is the usage example.
 */
#include "ctl_k8s.h"
#include "lisa/lisa_clock.h"

#include <criterion/criterion.h>
#include <czmq.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define S_DELAY_MS 400

static struct MHD_Daemon *s_d;
static char s_base[64];
static atomic_int s_inflight, s_most, s_posts;

static const char s_jobs[] =
    "{\"metadata\":{\"resourceVersion\":\"7\"},\"items\":[{\"metadata\":"
    "{\"name\":\"lisa-r1-a1\",\"labels\":{\"lisa/controller\":\"ctl-t\"},"
    "\"annotations\":{\"lisa/rollout-id\":\"r1\",\"lisa/run-id\":\"run\","
    "\"lisa/attempt\":\"1\",\"lisa/deadline-ms\":\"99999999999999\"}},"
    "\"status\":{\"conditions\":[{\"type\":\"Failed\",\"status\":\"True\"}]}}"
    "]}";
static const char s_pods[] =
    "{\"items\":[{\"metadata\":{\"name\":\"lisa-r1-a1-x\"},\"status\":"
    "{\"containerStatuses\":[{\"state\":{\"terminated\":{\"exitCode\":3,"
    "\"reason\":\"Error\"}}}]}}]}";

/* Jobs list, pods list, job creation (echoing a Job of the name asked
 * for), or an endless watch that sends nothing. */
static enum MHD_Result
s_handler(void *cls, struct MHD_Connection *c, const char *url,
          const char *method, const char *version, const char *upload,
          size_t *upload_size, void **con_cls)
{
    (void) cls, (void) version, (void) upload;
    if (!*con_cls) {
        *con_cls = (void *) 1;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0;
        return MHD_YES;
    }
    const char *watch =
        MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "watch");
    int now = atomic_fetch_add(&s_inflight, 1) + 1;
    int most = atomic_load(&s_most);
    while (now > most && !atomic_compare_exchange_weak(&s_most, &most, now))
        ;
    bool post = strcmp(method, "POST") == 0;
    if (post)
        atomic_fetch_add(&s_posts, 1);
    if (!watch)
        nanosleep(&(struct timespec){0, S_DELAY_MS * 1000000L}, NULL);
    atomic_fetch_sub(&s_inflight, 1);
    const char *body = "{}";
    unsigned status = 200;
    if (watch)
        status = 410; /* the watch ends at once; the cache stays */
    else if (post)
        status = 201;
    else if (strstr(url, "/pods"))
        body = s_pods;
    else if (strstr(url, "/jobs"))
        body = s_jobs;
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), (void *) (uintptr_t) body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static void
s_setup(void)
{
    atomic_store(&s_inflight, 0);
    atomic_store(&s_most, 0);
    atomic_store(&s_posts, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s_d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
        NULL, NULL, s_handler, NULL, MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_END);
    cr_assert_not_null(s_d);
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(s_d, MHD_DAEMON_INFO_BIND_PORT);
    snprintf(s_base, sizeof s_base, "http://127.0.0.1:%u",
             (unsigned) info->port);
}

static void
s_teardown(void)
{
    MHD_stop_daemon(s_d);
}

TestSuite(ctl_k8s_async, .init = s_setup, .fini = s_teardown, .timeout = 60);

/* What the callbacks saw. */
typedef struct {
    int ticks;
    bool done;
    lisa_rc_t rc;
    size_t n;
    ctl_sandbox_t first;
    lisa_rc_t rcs[8];
    int64_t at; /* when done ran (monotonic ms) */
} s_seen_t;

static int
s_on_tick(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop, (void) timer_id;
    ((s_seen_t *) arg)->ticks++;
    return 0;
}

static int
s_on_check(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop, (void) timer_id;
    return ((s_seen_t *) arg)->done ? -1 : 0;
}

static void
s_on_list(void *arg, lisa_rc_t rc, const ctl_sandbox_t *list, size_t n)
{
    s_seen_t *v = arg;
    v->rc = rc;
    v->n = n;
    if (n)
        v->first = list[0];
    v->done = true;
    v->at = zclock_mono();
}

static void
s_on_rc(void *arg, lisa_rc_t rc)
{
    s_seen_t *v = arg;
    v->rc = rc;
    v->done = true;
    v->at = zclock_mono();
}

static void
s_on_rcs(void *arg, const lisa_rc_t *rcs, size_t n)
{
    s_seen_t *v = arg;
    for (size_t i = 0; i < n && i < 8; i++)
        v->rcs[i] = rcs[i];
    v->n = n;
    v->done = true;
    v->at = zclock_mono();
}

static void
s_backend(const char *api, zloop_t *loop, ctl_backend_t *be)
{
    ctl_k8s_cfg_t c = {.controller_id = "ctl-t",
                       .api = api,
                       .namespace_ = "ns",
                       .image = "img",
                       .gateway_url = "http://gw:7180",
                       .ttl_s = 60};
    cr_assert_eq(ctl_k8s_new(&c, be), LISA_OK);
    cr_assert_not_null(be->ops->attach);
    cr_assert_eq(be->ops->attach(be->impl, loop, NULL, NULL), LISA_OK);
}

/* Runs the loop until the callback ran (or 10 s). */
static void
s_run(zloop_t *loop, s_seen_t *v)
{
    int t = zloop_timer(loop, 20, 0, s_on_tick, v);
    int c = zloop_timer(loop, 5, 0, s_on_check, v);
    int g = zloop_timer(loop, 10000, 1, s_on_check, v);
    (void) zloop_start(loop);
    zloop_timer_end(loop, t);
    zloop_timer_end(loop, c);
    zloop_timer_end(loop, g);
}

Test(ctl_k8s_async, usage)
{
    zloop_t *loop = zloop_new();
    ctl_backend_t be;
    s_backend(s_base, loop, &be);
    s_seen_t v = {0};
    int64_t t0 = zclock_mono();
    be.ops->list_async(be.impl, s_on_list, &v);
    cr_assert_not(v.done, "an HTTP answer cannot be in yet");
    s_run(loop, &v);
    cr_assert(v.done);
    cr_assert_eq(v.rc, LISA_OK);
    /* the Job failed; its pod says how */
    cr_assert_eq(v.n, 1);
    cr_assert_str_eq(v.first.name, "lisa-r1-a1");
    cr_assert_str_eq(v.first.rollout_id, "r1");
    cr_assert_eq(v.first.phase, CTL_PHASE_EXITED);
    cr_assert_eq(v.first.exit_code, 3);
    /* two answers of S_DELAY_MS in a row (jobs, then the pod), and the
     * loop ticked all along */
    cr_assert_geq(v.at - t0, 2 * S_DELAY_MS - 20);
    cr_assert_geq(v.ticks, (int) ((v.at - t0) / 20) / 2, "%d ticks in %lld ms",
                  v.ticks, (long long) (v.at - t0));
    be.ops->destroy(be.impl);
    zloop_destroy(&loop);
}

Test(ctl_k8s_async, a_batch_of_creates_goes_out_at_once)
{
    zloop_t *loop = zloop_new();
    ctl_backend_t be;
    s_backend(s_base, loop, &be);
    ctl_spec_t specs[4];
    char names[4][CTL_NAME_MAX], ids[4][16];
    for (int i = 0; i < 4; i++) {
        snprintf(ids[i], sizeof ids[i], "r%d", i);
        ctl_backend_name(ids[i], 1, names[i]);
        specs[i] = (ctl_spec_t){.name = names[i],
                                .controller_id = "ctl-t",
                                .run_id = "run",
                                .rollout_id = ids[i],
                                .attempt = 1,
                                .token = "tok",
                                .created_ms = lisa_clock_wall_ms(),
                                .deadline_ms = lisa_clock_wall_ms() + 60000,
                                .cpu_millis = 1000,
                                .memory_bytes = 1u << 30,
                                .pids = 64,
                                .disk_bytes = 1u << 30};
    }
    s_seen_t v = {0};
    int64_t t0 = zclock_mono();
    be.ops->start_async(be.impl, specs, 4, s_on_rcs, &v);
    s_run(loop, &v);
    cr_assert(v.done);
    cr_assert_eq(v.n, 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(v.rcs[i], LISA_OK, "start %d: %s", i,
                     lisa_rc_str(v.rcs[i]));
    cr_assert_eq(atomic_load(&s_posts), 4);
    cr_assert_geq(atomic_load(&s_most), 2, "the creates went one by one");
    cr_assert_lt(v.at - t0, 4 * S_DELAY_MS, "took %lld ms",
                 (long long) (v.at - t0));
    be.ops->destroy(be.impl);
    zloop_destroy(&loop);
}

Test(ctl_k8s_async, an_unreachable_server_is_an_error_not_a_hang)
{
    zloop_t *loop = zloop_new();
    ctl_backend_t be;
    s_backend("http://127.0.0.1:9", loop, &be);
    s_seen_t v = {0};
    be.ops->ping_async(be.impl, s_on_rc, &v);
    s_run(loop, &v);
    cr_assert(v.done);
    cr_assert_eq(v.rc, LISA_UNAVAILABLE);
    s_seen_t w = {0};
    be.ops->list_async(be.impl, s_on_list, &w);
    s_run(loop, &w);
    cr_assert(w.done);
    cr_assert_eq(w.rc, LISA_UNAVAILABLE);
    cr_assert_eq(w.n, 0);
    be.ops->destroy(be.impl);
    zloop_destroy(&loop);
}

Test(ctl_k8s_async, destroying_with_requests_in_flight_runs_no_callback)
{
    zloop_t *loop = zloop_new();
    ctl_backend_t be;
    s_backend(s_base, loop, &be);
    s_seen_t v = {0};
    be.ops->list_async(be.impl, s_on_list, &v);
    be.ops->ping_async(be.impl, s_on_rc, &v);
    be.ops->destroy(be.impl); /* frees both operations */
    cr_assert_not(v.done);
    zloop_destroy(&loop);
}
