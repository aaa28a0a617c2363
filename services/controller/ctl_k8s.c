/*
 * ctl_k8s: Jobs over REST, a list+watch cache.
 */
#include "ctl_k8s.h"

#include "ctl_http.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define S_TIMEOUT_MS    15000L
#define S_TOKEN_MS      (5 * 60 * 1000L)
#define S_MAX_JOBS      100000u
#define S_MAX_LINE      (4u * 1024u * 1024u)
#define S_WATCH_SECONDS 240

typedef struct {
    ctl_sandbox_t sb;
    bool finished;
    bool exit_known;
} s_job_t;

typedef struct {
    char *controller_id, *api, *ns, *token_file, *ca_file, *image;
    char *gateway_url, *sandbox_cmd;
    unsigned ttl_s;
    char selector_value[64];
    ctl_http_t *http;
    long token_at; /* monotonic ms of the last token read; 0 never */
    char *token;
    s_job_t *jobs;
    size_t n_jobs, cap_jobs;
    char rv[64];
    bool synced;
    /* the watch stream */
    CURLM *multi;
    CURL *watch;
    struct curl_slist *watch_hdr;
    char *line;
    size_t line_len;
    bool line_over;
} s_k8s_t;

static long
s_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long) ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

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
    long now = s_mono();
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
    ctl_http_set_bearer(k->http, k->token);
}

static char *
s_url(const s_k8s_t *k, const char *fmt_path)
{
    size_t n = strlen(k->api) + strlen(fmt_path) + 1;
    char *u = lisa_malloc(n);
    snprintf(u, n, "%s%s", k->api, fmt_path);
    return u;
}

static lisa_rc_t
s_call(s_k8s_t *k, const char *method, const char *path, const char *body,
       ctl_http_rep_t *rep)
{
    s_refresh_token(k);
    char *url = s_url(k, path);
    lisa_rc_t rc = ctl_http_call(k->http, method, url, "application/json", body,
                                 S_TIMEOUT_MS, rep);
    lisa_free(&url);
    if (rc == LISA_OK && (rep->status >= 500 || rep->status == 401 ||
                          rep->status == 403 || rep->status == 429)) {
        lisa_log_warn("k8s: %s %s -> %ld %.200s", method, path, rep->status,
                      rep->body);
        if (rep->status == 401)
            k->token_at = 0; /* re-read the token next time */
        rc = LISA_UNAVAILABLE;
    }
    return rc;
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
    if (k->watch) {
        curl_multi_remove_handle(k->multi, k->watch);
        curl_easy_cleanup(k->watch);
        k->watch = NULL;
    }
    curl_slist_free_all(k->watch_hdr);
    k->watch_hdr = NULL;
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

static size_t
s_on_watch_data(char *p, size_t size, size_t nmemb, void *ud)
{
    s_k8s_t *k = ud;
    size_t n = size * nmemb;
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
            k->line_over = true; /* an oversized event is dropped */
            continue;
        }
        k->line[k->line_len++] = p[i];
    }
    return n;
}

static void
s_watch_start(s_k8s_t *k)
{
    char *sel = NULL;
    char q[160];
    snprintf(q, sizeof q, "lisa/controller=%s", k->selector_value);
    sel = ctl_http_escape(q);
    char *rv = ctl_http_escape(k->rv);
    size_t n = strlen(k->api) + strlen(k->ns) + strlen(sel) + strlen(rv) + 200;
    char *url = lisa_malloc(n);
    snprintf(url, n,
             "%s/apis/batch/v1/namespaces/%s/jobs?watch=1&labelSelector=%s"
             "&resourceVersion=%s&allowWatchBookmarks=true&timeoutSeconds=%d",
             k->api, k->ns, sel, rv, S_WATCH_SECONDS);
    lisa_free(&sel);
    lisa_free(&rv);
    k->watch = curl_easy_init();
    CURL *c = k->watch;
    curl_easy_setopt(c, CURLOPT_URL, url);
    if (*k->ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, k->ca_file);
    if (k->token) {
        size_t an = strlen(k->token) + 32;
        char *auth = lisa_malloc(an);
        snprintf(auth, an, "Authorization: Bearer %s", k->token);
        k->watch_hdr = curl_slist_append(k->watch_hdr, auth);
        lisa_free(&auth);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, k->watch_hdr);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, s_on_watch_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, k);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
                     (long) (S_WATCH_SECONDS + 30) * 1000L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_multi_add_handle(k->multi, c);
    lisa_free(&url);
}

