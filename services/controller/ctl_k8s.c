/*
 * ctl_k8s: Jobs over REST, a list+watch cache, asynchronous.
 *
 * Every call is a request on common's lisa_http_client, driven by the
 * controller's loop: an operation sends its requests and returns; their
 * answers finish it from the loop. The watch is a streaming request of
 * the same client: its events update the cache as they arrive, and a
 * listing reads the cache (re-listing first when it is not in sync) and
 * asks for the pods of finished Jobs whose exit is not known yet, all at
 * once. Every operation in flight is on one list, so destroying the
 * backend frees those whose answers never came.
 */
#include "ctl_k8s.h"

#include "ctl_op.h"
#include "lisa/lisa_clock.h"
#include "lisa/lisa_http_client.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_TIMEOUT_MS    15000L
#define S_CONNECT_MS    5000L
#define S_MAX_REPLY     (64u * 1024u * 1024u)
#define S_TOKEN_MS      (5 * 60 * 1000L)
#define S_MAX_JOBS      100000u
#define S_MAX_LINE      (4u * 1024u * 1024u)
#define S_WATCH_SECONDS 240
#define S_PARALLEL      6

typedef struct {
    ctl_sandbox_t sb;
    bool finished;
    bool exit_known;
} s_job_t;

typedef struct {
    char *controller_id, *api, *ns, *token_file, *ca_file, *image;
    char *gateway_url, *sandbox_cmd;
    char *proxy_url; /* packages mode; "" when off */
    unsigned ttl_s;
    char selector_value[64];
    lisa_http_client_t *http; /* from attach */
    long token_at;            /* monotonic ms of the last token read; 0 never */
    char *token;
    s_job_t *jobs;
    size_t n_jobs, cap_jobs;
    char rv[64];
    bool synced;
    ctl_op_t ops; /* operations in flight (a sentinel) */
    /* the watch stream */
    bool watching;
    uint64_t watch_id;
    char *line;
    size_t line_len;
    bool line_over;
} s_k8s_t;

/* Label values: [A-Za-z0-9._-], at most 63, alphanumeric at both ends. */
static void
s_label_value(const char *in, char out[64])
{
    size_t n = 0;
    for (const char *p = in; *p && n < 63; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        out[n++] = ok ? c : '-';
    }
    while (n > 0 && !((out[n - 1] >= 'a' && out[n - 1] <= 'z') ||
                      (out[n - 1] >= 'A' && out[n - 1] <= 'Z') ||
                      (out[n - 1] >= '0' && out[n - 1] <= '9')))
        n--;
    out[n] = '\0';
    size_t lead = strspn(out, "-._");
    memmove(out, out + lead, n - lead + 1);
    if (!out[0])
        snprintf(out, 64, "x");
}

static void
s_refresh_token(s_k8s_t *k)
{
    if (!*k->token_file)
        return;
    long now = lisa_clock_mono_ms();
    if (k->token_at && now - k->token_at < S_TOKEN_MS)
        return;
    k->token_at = now;
    FILE *f = fopen(k->token_file, "r");
    if (!f) {
        lisa_log_warn("k8s: cannot read token file %s", k->token_file);
        return;
    }
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    lisa_free(&k->token);
    k->token = lisa_strdup(buf);
}

static char *
s_url(const s_k8s_t *k, const char *fmt_path)
{
    size_t n = strlen(k->api) + strlen(fmt_path) + 1;
    char *u = lisa_malloc(n);
    snprintf(u, n, "%s%s", k->api, fmt_path);
    return u;
}

/* ---- operations and requests ------------------------------------------ */

/* Sends one request; its answer goes to done(resp, arg). LISA_OK, or the
 * reason it could not be sent (done will not run). */
static lisa_rc_t
s_send(s_k8s_t *k, const char *method, const char *path, const char *body,
       lisa_http_done_fn *done, void *arg)
{
    s_refresh_token(k);
    lisa_http_request_t base = {.timeout_ms = S_TIMEOUT_MS,
                                .connect_timeout_ms = S_CONNECT_MS,
                                .ca_file = *k->ca_file ? k->ca_file : NULL,
                                .bearer_token = k->token,
                                .max_response = S_MAX_REPLY};
    char *url = s_url(k, path);
    lisa_rc_t rc = ctl_op_send_json(k->http, &base, "k8s", method, url, path,
                                    body, done, arg);
    lisa_free(&url);
    return rc;
}

/* An answer's outcome: transport failures, 5xx, 401, 403 and 429 are
 * LISA_UNAVAILABLE (pause), a timeout LISA_TIMEOUT; other answers LISA_OK
 * (check the status). */
