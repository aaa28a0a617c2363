/*
 * agt_gateway and agt_heartbeat tests against a real HTTP server
 * (libmicrohttpd on 127.0.0.1, an ephemeral port) that plays the gateway.
 * The first test is the usage example.
 */
#include "agt_gateway.h"
#include "agt_heartbeat.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* What the fake gateway does and saw. */
typedef struct {
    atomic_int calls;
    atomic_int fail_first;   /* answer 503 to this many calls */
    atomic_int status;       /* status of normal answers */
    atomic_int cancel_after; /* heartbeats before cancel=true (0: never) */
    atomic_int huge;         /* answer with a 1 MB body */
    atomic_int bad_json;     /* answer with text that is not JSON */
    atomic_int chunked;      /* answer in chunks (size unknown up front) */
    atomic_int conns;        /* connections the server accepted */
    char auth[256];
    char turn[32];
    char body[8192];
} s_gw_t;

static s_gw_t s_gw;
static struct MHD_Daemon *s_d;
static char s_url[64];

typedef struct {
    char buf[8192];
    size_t len;
} s_req_t;

static enum MHD_Result
s_reply(struct MHD_Connection *c, int status, const char *text)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(text), (void *) text, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned) status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Chunked answer: the body in pieces of at most 7 bytes. */
static ssize_t
s_chunk(void *cls, uint64_t pos, char *buf, size_t max)
{
    const char *text = cls;
    size_t n = strlen(text);
    if (pos >= n)
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t k = n - (size_t) pos < 7 ? n - (size_t) pos : 7;
    if (k > max)
        k = max;
    memcpy(buf, text + pos, k);
    return (ssize_t) k;
}

static void
s_on_conn(void *cls, struct MHD_Connection *c, void **socket_ctx,
          enum MHD_ConnectionNotificationCode code)
{
    (void) cls, (void) c, (void) socket_ctx;
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        atomic_fetch_add(&s_gw.conns, 1);
}

