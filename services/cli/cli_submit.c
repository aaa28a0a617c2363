/*
 * cli_submit: `lisa submit FILE` enqueues verl-format records.
 *
 * FILE is a JSON array or JSON lines. Each record is a verl row:
 *   prompt (string or chat messages), data_source,
 *   reward_model.ground_truth, extra_info {id, problem_statement,
 *   input_files (a JSON string or object mapping filename -> content),
 *   qa_type, ...}.
 * Raw dataset rows (id, domain, problem_statement, ground_truth,
 * input_files at the top level) are accepted as well. The ground truth
 * goes to the broker in its own field and is removed from extra_info.
 */
#include "cli.h"
#include "cli_broker.h"
#include "lisa/lisa_mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_FILE (512u * 1024u * 1024u)
#define S_BATCH    256u

typedef struct {
    Lisa__TaskSpec **tasks;
    size_t n, cap;
} s_tasks_t;

static void
s_usage(FILE *out)
{
    fprintf(out,
            "usage: lisa submit FILE [--n N] [--run RUN] [--step S]\n"
            "                   [--policy V] [--mode train|val]\n"
            "                   [--max-attempts K] [--deadline-ms MS]\n"
            "                   [--broker EP] [--json]\n"
            "Enqueues every record of FILE (JSON array or JSON lines, verl\n"
            "format) as a group of N rollouts. Endpoint: --broker or\n"
            "LISA_BROKER (default tcp://127.0.0.1:7100).\n");
}

static char *
s_read(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = lisa_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= S_MAX_FILE) {
                lisa_free(&buf);
                break;
            }
            cap *= 2;
            buf = lisa_realloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        if (got == 0)
            break;
        n += got;
    }
    if (f != stdin)
        fclose(f);
    if (buf)
        buf[n] = '\0';
    *len = n;
    return buf;
}

static char *
s_str(json_t *v)
{
    if (json_is_string(v))
        return lisa_strdup(json_string_value(v));
    if (json_is_integer(v) || json_is_real(v) || json_is_boolean(v)) {
        char *s = json_dumps(v, JSON_ENCODE_ANY);
        char *out = lisa_strdup(s);
        free(s);
        return out;
    }
    if (json_is_null(v) || !v)
        return lisa_strdup("");
    char *s = json_dumps(v, JSON_COMPACT);
    char *out = lisa_strdup(s);
    free(s);
    return out;
}

/* The problem text: extra_info.problem_statement, top-level
 * problem_statement, or the last user message of the prompt. */
static char *
s_problem(json_t *rec, json_t *extra)
{
    json_t *p = json_object_get(extra, "problem_statement");
    if (!json_is_string(p))
        p = json_object_get(rec, "problem_statement");
    if (json_is_string(p))
        return lisa_strdup(json_string_value(p));
    json_t *prompt = json_object_get(rec, "prompt");
    if (json_is_string(prompt))
        return lisa_strdup(json_string_value(prompt));
    if (json_is_array(prompt)) {
        for (size_t i = json_array_size(prompt); i-- > 0;) {
            json_t *m = json_array_get(prompt, i);
            if (json_is_string(json_object_get(m, "content")) &&
                strcmp(json_string_value(json_object_get(m, "role"))
                           ? json_string_value(json_object_get(m, "role"))
                           : "",
                       "user") == 0)
                return lisa_strdup(
                    json_string_value(json_object_get(m, "content")));
        }
    }
    return NULL;
}

static int
s_files(Lisa__TaskSpec *t, json_t *files, char *err, size_t errlen)
{
    json_t *owned = NULL;
    if (json_is_string(files)) {
        owned = json_loads(json_string_value(files), 0, NULL);
        if (!json_is_object(owned)) {
            json_decref(owned);
            snprintf(err, errlen, "input_files is not a JSON object");
            return -1;
        }
        files = owned;
    }
    if (!json_is_object(files)) {
        json_decref(owned);
        return files && !json_is_null(files) ? -1 : 0;
    }
    size_t n = json_object_size(files);
    t->files = lisa_calloc(n + 1, sizeof *t->files);
    const char *k;
    json_t *v;
    json_object_foreach(files, k, v)
    {
        Lisa__File *f = lisa_calloc(1, sizeof *f);
        lisa__file__init(f);
        f->path = lisa_strdup(k);
        char *content = s_str(v);
        f->content.len = strlen(content);
        f->content.data = (uint8_t *) content;
        t->files[t->n_files++] = f;
    }
    json_decref(owned);
    return 0;
}

