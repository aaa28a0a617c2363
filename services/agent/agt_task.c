/*
 * agt_task: TaskView parsing, safe file placement, answer read-back.
 */
#include "agt_task.h"

#include "agt_text.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_MAX_FILES     10000u
#define S_MAX_PATH      255u
#define S_MAX_ID        128u
#define S_MAX_STATEMENT (4u * 1024u * 1024u)
#define S_MAX_PROMPT    (8u * 1024u * 1024u)

bool
agt_task_path_ok(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    if (n == 0 || n > S_MAX_PATH || path[0] == '/')
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) path[i];
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    /* Check each component: not empty, not "." or "..". */
    const char *p = path;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t) (slash - p) : strlen(p);
        if (len == 0 || (len == 1 && p[0] == '.') ||
            (len == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        if (!slash)
            break;
        p = slash + 1;
        if (!*p)
            return false; /* trailing slash: a directory, not a file */
    }
    return true;
}

static lisa_rc_t
s_str(json_t *o, const char *key, size_t max, bool required, char **out,
      char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) {
            snprintf(err, errlen, "task: missing `%s`", key);
            return LISA_INVALID;
        }
        *out = lisa_strdup("");
        return LISA_OK;
    }
    if (!json_is_string(v) || json_string_length(v) > max) {
        snprintf(err, errlen,
                 "task: `%s` must be a string of at most %zu "
                 "bytes",
                 key, max);
        return LISA_INVALID;
    }
    *out = lisa_strdup(json_string_value(v));
    return LISA_OK;
}

static lisa_rc_t
s_uint(json_t *o, const char *key, unsigned *out, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, key);
    *out = 0;
    if (!v || json_is_null(v))
        return LISA_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > 0x7fffffff) {
        snprintf(err, errlen, "task: `%s` must be a non-negative integer", key);
        return LISA_INVALID;
    }
    *out = (unsigned) json_integer_value(v);
    return LISA_OK;
}

static lisa_rc_t
s_limits(json_t *lim, agt_task_t *t, char *err, size_t errlen)
{
    lisa_rc_t rc;
    if (!lim || json_is_null(lim))
        return LISA_OK;
    if (!json_is_object(lim)) {
        snprintf(err, errlen, "task: `limits` must be an object");
        return LISA_INVALID;
    }
    if ((rc = s_uint(lim, "max_turns", &t->max_turns, err, errlen)) ||
        (rc = s_uint(lim, "max_context_tokens", &t->max_context_tokens, err,
                     errlen)) ||
        (rc = s_uint(lim, "max_tokens_per_call", &t->max_tokens_per_call, err,
                     errlen)))
        return rc;
    json_t *d = json_object_get(lim, "deadline_ms");
    if (d && !json_is_null(d)) {
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            snprintf(err, errlen,
                     "task: `deadline_ms` must be a "
                     "non-negative integer");
            return LISA_INVALID;
        }
        t->deadline_ms = (uint64_t) json_integer_value(d);
    }
    json_t *tl = json_object_get(lim, "time_left_ms");
    if (tl && !json_is_null(tl)) {
        if (!json_is_integer(tl)) {
            snprintf(err, errlen, "task: `time_left_ms` must be an integer");
            return LISA_INVALID;
        }
        t->time_left_ms = json_integer_value(tl);
        if (t->time_left_ms < 0)
            t->time_left_ms = 0;
    }
    json_t *temp = json_object_get(lim, "temperature");
    if (temp && !json_is_null(temp)) {
        if (!json_is_number(temp) || json_number_value(temp) < 0 ||
            json_number_value(temp) > 10) {
            snprintf(err, errlen, "task: `temperature` must be in [0, 10]");
            return LISA_INVALID;
        }
        t->temperature = json_number_value(temp);
    }
    json_t *tp = json_object_get(lim, "top_p");
    if (tp && !json_is_null(tp)) {
        if (!json_is_number(tp) || json_number_value(tp) < 0 ||
            json_number_value(tp) > 1) {
            snprintf(err, errlen, "task: `top_p` must be in [0, 1]");
            return LISA_INVALID;
        }
        t->top_p = json_number_value(tp);
    }
    return LISA_OK;
}