static lisa_rc_t
s_call_rc(s_k8s_t *k, const lisa_http_response_t *r, const char *what)
{
    lisa_rc_t rc = lisa_http_response_rc(r);
    if (rc != LISA_OK) {
        lisa_log_debug("k8s: %s: %s", what, lisa_http_response_error(r));
        return rc == LISA_TIMEOUT ? LISA_TIMEOUT : LISA_UNAVAILABLE;
    }
    long status = lisa_http_response_status(r);
    if (status >= 500 || status == 401 || status == 403 || status == 429) {
        lisa_log_warn("k8s: %s -> %ld %.200s", what, status,
                      lisa_http_response_body(r, NULL));
        if (status == 401)
            k->token_at = 0; /* re-read the token next time */
        return LISA_UNAVAILABLE;
    }
    return LISA_OK;
}

/* ---- the cache ------------------------------------------------------- */

static const char *
s_str(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

/* Fills *j from a Job object; false when it is not one of ours. */
static bool
s_from_job(const s_k8s_t *k, json_t *job, s_job_t *j)
{
    memset(j, 0, sizeof *j);
    json_t *meta = json_object_get(job, "metadata");
    json_t *ann = json_object_get(meta, "annotations");
    json_t *labels = json_object_get(meta, "labels");
    const char *name = s_str(meta, "name");
    if (json_object_get(meta, "deletionTimestamp"))
        return false; /* going away: no longer a sandbox */
    if (!*name || strlen(name) >= CTL_NAME_MAX ||
        strcmp(s_str(labels, "lisa/controller"), k->selector_value) != 0)
        return false;
    ctl_sandbox_t *sb = &j->sb;
    snprintf(sb->name, sizeof sb->name, "%s", name);
    snprintf(sb->controller_id, sizeof sb->controller_id, "%s",
             k->controller_id);
    snprintf(sb->run_id, sizeof sb->run_id, "%s", s_str(ann, "lisa/run-id"));
    snprintf(sb->rollout_id, sizeof sb->rollout_id, "%s",
             s_str(ann, "lisa/rollout-id"));
    sb->attempt = (unsigned) strtoul(s_str(ann, "lisa/attempt"), NULL, 10);
    sb->created_ms = strtoull(s_str(ann, "lisa/created-ms"), NULL, 10);
    sb->deadline_ms = strtoull(s_str(ann, "lisa/deadline-ms"), NULL, 10);
    json_t *status = json_object_get(job, "status");
    json_t *conds = json_object_get(status, "conditions");
    size_t i;
    json_t *c;
    sb->phase = json_integer_value(json_object_get(status, "active")) > 0
                    ? CTL_PHASE_RUNNING
                    : CTL_PHASE_PENDING;
    json_array_foreach(conds, i, c)
    {
        if (strcmp(s_str(c, "status"), "True") != 0)
            continue;
        const char *type = s_str(c, "type");
        if (strcmp(type, "Complete") == 0) {
            j->finished = true;
        } else if (strcmp(type, "Failed") == 0) {
            j->finished = true;
            sb->deadline_exceeded =
                strcmp(s_str(c, "reason"), "DeadlineExceeded") == 0;
        }
    }
    if (j->finished) {
        sb->phase = CTL_PHASE_EXITED;
        sb->exit_code = -1;
    }
    return true;
}

static s_job_t *
s_find(s_k8s_t *k, const char *name)
{
    for (size_t i = 0; i < k->n_jobs; i++)
        if (strcmp(k->jobs[i].sb.name, name) == 0)
            return &k->jobs[i];
    return NULL;
}

static void
s_upsert(s_k8s_t *k, const s_job_t *j)
{
    s_job_t *old = s_find(k, j->sb.name);
    if (old) {
        /* Keep what the pods already told us about the exit. */
        bool known = old->exit_known && j->finished;
        ctl_sandbox_t keep = old->sb;
        *old = *j;
        if (known) {
            old->exit_known = true;
            old->sb.exit_code = keep.exit_code;
            old->sb.oom = keep.oom;
        }
        return;
    }
    if (k->n_jobs >= S_MAX_JOBS)
        return;
    if (k->n_jobs == k->cap_jobs) {
        k->cap_jobs = k->cap_jobs ? k->cap_jobs * 2 : 16;
        k->jobs = lisa_realloc(k->jobs, k->cap_jobs * sizeof *k->jobs);
    }
    k->jobs[k->n_jobs++] = *j;
}

static void
s_forget(s_k8s_t *k, const char *name)
{
    s_job_t *j = s_find(k, name);
    if (j)
        *j = k->jobs[--k->n_jobs];
}

/* ---- watch ----------------------------------------------------------- */

static void
s_watch_stop(s_k8s_t *k)
{
    if (k->watching)
        (void) lisa_http_client_cancel(k->http, k->watch_id);
    k->watching = false;
    k->line_len = 0;
    k->line_over = false;
}

static void
s_on_event(s_k8s_t *k, const char *line)
{
    json_t *ev = json_loads(line, 0, NULL);
    const char *type = s_str(ev, "type");
    json_t *obj = json_object_get(ev, "object");
    const char *rv = s_str(json_object_get(obj, "metadata"), "resourceVersion");
    if (strcmp(type, "ERROR") == 0) {
        long code = (long) json_integer_value(json_object_get(obj, "code"));
        lisa_log_info("k8s: watch error %ld (%s); listing again", code,
                      s_str(obj, "reason"));
        k->synced = false; /* 410 Gone and friends: start over */
    } else if (strcmp(type, "BOOKMARK") == 0) {
        if (*rv)
            snprintf(k->rv, sizeof k->rv, "%s", rv);
    } else if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0 ||
               strcmp(type, "DELETED") == 0) {
        json_t *meta = json_object_get(obj, "metadata");
        s_job_t j;
        if (strcmp(type, "DELETED") == 0 ||
            json_object_get(meta, "deletionTimestamp"))
            s_forget(k, s_str(meta, "name"));
        else if (s_from_job(k, obj, &j))
            s_upsert(k, &j);
        if (*rv)
            snprintf(k->rv, sizeof k->rv, "%s", rv);
    }
    json_decref(ev);
}