static enum MHD_Result
s_handler(void *cls, struct MHD_Connection *c, const char *url,
          const char *method, const char *version, const char *upload,
          size_t *upload_size, void **con_cls)
{
    (void) cls, (void) version, (void) method;
    s_req_t *rq = *con_cls;
    if (!rq) {
        *con_cls = rq = calloc(1, sizeof *rq);
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        if (rq->len + n < sizeof rq->buf - 1) {
            memcpy(rq->buf + rq->len, upload, n);
            rq->len += n;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    int call = atomic_fetch_add(&s_gw.calls, 1) + 1;
    const char *a =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    const char *t =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Lisa-Turn");
    snprintf(s_gw.auth, sizeof s_gw.auth, "%s", a ? a : "");
    snprintf(s_gw.turn, sizeof s_gw.turn, "%s", t ? t : "");
    rq->buf[rq->len] = '\0';
    snprintf(s_gw.body, sizeof s_gw.body, "%s", rq->buf);
    if (call <= atomic_load(&s_gw.fail_first))
        return s_reply(c, 503,
                       "{\"error\":{\"code\":\"unavailable\","
                       "\"message\":\"engine down\"}}");
    if (atomic_load(&s_gw.huge)) {
        size_t n = 1 << 20;
        char *big = malloc(n + 1);
        memset(big, ' ', n);
        big[0] = '{';
        big[n - 1] = '}';
        big[n] = '\0';
        enum MHD_Result r = s_reply(c, 200, big);
        free(big);
        return r;
    }
    if (atomic_load(&s_gw.bad_json))
        return s_reply(c, 200, "this is not json");
    if (atomic_load(&s_gw.chunked)) {
        static const char text[] =
            "{\"rollout_id\":\"r-1\",\"note\":\"sent in chunks\"}";
        struct MHD_Response *r = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, 64, s_chunk, (void *) text, NULL);
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    int st = atomic_load(&s_gw.status);
    if (st != 200) {
        char e[160];
        snprintf(e, sizeof e,
                 "{\"error\":{\"code\":\"context_length_exceeded\","
                 "\"message\":\"status %d\"}}",
                 st);
        return s_reply(c, st, e);
    }
    if (strcmp(url, "/lisa/v1/heartbeat") == 0) {
        int after = atomic_load(&s_gw.cancel_after);
        bool cancel = after && call > after;
        return s_reply(c, 200,
                       cancel ? "{\"lease_expiry_ms\":1,\"cancel\":true}"
                              : "{\"lease_expiry_ms\":1,\"cancel\":false}");
    }
    return s_reply(c, 200, "{\"rollout_id\":\"r-1\",\"ok\":true}");
}

static void
s_done(void *cls, struct MHD_Connection *c, void **con_cls,
       enum MHD_RequestTerminationCode toe)
{
    (void) cls, (void) c, (void) toe;
    free(*con_cls);
    *con_cls = NULL;
}

static void
s_setup(void)
{
    memset(&s_gw, 0, sizeof s_gw);
    atomic_store(&s_gw.status, 200);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = 0;
    s_d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
        NULL, NULL, s_handler, NULL, MHD_OPTION_SOCK_ADDR, &sa,
        MHD_OPTION_NOTIFY_COMPLETED, s_done, NULL, MHD_OPTION_NOTIFY_CONNECTION,
        s_on_conn, NULL,
        /* idle connections close after a second (see kept_alive_...) */
        MHD_OPTION_CONNECTION_TIMEOUT, 1u, MHD_OPTION_END);
    cr_assert_not_null(s_d);
    const union MHD_DaemonInfo *info =
        MHD_get_daemon_info(s_d, MHD_DAEMON_INFO_BIND_PORT);
    snprintf(s_url, sizeof s_url, "http://127.0.0.1:%u", (unsigned) info->port);
}

static void
s_teardown(void)
{
    MHD_stop_daemon(s_d);
}

static agt_gateway_t *
s_client(size_t max)
{
    agt_gateway_cfg_t c = {
        .base_url = s_url, .token = "tok-123", .max_reply_bytes = max};
    agt_gateway_t *gw = agt_gateway_new(&c);
    cr_assert_not_null(gw);
    return gw;
}

TestSuite(agt_gateway, .init = s_setup, .fini = s_teardown, .timeout = 60);
TestSuite(agt_heartbeat, .init = s_setup, .fini = s_teardown, .timeout = 60);

Test(agt_gateway, usage)
{
    agt_gateway_t *gw = s_client(1 << 20);
    agt_reply_t rep;
    json_t *body = json_pack("{s:s}", "note", "turn 1");
    cr_assert_eq(agt_gateway_call(gw, "POST", "/v1/chat/completions", body, 3,
                                  5000, &rep),
                 LISA_OK, "%s", rep.error);
    json_decref(body);
    cr_assert_eq(rep.status, 200);
    cr_assert_str_eq(json_string_value(json_object_get(rep.body, "rollout_id")),
                     "r-1");
    cr_assert_str_eq(s_gw.auth, "Bearer tok-123");
    cr_assert_str_eq(s_gw.turn, "3");
    cr_assert_str_eq(s_gw.body, "{\"note\":\"turn 1\"}");
    agt_reply_clear(&rep);
    agt_gateway_destroy(&gw);
    agt_gateway_destroy(&gw);
}

Test(agt_gateway, status_codes_map_to_return_codes)
{
    static const struct {
        int status;
        lisa_rc_t rc;
    } cases[] = {
        {401, LISA_UNAUTHORIZED}, {403, LISA_UNAUTHORIZED},
        {404, LISA_NOTFOUND},     {409, LISA_CONFLICT},
        {410, LISA_CONFLICT},     {413, LISA_TOOLARGE},
        {400, LISA_INVALID},      {429, LISA_UNAVAILABLE},
        {500, LISA_UNAVAILABLE},  {503, LISA_UNAVAILABLE},
    };
    agt_gateway_t *gw = s_client(1 << 20);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        atomic_store(&s_gw.status, cases[i].status);
        agt_reply_t rep;
        cr_assert_eq(
            agt_gateway_call(gw, "GET", "/lisa/v1/task", NULL, 0, 5000, &rep),
            cases[i].rc, "status %d", cases[i].status);
        cr_assert_eq(rep.status, cases[i].status);
        cr_assert_str_eq(rep.err_code, "context_length_exceeded");
        cr_assert(strstr(rep.error, "HTTP"));
        agt_reply_clear(&rep);
    }
    agt_gateway_destroy(&gw);
}

