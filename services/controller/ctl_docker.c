/*
 * ctl_docker: Engine API calls, JSON with jansson.
 *
 * Batches of creates, starts and removals run concurrently over a few
 * kept-alive connections (the engine works on them in parallel). An
 * /events stream of this controller's containers dying, read on its own
 * unix socket connection, is the wake descriptor: its bytes are only a
 * signal to list now; the listing is the truth.
 */
#define _DEFAULT_SOURCE /* struct sockaddr_un */
#include "ctl_docker.h"

#include "ctl_http.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define S_TIMEOUT_MS     15000L
#define S_MAX_LIST       100000u
#define S_PARALLEL       6u    /* connections of a batch (more: no faster) */
#define S_EVENTS_RETRY_S 1     /* between attempts to open the stream */
#define S_DRAIN_MAX      65536 /* bytes of the stream read per listing */

typedef struct {
    char *controller_id, *socket, *image, *runtime, *network;
    char *gateway_socket, *gateway_url, *sandbox_cmd, *user;
    ctl_http_t *http;
    char version[16]; /* "1.45"; "" until negotiated */
    int events_fd;    /* the /events stream; -1 when not open */
    time_t events_tried;
} s_docker_t;

static void s_events_close(s_docker_t *d);
static void s_events_drain(s_docker_t *d);

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

static lisa_rc_t
s_negotiate(s_docker_t *d)
{
    if (d->version[0])
        return LISA_OK;
    ctl_http_rep_t rep;
    lisa_rc_t rc = ctl_http_call(d->http, "GET", "http://docker/version", NULL,
                                 NULL, S_TIMEOUT_MS, &rep);
    if (rc != LISA_OK)
        return LISA_UNAVAILABLE;
    json_t *j = json_loads(rep.body, 0, NULL);
    const char *v = json_string_value(json_object_get(j, "ApiVersion"));
    rc = LISA_UNAVAILABLE;
    /* Accept "1.NN" only: it becomes part of every path. */
    if (rep.status == 200 && v && strncmp(v, "1.", 2) == 0 &&
        strlen(v) < sizeof d->version &&
        strspn(v + 2, "0123456789") == strlen(v + 2) && v[2]) {
        snprintf(d->version, sizeof d->version, "%s", v);
        lisa_log_info("docker: Engine API %s", d->version);
        rc = LISA_OK;
    } else {
        lisa_log_warn("docker: /version answered %ld without a usable "
                      "ApiVersion",
                      rep.status);
    }
    json_decref(j);
    ctl_http_rep_clear(&rep);
    return rc;
}

static lisa_rc_t
s_call(s_docker_t *d, const char *method, const char *path, json_t *body,
       ctl_http_rep_t *rep)
{
    lisa_rc_t rc = s_negotiate(d);
    if (rc != LISA_OK) {
        memset(rep, 0, sizeof *rep);
        return rc;
    }
    char *url = s_url(d, path);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    rc = ctl_http_call(d->http, method, url, "application/json", text,
                       S_TIMEOUT_MS, rep);
    free(text);
    lisa_free(&url);
    if (rc == LISA_OK && rep->status >= 500) {
        lisa_log_warn("docker: %s %s -> %ld %.200s", method, path, rep->status,
                      rep->body);
        rc = LISA_UNAVAILABLE;
    }
    return rc;
}

static lisa_rc_t
s_ping(void *impl)
{
    s_docker_t *d = impl;
    ctl_http_rep_t rep;
    lisa_rc_t rc = s_call(d, "GET", "/_ping", NULL, &rep);
    if (rc == LISA_OK && rep.status != 200)
        rc = LISA_UNAVAILABLE;
    ctl_http_rep_clear(&rep);
    if (rc != LISA_OK) {
        d->version[0] = '\0'; /* negotiate again when it comes back */
        s_events_close(d);
    }
    return rc;
}

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
    if (sock) {
        snprintf(buf, sizeof buf, "%s:/run/lisa/gateway.sock",
                 d->gateway_socket);
        json_object_set_new(host, "Binds", json_pack("[s]", buf));
    }
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

