/*
 * ctl_docker: Engine API calls, JSON with jansson, asynchronous.
 *
 * Every call is a request on common's lisa_http_client, driven by the
 * controller's loop: an operation (a listing, a batch of starts or
 * removals, a log tail) sends its requests and returns; their answers
 * finish it from the loop. Batches run concurrently over a few
 * kept-alive connections (the engine works on them in parallel); a
 * container's start goes out as soon as its create is answered. The API
 * version is negotiated once, before anything else: operations that
 * arrive meanwhile wait for it. An /events stream of this controller's
 * containers dying (a streaming request of the same client) wakes the
 * controller: its bytes are only a signal to list now; the listing is
 * the truth.
 *
 * Every operation in flight is on one list, so destroying the backend
 * frees those whose answers never came.
 */
#include "ctl_docker.h"

#include "ctl_op.h"
#include "lisa/lisa_http_client.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_TIMEOUT_MS      15000L
#define S_CONNECT_MS      5000L
#define S_MAX_REPLY       (64u * 1024u * 1024u)
#define S_MAX_LIST        100000u
#define S_PARALLEL        6    /* connections (more: no faster) */
#define S_EVENTS_RETRY_MS 1000 /* between attempts to open the stream */

typedef struct s_docker s_docker_t;
/* Continues an operation once the version is known (rc LISA_OK) or
 * cannot be (LISA_UNAVAILABLE). */
typedef void(s_go_fn)(s_docker_t *d, ctl_op_t *op, lisa_rc_t rc);

typedef struct {
    s_go_fn *go;
    ctl_op_t *op;
} s_wait_t;

struct s_docker {
    char *controller_id, *socket, *image, *runtime, *network;
    char *gateway_socket, *gateway_url, *sandbox_cmd, *user;
    char *proxy_socket, *proxy_url; /* packages mode; "" when off */
    lisa_http_client_t *http;       /* from attach */
    ctl_wake_fn *wake;
    void *wake_ctx;
    char version[16]; /* "1.45"; "" until negotiated */
    bool negotiating;
    s_wait_t *waiting; /* operations waiting for the version */
    size_t n_waiting, cap_waiting;
    ctl_op_t ops; /* the list of operations in flight (a sentinel) */
    bool events_open;
    uint64_t events_id;
    int64_t events_tried; /* monotonic ms */
};

/* ---- operations and requests ----------------------------------------- */

/* Builds "http://docker/v<ver><path>". Caller frees. */
static char *
s_url(const s_docker_t *d, const char *path)
{
    size_t n = strlen(path) + 48;
    char *u = lisa_malloc(n);
    if (d->version[0])
        snprintf(u, n, "http://docker/v%s%s", d->version, path);
    else
        snprintf(u, n, "http://docker%s", path);
    return u;
}

/* Sends one request; its answer goes to done(resp, arg). LISA_OK, or the
 * reason it could not be sent (done will not run). */
static lisa_rc_t
s_send(s_docker_t *d, const char *method, const char *path, const char *body,
       lisa_http_done_fn *done, void *arg)
{
    lisa_http_request_t base = {.timeout_ms = S_TIMEOUT_MS,
                                .connect_timeout_ms = S_CONNECT_MS,
                                .unix_socket = d->socket,
                                .max_response = S_MAX_REPLY};
    char *url = s_url(d, path);
    lisa_rc_t rc = ctl_op_send_json(d->http, &base, "docker", method, url, path,
                                    body, done, arg);
    lisa_free(&url);
    return rc;
}

/* An answer's outcome: transport failures are LISA_UNAVAILABLE (the
 * engine is down: pause), a timeout LISA_TIMEOUT, an oversized answer
 * LISA_TOOLARGE; an answer of any status is LISA_OK. */
static lisa_rc_t
s_transport_rc(const lisa_http_response_t *r)
{
    lisa_rc_t rc = lisa_http_response_rc(r);
    if (rc == LISA_OK || rc == LISA_TIMEOUT || rc == LISA_TOOLARGE)
        return rc;
    lisa_log_debug("docker: %s", lisa_http_response_error(r));
    return LISA_UNAVAILABLE;
}

/* The outcome of a call whose 5xx answers mean the engine is in trouble. */
static lisa_rc_t
s_call_rc(const lisa_http_response_t *r, const char *what)
{
    lisa_rc_t rc = s_transport_rc(r);
    long status = lisa_http_response_status(r);
    if (rc == LISA_OK && status >= 500) {
        lisa_log_warn("docker: %s -> %ld %.200s", what, status,
                      lisa_http_response_body(r, NULL));
        rc = LISA_UNAVAILABLE;
    }
    return rc;
}