/* The optional `prompt` object: {"system": ..., "user": ...}. */
static lisa_rc_t
s_prompt(json_t *p, agt_task_t *t, char *err, size_t errlen)
{
    lisa_rc_t rc;
    if (!p || json_is_null(p))
        return LISA_OK;
    if (!json_is_object(p)) {
        snprintf(err, errlen, "task: `prompt` must be an object");
        return LISA_INVALID;
    }
    if ((rc = s_str(p, "system", S_MAX_PROMPT, true, &t->system_prompt, err,
                    errlen)) ||
        (rc = s_str(p, "user", S_MAX_PROMPT, true, &t->user_prompt, err,
                    errlen)))
        return rc;
    return LISA_OK;
}

static lisa_rc_t
s_files(json_t *files, agt_task_t *t, char *err, size_t errlen)
{
    if (!files || json_is_null(files)) {
        t->files = json_array();
        return LISA_OK;
    }
    if (!json_is_array(files) || json_array_size(files) > S_MAX_FILES) {
        snprintf(err, errlen,
                 "task: `files` must be an array of at most %u "
                 "entries",
                 S_MAX_FILES);
        return LISA_INVALID;
    }
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f)
    {
        const char *path = json_string_value(json_object_get(f, "path"));
        json_t *content = json_object_get(f, "content");
        const char *enc = json_string_value(json_object_get(f, "encoding"));
        if (!json_is_object(f) || !path || !json_is_string(content)) {
            snprintf(err, errlen,
                     "task: files[%zu] needs string `path` and "
                     "`content`",
                     i);
            return LISA_INVALID;
        }
        if (!agt_task_path_ok(path)) {
            snprintf(err, errlen,
                     "task: files[%zu] has an unsafe path "
                     "'%.64s'",
                     i, path);
            return LISA_INVALID;
        }
        if (enc && strcmp(enc, "utf-8") != 0 && strcmp(enc, "base64") != 0) {
            snprintf(err, errlen,
                     "task: files[%zu] has unknown encoding "
                     "'%.32s'",
                     i, enc);
            return LISA_INVALID;
        }
    }
    t->files = json_incref(files);
    t->n_files = json_array_size(files);
    return LISA_OK;
}

lisa_rc_t
agt_task_parse(json_t *view, agt_task_t *t, char *err, size_t errlen)
{
    lisa_rc_t rc;
    memset(t, 0, sizeof *t);
    t->time_left_ms = -1;
    t->temperature = -1;
    if (!json_is_object(view)) {
        snprintf(err, errlen, "task: not a JSON object");
        return LISA_INVALID;
    }
    if ((rc = s_str(view, "rollout_id", S_MAX_ID, true, &t->rollout_id, err,
                    errlen)) ||
        (rc = s_str(view, "data_source", S_MAX_ID, false, &t->data_source, err,
                    errlen)) ||
        (rc = s_str(view, "problem_statement", S_MAX_STATEMENT, true,
                    &t->problem_statement, err, errlen)) ||
        (rc = s_uint(view, "attempt", &t->attempt, err, errlen)) ||
        (rc = s_limits(json_object_get(view, "limits"), t, err, errlen)) ||
        (rc = s_files(json_object_get(view, "files"), t, err, errlen)) ||
        (rc = s_prompt(json_object_get(view, "prompt"), t, err, errlen)))
        goto out;
    json_t *extra = json_object_get(view, "extra_info");
    const char *qa = json_string_value(json_object_get(extra, "qa_type"));
    if (qa)
        t->qa_type = lisa_strndup(qa, S_MAX_ID);
out:
    if (rc != LISA_OK)
        agt_task_clear(t);
    return rc;
}

static int
s_mkdir_p(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int r = mkdir(path, 0755);
        *p = '/';
        if (r != 0 && errno != EEXIST)
            return -1;
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* Decodes base64 (RFC 4648, padding optional, whitespace skipped). */
static int
s_b64(const char *in, size_t len, lisa_buf_t *out)
{
    unsigned acc = 0, bits = 0;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        int v;
        if (c >= 'A' && c <= 'Z')
            v = c - 'A';
        else if (c >= 'a' && c <= 'z')
            v = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            v = c - '0' + 52;
        else if (c == '+')
            v = 62;
        else if (c == '/')
            v = 63;
        else if (c == '=' || c == '\n' || c == '\r' || c == ' ')
            continue;
        else
            return -1;
        acc = (acc << 6) | (unsigned) v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            char b = (char) ((acc >> bits) & 0xFFu);
            lisa_buf_put(out, &b, 1);
        }
    }
    return 0;
}