/* rc of a create answer (rc: the transport's). */
static lisa_rc_t
s_create_rc(const s_docker_t *d, const ctl_spec_t *sp, lisa_rc_t rc,
            const ctl_http_rep_t *rep)
{
    if (rc != LISA_OK)
        return rc;
    if (rep->status >= 500) {
        lisa_log_warn("docker: create %s -> %ld %.200s", sp->name, rep->status,
                      rep->body);
        return LISA_UNAVAILABLE;
    }
    rc = s_rc_of(rep->status);
    if (rep->status == 404) {
        lisa_log_error("docker: image %s not found: %.200s", d->image,
                       rep->body);
        rc = LISA_UNAVAILABLE; /* nothing can start until it exists */
    } else if (rc == LISA_INVALID) {
        lisa_log_error("docker: create %s -> %ld %.200s", sp->name, rep->status,
                       rep->body);
    }
    return rc; /* LISA_CONFLICT: it exists; the caller takes it */
}

/* rc of a start answer. */
static lisa_rc_t
s_started_rc(const ctl_spec_t *sp, lisa_rc_t rc, const ctl_http_rep_t *rep)
{
    if (rc != LISA_OK)
        return rc;
    rc = s_rc_of(rep->status);
    if (rc != LISA_OK)
        lisa_log_error("docker: start %s -> %ld %.200s", sp->name, rep->status,
                       rep->body);
    else
        lisa_log_info("docker: started %s for rollout %s attempt %u", sp->name,
                      sp->rollout_id, sp->attempt);
    return rc;
}

static lisa_rc_t
s_start(void *impl, const ctl_spec_t *sp)
{
    s_docker_t *d = impl;
    json_t *body = s_create_body(d, sp);
    char *name = ctl_http_escape(sp->name);
    char path[256];
    snprintf(path, sizeof path, "/containers/create?name=%s", name);
    ctl_http_rep_t rep;
    lisa_rc_t rc = s_call(d, "POST", path, body, &rep);
    json_decref(body);
    rc = s_create_rc(d, sp, rc, &rep);
    ctl_http_rep_clear(&rep);
    if (rc != LISA_OK) {
        lisa_free(&name);
        return rc;
    }
    snprintf(path, sizeof path, "/containers/%s/start", name);
    lisa_free(&name);
    rc = s_call(d, "POST", path, NULL, &rep);
    rc = s_started_rc(sp, rc, &rep);
    ctl_http_rep_clear(&rep);
    return rc;
}

/* Request i of a batch on container `name`: path "/containers/<name><tail>"
 * (or `create` with the name as the query). */
static void
s_batch_req(const s_docker_t *d, ctl_http_req_t *rq, const char *method,
            const char *name, const char *tail, bool create)
{
    char *esc = ctl_http_escape(name);
    char path[256];
    if (create)
        snprintf(path, sizeof path, "/containers/create?name=%s", esc);
    else
        snprintf(path, sizeof path, "/containers/%s%s", esc, tail);
    lisa_free(&esc);
    rq->method = method;
    rq->url = s_url(d, path);
}

static void
s_batch_free(ctl_http_req_t *rq, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        ctl_http_rep_clear(&rq[i].rep);
        char *url = (char *) (uintptr_t) rq[i].url;
        lisa_free(&url);
        free((char *) (uintptr_t) rq[i].body); /* json_dumps: malloc */
    }
}