/* Reads whatever the watch stream has now; never blocks. */
static void
s_watch_pump(s_k8s_t *k)
{
    if (!k->watch)
        s_watch_start(k);
    int running = 0;
    curl_multi_perform(k->multi, &running);
    int left = 0;
    CURLMsg *m;
    while ((m = curl_multi_info_read(k->multi, &left)) != NULL) {
        if (m->msg != CURLMSG_DONE)
            continue;
        long status = 0;
        curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &status);
        if (status == 410) {
            lisa_log_info("k8s: watch answered 410 Gone; listing again");
            k->synced = false;
        } else if (m->data.result != CURLE_OK || status != 200) {
            lisa_log_debug("k8s: watch ended (%s, HTTP %ld)",
                           curl_easy_strerror(m->data.result), status);
        }
        /* A closed stream is normal (timeoutSeconds); resume from rv. */
        s_watch_stop(k);
        break;
    }
}

/* ---- operations ------------------------------------------------------ */

static lisa_rc_t
s_relist(s_k8s_t *k)
{
    char q[160];
    snprintf(q, sizeof q, "lisa/controller=%s", k->selector_value);
    char *sel = ctl_http_escape(q);
    size_t n = strlen(k->ns) + strlen(sel) + 64;
    char *path = lisa_malloc(n);
    snprintf(path, n, "/apis/batch/v1/namespaces/%s/jobs?labelSelector=%s",
             k->ns, sel);
    lisa_free(&sel);
    ctl_http_rep_t rep;
    lisa_rc_t rc = s_call(k, "GET", path, NULL, &rep);
    lisa_free(&path);
    if (rc != LISA_OK || rep.status != 200) {
        if (rc == LISA_OK)
            lisa_log_warn("k8s: list jobs -> %ld %.200s", rep.status, rep.body);
        ctl_http_rep_clear(&rep);
        return LISA_UNAVAILABLE;
    }
    json_t *list = json_loads(rep.body, 0, NULL);
    ctl_http_rep_clear(&rep);
    json_t *items = json_object_get(list, "items");
    const char *rv =
        s_str(json_object_get(list, "metadata"), "resourceVersion");
    if (!json_is_array(items) || !*rv) {
        json_decref(list);
        return LISA_UNAVAILABLE;
    }
    /* Keep known exit codes across the re-list. */
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
    s_watch_stop(k);
    k->synced = true;
    return LISA_OK;
}