Test(agt_gateway, retries_transient_errors_with_backoff)
{
    atomic_store(&s_gw.fail_first, 2);
    agt_gateway_t *gw = s_client(1 << 20);
    agt_reply_t rep;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    cr_assert_eq(agt_gateway_call_retry(gw, "GET", "/lisa/v1/task", NULL, 0,
                                        5000, 5, 0, NULL, &rep),
                 LISA_OK);
    clock_gettime(CLOCK_MONOTONIC, &b);
    long ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
    cr_assert_eq(atomic_load(&s_gw.calls), 3);
    cr_assert_geq(ms, 250 + 500 - 50, "backoff too short: %ld ms", ms);
    agt_reply_clear(&rep);
    /* Bounded: with 2 tries and 5 failures it gives up. */
    atomic_store(&s_gw.calls, 0);
    atomic_store(&s_gw.fail_first, 5);
    cr_assert_eq(agt_gateway_call_retry(gw, "GET", "/lisa/v1/task", NULL, 0,
                                        5000, 2, 0, NULL, &rep),
                 LISA_UNAVAILABLE);
    cr_assert_eq(atomic_load(&s_gw.calls), 2);
    agt_reply_clear(&rep);
    agt_gateway_destroy(&gw);
}

Test(agt_gateway, bounded_and_malformed_answers)
{
    agt_gateway_t *gw = s_client(64 * 1024);
    agt_reply_t rep;
    atomic_store(&s_gw.huge, 1);
    cr_assert_eq(
        agt_gateway_call(gw, "GET", "/lisa/v1/task", NULL, 0, 5000, &rep),
        LISA_TOOLARGE);
    agt_reply_clear(&rep);
    atomic_store(&s_gw.huge, 0);
    atomic_store(&s_gw.bad_json, 1);
    cr_assert_eq(
        agt_gateway_call(gw, "GET", "/lisa/v1/task", NULL, 0, 5000, &rep),
        LISA_INVALID);
    cr_assert_null(rep.body);
    agt_reply_clear(&rep);
    agt_gateway_destroy(&gw);
}

Test(agt_gateway, nobody_listening_is_unavailable)
{
    agt_gateway_cfg_t c = {.base_url = "http://127.0.0.1:1",
                           .token = "t",
                           .max_reply_bytes = 1024};
    agt_gateway_t *gw = agt_gateway_new(&c);
    agt_reply_t rep;
    cr_assert_eq(agt_gateway_call(gw, "GET", "/x", NULL, 0, 2000, &rep),
                 LISA_UNAVAILABLE);
    cr_assert_neq(rep.error[0], '\0');
    agt_reply_clear(&rep);
    agt_gateway_destroy(&gw);
    /* https goes through libcurl, loaded on first use. */
    agt_gateway_cfg_t tls = {.base_url = "https://127.0.0.1:1",
                             .token = "t",
                             .max_reply_bytes = 1024};
    gw = agt_gateway_new(&tls);
    cr_assert_eq(agt_gateway_call(gw, "GET", "/x", NULL, 0, 2000, &rep),
                 LISA_UNAVAILABLE);
    cr_assert(strstr(rep.error, "onnect"), "%s", rep.error);
    agt_reply_clear(&rep);
    agt_gateway_destroy(&gw);
    agt_gateway_cfg_t none = {.token = "t", .max_reply_bytes = 1024};
    cr_assert_null(agt_gateway_new(&none));
}

Test(agt_gateway, chunked_answers_and_one_kept_alive_connection)
{
    atomic_store(&s_gw.chunked, 1);
    agt_gateway_t *gw = s_client(1 << 20);
    for (int i = 0; i < 3; i++) {
        agt_reply_t rep;
        cr_assert_eq(
            agt_gateway_call(gw, "GET", "/lisa/v1/task", NULL, 0, 5000, &rep),
            LISA_OK, "%s", rep.error);
        cr_assert_str_eq(json_string_value(json_object_get(rep.body, "note")),
                         "sent in chunks");
        agt_reply_clear(&rep);
    }
    cr_assert_eq(atomic_load(&s_gw.calls), 3);
    cr_assert_eq(atomic_load(&s_gw.conns), 1, "connections: %d",
                 atomic_load(&s_gw.conns));
    /* A chunked answer over the bound is refused like any other. */
    agt_gateway_t *small = s_client(16);
    agt_reply_t rep;
    cr_assert_eq(
        agt_gateway_call(small, "GET", "/lisa/v1/task", NULL, 0, 5000, &rep),
        LISA_TOOLARGE);
    agt_reply_clear(&rep);
    agt_gateway_destroy(&small);
    agt_gateway_destroy(&gw);
}

