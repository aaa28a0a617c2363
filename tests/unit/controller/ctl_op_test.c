/*
 * ctl_op: the backends' operations in flight. Batches of starts and
 * removals answer once, after their last item, with each item's outcome;
 * ending the list frees what never got an answer, with no callback; a
 * JSON request reaches a real HTTP server (libmicrohttpd on 127.0.0.1)
 * with its method, path, headers and body. The first test is the usage
 * example.
 */
#include "ctl_op.h"

#include <criterion/criterion.h>
#include <czmq.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    int calls;
    lisa_rc_t rc;
    lisa_rc_t rcs[8];
    size_t n;
    char text[64];
} s_seen_t;

static void
s_on_rc(void *arg, lisa_rc_t rc)
{
    s_seen_t *s = arg;
    s->calls++;
    s->rc = rc;
}

static void
s_on_rcs(void *arg, const lisa_rc_t *rcs, size_t n)
{
    s_seen_t *s = arg;
    s->calls++;
    s->n = n;
    for (size_t i = 0; i < n && i < 8; i++)
        s->rcs[i] = rcs[i];
}

static void
s_on_text(void *arg, const char *text)
{
    s_seen_t *s = arg;
    s->calls++;
    snprintf(s->text, sizeof s->text, "%s", text);
}

Test(ctl_op, usage)
{
    ctl_op_t ops;
    ctl_op_list_init(&ops);
    const char *names[] = {"lisa-a", "lisa-b"};
    s_seen_t seen = {0};
    int impl = 0;
    ctl_op_remove_t *o =
        ctl_op_remove_new(&ops, &impl, names, 2, s_on_rc, &seen);
    cr_assert_eq(o->base.impl, &impl);
    cr_assert_str_eq(o->items[1].name, "lisa-b");
    cr_assert_eq(o->items[1].op, o);
    /* the requests went out; the loop lets go; the answers come */
    ctl_op_remove_item_end(o, LISA_OK);
    ctl_op_remove_item_end(o, LISA_OK);
    cr_assert_eq(seen.calls, 0, "one item still out");
    ctl_op_remove_item_end(o, LISA_OK);
    cr_assert_eq(seen.calls, 1);
    cr_assert_eq(seen.rc, LISA_OK);
    cr_assert_eq(ops.next, &ops, "the removal left the list");
}

Test(ctl_op, a_removal_reports_a_failed_item)
{
    ctl_op_t ops;
    ctl_op_list_init(&ops);
    const char *names[] = {"a", "b", "c"};
    s_seen_t seen = {0};
    ctl_op_remove_t *o =
        ctl_op_remove_new(&ops, NULL, names, 3, s_on_rc, &seen);
    ctl_op_remove_item_end(o, LISA_OK);
    ctl_op_remove_item_end(o, LISA_UNAVAILABLE); /* not sent */
    ctl_op_remove_item_end(o, LISA_OK);
    ctl_op_remove_item_end(o, LISA_OK); /* the loop's hold */
    cr_assert_eq(seen.calls, 1);
    cr_assert_eq(seen.rc, LISA_UNAVAILABLE);
    cr_assert_eq(ops.next, &ops);
}

Test(ctl_op, an_empty_removal_answers_when_the_loop_lets_go)
{
    ctl_op_t ops;
    ctl_op_list_init(&ops);
    s_seen_t seen = {0};
    ctl_op_remove_t *o = ctl_op_remove_new(&ops, NULL, NULL, 0, s_on_rc, &seen);
    cr_assert_eq(seen.calls, 0);
    ctl_op_remove_item_end(o, LISA_OK);
    cr_assert_eq(seen.calls, 1);
    cr_assert_eq(seen.rc, LISA_OK);
}