static void
s_task_free(Lisa__TaskSpec **pt)
{
    Lisa__TaskSpec *t = *pt;
    if (!t)
        return;
    lisa_free(&t->task_id);
    lisa_free(&t->data_source);
    lisa_free(&t->problem_statement);
    lisa_free(&t->ground_truth);
    lisa_free(&t->extra_info_json);
    for (size_t i = 0; i < t->n_files; i++) {
        lisa_free(&t->files[i]->path);
        lisa_free(&t->files[i]->content.data);
        lisa_free(&t->files[i]);
    }
    lisa_free(&t->files);
    lisa_free(&t->limits);
    lisa_free(pt);
}

static int
s_record(json_t *rec, size_t index, const Lisa__TaskSpec *proto, s_tasks_t *out,
         char *err, size_t errlen)
{
    if (!json_is_object(rec)) {
        snprintf(err, errlen, "record %zu is not a JSON object", index);
        return -1;
    }
    json_t *extra = json_object_get(rec, "extra_info");
    json_t *extra_copy =
        json_is_object(extra) ? json_deep_copy(extra) : json_object();
    Lisa__TaskSpec *t = lisa_calloc(1, sizeof *t);
    lisa__task_spec__init(t);
    t->n = proto->n;
    t->max_attempts = proto->max_attempts;
    if (proto->limits) {
        t->limits = lisa_malloc(sizeof *t->limits);
        *t->limits = *proto->limits;
    }
    json_t *gt =
        json_object_get(json_object_get(rec, "reward_model"), "ground_truth");
    if (!gt)
        gt = json_object_get(rec, "ground_truth");
    if (!gt)
        gt = json_object_get(extra, "ground_truth");
    t->ground_truth = s_str(gt);
    json_t *ds = json_object_get(rec, "data_source");
    if (!json_is_string(ds))
        ds = json_object_get(rec, "domain");
    t->data_source = s_str(ds);
    json_t *id = json_object_get(extra, "id");
    if (!id)
        id = json_object_get(rec, "id");
    if (id) {
        t->task_id = s_str(id);
    } else {
        t->task_id = lisa_malloc(32);
        snprintf(t->task_id, 32, "%zu", index);
    }
    t->problem_statement = s_problem(rec, extra);
    if (!t->problem_statement) {
        snprintf(err, errlen, "record %zu has no problem statement", index);
        goto fail;
    }
    json_t *files = json_object_get(extra, "input_files");
    if (!files)
        files = json_object_get(rec, "input_files");
    if (s_files(t, files, err, errlen) != 0) {
        if (!err[0])
            snprintf(err, errlen, "record %zu: bad input_files", index);
        goto fail;
    }
    json_object_del(extra_copy, "ground_truth");
    json_object_del(extra_copy, "input_files");
    if (!json_object_get(extra_copy, "qa_type") &&
        json_object_get(rec, "qa_type"))
        json_object_set(extra_copy, "qa_type", json_object_get(rec, "qa_type"));
    char *s = json_dumps(extra_copy, JSON_COMPACT);
    t->extra_info_json = lisa_strdup(s);
    free(s);
    json_decref(extra_copy);
    if (out->n == out->cap) {
        out->cap = out->cap ? out->cap * 2 : 64;
        out->tasks = lisa_realloc(out->tasks, out->cap * sizeof *out->tasks);
    }
    out->tasks[out->n++] = t;
    return 0;
fail:
    json_decref(extra_copy);
    s_task_free(&t);
    return -1;
}

static int
s_parse(const char *text, const Lisa__TaskSpec *proto, s_tasks_t *out,
        char *err, size_t errlen)
{
    const char *p = text;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    json_error_t je;
    if (*p == '[') {
        json_t *arr = json_loads(p, 0, &je);
        if (!json_is_array(arr)) {
            snprintf(err, errlen, "not a JSON array: %s (line %d)", je.text,
                     je.line);
            json_decref(arr);
            return -1;
        }
        for (size_t i = 0; i < json_array_size(arr); i++)
            if (s_record(json_array_get(arr, i), i, proto, out, err, errlen)) {
                json_decref(arr);
                return -1;
            }
        json_decref(arr);
        return 0;
    }
    size_t index = 0, line = 0;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t) (nl - p) : strlen(p);
        line++;
        bool blank = true;
        for (size_t i = 0; i < len; i++)
            if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
                blank = false;
        if (!blank) {
            json_t *rec = json_loadb(p, len, 0, &je);
            if (!rec) {
                snprintf(err, errlen, "line %zu: %s", line, je.text);
                return -1;
            }
            int rc = s_record(rec, index++, proto, out, err, errlen);
            json_decref(rec);
            if (rc)
                return -1;
        }
        p += len + (nl ? 1 : 0);
    }
    return 0;
}