/* Splits the stream into lines, one event each (bounded: an oversized
 * event is dropped). */
static bool
s_on_watch_chunk(const char *p, size_t n, long status, void *arg)
{
    (void) status;
    s_k8s_t *k = arg;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') {
            if (!k->line_over && k->line_len) {
                k->line[k->line_len] = '\0';
                s_on_event(k, k->line);
            }
            k->line_len = 0;
            k->line_over = false;
            continue;
        }
        if (k->line_len + 1 >= S_MAX_LINE) {
            k->line_over = true;
            continue;
        }
        k->line[k->line_len++] = p[i];
    }
    return true;
}

static void
s_on_watch_end(lisa_http_response_t *r, void *arg)
{
    s_k8s_t *k = arg;
    long status = lisa_http_response_status(r);
    k->watching = false;
    k->line_len = 0;
    k->line_over = false;
    if (status == 410) {
        lisa_log_info("k8s: watch answered 410 Gone; listing again");
        k->synced = false;
    } else if (lisa_http_response_rc(r) != LISA_OK || status != 200) {
        lisa_log_debug("k8s: watch ended (%s, HTTP %ld)",
                       lisa_http_response_error(r), status);
    }
    /* A closed stream is normal (timeoutSeconds): the next listing
     * resumes it from rv. */
}

static void
s_watch_start(s_k8s_t *k)
{
    if (k->watching)
        return;
    char q[160];
    snprintf(q, sizeof q, "lisa/controller=%s", k->selector_value);
    char *sel = ctl_backend_escape(q);
    char *rv = ctl_backend_escape(k->rv);
    size_t n = strlen(k->ns) + strlen(sel) + strlen(rv) + 200;
    char *path = lisa_malloc(n);
    snprintf(path, n,
             "/apis/batch/v1/namespaces/%s/jobs?watch=1&labelSelector=%s"
             "&resourceVersion=%s&allowWatchBookmarks=true&timeoutSeconds=%d",
             k->ns, sel, rv, S_WATCH_SECONDS);
    lisa_free(&sel);
    lisa_free(&rv);
    s_refresh_token(k);
    char *url = s_url(k, path);
    lisa_free(&path);
    lisa_http_request_t req = {
        .method = "GET",
        .url = url,
        .timeout_ms = (long) (S_WATCH_SECONDS + 30) * 1000L,
        .connect_timeout_ms = S_CONNECT_MS,
        .ca_file = *k->ca_file ? k->ca_file : NULL,
        .bearer_token = k->token,
        .max_response = 64u * 1024u,
        .on_chunk = s_on_watch_chunk,
    };
    k->line_len = 0;
    k->line_over = false;
    if (lisa_http_client_send(k->http, &req, s_on_watch_end, k, &k->watch_id) ==
        LISA_OK)
        k->watching = true;
    lisa_free(&url);
}

/* ---- ping -------------------------------------------------------------- */

static void
s_on_ping(lisa_http_response_t *r, void *arg)
{
    ctl_op_rc_t *o = arg;
    lisa_rc_t rc = s_call_rc(o->impl, r, "ping");
    if (rc == LISA_OK && lisa_http_response_status(r) != 200)
        rc = LISA_UNAVAILABLE;
    ctl_op_rc_end(o, rc);
}

static void
s_ping_async(void *impl, ctl_rc_fn *done, void *arg)
{
    s_k8s_t *k = impl;
    ctl_op_rc_t *o = ctl_op_rc_new(&k->ops, k, done, arg);
    size_t n = strlen(k->ns) + 64;
    char *path = lisa_malloc(n);
    snprintf(path, n, "/apis/batch/v1/namespaces/%s/jobs?limit=1", k->ns);
    lisa_rc_t rc = s_send(k, "GET", path, NULL, s_on_ping, o);
    lisa_free(&path);
    if (rc != LISA_OK)
        ctl_op_rc_end(o, LISA_UNAVAILABLE);
}

/* ---- pods ------------------------------------------------------------ */

/* The first pod of a pod list: its name, exit code and OOM flag.
 * LISA_OK (terminated), LISA_AGAIN (not yet), LISA_NOTFOUND (no pod),
 * LISA_UNAVAILABLE (no usable answer). */