/* ---- version negotiation --------------------------------------------- */

static void
s_on_version(lisa_http_response_t *r, void *arg)
{
    s_docker_t *d = arg;
    d->negotiating = false;
    lisa_rc_t rc = LISA_UNAVAILABLE;
    long status = lisa_http_response_status(r);
    if (s_transport_rc(r) == LISA_OK) {
        json_t *j = json_loads(lisa_http_response_body(r, NULL), 0, NULL);
        const char *v = json_string_value(json_object_get(j, "ApiVersion"));
        /* Accept "1.NN" only: it becomes part of every path. */
        if (status == 200 && v && strncmp(v, "1.", 2) == 0 &&
            strlen(v) < sizeof d->version &&
            strspn(v + 2, "0123456789") == strlen(v + 2) && v[2]) {
            snprintf(d->version, sizeof d->version, "%s", v);
            lisa_log_info("docker: Engine API %s", d->version);
            rc = LISA_OK;
        } else {
            lisa_log_warn("docker: /version answered %ld without a usable "
                          "ApiVersion",
                          status);
        }
        json_decref(j);
    }
    /* the waiting operations go on (they may queue again: take the list) */
    s_wait_t *w = d->waiting;
    size_t n = d->n_waiting;
    d->waiting = NULL;
    d->n_waiting = d->cap_waiting = 0;
    for (size_t i = 0; i < n; i++)
        w[i].go(d, w[i].op, rc);
    lisa_free(&w);
}

/* Runs go(op) once the API version is known. */
static void
s_with_version(s_docker_t *d, s_go_fn *go, ctl_op_t *op)
{
    if (d->version[0]) {
        go(d, op, LISA_OK);
        return;
    }
    if (d->n_waiting == d->cap_waiting) {
        d->cap_waiting = d->cap_waiting ? 2 * d->cap_waiting : 8;
        d->waiting =
            lisa_realloc(d->waiting, d->cap_waiting * sizeof *d->waiting);
    }
    d->waiting[d->n_waiting++] = (s_wait_t){go, op};
    if (d->negotiating)
        return;
    d->negotiating = true;
    if (s_send(d, "GET", "/version", NULL, s_on_version, d) != LISA_OK) {
        d->negotiating = false;
        s_wait_t *w = d->waiting;
        size_t n = d->n_waiting;
        d->waiting = NULL;
        d->n_waiting = d->cap_waiting = 0;
        for (size_t i = 0; i < n; i++)
            w[i].go(d, w[i].op, LISA_UNAVAILABLE);
        lisa_free(&w);
    }
}

/* ---- the /events stream (wake-ups) ----------------------------------- */

static bool
s_on_events_chunk(const char *data, size_t len, long status, void *arg)
{
    (void) data;
    (void) status;
    s_docker_t *d = arg;
    if (len && d->wake)
        d->wake(d->wake_ctx);
    return true;
}

static void
s_on_events_end(lisa_http_response_t *r, void *arg)
{
    s_docker_t *d = arg;
    d->events_open = false; /* opened again at a later listing */
    lisa_log_debug("docker: events stream ended: %s",
                   lisa_http_response_error(r));
}

static void
s_events_close(s_docker_t *d)
{
    if (d->events_open)
        (void) lisa_http_client_cancel(d->http, d->events_id);
    d->events_open = false;
}

/* Opens the stream of this controller's containers dying: answered chunk
 * by chunk for as long as it stays open. */
static void
s_events_open(s_docker_t *d)
{
    int64_t now = zclock_mono();
    if (d->events_open || !d->wake || !d->version[0] ||
        now - d->events_tried < S_EVENTS_RETRY_MS)
        return;
    d->events_tried = now;
    char filter[320];
    snprintf(filter, sizeof filter,
             "{\"type\":[\"container\"],\"event\":[\"die\"],"
             "\"label\":[\"lisa.controller=%s\"]}",
             d->controller_id);
    char *esc = ctl_backend_escape(filter);
    size_t n = strlen(esc) + 32;
    char *path = lisa_malloc(n);
    snprintf(path, n, "/events?filters=%s", esc);
    lisa_free(&esc);
    char *url = s_url(d, path);
    lisa_free(&path);
    lisa_http_request_t req = {
        .method = "GET",
        .url = url,
        .timeout_ms = -1, /* for as long as the engine keeps it */
        .connect_timeout_ms = S_CONNECT_MS,
        .unix_socket = d->socket,
        .max_response = 64u * 1024u,
        .on_chunk = s_on_events_chunk,
    };
    if (lisa_http_client_send(d->http, &req, s_on_events_end, d,
                              &d->events_id) == LISA_OK)
        d->events_open = true;
    lisa_free(&url);
}