int
cli_submit(int argc, char **argv)
{
    const char *file = NULL, *broker = NULL, *run = "", *mode = "train";
    uint64_t n = 1, step = 0, policy = 0, max_attempts = 0, deadline = 0;
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            s_usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            as_json = true;
            continue;
        } else if (strcmp(a, "--n") == 0)
            ok = cli_parse_u64(v, &n) && n >= 1 && n <= 4096;
        else if (strcmp(a, "--step") == 0)
            ok = cli_parse_u64(v, &step);
        else if (strcmp(a, "--policy") == 0)
            ok = cli_parse_u64(v, &policy);
        else if (strcmp(a, "--max-attempts") == 0)
            ok = cli_parse_u64(v, &max_attempts) && max_attempts <= 100;
        else if (strcmp(a, "--deadline-ms") == 0)
            ok = cli_parse_u64(v, &deadline);
        else if (strcmp(a, "--run") == 0)
            run = v;
        else if (strcmp(a, "--mode") == 0)
            mode = v;
        else if (strcmp(a, "--broker") == 0)
            broker = v;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "lisa submit: unknown option %s\n", a);
            return 2;
        } else {
            file = a;
            continue;
        }
        if (!v || !ok) {
            fprintf(stderr, "lisa submit: bad value for %s\n", a);
            return 2;
        }
        i++;
    }
    if (!file || (strcmp(mode, "train") != 0 && strcmp(mode, "val") != 0)) {
        s_usage(stderr);
        return 2;
    }
    size_t len = 0;
    char *text = s_read(file, &len);
    if (!text) {
        fprintf(stderr, "lisa submit: cannot read '%s'\n", file);
        return 1;
    }
    Lisa__TaskSpec proto = LISA__TASK_SPEC__INIT;
    Lisa__Limits limits = LISA__LIMITS__INIT;
    proto.n = (uint32_t) n;
    proto.max_attempts = (uint32_t) max_attempts;
    if (deadline) {
        limits.deadline_ms = deadline;
        proto.limits = &limits;
    }
    s_tasks_t tasks = {0};
    char err[512] = "";
    int code = 1;
    lisa_rpc_t *rpc = NULL;
    json_t *ids = json_array(), *groups = json_array();
    if (s_parse(text, &proto, &tasks, err, sizeof err) != 0) {
        fprintf(stderr, "lisa submit: %s: %s\n", file, err);
        goto out;
    }
    if (tasks.n == 0) {
        fprintf(stderr, "lisa submit: %s holds no records\n", file);
        goto out;
    }
    rpc = cli_connect(cli_broker_endpoint(broker));
    if (!rpc)
        goto out;
    for (size_t off = 0; off < tasks.n; off += S_BATCH) {
        Lisa__Request req = LISA__REQUEST__INIT;
        Lisa__EnqueueReq q = LISA__ENQUEUE_REQ__INIT;
        q.run_id = (char *) (uintptr_t) run;
        q.step = step;
        q.policy_version = policy;
        q.mode = strcmp(mode, "val") == 0 ? LISA__MODE__MODE_VAL
                                          : LISA__MODE__MODE_TRAIN;
        q.n_tasks = tasks.n - off < S_BATCH ? tasks.n - off : S_BATCH;
        q.tasks = tasks.tasks + off;
        req.body_case = LISA__REQUEST__BODY_ENQUEUE;
        req.enqueue = &q;
        Lisa__Reply *rep = NULL;
        if (cli_call(rpc, "submit", &req, &rep) != 0)
            goto out;
        for (size_t i = 0; i < rep->enqueue->n_rollout_ids; i++)
            json_array_append_new(ids,
                                  json_string(rep->enqueue->rollout_ids[i]));
        for (size_t i = 0; i < rep->enqueue->n_group_ids; i++)
            json_array_append_new(groups,
                                  json_string(rep->enqueue->group_ids[i]));
        lisa_rpc_reply_free(&rep);
    }
    if (as_json) {
        cli_print_json(json_pack("{s:s, s:I, s:I, s:O, s:O}", "run_id", run,
                                 "step", (json_int_t) step, "tasks",
                                 (json_int_t) tasks.n, "group_ids", groups,
                                 "rollout_ids", ids));
    } else {
        printf("submitted %zu tasks as %zu rollouts (run '%s', step %llu, "
               "n %llu)\n",
               tasks.n, json_array_size(ids), run, (unsigned long long) step,
               (unsigned long long) n);
        for (size_t i = 0; i < json_array_size(ids); i++)
            printf("  %s\n", json_string_value(json_array_get(ids, i)));
    }
    code = 0;
out:
    json_decref(ids);
    json_decref(groups);
    for (size_t i = 0; i < tasks.n; i++)
        s_task_free(&tasks.tasks[i]);
    lisa_free(&tasks.tasks);
    lisa_free(&text);
    lisa_rpc_destroy(&rpc);
    return code;
}