static lisa_rc_t
s_pod_of(s_k8s_t *k, lisa_http_response_t *r, char *pod, size_t podlen,
         int *exit_code, bool *oom)
{
    if (s_call_rc(k, r, "list pods") != LISA_OK ||
        lisa_http_response_status(r) != 200)
        return LISA_UNAVAILABLE;
    json_t *list = json_loads(lisa_http_response_body(r, NULL), 0, NULL);
    json_t *p0 = json_array_get(json_object_get(list, "items"), 0);
    lisa_rc_t rc = p0 ? LISA_OK : LISA_NOTFOUND;
    if (p0) {
        snprintf(pod, podlen, "%s",
                 s_str(json_object_get(p0, "metadata"), "name"));
        json_t *cs = json_array_get(
            json_object_get(json_object_get(p0, "status"), "containerStatuses"),
            0);
        json_t *term =
            json_object_get(json_object_get(cs, "state"), "terminated");
        if (term) {
            *exit_code =
                (int) json_integer_value(json_object_get(term, "exitCode"));
            *oom = strcmp(s_str(term, "reason"), "OOMKilled") == 0;
        } else {
            rc = LISA_AGAIN;
        }
    }
    json_decref(list);
    return rc;
}

/* Asks for the pods of Job `job`. */
static lisa_rc_t
s_pods_send(s_k8s_t *k, const char *job, lisa_http_done_fn *done, void *arg)
{
    char q[128];
    snprintf(q, sizeof q, "job-name=%s", job);
    char *sel = ctl_backend_escape(q);
    size_t n = strlen(k->ns) + strlen(sel) + 64;
    char *path = lisa_malloc(n);
    snprintf(path, n, "/api/v1/namespaces/%s/pods?labelSelector=%s", k->ns,
             sel);
    lisa_free(&sel);
    lisa_rc_t rc = s_send(k, "GET", path, NULL, done, arg);
    lisa_free(&path);
    return rc;
}

/* ---- listing ------------------------------------------------------------ */

typedef struct s_list_op s_list_op_t;

typedef struct {
    s_list_op_t *op;
    char job[CTL_NAME_MAX];
} s_pod_ask_t;

struct s_list_op {
    ctl_op_t op;
    s_k8s_t *k;
    s_pod_ask_t *asks;
    size_t left;
    ctl_list_fn *done;
    void *arg;
};

static void
s_list_free(ctl_op_t *op)
{
    s_list_op_t *o = (s_list_op_t *) op;
    lisa_free(&o->asks);
    lisa_free(&o);
}

/* Answers the listing from the cache: finished Jobs whose exit is not
 * known yet are left out (reported later). */
static void
s_list_end(s_list_op_t *o, lisa_rc_t rc)
{
    s_k8s_t *k = o->k;
    ctl_list_fn *done = o->done;
    void *arg = o->arg;
    ctl_op_end(&o->op);
    if (rc != LISA_OK) {
        done(arg, rc, NULL, 0);
        return;
    }
    ctl_sandbox_t *out = lisa_calloc(k->n_jobs ? k->n_jobs : 1, sizeof *out);
    size_t n = 0;
    for (size_t i = 0; i < k->n_jobs; i++) {
        s_job_t *j = &k->jobs[i];
        if (j->finished && !j->exit_known)
            continue;
        out[n++] = j->sb;
    }
    done(arg, LISA_OK, out, n);
    lisa_free(&out);
}

static void
s_on_list_pod(lisa_http_response_t *r, void *arg)
{
    s_pod_ask_t *a = arg;
    s_list_op_t *o = a->op;
    char pod[256];
    int code = -1;
    bool oom = false;
    lisa_rc_t rc = s_pod_of(o->k, r, pod, sizeof pod, &code, &oom);
    s_job_t *j = s_find(o->k, a->job);
    if (j && j->finished && (rc == LISA_OK || rc == LISA_NOTFOUND)) {
        j->exit_known = true;
        j->sb.exit_code = code;
        j->sb.oom = oom;
    }
    /* else not terminated yet (pod still stopping): reported later */
    if (--o->left == 0)
        s_list_end(o, LISA_OK);
}

/* The cache is in sync: the watch goes on, and the exits not known yet
 * are asked for, all at once. */
static void
s_list_pods(s_list_op_t *o)
{
    s_k8s_t *k = o->k;
    s_watch_start(k);
    size_t m = 0;
    for (size_t i = 0; i < k->n_jobs; i++)
        m += k->jobs[i].finished && !k->jobs[i].exit_known;
    o->asks = lisa_calloc(m ? m : 1, sizeof *o->asks);
    o->left = 1; /* this function's own hold */
    size_t a = 0;
    for (size_t i = 0; i < k->n_jobs && a < m; i++) {
        s_job_t *j = &k->jobs[i];
        if (!j->finished || j->exit_known)
            continue;
        s_pod_ask_t *ask = &o->asks[a++];
        ask->op = o;
        snprintf(ask->job, sizeof ask->job, "%s", j->sb.name);
        if (s_pods_send(k, ask->job, s_on_list_pod, ask) == LISA_OK)
            o->left++;
    }
    if (--o->left == 0)
        s_list_end(o, LISA_OK);
}