/* ---- ping ------------------------------------------------------------ */

static void
s_ping_end(ctl_op_rc_t *p, lisa_rc_t rc)
{
    if (rc != LISA_OK) {
        s_docker_t *d = p->impl;
        d->version[0] = '\0'; /* negotiate again when it comes back */
        s_events_close(d);
    }
    ctl_op_rc_end(p, rc);
}

static void
s_on_ping(lisa_http_response_t *r, void *arg)
{
    lisa_rc_t rc = s_call_rc(r, "GET /_ping");
    if (rc == LISA_OK && lisa_http_response_status(r) != 200)
        rc = LISA_UNAVAILABLE;
    s_ping_end(arg, rc);
}

static void
s_ping_go(s_docker_t *d, ctl_op_t *op, lisa_rc_t rc)
{
    if (rc == LISA_OK)
        rc = s_send(d, "GET", "/_ping", NULL, s_on_ping, op);
    if (rc != LISA_OK)
        s_ping_end((ctl_op_rc_t *) op, LISA_UNAVAILABLE);
}

static void
s_ping_async(void *impl, ctl_rc_fn *done, void *arg)
{
    s_docker_t *d = impl;
    ctl_op_rc_t *p = ctl_op_rc_new(&d->ops, d, done, arg);
    s_with_version(d, s_ping_go, &p->op);
}

/* ---- starts ---------------------------------------------------------- */