static int
s_write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t) w;
    }
    return 0;
}

lisa_rc_t
agt_task_write_files(const agt_task_t *t, const char *root, char *err,
                     size_t errlen)
{
    lisa_rc_t rc = LISA_OK;
    size_t dn = strlen(root) + 16;
    char *docs = lisa_malloc(dn);
    snprintf(docs, dn, "%s/documents", root);
    if (s_mkdir_p(docs) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", docs, strerror(errno));
        rc = LISA_ERR;
        goto out;
    }
    size_t i;
    json_t *f;
    json_array_foreach(t->files, i, f)
    {
        const char *path = json_string_value(json_object_get(f, "path"));
        json_t *content = json_object_get(f, "content");
        const char *enc = json_string_value(json_object_get(f, "encoding"));
        size_t fn = strlen(docs) + strlen(path) + 2;
        char *full = lisa_malloc(fn);
        snprintf(full, fn, "%s/%s", docs, path);
        char *slash = strrchr(full, '/');
        *slash = '\0';
        int mk = s_mkdir_p(full);
        *slash = '/';
        lisa_buf_t data;
        data = LISA_BUF_CUT(json_string_length(content) + 1);
        if (enc && strcmp(enc, "base64") == 0) {
            if (s_b64(json_string_value(content), json_string_length(content),
                      &data) != 0) {
                snprintf(err, errlen, "files[%zu]: bad base64", i);
                rc = LISA_INVALID;
            }
        } else {
            lisa_buf_put(&data, json_string_value(content),
                         json_string_length(content));
        }
        int fd = -1;
        if (rc == LISA_OK) {
            fd = mk == 0 ? open(full,
                                O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
                                    O_CLOEXEC,
                                0644)
                         : -1;
            if (fd < 0 ||
                s_write_all(fd, data.p ? data.p : "", data.len) != 0) {
                snprintf(err, errlen, "cannot write %s: %s", full,
                         strerror(errno));
                rc = LISA_ERR;
            }
        }
        if (fd >= 0 && close(fd) != 0 && rc == LISA_OK) {
            snprintf(err, errlen, "cannot write %s: %s", full, strerror(errno));
            rc = LISA_ERR;
        }
        lisa_buf_free(&data);
        lisa_free(&full);
        if (rc != LISA_OK)
            goto out;
    }
out:
    lisa_free(&docs);
    return rc;
}

lisa_rc_t
agt_task_read_answer(const char *root, size_t max, char **answer,
                     bool *truncated, bool *found)
{
    *answer = NULL;
    *truncated = false;
    *found = false;
    size_t n = strlen(root) + 16;
    char *path = lisa_malloc(n);
    snprintf(path, n, "%s/answer.txt", root);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    lisa_free(&path);
    if (fd < 0) {
        *answer = lisa_strdup("");
        return errno == ENOENT ? LISA_OK : LISA_ERR;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd); /* a FIFO or device must not block the agent */
        *answer = lisa_strdup("");
        return LISA_ERR;
    }
    *found = true;
    char *buf = lisa_malloc(max + 1);
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, buf + got, max + 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t) r;
        if (got == max + 1)
            break;
    }
    close(fd);
    if (got > max) {
        *truncated = true;
        got = max;
    }
    *answer = lisa_utf8_scrub(buf, got, got);
    lisa_free(&buf);
    return LISA_OK;
}

void
agt_task_clear(agt_task_t *t)
{
    lisa_free(&t->rollout_id);
    lisa_free(&t->data_source);
    lisa_free(&t->problem_statement);
    lisa_free(&t->qa_type);
    lisa_free(&t->system_prompt);
    lisa_free(&t->user_prompt);
    json_decref(t->files);
    t->files = NULL;
}