/* Replaces the cache with a LIST answer (keeping known exit codes). */
static lisa_rc_t
s_relisted(s_k8s_t *k, lisa_http_response_t *r)
{
    if (s_call_rc(k, r, "list jobs") != LISA_OK)
        return LISA_UNAVAILABLE;
    if (lisa_http_response_status(r) != 200) {
        lisa_log_warn("k8s: list jobs -> %ld %.200s",
                      lisa_http_response_status(r),
                      lisa_http_response_body(r, NULL));
        return LISA_UNAVAILABLE;
    }
    json_t *list = json_loads(lisa_http_response_body(r, NULL), 0, NULL);
    json_t *items = json_object_get(list, "items");
    const char *rv =
        s_str(json_object_get(list, "metadata"), "resourceVersion");
    if (!json_is_array(items) || !*rv) {
        json_decref(list);
        return LISA_UNAVAILABLE;
    }
    s_job_t *old = k->jobs;
    size_t n_old = k->n_jobs;
    k->jobs = NULL;
    k->n_jobs = k->cap_jobs = 0;
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it)
    {
        s_job_t j;
        if (!s_from_job(k, it, &j))
            continue;
        for (size_t o = 0; o < n_old; o++)
            if (strcmp(old[o].sb.name, j.sb.name) == 0 && old[o].exit_known &&
                j.finished) {
                j.exit_known = true;
                j.sb.exit_code = old[o].sb.exit_code;
                j.sb.oom = old[o].sb.oom;
            }
        s_upsert(k, &j);
    }
    lisa_free(&old);
    snprintf(k->rv, sizeof k->rv, "%s", rv);
    json_decref(list);
    s_watch_stop(k); /* the watch resumes from the new version */
    k->synced = true;
    return LISA_OK;
}

static void
s_on_relist(lisa_http_response_t *r, void *arg)
{
    s_list_op_t *o = arg;
    if (s_relisted(o->k, r) != LISA_OK)
        s_list_end(o, LISA_UNAVAILABLE);
    else
        s_list_pods(o);
}

static void
s_list_async(void *impl, ctl_list_fn *done, void *arg)
{
    s_k8s_t *k = impl;
    s_list_op_t *o = lisa_calloc(1, sizeof *o);
    o->k = k;
    o->done = done;
    o->arg = arg;
    ctl_op_link(&k->ops, &o->op, s_list_free);
    if (k->synced) {
        s_list_pods(o);
        return;
    }
    char q[160];
    snprintf(q, sizeof q, "lisa/controller=%s", k->selector_value);
    char *sel = ctl_backend_escape(q);
    size_t n = strlen(k->ns) + strlen(sel) + 64;
    char *path = lisa_malloc(n);
    snprintf(path, n, "/apis/batch/v1/namespaces/%s/jobs?labelSelector=%s",
             k->ns, sel);
    lisa_free(&sel);
    lisa_rc_t rc = s_send(k, "GET", path, NULL, s_on_relist, o);
    lisa_free(&path);
    if (rc != LISA_OK)
        s_list_end(o, LISA_UNAVAILABLE);
}

/* The Job for one attempt. `c` supplies image, gateway URL, sandbox
 * command and TTL; `selector` is the controller's label value. */