static json_t *
s_create_body(const s_docker_t *d, const ctl_spec_t *sp)
{
    char num[32];
    json_t *labels = json_object();
    json_object_set_new(labels, "managed-by", json_string("lisa"));
    json_object_set_new(labels, "lisa.controller",
                        json_string(sp->controller_id));
    json_object_set_new(labels, "lisa.run", json_string(sp->run_id));
    json_object_set_new(labels, "lisa.rollout", json_string(sp->rollout_id));
    snprintf(num, sizeof num, "%u", sp->attempt);
    json_object_set_new(labels, "lisa.attempt", json_string(num));
    snprintf(num, sizeof num, "%" PRIu64, sp->created_ms);
    json_object_set_new(labels, "lisa.created_ms", json_string(num));
    snprintf(num, sizeof num, "%" PRIu64, sp->deadline_ms);
    json_object_set_new(labels, "lisa.deadline_ms", json_string(num));

    bool sock = *d->gateway_socket != '\0';
    json_t *env = json_array();
    char buf[4352];
    snprintf(buf, sizeof buf, "LISA_ATTEMPT_TOKEN=%s", sp->token);
    json_array_append_new(env, json_string(buf));
    json_array_append_new(env, json_string("LISA_TESTBED=/testbed"));
    json_array_append_new(env, json_string("HOME=/testbed"));
    if (sock)
        json_array_append_new(
            env, json_string("LISA_GATEWAY_SOCKET=/run/lisa/gateway.sock"));
    else {
        snprintf(buf, sizeof buf, "LISA_GATEWAY_URL=%s", d->gateway_url);
        json_array_append_new(env, json_string(buf));
    }
    if (*d->proxy_socket || *d->proxy_url) {
        json_array_append_new(env,
                              json_string("LISA_SANDBOX_NETWORK=packages"));
        if (*d->proxy_socket)
            snprintf(buf, sizeof buf, "LISA_PROXY_SOCKET=/run/lisa/proxy.sock");
        else
            snprintf(buf, sizeof buf, "LISA_PROXY_URL=%s", d->proxy_url);
        json_array_append_new(env, json_string(buf));
    }
    /* Entrypoint too: an image's own ENTRYPOINT would otherwise take Cmd
     * as its arguments. */
    json_t *entry = *d->sandbox_cmd
                        ? json_pack("[s]", "/bin/sh")
                        : json_pack("[s]", "/usr/local/bin/lisa-agent");
    json_t *cmd = *d->sandbox_cmd ? json_pack("[s,s]", "-c", d->sandbox_cmd)
                                  : json_array();

    json_t *host = json_object();
    json_object_set_new(host, "NetworkMode",
                        json_string(*d->network ? d->network : "none"));
    json_object_set_new(host, "CapDrop", json_pack("[s]", "ALL"));
    json_object_set_new(host, "SecurityOpt",
                        json_pack("[s]", "no-new-privileges:true"));
    json_object_set_new(host, "ReadonlyRootfs", json_true());
    /* No docker-init: it would keep the token in its environment; the
     * agent is pid 1, scrubs its copy and reaps orphans. */
    json_object_set_new(host, "Init", json_false());
    json_object_set_new(host, "AutoRemove", json_false());
    json_object_set_new(host, "Privileged", json_false());
    json_object_set_new(host, "Memory",
                        json_integer((json_int_t) sp->memory_bytes));
    json_object_set_new(host, "MemorySwap",
                        json_integer((json_int_t) sp->memory_bytes));
    json_object_set_new(host, "NanoCpus",
                        json_integer((json_int_t) sp->cpu_millis * 1000000));
    json_object_set_new(host, "PidsLimit", json_integer(sp->pids));
    json_object_set_new(host, "Ulimits",
                        json_pack("[{s:s,s:i,s:i}]", "Name", "nofile", "Soft",
                                  4096, "Hard", 4096));
    /* Every writable mount is sized, together the disk: /testbed three
     * quarters, /tmp and /dev/shm an eighth each. Output kept on the host:
     * at most 1 MiB per container (the newest). */
    uint64_t eighth = sp->disk_bytes / 8;
    json_t *tmpfs = json_object();
    snprintf(buf, sizeof buf, "rw,exec,size=%" PRIu64 ",mode=1777",
             sp->disk_bytes - 2 * eighth);
    json_object_set_new(tmpfs, "/testbed", json_string(buf));
    snprintf(buf, sizeof buf, "rw,exec,size=%" PRIu64 ",mode=1777", eighth);
    json_object_set_new(tmpfs, "/tmp", json_string(buf));
    json_object_set_new(host, "Tmpfs", tmpfs);
    json_object_set_new(host, "ShmSize", json_integer((json_int_t) eighth));
    json_object_set_new(host, "LogConfig",
                        json_pack("{s:s,s:{s:s,s:s}}", "Type", "json-file",
                                  "Config", "max-size", "1m", "max-file", "1"));
    json_t *binds = json_array();
    if (sock) {
        snprintf(buf, sizeof buf, "%s:/run/lisa/gateway.sock",
                 d->gateway_socket);
        json_array_append_new(binds, json_string(buf));
    }
    if (*d->proxy_socket) {
        snprintf(buf, sizeof buf, "%s:/run/lisa/proxy.sock", d->proxy_socket);
        json_array_append_new(binds, json_string(buf));
    }
    if (json_array_size(binds))
        json_object_set_new(host, "Binds", binds);
    else
        json_decref(binds);
    if (*d->runtime)
        json_object_set_new(host, "Runtime", json_string(d->runtime));
    json_t *body = json_object();
    json_object_set_new(body, "Image", json_string(d->image));
    json_object_set_new(body, "Entrypoint", entry);
    json_object_set_new(body, "Cmd", cmd);
    json_object_set_new(body, "Env", env);
    json_object_set_new(body, "User",
                        json_string(*d->user ? d->user : "65534:65534"));
    json_object_set_new(body, "WorkingDir", json_string("/testbed"));
    json_object_set_new(body, "Labels", labels);
    json_object_set_new(body, "NetworkDisabled", json_boolean(sock));
    json_object_set_new(body, "HostConfig", host);
    return body;
}

static lisa_rc_t
s_rc_of(long status)
{
    if (status >= 200 && status < 300)
        return LISA_OK;
    if (status == 304)
        return LISA_OK; /* already started */
    if (status == 404)
        return LISA_NOTFOUND;
    if (status == 409)
        return LISA_CONFLICT;
    if (status >= 500)
        return LISA_UNAVAILABLE;
    return LISA_INVALID;
}

/* rc of a create answer. */
static lisa_rc_t
s_create_rc(const s_docker_t *d, const char *name, lisa_http_response_t *r)
{
    lisa_rc_t rc = s_transport_rc(r);
    if (rc != LISA_OK)
        return rc;
    long status = lisa_http_response_status(r);
    const char *body = lisa_http_response_body(r, NULL);
    if (status >= 500) {
        lisa_log_warn("docker: create %s -> %ld %.200s", name, status, body);
        return LISA_UNAVAILABLE;
    }
    rc = s_rc_of(status);
    if (status == 404) {
        lisa_log_error("docker: image %s not found: %.200s", d->image, body);
        rc = LISA_UNAVAILABLE; /* nothing can start until it exists */
    } else if (rc == LISA_INVALID) {
        lisa_log_error("docker: create %s -> %ld %.200s", name, status, body);
    }
    return rc; /* LISA_CONFLICT: it exists; the caller takes it */
}