/* All creates at once, each container's start as soon as it exists. */
static void
s_start_many(void *impl, const ctl_spec_t *specs, size_t n, lisa_rc_t *rcs)
{
    s_docker_t *d = impl;
    if (s_negotiate(d) != LISA_OK) {
        for (size_t i = 0; i < n; i++)
            rcs[i] = LISA_UNAVAILABLE;
        return;
    }
    ctl_http_req_t *create = lisa_calloc(n, sizeof *create);
    ctl_http_req_t *start = lisa_calloc(n, sizeof *start);
    for (size_t i = 0; i < n; i++) {
        json_t *body = s_create_body(d, &specs[i]);
        s_batch_req(d, &create[i], "POST", specs[i].name, NULL, true);
        create[i].body = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        s_batch_req(d, &start[i], "POST", specs[i].name, "/start", false);
        create[i].next = &start[i];
    }
    ctl_http_many(d->http, create, n, S_PARALLEL, S_TIMEOUT_MS);
    for (size_t i = 0; i < n; i++) {
        rcs[i] = s_create_rc(d, &specs[i], create[i].rc, &create[i].rep);
        if (rcs[i] != LISA_OK)
            continue; /* LISA_CONFLICT: it exists; the caller takes it */
        rcs[i] = start[i].rc == LISA_AGAIN
                     ? LISA_UNAVAILABLE
                     : s_started_rc(&specs[i], start[i].rc, &start[i].rep);
    }
    s_batch_free(create, n);
    s_batch_free(start, n);
    lisa_free(&start);
    lisa_free(&create);
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

/* Exit code and OOM flag from an inspect answer. */
static void
s_exit_of(const ctl_http_req_t *rq, ctl_sandbox_t *sb)
{
    sb->exit_code = -1;
    if (rq->rc != LISA_OK || rq->rep.status != 200)
        return;
    json_t *j = json_loads(rq->rep.body, 0, NULL);
    json_t *st = json_object_get(j, "State");
    json_t *code = json_object_get(st, "ExitCode");
    if (json_is_integer(code))
        sb->exit_code = (int) json_integer_value(code);
    sb->oom = json_is_true(json_object_get(st, "OOMKilled"));
    json_decref(j);
}

/* Inspects the ended containers of a listing, all at once. */
static void
s_inspect_exits(s_docker_t *d, ctl_sandbox_t *sbs, size_t n)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += sbs[i].phase == CTL_PHASE_EXITED;
    if (m == 0)
        return;
    ctl_http_req_t *rq = lisa_calloc(m, sizeof *rq);
    size_t *which = lisa_calloc(m, sizeof *which);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (sbs[i].phase != CTL_PHASE_EXITED)
            continue;
        s_batch_req(d, &rq[k], "GET", sbs[i].name, "/json", false);
        which[k++] = i;
    }
    ctl_http_many(d->http, rq, m, S_PARALLEL, S_TIMEOUT_MS);
    for (k = 0; k < m; k++)
        s_exit_of(&rq[k], &sbs[which[k]]);
    s_batch_free(rq, m);
    lisa_free(&which);
    lisa_free(&rq);
}

static lisa_rc_t
s_list(void *impl, ctl_sandbox_t **out, size_t *n)
{
    s_docker_t *d = impl;
    *out = NULL;
    *n = 0;
    s_events_drain(d); /* before listing: a death after it wakes us again */
    char filter[256];
    snprintf(filter, sizeof filter, "{\"label\":[\"lisa.controller=%s\"]}",
             d->controller_id);
    char *esc = ctl_http_escape(filter);
    size_t pn = strlen(esc) + 64;
    char *path = lisa_malloc(pn);
    snprintf(path, pn, "/containers/json?all=1&filters=%s", esc);
    lisa_free(&esc);
    ctl_http_rep_t rep;
    lisa_rc_t rc = s_call(d, "GET", path, NULL, &rep);
    lisa_free(&path);
    if (rc != LISA_OK || rep.status != 200) {
        ctl_http_rep_clear(&rep);
        return rc == LISA_OK ? LISA_UNAVAILABLE : rc;
    }
    json_t *arr = json_loads(rep.body, 0, NULL);
    ctl_http_rep_clear(&rep);
    if (!json_is_array(arr)) {
        json_decref(arr);
        lisa_log_warn("docker: container list is not an array");
        return LISA_UNAVAILABLE;
    }
    size_t cnt = json_array_size(arr);
    if (cnt > S_MAX_LIST)
        cnt = S_MAX_LIST;
    *out = lisa_calloc(cnt ? cnt : 1, sizeof **out);
    for (size_t i = 0; i < cnt; i++) {
        json_t *c = json_array_get(arr, i);
        json_t *labels = json_object_get(c, "Labels");
        const char *name =
            json_string_value(json_array_get(json_object_get(c, "Names"), 0));
        const char *state = json_string_value(json_object_get(c, "State"));
        if (!name || !state || !json_is_object(labels))
            continue;
        ctl_sandbox_t *sb = &(*out)[*n];
        snprintf(sb->name, sizeof sb->name, "%s",
                 name[0] == '/' ? name + 1 : name);
        s_label(labels, "lisa.controller", sb->controller_id,
                sizeof sb->controller_id);
        if (strcmp(sb->controller_id, d->controller_id) != 0)
            continue;
        s_label(labels, "lisa.run", sb->run_id, sizeof sb->run_id);
        s_label(labels, "lisa.rollout", sb->rollout_id, sizeof sb->rollout_id);
        sb->attempt = (unsigned) s_label_u64(labels, "lisa.attempt");
        sb->created_ms = s_label_u64(labels, "lisa.created_ms");
        sb->deadline_ms = s_label_u64(labels, "lisa.deadline_ms");
        if (strcmp(state, "created") == 0) {
            sb->phase = CTL_PHASE_PENDING;
        } else if (strcmp(state, "exited") == 0 || strcmp(state, "dead") == 0) {
            sb->phase = CTL_PHASE_EXITED; /* exit code: below */
        } else {
            sb->phase = CTL_PHASE_RUNNING;
        }
        (*n)++;
    }
    json_decref(arr);
    s_inspect_exits(d, *out, *n);
    return LISA_OK;
}