static json_t *
s_job_body(const ctl_k8s_cfg_t *c, const char *selector, const ctl_spec_t *sp)
{
    char num[32], run_l[64], roll_l[64];
    s_label_value(sp->run_id, run_l);
    s_label_value(sp->rollout_id, roll_l);
    json_t *labels = json_object();
    json_object_set_new(labels, "app.kubernetes.io/managed-by",
                        json_string("lisa"));
    /* The NetworkPolicy lisa-sandbox selects pods by this label. */
    json_object_set_new(labels, "app.kubernetes.io/component",
                        json_string("sandbox"));
    json_object_set_new(labels, "lisa/controller", json_string(selector));
    json_object_set_new(labels, "lisa/run", json_string(run_l));
    json_object_set_new(labels, "lisa/rollout", json_string(roll_l));
    snprintf(num, sizeof num, "%u", sp->attempt);
    json_object_set_new(labels, "lisa/attempt", json_string(num));
    json_t *ann = json_object();
    json_object_set_new(ann, "lisa/run-id", json_string(sp->run_id));
    json_object_set_new(ann, "lisa/rollout-id", json_string(sp->rollout_id));
    json_object_set_new(ann, "lisa/attempt", json_string(num));
    snprintf(num, sizeof num, "%" PRIu64, sp->created_ms);
    json_object_set_new(ann, "lisa/created-ms", json_string(num));
    snprintf(num, sizeof num, "%" PRIu64, sp->deadline_ms);
    json_object_set_new(ann, "lisa/deadline-ms", json_string(num));

    uint64_t now = lisa_clock_wall_ms();
    json_int_t active = sp->deadline_ms > now
                            ? (json_int_t) ((sp->deadline_ms - now) / 1000 + 1)
                            : 1;
    char cpu[32], mem[32], disk[32];
    snprintf(cpu, sizeof cpu, "%um", sp->cpu_millis);
    snprintf(mem, sizeof mem, "%" PRIu64, sp->memory_bytes);
    snprintf(disk, sizeof disk, "%" PRIu64, sp->disk_bytes);
    json_t *cmd = c->sandbox_cmd && *c->sandbox_cmd
                      ? json_pack("[s,s,s]", "/bin/sh", "-c", c->sandbox_cmd)
                      : json_pack("[s]", "/usr/local/bin/lisa-agent");
    json_t *env = json_pack("[{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s}]", "name",
                            "LISA_GATEWAY_URL", "value", c->gateway_url, "name",
                            "LISA_ATTEMPT_TOKEN", "value", sp->token, "name",
                            "LISA_TESTBED", "value", "/testbed", "name", "HOME",
                            "value", "/testbed");
    if (c->proxy_url && *c->proxy_url) {
        json_array_append_new(env, json_pack("{s:s,s:s}", "name",
                                             "LISA_SANDBOX_NETWORK", "value",
                                             "packages"));
        json_array_append_new(env,
                              json_pack("{s:s,s:s}", "name", "LISA_PROXY_URL",
                                        "value", c->proxy_url));
    }
    json_t *container = json_pack(
        "{s:s,s:s,s:o,s:o,s:s,"
        "s:{s:{s:s,s:s},s:{s:s,s:s,s:s}},"
        "s:{s:b,s:b,s:b,s:{s:[s]}},"
        "s:[{s:s,s:s},{s:s,s:s}]}",
        "name", "agent", "image", c->image, "command", cmd, "env", env,
        "workingDir", "/testbed", "resources", "requests", "cpu", cpu, "memory",
        mem, "limits", "cpu", cpu, "memory", mem, "ephemeral-storage", disk,
        "securityContext", "allowPrivilegeEscalation", 0,
        "readOnlyRootFilesystem", 1, "privileged", 0, "capabilities", "drop",
        "ALL", "volumeMounts", "name", "testbed", "mountPath", "/testbed",
        "name", "tmp", "mountPath", "/tmp");
    json_t *pod = json_pack(
        "{s:s,s:b,s:b,s:I,"
        "s:{s:b,s:i,s:i,s:i,s:{s:s}},"
        "s:[o],"
        "s:[{s:s,s:{s:s}},{s:s,s:{s:s}}]}",
        "restartPolicy", "Never", "automountServiceAccountToken", 0,
        "enableServiceLinks", 0, "terminationGracePeriodSeconds",
        (json_int_t) 5, "securityContext", "runAsNonRoot", 1, "runAsUser",
        65534, "runAsGroup", 65534, "fsGroup", 65534, "seccompProfile", "type",
        "RuntimeDefault", "containers", container, "volumes", "name", "testbed",
        "emptyDir", "sizeLimit", disk, "name", "tmp", "emptyDir", "sizeLimit",
        disk);
    /* An eviction or preemption is the infrastructure's fault: the Job
     * fails at once and the broker retries the rollout. */
    json_t *failure = json_pack("{s:[{s:s,s:[{s:s,s:s}]}]}", "rules", "action",
                                "FailJob", "onPodConditions", "type",
                                "DisruptionTarget", "status", "True");
    json_t *job = json_pack(
        "{s:s,s:s,s:{s:s,s:O,s:o},"
        "s:{s:i,s:I,s:I,s:o,s:{s:{s:o},s:o}}}",
        "apiVersion", "batch/v1", "kind", "Job", "metadata", "name", sp->name,
        "labels", labels, "annotations", ann, "spec", "backoffLimit", 0,
        "activeDeadlineSeconds", active, "ttlSecondsAfterFinished",
        (json_int_t) c->ttl_s, "podFailurePolicy", failure, "template",
        "metadata", "labels", labels, "spec", pod);
    return job; /* labels: one reference held by each metadata */
}

/* ---- starts ----------------------------------------------------------- */

static void
s_on_created(lisa_http_response_t *r, void *arg)
{
    ctl_op_start_item_t *it = arg;
    s_k8s_t *k = it->op->impl;
    lisa_rc_t rc = s_call_rc(k, r, "create job");
    long status = lisa_http_response_status(r);
    const char *body = lisa_http_response_body(r, NULL);
    if (rc == LISA_OK) {
        if (status == 201 || status == 200) {
            lisa_log_info("k8s: created Job %s for rollout %s attempt %u",
                          it->name, it->rollout_id, it->attempt);
            /* Into the cache now: the watch may bring it a tick later. */
            json_t *created = json_loads(body, 0, NULL);
            s_job_t j;
            if (created && s_from_job(k, created, &j))
                s_upsert(k, &j);
            json_decref(created);
        } else if (status == 409) {
            rc = LISA_CONFLICT;
        } else {
            lisa_log_error("k8s: create %s -> %ld %.300s", it->name, status,
                           body);
            rc = status == 422 || status == 400 ? LISA_INVALID
                                                : LISA_UNAVAILABLE;
        }
    }
    ctl_op_start_item_end(it, rc);
}