static void
s_on_started(lisa_http_response_t *r, void *arg)
{
    ctl_op_start_item_t *it = arg;
    lisa_rc_t rc = s_transport_rc(r);
    long status = lisa_http_response_status(r);
    if (rc == LISA_OK)
        rc = s_rc_of(status);
    if (rc != LISA_OK)
        lisa_log_error("docker: start %s -> %ld %.200s (%s)", it->name, status,
                       lisa_http_response_body(r, NULL), lisa_rc_str(rc));
    else
        lisa_log_info("docker: started %s for rollout %s attempt %u", it->name,
                      it->rollout_id, it->attempt);
    ctl_op_start_item_end(it, rc);
}

static void
s_on_created(lisa_http_response_t *r, void *arg)
{
    ctl_op_start_item_t *it = arg;
    s_docker_t *d = it->op->impl;
    lisa_rc_t rc = s_create_rc(d, it->name, r);
    if (rc != LISA_OK) {
        ctl_op_start_item_end(it, rc);
        return;
    }
    char *esc = ctl_backend_escape(it->name);
    char path[256];
    snprintf(path, sizeof path, "/containers/%s/start", esc);
    lisa_free(&esc);
    if (s_send(d, "POST", path, NULL, s_on_started, it) != LISA_OK)
        ctl_op_start_item_end(it, LISA_UNAVAILABLE);
}

static void
s_start_go(s_docker_t *d, ctl_op_t *op, lisa_rc_t rc)
{
    ctl_op_start_t *o = (ctl_op_start_t *) op;
    for (size_t i = 0; i < o->n; i++) {
        ctl_op_start_item_t *it = &o->items[i];
        lisa_rc_t r = rc;
        if (r == LISA_OK) {
            char *esc = ctl_backend_escape(it->name);
            char path[256];
            snprintf(path, sizeof path, "/containers/create?name=%s", esc);
            lisa_free(&esc);
            r = s_send(d, "POST", path, it->body, s_on_created, it);
        }
        if (r != LISA_OK)
            ctl_op_start_item_end(it, LISA_UNAVAILABLE);
    }
    ctl_op_start_release(o); /* this function's own hold */
}

/* Every create at once, each container's start as soon as it exists. */
static void
s_start_async(void *impl, const ctl_spec_t *specs, size_t n, ctl_rcs_fn *done,
              void *arg)
{
    s_docker_t *d = impl;
    if (n == 0) {
        done(arg, NULL, 0);
        return;
    }
    ctl_op_start_t *o = ctl_op_start_new(&d->ops, d, specs, n, done, arg);
    for (size_t i = 0; i < n; i++) {
        json_t *body = s_create_body(d, &specs[i]);
        o->items[i].body = json_dumps(body, JSON_COMPACT);
        json_decref(body);
    }
    s_with_version(d, s_start_go, &o->op);
}

static void
s_label(json_t *labels, const char *key, char *dst, size_t cap)
{
    const char *v = json_string_value(json_object_get(labels, key));
    snprintf(dst, cap, "%s", v ? v : "");
}

static uint64_t
s_label_u64(json_t *labels, const char *key)
{
    const char *v = json_string_value(json_object_get(labels, key));
    return v ? strtoull(v, NULL, 10) : 0;
}

/* ---- listing --------------------------------------------------------- */

typedef struct s_list_op s_list_op_t;

/* One inspect of an ended container. */
typedef struct {
    s_list_op_t *op;
    size_t i; /* its sandbox */
} s_inspect_t;

struct s_list_op {
    ctl_op_t op;
    s_docker_t *d;
    ctl_sandbox_t *sbs;
    size_t n;
    s_inspect_t *inspects;
    size_t left;
    ctl_list_fn *done;
    void *arg;
};

static void
s_list_free(ctl_op_t *op)
{
    s_list_op_t *o = (s_list_op_t *) op;
    lisa_free(&o->sbs);
    lisa_free(&o->inspects);
    lisa_free(&o);
}

static void
s_list_end(s_list_op_t *o, lisa_rc_t rc)
{
    ctl_list_fn *done = o->done;
    void *arg = o->arg;
    ctl_sandbox_t *sbs = o->sbs;
    size_t n = o->n;
    o->sbs = NULL;
    ctl_op_end(&o->op);
    done(arg, rc, rc == LISA_OK ? sbs : NULL, rc == LISA_OK ? n : 0);
    lisa_free(&sbs);
}