Test(ctl_op, a_batch_of_starts_answers_each_item_in_order)
{
    ctl_op_t ops;
    ctl_op_list_init(&ops);
    ctl_spec_t specs[3] = {
        {.name = "lisa-r1-a1", .rollout_id = "r1", .attempt = 1},
        {.name = "lisa-r2-a1", .rollout_id = "r2", .attempt = 1},
        {.name = "lisa-r3-a4", .rollout_id = "r3", .attempt = 4}};
    s_seen_t seen = {0};
    ctl_op_start_t *o = ctl_op_start_new(&ops, NULL, specs, 3, s_on_rcs, &seen);
    cr_assert_str_eq(o->items[2].name, "lisa-r3-a4");
    cr_assert_str_eq(o->items[2].rollout_id, "r3");
    cr_assert_eq(o->items[2].attempt, 4);
    o->items[0].body = strdup("{\"freed\":\"with the batch\"}");
    /* answers in any order; each lands at its own index */
    ctl_op_start_item_end(&o->items[2], LISA_CONFLICT);
    ctl_op_start_item_end(&o->items[0], LISA_OK);
    ctl_op_start_release(o);
    cr_assert_eq(seen.calls, 0, "item 1 is still out");
    ctl_op_start_item_end(&o->items[1], LISA_INVALID);
    cr_assert_eq(seen.calls, 1);
    cr_assert_eq(seen.n, 3);
    cr_assert_eq(seen.rcs[0], LISA_OK);
    cr_assert_eq(seen.rcs[1], LISA_INVALID);
    cr_assert_eq(seen.rcs[2], LISA_CONFLICT);
    cr_assert_eq(ops.next, &ops);
}

Test(ctl_op, one_outcome_and_a_log_tail)
{
    ctl_op_t ops;
    ctl_op_list_init(&ops);
    s_seen_t ping = {0}, tail = {0};
    ctl_op_rc_t *p = ctl_op_rc_new(&ops, NULL, s_on_rc, &ping);
    ctl_op_tail_t *t =
        ctl_op_tail_new(&ops, NULL, "lisa-r1-a1", s_on_text, &tail);
    cr_assert_str_eq(t->name, "lisa-r1-a1");
    ctl_op_rc_end(p, LISA_UNAVAILABLE);
    cr_assert_eq(ping.calls, 1);
    cr_assert_eq(ping.rc, LISA_UNAVAILABLE);
    cr_assert_neq(ops.next, &ops, "the tail is still on the list");
    ctl_op_tail_end(t, "last line");
    cr_assert_eq(tail.calls, 1);
    cr_assert_str_eq(tail.text, "last line");
    cr_assert_eq(ops.next, &ops);
}

Test(ctl_op, ending_the_list_frees_every_operation_without_callbacks)
{
    ctl_op_t ops;
    ctl_op_list_init(&ops);
    const char *names[] = {"a", "b"};
    ctl_spec_t spec = {.name = "n", .rollout_id = "r", .attempt = 1};
    s_seen_t seen = {0};
    (void) ctl_op_remove_new(&ops, NULL, names, 2, s_on_rc, &seen);
    ctl_op_start_t *s = ctl_op_start_new(&ops, NULL, &spec, 1, s_on_rcs, &seen);
    s->items[0].body = strdup("{}");
    (void) ctl_op_rc_new(&ops, NULL, s_on_rc, &seen);
    (void) ctl_op_tail_new(&ops, NULL, "n", s_on_text, &seen);
    int n = 0;
    for (ctl_op_t *op = ops.next; op != &ops; op = op->next)
        n++;
    cr_assert_eq(n, 4);
    ctl_op_end_all(&ops);
    cr_assert_eq(ops.next, &ops);
    cr_assert_eq(ops.prev, &ops);
    cr_assert_eq(seen.calls, 0);
}

/* ---- a JSON request against a real server -------------------------------- */

typedef struct {
    char method[16], path[128], type[64], accept[64], body[256];
    size_t len;
} s_got_t;

static s_got_t s_got;