static lisa_rc_t
s_remove(void *impl, const char *name)
{
    s_docker_t *d = impl;
    char *esc = ctl_http_escape(name);
    char path[256];
    snprintf(path, sizeof path, "/containers/%s?force=1&v=1", esc);
    lisa_free(&esc);
    ctl_http_rep_t rep;
    lisa_rc_t rc = s_call(d, "DELETE", path, NULL, &rep);
    if (rc == LISA_OK)
        rc = s_rc_of(rep.status);
    ctl_http_rep_clear(&rep);
    return rc;
}

static void
s_remove_many(void *impl, const char *const *names, size_t n)
{
    s_docker_t *d = impl;
    if (s_negotiate(d) != LISA_OK)
        return;
    ctl_http_req_t *rq = lisa_calloc(n, sizeof *rq);
    for (size_t i = 0; i < n; i++)
        s_batch_req(d, &rq[i], "DELETE", names[i], "?force=1&v=1", false);
    ctl_http_many(d->http, rq, n, S_PARALLEL, S_TIMEOUT_MS);
    for (size_t i = 0; i < n; i++)
        if (rq[i].rc != LISA_OK ||
            (rq[i].rep.status >= 300 && rq[i].rep.status != 404))
            lisa_log_warn("docker: remove %s: %s %ld", names[i],
                          lisa_rc_str(rq[i].rc), rq[i].rep.status);
    s_batch_free(rq, n);
    lisa_free(&rq);
}

/* ---- the /events stream (wake descriptor) ---------------------------- */

static void
s_events_close(s_docker_t *d)
{
    if (d->events_fd >= 0)
        close(d->events_fd);
    d->events_fd = -1;
}

/* Opens the stream of this controller's containers dying: a plain
 * request on a new connection, answered chunk by chunk for as long as it
 * stays open. */
static void
s_events_open(s_docker_t *d)
{
    time_t now = time(NULL);
    if (d->events_fd >= 0 || now - d->events_tried < S_EVENTS_RETRY_S ||
        !d->version[0])
        return;
    d->events_tried = now;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(d->socket) >= sizeof sa.sun_path)
        return;
    memcpy(sa.sun_path, d->socket, strlen(d->socket) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    char filter[320];
    snprintf(filter, sizeof filter,
             "{\"type\":[\"container\"],\"event\":[\"die\"],"
             "\"label\":[\"lisa.controller=%s\"]}",
             d->controller_id);
    char *esc = ctl_http_escape(filter);
    size_t n = strlen(esc) + 128;
    char *req = lisa_malloc(n);
    int len = snprintf(req, n,
                       "GET /v%s/events?filters=%s HTTP/1.1\r\n"
                       "Host: docker\r\n\r\n",
                       d->version, esc);
    lisa_free(&esc);
    bool ok = connect(fd, (struct sockaddr *) &sa, sizeof sa) == 0 && len > 0 &&
              (size_t) len < n &&
              write(fd, req, (size_t) len) == (ssize_t) len &&
              fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0;
    lisa_free(&req);
    if (!ok) {
        lisa_log_debug("docker: events stream: %s", strerror(errno));
        close(fd);
        return;
    }
    d->events_fd = fd;
}