/* Exit code and OOM flag from an inspect answer. */
static void
s_on_inspect(lisa_http_response_t *r, void *arg)
{
    s_inspect_t *in = arg;
    s_list_op_t *o = in->op;
    ctl_sandbox_t *sb = &o->sbs[in->i];
    sb->exit_code = -1;
    if (s_transport_rc(r) == LISA_OK && lisa_http_response_status(r) == 200) {
        json_t *j = json_loads(lisa_http_response_body(r, NULL), 0, NULL);
        json_t *st = json_object_get(j, "State");
        json_t *code = json_object_get(st, "ExitCode");
        if (json_is_integer(code))
            sb->exit_code = (int) json_integer_value(code);
        sb->oom = json_is_true(json_object_get(st, "OOMKilled"));
        json_decref(j);
    }
    if (--o->left == 0)
        s_list_end(o, LISA_OK);
}

/* Inspects the ended containers of a listing, all at once. */
static void
s_inspect_exits(s_list_op_t *o)
{
    size_t m = 0;
    for (size_t i = 0; i < o->n; i++)
        m += o->sbs[i].phase == CTL_PHASE_EXITED;
    o->inspects = lisa_calloc(m ? m : 1, sizeof *o->inspects);
    o->left = m + 1; /* + 1: this function's own hold */
    size_t k = 0;
    for (size_t i = 0; i < o->n; i++) {
        if (o->sbs[i].phase != CTL_PHASE_EXITED)
            continue;
        s_inspect_t *in = &o->inspects[k++];
        in->op = o;
        in->i = i;
        char *esc = ctl_backend_escape(o->sbs[i].name);
        char path[256];
        snprintf(path, sizeof path, "/containers/%s/json", esc);
        lisa_free(&esc);
        if (s_send(o->d, "GET", path, NULL, s_on_inspect, in) != LISA_OK) {
            o->sbs[i].exit_code = -1;
            o->left--;
        }
    }
    if (--o->left == 0)
        s_list_end(o, LISA_OK);
}

/* One container of the listing into *sb; false when it is not ours. */
static bool
s_sandbox_of(const s_docker_t *d, json_t *c, ctl_sandbox_t *sb)
{
    json_t *labels = json_object_get(c, "Labels");
    const char *name =
        json_string_value(json_array_get(json_object_get(c, "Names"), 0));
    const char *state = json_string_value(json_object_get(c, "State"));
    if (!name || !state || !json_is_object(labels))
        return false;
    memset(sb, 0, sizeof *sb);
    snprintf(sb->name, sizeof sb->name, "%s", name[0] == '/' ? name + 1 : name);
    s_label(labels, "lisa.controller", sb->controller_id,
            sizeof sb->controller_id);
    if (strcmp(sb->controller_id, d->controller_id) != 0)
        return false;
    s_label(labels, "lisa.run", sb->run_id, sizeof sb->run_id);
    s_label(labels, "lisa.rollout", sb->rollout_id, sizeof sb->rollout_id);
    sb->attempt = (unsigned) s_label_u64(labels, "lisa.attempt");
    sb->created_ms = s_label_u64(labels, "lisa.created_ms");
    sb->deadline_ms = s_label_u64(labels, "lisa.deadline_ms");
    if (strcmp(state, "created") == 0)
        sb->phase = CTL_PHASE_PENDING;
    else if (strcmp(state, "exited") == 0 || strcmp(state, "dead") == 0)
        sb->phase = CTL_PHASE_EXITED; /* exit code: inspected */
    else
        sb->phase = CTL_PHASE_RUNNING;
    return true;
}

static void
s_on_list(lisa_http_response_t *r, void *arg)
{
    s_list_op_t *o = arg;
    lisa_rc_t rc = s_call_rc(r, "GET /containers/json");
    if (rc != LISA_OK || lisa_http_response_status(r) != 200) {
        s_list_end(o, rc == LISA_OK ? LISA_UNAVAILABLE : rc);
        return;
    }
    json_t *arr = json_loads(lisa_http_response_body(r, NULL), 0, NULL);
    if (!json_is_array(arr)) {
        json_decref(arr);
        lisa_log_warn("docker: container list is not an array");
        s_list_end(o, LISA_UNAVAILABLE);
        return;
    }
    size_t cnt = json_array_size(arr);
    if (cnt > S_MAX_LIST)
        cnt = S_MAX_LIST;
    o->sbs = lisa_calloc(cnt ? cnt : 1, sizeof *o->sbs);
    for (size_t i = 0; i < cnt; i++)
        if (s_sandbox_of(o->d, json_array_get(arr, i), &o->sbs[o->n]))
            o->n++;
    json_decref(arr);
    s_inspect_exits(o);
}