/* Every Job of the batch created at once. */
static void
s_start_async(void *impl, const ctl_spec_t *specs, size_t n, ctl_rcs_fn *done,
              void *arg)
{
    s_k8s_t *k = impl;
    ctl_op_start_t *o = ctl_op_start_new(&k->ops, k, specs, n, done, arg);
    ctl_k8s_cfg_t c = {.image = k->image,
                       .gateway_url = k->gateway_url,
                       .proxy_url = k->proxy_url,
                       .sandbox_cmd = k->sandbox_cmd,
                       .ttl_s = k->ttl_s};
    size_t pn = strlen(k->ns) + 48;
    char *path = lisa_malloc(pn);
    snprintf(path, pn, "/apis/batch/v1/namespaces/%s/jobs", k->ns);
    for (size_t i = 0; i < n; i++) {
        ctl_op_start_item_t *it = &o->items[i];
        json_t *job = s_job_body(&c, k->selector_value, &specs[i]);
        char *body = job ? json_dumps(job, JSON_COMPACT) : NULL;
        json_decref(job);
        lisa_rc_t rc = LISA_ERR;
        if (!body)
            lisa_log_error("k8s: cannot build the Job for %s", it->name);
        else
            rc = s_send(k, "POST", path, body, s_on_created, it);
        free(body);
        if (rc != LISA_OK)
            ctl_op_start_item_end(it, body ? LISA_UNAVAILABLE : LISA_ERR);
    }
    lisa_free(&path);
    ctl_op_start_release(o); /* this function's own hold */
}

/* ---- removals ---------------------------------------------------------- */

static void
s_on_removed(lisa_http_response_t *r, void *arg)
{
    ctl_op_item_t *it = arg;
    ctl_op_remove_t *o = it->op;
    s_k8s_t *k = o->base.impl;
    lisa_rc_t rc = s_call_rc(k, r, "delete job");
    long status = lisa_http_response_status(r);
    if (rc == LISA_OK && status >= 300 && status != 404)
        rc = LISA_ERR;
    if (rc == LISA_OK)
        s_forget(k, it->name); /* 404: gone already */
    ctl_op_remove_item_end(o, rc);
}

static void
s_remove_async(void *impl, const char *const *names, size_t n, ctl_rc_fn *done,
               void *arg)
{
    s_k8s_t *k = impl;
    ctl_op_remove_t *o = ctl_op_remove_new(&k->ops, k, names, n, done, arg);
    for (size_t i = 0; i < n; i++) {
        ctl_op_item_t *it = &o->items[i];
        char *esc = ctl_backend_escape(it->name);
        size_t pn = strlen(k->ns) + strlen(esc) + 96;
        char *path = lisa_malloc(pn);
        snprintf(path, pn,
                 "/apis/batch/v1/namespaces/%s/jobs/%s?propagationPolicy="
                 "Background",
                 k->ns, esc);
        lisa_free(&esc);
        if (s_send(k, "DELETE", path, NULL, s_on_removed, it) != LISA_OK)
            ctl_op_remove_item_end(o, LISA_UNAVAILABLE);
        lisa_free(&path);
    }
    ctl_op_remove_item_end(o, LISA_OK); /* this function's own hold */
}

/* ---- log tail ---------------------------------------------------------- */

static void
s_on_log(lisa_http_response_t *r, void *arg)
{
    ctl_op_tail_t *o = arg;
    char line[1024] = "";
    if (s_call_rc(o->impl, r, "pod log") == LISA_OK &&
        lisa_http_response_status(r) == 200) {
        size_t e = 0;
        const char *body = lisa_http_response_body(r, &e);
        while (e > 0 && (body[e - 1] == '\n' || body[e - 1] == '\r'))
            e--;
        size_t start = e;
        while (start > 0 && body[start - 1] != '\n')
            start--;
        snprintf(line, sizeof line, "%.*s", (int) (e - start), body + start);
    }
    ctl_op_tail_end(o, line);
}

static void
s_on_tail_pod(lisa_http_response_t *r, void *arg)
{
    ctl_op_tail_t *o = arg;
    s_k8s_t *k = o->impl;
    char pod[256] = "";
    int code;
    bool oom;
    lisa_rc_t rc = s_pod_of(k, r, pod, sizeof pod, &code, &oom);
    if ((rc != LISA_OK && rc != LISA_AGAIN) || !*pod) {
        ctl_op_tail_end(o, "");
        return;
    }
    char *esc = ctl_backend_escape(pod);
    size_t n = strlen(k->ns) + strlen(esc) + 96;
    char *path = lisa_malloc(n);
    snprintf(path, n, "/api/v1/namespaces/%s/pods/%s/log?tailLines=5", k->ns,
             esc);
    lisa_free(&esc);
    rc = s_send(k, "GET", path, NULL, s_on_log, o);
    lisa_free(&path);
    if (rc != LISA_OK)
        ctl_op_tail_end(o, "");
}