Test(agt_gateway, kept_alive_connection_closed_by_the_server_is_reopened)
{
    agt_gateway_t *gw = s_client(1 << 20);
    agt_reply_t rep;
    cr_assert_eq(
        agt_gateway_call(gw, "GET", "/lisa/v1/task", NULL, 0, 5000, &rep),
        LISA_OK, "%s", rep.error);
    agt_reply_clear(&rep);
    /* The server drops idle connections after a second. */
    nanosleep(&(struct timespec){2, 0}, NULL);
    json_t *body = json_pack("{s:s}", "note", "after idle");
    cr_assert_eq(
        agt_gateway_call(gw, "POST", "/lisa/v1/result", body, 0, 5000, &rep),
        LISA_OK, "%s", rep.error);
    json_decref(body);
    agt_reply_clear(&rep);
    cr_assert_eq(atomic_load(&s_gw.calls), 2);
    cr_assert_str_eq(s_gw.body, "{\"note\":\"after idle\"}");
    cr_assert_eq(atomic_load(&s_gw.conns), 2);
    agt_gateway_destroy(&gw);
}

Test(agt_gateway, unix_socket)
{
    /* The same server behind a unix socket, as in local sandboxes. */
    char dir[] = "/tmp/agt_gw_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[sizeof dir + 16];
    snprintf(path, sizeof path, "%s/gw.sock", dir);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    cr_assert_eq(bind(fd, (struct sockaddr *) &sa, sizeof sa), 0);
    cr_assert_eq(listen(fd, 16), 0);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
        NULL, NULL, s_handler, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_NOTIFY_COMPLETED, s_done, NULL, MHD_OPTION_END);
    cr_assert_not_null(d);
    agt_gateway_cfg_t c = {
        .unix_socket = path, .token = "tok-unix", .max_reply_bytes = 4096};
    agt_gateway_t *gw = agt_gateway_new(&c);
    cr_assert_not_null(gw);
    agt_reply_t rep;
    cr_assert_eq(
        agt_gateway_call(gw, "GET", "/lisa/v1/task", NULL, 2, 5000, &rep),
        LISA_OK, "%s", rep.error);
    cr_assert_str_eq(json_string_value(json_object_get(rep.body, "rollout_id")),
                     "r-1");
    cr_assert_str_eq(s_gw.auth, "Bearer tok-unix");
    cr_assert_str_eq(s_gw.turn, "2");
    agt_reply_clear(&rep);
    agt_gateway_destroy(&gw);
    MHD_stop_daemon(d);
    unlink(path);
    rmdir(dir);
}

Test(agt_heartbeat, beats_and_cancels)
{
    atomic_store(&s_gw.cancel_after, 3);
    agt_gateway_cfg_t c = {
        .base_url = s_url, .token = "tok-123", .max_reply_bytes = 4096};
    atomic_bool cancel = false;
    agt_heartbeat_t *hb = agt_heartbeat_start(&c, 50, &cancel);
    cr_assert_not_null(hb);
    agt_heartbeat_note(hb, "turn 7");
    for (int i = 0; i < 200 && !atomic_load(&cancel); i++)
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    cr_assert(atomic_load(&cancel), "cancel=true was not honoured");
    cr_assert_geq(agt_heartbeat_acked(hb), 4);
    cr_assert_str_eq(s_gw.body, "{\"note\":\"turn 7\"}");
    /* stop() wakes the thread at once, not after the period. */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    agt_heartbeat_stop(&hb);
    clock_gettime(CLOCK_MONOTONIC, &b);
    cr_assert_null(hb);
    cr_assert_lt(
        (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000, 500);
    agt_heartbeat_stop(&hb);
}

Test(agt_heartbeat, closed_attempt_cancels)
{
    /* 409: the attempt is no longer open; the agent must stop. */
    atomic_store(&s_gw.status, 409);
    agt_gateway_cfg_t c = {
        .base_url = s_url, .token = "tok", .max_reply_bytes = 4096};
    atomic_bool cancel = false;
    agt_heartbeat_t *hb = agt_heartbeat_start(&c, 50, &cancel);
    cr_assert_not_null(hb);
    for (int i = 0; i < 200 && !atomic_load(&cancel); i++)
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    cr_assert(atomic_load(&cancel));
    cr_assert_geq(agt_heartbeat_failed(hb), 1);
    cr_assert_eq(agt_heartbeat_acked(hb), 0);
    agt_heartbeat_stop(&hb);
}