static void
s_list_go(s_docker_t *d, ctl_op_t *op, lisa_rc_t rc)
{
    s_list_op_t *o = (s_list_op_t *) op;
    if (rc != LISA_OK) {
        s_list_end(o, LISA_UNAVAILABLE);
        return;
    }
    s_events_open(d); /* a death after this listing wakes us again */
    char filter[256];
    snprintf(filter, sizeof filter, "{\"label\":[\"lisa.controller=%s\"]}",
             d->controller_id);
    char *esc = ctl_backend_escape(filter);
    size_t pn = strlen(esc) + 64;
    char *path = lisa_malloc(pn);
    snprintf(path, pn, "/containers/json?all=1&filters=%s", esc);
    lisa_free(&esc);
    rc = s_send(d, "GET", path, NULL, s_on_list, o);
    lisa_free(&path);
    if (rc != LISA_OK)
        s_list_end(o, LISA_UNAVAILABLE);
}

static void
s_list_async(void *impl, ctl_list_fn *done, void *arg)
{
    s_docker_t *d = impl;
    s_list_op_t *o = lisa_calloc(1, sizeof *o);
    o->d = d;
    o->done = done;
    o->arg = arg;
    ctl_op_link(&d->ops, &o->op, s_list_free);
    s_with_version(d, s_list_go, &o->op);
}

/* ---- removals -------------------------------------------------------- */

static void
s_on_removed(lisa_http_response_t *r, void *arg)
{
    ctl_op_item_t *it = arg;
    lisa_rc_t rc = s_transport_rc(r);
    long status = lisa_http_response_status(r);
    if (rc != LISA_OK || (status >= 300 && status != 404)) {
        lisa_log_warn("docker: remove %s: %s %ld", it->name, lisa_rc_str(rc),
                      status);
        rc = rc != LISA_OK ? rc : s_rc_of(status);
    }
    ctl_op_remove_item_end(it->op, rc);
}

static void
s_remove_go(s_docker_t *d, ctl_op_t *op, lisa_rc_t rc)
{
    ctl_op_remove_t *o = (ctl_op_remove_t *) op;
    for (size_t i = 0; i < o->n; i++) {
        lisa_rc_t r = rc;
        if (r == LISA_OK) {
            char *esc = ctl_backend_escape(o->items[i].name);
            char path[256];
            snprintf(path, sizeof path, "/containers/%s?force=1&v=1", esc);
            lisa_free(&esc);
            r = s_send(d, "DELETE", path, NULL, s_on_removed, &o->items[i]);
        }
        if (r != LISA_OK)
            ctl_op_remove_item_end(o, LISA_UNAVAILABLE);
    }
    ctl_op_remove_item_end(o, LISA_OK); /* this function's own hold */
}

static void
s_remove_async(void *impl, const char *const *names, size_t n, ctl_rc_fn *done,
               void *arg)
{
    s_docker_t *d = impl;
    ctl_op_remove_t *o = ctl_op_remove_new(&d->ops, d, names, n, done, arg);
    s_with_version(d, s_remove_go, &o->base.op);
}

/* ---- log tail -------------------------------------------------------- */

/* Logs without a TTY are multiplexed: 8-byte headers (stream, 0, 0, 0,
 * big-endian length) before each payload. The last non-empty line. */
static void
s_last_line(const char *body, size_t left, char *last, size_t cap)
{
    const unsigned char *p = (const unsigned char *) body;
    last[0] = '\0';
    while (left >= 8) {
        size_t n = ((size_t) p[4] << 24) | ((size_t) p[5] << 16) |
                   ((size_t) p[6] << 8) | (size_t) p[7];
        if (p[0] > 2 || n > left - 8)
            break;
        /* Keep the last non-empty line of this frame. */
        size_t end = n;
        while (end > 0 && (p[8 + end - 1] == '\n' || p[8 + end - 1] == '\r'))
            end--;
        size_t start = end;
        while (start > 0 && p[8 + start - 1] != '\n')
            start--;
        if (end > start) {
            size_t m = end - start < cap - 1 ? end - start : cap - 1;
            memcpy(last, p + 8 + start, m);
            last[m] = '\0';
        }
        p += 8 + n;
        left -= 8 + n;
    }
}