static enum MHD_Result
s_handler(void *cls, struct MHD_Connection *c, const char *url,
          const char *method, const char *version, const char *upload,
          size_t *upload_size, void **con_cls)
{
    (void) cls, (void) version;
    if (!*con_cls) {
        *con_cls = (void *) 1;
        memset(&s_got, 0, sizeof s_got);
        return MHD_YES;
    }
    if (*upload_size) {
        size_t room = sizeof s_got.body - 1 - s_got.len;
        size_t n = *upload_size < room ? *upload_size : room;
        memcpy(s_got.body + s_got.len, upload, n);
        s_got.len += n;
        *upload_size = 0;
        return MHD_YES;
    }
    const char *type =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    const char *accept =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept");
    snprintf(s_got.method, sizeof s_got.method, "%s", method);
    snprintf(s_got.path, sizeof s_got.path, "%s", url);
    snprintf(s_got.type, sizeof s_got.type, "%s", type ? type : "");
    snprintf(s_got.accept, sizeof s_got.accept, "%s", accept ? accept : "");
    static const char body[] = "{\"ok\":true}";
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), (void *) (uintptr_t) body, MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, 201, r);
    MHD_destroy_response(r);
    return ret;
}

typedef struct {
    zloop_t *loop;
    long status;
    char body[64];
    int calls;
} s_answer_t;

static void
s_on_answer(lisa_http_response_t *r, void *arg)
{
    s_answer_t *a = arg;
    a->calls++;
    a->status = lisa_http_response_status(r);
    const char *b = lisa_http_response_body(r, NULL);
    snprintf(a->body, sizeof a->body, "%s", b ? b : "");
}

static int
s_until_answered(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop, (void) timer_id;
    s_answer_t *a = arg;
    return a->calls ? -1 : 0;
}

/* Sends one request through ctl_op_send_json and runs the loop until its
 * answer came (or 10 s passed). */
static void
s_roundtrip(const char *method, const char *path, const char *body,
            s_answer_t *a)
{
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, s_handler, NULL,
        MHD_OPTION_SOCK_ADDR,
        (const struct sockaddr *) &(struct sockaddr_in){
            .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)},
        MHD_OPTION_END);
    cr_assert_not_null(d);
    unsigned port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT)->port;
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u%s", port, path);
    zloop_t *loop = zloop_new();
    lisa_http_client_config_t hc = {0};
    lisa_http_client_t *http = lisa_http_client_new(loop, &hc);
    cr_assert_not_null(http);
    lisa_http_request_t base = {
        .timeout_ms = 5000, .connect_timeout_ms = 2000, .max_response = 1024};
    cr_assert_eq(ctl_op_send_json(http, &base, "test", method, url, path, body,
                                  s_on_answer, a),
                 LISA_OK);
    zloop_timer(loop, 10, 1000, s_until_answered, a);
    zloop_start(loop);
    lisa_http_client_destroy(&http);
    zloop_destroy(&loop);
    MHD_stop_daemon(d);
}

Test(ctl_op, a_json_request_reaches_the_server_as_sent)
{
    s_answer_t a = {0};
    s_roundtrip("POST", "/containers/create?name=x", "{\"Image\":\"img\"}", &a);
    cr_assert_eq(a.calls, 1);
    cr_assert_eq(a.status, 201);
    cr_assert_str_eq(a.body, "{\"ok\":true}");
    cr_assert_str_eq(s_got.method, "POST");
    cr_assert_str_eq(s_got.path, "/containers/create");
    cr_assert_str_eq(s_got.type, "application/json");
    cr_assert_str_eq(s_got.accept, "application/json");
    cr_assert_str_eq(s_got.body, "{\"Image\":\"img\"}");
}

Test(ctl_op, a_request_without_body_has_no_content_type)
{
    s_answer_t a = {0};
    s_roundtrip("DELETE", "/containers/x", NULL, &a);
    cr_assert_eq(a.calls, 1);
    cr_assert_eq(a.status, 201);
    cr_assert_str_eq(s_got.method, "DELETE");
    cr_assert_str_eq(s_got.type, "");
    cr_assert_str_eq(s_got.accept, "application/json");
    cr_assert_eq(s_got.len, 0);
}