/* The job's pod: exit code, OOM, and its name (for logs). */
static lisa_rc_t
s_pod(s_k8s_t *k, const char *job, char *pod, size_t podlen, int *exit_code,
      bool *oom)
{
    char q[128];
    snprintf(q, sizeof q, "job-name=%s", job);
    char *sel = ctl_http_escape(q);
    size_t n = strlen(k->ns) + strlen(sel) + 64;
    char *path = lisa_malloc(n);
    snprintf(path, n, "/api/v1/namespaces/%s/pods?labelSelector=%s", k->ns,
             sel);
    lisa_free(&sel);
    ctl_http_rep_t rep;
    lisa_rc_t rc = s_call(k, "GET", path, NULL, &rep);
    lisa_free(&path);
    if (rc != LISA_OK || rep.status != 200) {
        ctl_http_rep_clear(&rep);
        return LISA_UNAVAILABLE;
    }
    json_t *list = json_loads(rep.body, 0, NULL);
    ctl_http_rep_clear(&rep);
    json_t *p0 = json_array_get(json_object_get(list, "items"), 0);
    rc = p0 ? LISA_OK : LISA_NOTFOUND;
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

static lisa_rc_t
s_list(void *impl, ctl_sandbox_t **out, size_t *n)
{
    s_k8s_t *k = impl;
    *out = NULL;
    *n = 0;
    if (!k->synced && s_relist(k) != LISA_OK)
        return LISA_UNAVAILABLE;
    s_watch_pump(k);
    if (!k->synced && s_relist(k) != LISA_OK)
        return LISA_UNAVAILABLE;
    for (size_t i = 0; i < k->n_jobs; i++) {
        s_job_t *j = &k->jobs[i];
        if (!j->finished || j->exit_known)
            continue;
        char pod[256];
        int code = -1;
        bool oom = false;
        lisa_rc_t rc = s_pod(k, j->sb.name, pod, sizeof pod, &code, &oom);
        if (rc == LISA_OK || rc == LISA_NOTFOUND) {
            j->exit_known = true;
            j->sb.exit_code = code;
            j->sb.oom = oom;
        } else {
            /* Not terminated yet (pod still stopping): report later. */
            j->sb.phase = CTL_PHASE_RUNNING;
        }
    }
    *out = lisa_calloc(k->n_jobs ? k->n_jobs : 1, sizeof **out);
    for (size_t i = 0; i < k->n_jobs; i++) {
        s_job_t *j = &k->jobs[i];
        if (j->finished && !j->exit_known)
            continue;
        (*out)[(*n)++] = j->sb;
    }
    return LISA_OK;
}

static lisa_rc_t
s_ping(void *impl)
{
    s_k8s_t *k = impl;
    size_t n = strlen(k->ns) + 64;
    char *path = lisa_malloc(n);
    snprintf(path, n, "/apis/batch/v1/namespaces/%s/jobs?limit=1", k->ns);
    ctl_http_rep_t rep;
    lisa_rc_t rc = s_call(k, "GET", path, NULL, &rep);
    lisa_free(&path);
    if (rc == LISA_OK && rep.status != 200)
        rc = LISA_UNAVAILABLE;
    ctl_http_rep_clear(&rep);
    return rc;
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

    uint64_t now = ctl_wall_ms();
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

static lisa_rc_t
s_start(void *impl, const ctl_spec_t *sp)
{
    s_k8s_t *k = impl;
    ctl_k8s_cfg_t c = {.image = k->image,
                       .gateway_url = k->gateway_url,
                       .sandbox_cmd = k->sandbox_cmd,
                       .ttl_s = k->ttl_s};
    json_t *job = s_job_body(&c, k->selector_value, sp);
    if (!job) {
        lisa_log_error("k8s: cannot build the Job for %s", sp->name);
        return LISA_ERR;
    }
    char *body = json_dumps(job, JSON_COMPACT);
    json_decref(job);
    size_t n = strlen(k->ns) + 48;
    char *path = lisa_malloc(n);
    snprintf(path, n, "/apis/batch/v1/namespaces/%s/jobs", k->ns);
    ctl_http_rep_t rep;
    lisa_rc_t rc = s_call(k, "POST", path, body, &rep);
    free(body);
    lisa_free(&path);
    if (rc == LISA_OK) {
        if (rep.status == 201 || rep.status == 200) {
            lisa_log_info("k8s: created Job %s for rollout %s attempt %u",
                          sp->name, sp->rollout_id, sp->attempt);
            /* Into the cache now: the watch may bring it a tick later. */
            json_t *created = json_loads(rep.body, 0, NULL);
            s_job_t j;
            if (created && s_from_job(k, created, &j))
                s_upsert(k, &j);
            json_decref(created);
        } else if (rep.status == 409) {
            rc = LISA_CONFLICT;
        } else {
            lisa_log_error("k8s: create %s -> %ld %.300s", sp->name, rep.status,
                           rep.body);
            rc = rep.status == 422 || rep.status == 400 ? LISA_INVALID
                                                        : LISA_UNAVAILABLE;
        }
    }
    ctl_http_rep_clear(&rep);
    return rc;
}

static lisa_rc_t
s_remove(void *impl, const char *name)
{
    s_k8s_t *k = impl;
    size_t n = strlen(k->ns) + strlen(name) + 96;
    char *path = lisa_malloc(n);
    snprintf(path, n,
             "/apis/batch/v1/namespaces/%s/jobs/%s?propagationPolicy="
             "Background",
             k->ns, name);
    ctl_http_rep_t rep;
    lisa_rc_t rc = s_call(k, "DELETE", path, NULL, &rep);
    lisa_free(&path);
    if (rc == LISA_OK) {
        if (rep.status == 404)
            rc = LISA_NOTFOUND;
        else if (rep.status >= 300)
            rc = LISA_ERR;
    }
    ctl_http_rep_clear(&rep);
    if (rc == LISA_OK || rc == LISA_NOTFOUND)
        s_forget(k, name);
    return rc;
}

static void
s_log_tail(void *impl, const char *name, char *buf, size_t len)
{
    s_k8s_t *k = impl;
    buf[0] = '\0';
    char pod[256] = "";
    int code;
    bool oom;
    lisa_rc_t rc = s_pod(k, name, pod, sizeof pod, &code, &oom);
    if ((rc != LISA_OK && rc != LISA_AGAIN) || !*pod)
        return;
    size_t n = strlen(k->ns) + strlen(pod) + 96;
    char *path = lisa_malloc(n);
    snprintf(path, n, "/api/v1/namespaces/%s/pods/%s/log?tailLines=5", k->ns,
             pod);
    ctl_http_rep_t rep;
    if (s_call(k, "GET", path, NULL, &rep) == LISA_OK && rep.status == 200) {
        size_t e = rep.len;
        while (e > 0 && (rep.body[e - 1] == '\n' || rep.body[e - 1] == '\r'))
            rep.body[--e] = '\0';
        const char *last = strrchr(rep.body, '\n');
        snprintf(buf, len, "%s", last ? last + 1 : rep.body);
    }
    ctl_http_rep_clear(&rep);
    lisa_free(&path);
}

static void
s_destroy(void *impl)
{
    s_k8s_t *k = impl;
    s_watch_stop(k);
    curl_multi_cleanup(k->multi);
    ctl_http_destroy(&k->http);
    lisa_free(&k->controller_id);
    lisa_free(&k->api);
    lisa_free(&k->ns);
    lisa_free(&k->token_file);
    lisa_free(&k->ca_file);
    lisa_free(&k->image);
    lisa_free(&k->gateway_url);
    lisa_free(&k->sandbox_cmd);
    lisa_free(&k->token);
    lisa_free(&k->jobs);
    lisa_free(&k->line);
    lisa_free(&k);
}

static const ctl_backend_ops_t s_ops = {
    .name = "k8s",
    .ping = s_ping,
    .start = s_start,
    .list = s_list,
    .remove = s_remove,
    .log_tail = s_log_tail,
    .destroy = s_destroy,
    .dies_with_controller = false,
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
    k->ttl_s = cfg->ttl_s;
    s_label_value(cfg->controller_id, k->selector_value);
    k->http = ctl_http_new(NULL, k->ca_file, 64u * 1024u * 1024u);
    k->multi = curl_multi_init();
    k->line = lisa_malloc(S_MAX_LINE);
    if (!k->http || !k->multi) {
        s_destroy(k);
        return LISA_ERR;
    }
    out->ops = &s_ops;
    out->impl = k;
    return LISA_OK;
}
