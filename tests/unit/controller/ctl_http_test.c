/*
 * ctl_http tests against a real HTTP server (libmicrohttpd on 127.0.0.1,
 * an ephemeral port, a thread per connection). The first test is the
 * usage example.
 */
#include "ctl_http.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct MHD_Daemon *s_d;
static char s_base[64];
static atomic_int s_inflight, s_most, s_calls;

/* Answers "/status/NNN" with that status and the path as body, after
 * 100 ms, counting how many requests are open at once. */
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
    int now = atomic_fetch_add(&s_inflight, 1) + 1;
    int most = atomic_load(&s_most);
    while (now > most && !atomic_compare_exchange_weak(&s_most, &most, now))
        ;
    atomic_fetch_add(&s_calls, 1);
    nanosleep(&(struct timespec){0, 100000000L}, NULL);
    atomic_fetch_sub(&s_inflight, 1);
    unsigned status = 200;
    if (strncmp(url, "/status/", 8) == 0)
        status = (unsigned) atoi(url + 8);
    char body[256];
    snprintf(body, sizeof body, "{\"method\":\"%s\",\"path\":\"%s\"}", method,
             url);
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static void
s_setup(void)
{
    atomic_store(&s_inflight, 0);
    atomic_store(&s_most, 0);
    atomic_store(&s_calls, 0);
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

TestSuite(ctl_http, .init = s_setup, .fini = s_teardown, .timeout = 60);

Test(ctl_http, usage)
{
    ctl_http_t *h = ctl_http_new(NULL, NULL, 1 << 20);
    cr_assert_not_null(h);
    /* One call. */
    char url[128];
    snprintf(url, sizeof url, "%s/status/201", s_base);
    ctl_http_rep_t rep;
    cr_assert_eq(ctl_http_call(h, "POST", url, NULL, "{}", 5000, &rep),
                 LISA_OK);
    cr_assert_eq(rep.status, 201);
    cr_assert(strstr(rep.body, "\"method\":\"POST\""), "%s", rep.body);
    ctl_http_rep_clear(&rep);
    /* A batch: eight requests over four connections at once. */
    static const char *paths[] = {"/status/200", "/status/404", "/a",
                                  "/status/409", "/b",          "/c",
                                  "/status/500", "/d"};
    enum { N = sizeof paths / sizeof paths[0] };
    char urls[N][128];
    ctl_http_req_t rq[N];
    memset(rq, 0, sizeof rq);
    for (size_t i = 0; i < N; i++) {
        snprintf(urls[i], sizeof urls[i], "%s%s", s_base, paths[i]);
        rq[i].method = i % 2 ? "DELETE" : "GET";
        rq[i].url = urls[i];
    }
    ctl_http_many(h, rq, N, 4, 5000);
    for (size_t i = 0; i < N; i++) {
        cr_assert_eq(rq[i].rc, LISA_OK, "request %zu", i);
        long want =
            strncmp(paths[i], "/status/", 8) == 0 ? atol(paths[i] + 8) : 200;
        cr_assert_eq(rq[i].rep.status, want, "request %zu", i);
        char path[64];
        snprintf(path, sizeof path, "\"path\":\"%s\"", paths[i]);
        cr_assert(strstr(rq[i].rep.body, path), "%s", rq[i].rep.body);
        cr_assert(strstr(rq[i].rep.body, rq[i].method), "%s", rq[i].rep.body);
        ctl_http_rep_clear(&rq[i].rep);
    }
    cr_assert_eq(atomic_load(&s_calls), N + 1);
    /* Concurrent (each request holds the server 100 ms), and never over
     * four connections. */
    cr_assert_geq(atomic_load(&s_most), 2);
    cr_assert_leq(atomic_load(&s_most), 4);
    ctl_http_destroy(&h);
    ctl_http_destroy(&h);
}

Test(ctl_http, follow_up_goes_out_after_a_2xx_answer_only)
{
    ctl_http_t *h = ctl_http_new(NULL, NULL, 1 << 20);
    char u[4][128];
    static const char *paths[] = {"/status/201", "/then-a", "/status/404",
                                  "/then-b"};
    for (size_t i = 0; i < 4; i++)
        snprintf(u[i], sizeof u[i], "%s%s", s_base, paths[i]);
    ctl_http_req_t first[2], then[2];
    memset(first, 0, sizeof first);
    memset(then, 0, sizeof then);
    for (size_t i = 0; i < 2; i++) {
        first[i] = (ctl_http_req_t){.method = "POST", .url = u[2 * i]};
        then[i] = (ctl_http_req_t){.method = "POST", .url = u[2 * i + 1]};
        first[i].next = &then[i];
    }
    ctl_http_many(h, first, 2, 2, 5000);
    cr_assert_eq(first[0].rep.status, 201);
    cr_assert_eq(then[0].rc, LISA_OK);
    cr_assert(strstr(then[0].rep.body, "/then-a"), "%s", then[0].rep.body);
    cr_assert_eq(first[1].rep.status, 404);
    cr_assert_eq(then[1].rc, LISA_AGAIN); /* never sent */
    cr_assert_null(then[1].rep.body);
    cr_assert_eq(atomic_load(&s_calls), 3);
    for (size_t i = 0; i < 2; i++) {
        ctl_http_rep_clear(&first[i].rep);
        ctl_http_rep_clear(&then[i].rep);
    }
    ctl_http_destroy(&h);
}

Test(ctl_http, batch_to_nobody_fails_each_request)
{
    ctl_http_t *h = ctl_http_new(NULL, NULL, 1 << 20);
    ctl_http_req_t rq[3];
    memset(rq, 0, sizeof rq);
    for (size_t i = 0; i < 3; i++) {
        rq[i].method = "GET";
        rq[i].url = "http://127.0.0.1:1/x";
    }
    ctl_http_many(h, rq, 3, 2, 2000);
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(rq[i].rc, LISA_UNAVAILABLE);
        cr_assert_null(rq[i].rep.body);
    }
    ctl_http_many(h, rq, 0, 2, 2000); /* nothing to do */
    ctl_http_destroy(&h);
}

Test(ctl_http, answers_over_the_bound_are_refused)
{
    ctl_http_t *h = ctl_http_new(NULL, NULL, 8);
    char url[128];
    snprintf(url, sizeof url, "%s/long/path", s_base);
    ctl_http_req_t rq = {.method = "GET", .url = url};
    ctl_http_many(h, &rq, 1, 1, 5000);
    cr_assert_eq(rq.rc, LISA_TOOLARGE);
    ctl_http_rep_t rep;
    cr_assert_eq(ctl_http_call(h, "GET", url, NULL, NULL, 5000, &rep),
                 LISA_TOOLARGE);
    ctl_http_destroy(&h);
}