/* Reads what the stream holds now; an ended stream is closed (and opened
 * again later). */
static void
s_events_drain(s_docker_t *d)
{
    char buf[4096];
    for (size_t got = 0; d->events_fd >= 0 && got < S_DRAIN_MAX;) {
        ssize_t r = read(d->events_fd, buf, sizeof buf);
        if (r > 0) {
            got += (size_t) r;
            continue;
        }
        if (r < 0 &&
            (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            break;
        s_events_close(d); /* EOF or error */
    }
}

static int
s_wake_fd(void *impl)
{
    s_docker_t *d = impl;
    s_events_open(d);
    return d->events_fd;
}

/* Logs without a TTY are multiplexed: 8-byte headers (stream, 0, 0, 0,
 * big-endian length) before each payload. */
static void
s_log_tail(void *impl, const char *name, char *buf, size_t len)
{
    s_docker_t *d = impl;
    buf[0] = '\0';
    char *esc = ctl_http_escape(name);
    char path[256];
    snprintf(path, sizeof path, "/containers/%s/logs?stdout=1&stderr=1&tail=5",
             esc);
    lisa_free(&esc);
    ctl_http_rep_t rep;
    if (s_call(d, "GET", path, NULL, &rep) != LISA_OK || rep.status != 200) {
        ctl_http_rep_clear(&rep);
        return;
    }
    const unsigned char *p = (const unsigned char *) rep.body;
    size_t left = rep.len;
    char last[1024] = "";
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
            size_t m =
                end - start < sizeof last - 1 ? end - start : sizeof last - 1;
            memcpy(last, p + 8 + start, m);
            last[m] = '\0';
        }
        p += 8 + n;
        left -= 8 + n;
    }
    snprintf(buf, len, "%s", last);
    ctl_http_rep_clear(&rep);
}

static void
s_destroy(void *impl)
{
    s_docker_t *d = impl;
    s_events_close(d);
    ctl_http_destroy(&d->http);
    lisa_free(&d->controller_id);
    lisa_free(&d->socket);
    lisa_free(&d->image);
    lisa_free(&d->runtime);
    lisa_free(&d->network);
    lisa_free(&d->gateway_socket);
    lisa_free(&d->gateway_url);
    lisa_free(&d->sandbox_cmd);
    lisa_free(&d->user);
    lisa_free(&d);
}

static const ctl_backend_ops_t s_ops = {
    .name = "docker",
    .ping = s_ping,
    .start = s_start,
    .list = s_list,
    .remove = s_remove,
    .start_many = s_start_many,
    .remove_many = s_remove_many,
    .log_tail = s_log_tail,
    .destroy = s_destroy,
    .wake_fd = s_wake_fd,
    .dies_with_controller = false,
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
    d->http = ctl_http_new(cfg->socket, NULL, 64u * 1024u * 1024u);
    if (!d->http) {
        lisa_free(&d);
        return LISA_ERR;
    }
    d->controller_id = s_dup(cfg->controller_id);
    d->socket = s_dup(cfg->socket);
    d->image = s_dup(cfg->image);
    d->runtime = s_dup(cfg->runtime);
    d->network = s_dup(cfg->network);
    d->gateway_socket = s_dup(cfg->gateway_socket);
    d->gateway_url = s_dup(cfg->gateway_url);
    d->sandbox_cmd = s_dup(cfg->sandbox_cmd);
    d->user = s_dup(cfg->user);
    d->events_fd = -1;
    out->ops = &s_ops;
    out->impl = d;
    return LISA_OK;
}