static void
s_log_tail_async(void *impl, const char *name, ctl_text_fn *done, void *arg)
{
    s_k8s_t *k = impl;
    ctl_op_tail_t *o = ctl_op_tail_new(&k->ops, k, name, done, arg);
    if (s_pods_send(k, o->name, s_on_tail_pod, o) != LISA_OK)
        ctl_op_tail_end(o, "");
}

/* ---- the backend ------------------------------------------------------- */

static lisa_rc_t
s_attach(void *impl, zloop_t *loop, ctl_wake_fn *wake, void *wake_ctx)
{
    (void) wake; /* the watch feeds the cache; listings read it */
    (void) wake_ctx;
    s_k8s_t *k = impl;
    if (k->http)
        return LISA_ERR;
    lisa_http_client_config_t hc = {.max_host_connections = S_PARALLEL};
    k->http = lisa_http_client_new(loop, &hc);
    return k->http ? LISA_OK : LISA_ERR;
}

static void
s_destroy(void *impl)
{
    s_k8s_t *k = impl;
    lisa_http_client_destroy(&k->http); /* no callback runs after this */
    ctl_op_end_all(&k->ops);
    lisa_free(&k->controller_id);
    lisa_free(&k->api);
    lisa_free(&k->ns);
    lisa_free(&k->token_file);
    lisa_free(&k->ca_file);
    lisa_free(&k->image);
    lisa_free(&k->gateway_url);
    lisa_free(&k->sandbox_cmd);
    lisa_free(&k->proxy_url);
    lisa_free(&k->token);
    lisa_free(&k->jobs);
    lisa_free(&k->line);
    lisa_free(&k);
}

static const ctl_backend_ops_t s_ops = {
    .name = "k8s",
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
s_read_small(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    return lisa_strdup(buf);
}

char *
ctl_k8s_job_json(const ctl_k8s_cfg_t *cfg, const ctl_spec_t *spec)
{
    if (!cfg || !spec || !cfg->controller_id || !cfg->image || !*cfg->image ||
        !cfg->gateway_url || !*cfg->gateway_url || !spec->name ||
        !spec->run_id || !spec->rollout_id || !spec->token)
        return NULL;
    char selector[64];
    s_label_value(cfg->controller_id, selector);
    json_t *job = s_job_body(cfg, selector, spec);
    if (!job)
        return NULL;
    char *text = json_dumps(job, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(job);
    return text;
}

lisa_rc_t
ctl_k8s_new(const ctl_k8s_cfg_t *cfg, ctl_backend_t *out)
{
    if (!cfg || !cfg->controller_id || !cfg->image || !*cfg->image)
        return LISA_INVALID;
    if (!cfg->gateway_url || !*cfg->gateway_url) {
        lisa_log_error("k8s: sandboxes need the gateway URL");
        return LISA_INVALID;
    }
    char *api = NULL;
    if (cfg->api && *cfg->api) {
        api = lisa_strdup(cfg->api);
    } else {
        const char *h = getenv("KUBERNETES_SERVICE_HOST");
        const char *p = getenv("KUBERNETES_SERVICE_PORT");
        if (!h || !p) {
            lisa_log_error("k8s: no API server (set LISA_K8S_API or run "
                           "in a cluster)");
            return LISA_INVALID;
        }
        size_t n = strlen(h) + strlen(p) + 16;
        api = lisa_malloc(n);
        snprintf(api, n, "https://%s:%s", h, p);
    }
    char *ns = cfg->namespace_ && *cfg->namespace_
                   ? lisa_strdup(cfg->namespace_)
                   : s_read_small("/var/run/secrets/kubernetes.io/"
                                  "serviceaccount/namespace");
    if (!ns)
        ns = lisa_strdup("default");
    size_t nl = strlen(api);
    while (nl > 0 && api[nl - 1] == '/')
        api[--nl] = '\0';
    s_k8s_t *k = lisa_calloc(1, sizeof *k);
    k->controller_id = lisa_strdup(cfg->controller_id);
    k->api = api;
    k->ns = ns;
    k->token_file = lisa_strdup(cfg->token_file ? cfg->token_file : "");
    k->ca_file = lisa_strdup(cfg->ca_file ? cfg->ca_file : "");
    k->image = lisa_strdup(cfg->image);
    k->gateway_url = lisa_strdup(cfg->gateway_url);
    k->sandbox_cmd = lisa_strdup(cfg->sandbox_cmd ? cfg->sandbox_cmd : "");
    k->proxy_url = lisa_strdup(cfg->proxy_url ? cfg->proxy_url : "");
    k->ttl_s = cfg->ttl_s;
    s_label_value(cfg->controller_id, k->selector_value);
    k->line = lisa_malloc(S_MAX_LINE);
    ctl_op_list_init(&k->ops);
    out->ops = &s_ops;
    out->impl = k;
    return LISA_OK;
}