static void
s_on_logs(lisa_http_response_t *r, void *arg)
{
    char last[1024] = "";
    if (s_transport_rc(r) == LISA_OK && lisa_http_response_status(r) == 200) {
        size_t len = 0;
        const char *body = lisa_http_response_body(r, &len);
        s_last_line(body, len, last, sizeof last);
    }
    ctl_op_tail_end(arg, last);
}

static void
s_tail_go(s_docker_t *d, ctl_op_t *op, lisa_rc_t rc)
{
    ctl_op_tail_t *o = (ctl_op_tail_t *) op;
    if (rc == LISA_OK) {
        char *esc = ctl_backend_escape(o->name);
        char path[256];
        snprintf(path, sizeof path,
                 "/containers/%s/logs?stdout=1&stderr=1&tail=5", esc);
        lisa_free(&esc);
        rc = s_send(d, "GET", path, NULL, s_on_logs, o);
    }
    if (rc != LISA_OK)
        ctl_op_tail_end(o, "");
}

static void
s_log_tail_async(void *impl, const char *name, ctl_text_fn *done, void *arg)
{
    s_docker_t *d = impl;
    ctl_op_tail_t *o = ctl_op_tail_new(&d->ops, d, name, done, arg);
    s_with_version(d, s_tail_go, &o->op);
}

/* ---- the backend ------------------------------------------------------ */

static lisa_rc_t
s_attach(void *impl, zloop_t *loop, ctl_wake_fn *wake, void *wake_ctx)
{
    s_docker_t *d = impl;
    if (d->http)
        return LISA_ERR;
    lisa_http_client_config_t hc = {.max_connections = S_PARALLEL,
                                    .max_host_connections = S_PARALLEL};
    d->http = lisa_http_client_new(loop, &hc);
    d->wake = wake;
    d->wake_ctx = wake_ctx;
    return d->http ? LISA_OK : LISA_ERR;
}

static void
s_destroy(void *impl)
{
    s_docker_t *d = impl;
    lisa_http_client_destroy(&d->http); /* no callback runs after this */
    ctl_op_end_all(&d->ops);
    lisa_free(&d->waiting);
    lisa_free(&d->controller_id);
    lisa_free(&d->socket);
    lisa_free(&d->image);
    lisa_free(&d->runtime);
    lisa_free(&d->network);
    lisa_free(&d->gateway_socket);
    lisa_free(&d->gateway_url);
    lisa_free(&d->proxy_socket);
    lisa_free(&d->proxy_url);
    lisa_free(&d->sandbox_cmd);
    lisa_free(&d->user);
    lisa_free(&d);
}

static const ctl_backend_ops_t s_ops = {
    .name = "docker",
    .destroy = s_destroy,
    .dies_with_controller = false,
    .attach = s_attach,
    .ping_async = s_ping_async,
    .list_async = s_list_async,
    .start_async = s_start_async,
    .remove_async = s_remove_async,
    .log_tail_async = s_log_tail_async,
};

static char *
s_dup(const char *s)
{
    return lisa_strdup(s ? s : "");
}

lisa_rc_t
ctl_docker_new(const ctl_docker_cfg_t *cfg, ctl_backend_t *out)
{
    if (!cfg || !cfg->socket || !*cfg->socket || !cfg->image || !*cfg->image ||
        !cfg->controller_id)
        return LISA_INVALID;
    bool sock = cfg->gateway_socket && *cfg->gateway_socket;
    if (!sock && !(cfg->gateway_url && *cfg->gateway_url)) {
        lisa_log_error("docker: set a gateway socket or URL");
        return LISA_INVALID;
    }
    if (!sock && !(cfg->network && *cfg->network)) {
        lisa_log_error("docker: a URL gateway needs a network that reaches "
                       "it (the default is none)");
        return LISA_INVALID;
    }
    s_docker_t *d = lisa_calloc(1, sizeof *d);
    ctl_op_list_init(&d->ops);
    d->controller_id = s_dup(cfg->controller_id);
    d->socket = s_dup(cfg->socket);
    d->image = s_dup(cfg->image);
    d->runtime = s_dup(cfg->runtime);
    d->network = s_dup(cfg->network);
    d->gateway_socket = s_dup(cfg->gateway_socket);
    d->gateway_url = s_dup(cfg->gateway_url);
    d->proxy_socket = s_dup(cfg->proxy_socket);
    d->proxy_url = s_dup(cfg->proxy_url);
    d->sandbox_cmd = s_dup(cfg->sandbox_cmd);
    d->user = s_dup(cfg->user);
    out->ops = &s_ops;
    out->impl = d;
    return LISA_OK;
}
