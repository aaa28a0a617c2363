/*
 * trn_data: verl-format records (see trn_data.h).
 */
#include "trn_data.h"

#include "lisa/lisa_json.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct trn_data {
    trn_sample_t *s;
    size_t n, cap;
};

static void s_err(char *err, size_t errlen, const char *fmt, ...)
    LISA_PRINTF(3, 4);
static void
s_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lisa_verrf(err, errlen, fmt, ap);
    va_end(ap);
    lisa_log_warn("data: %s", err ? err : "error");
}

static void
s_sample_free(trn_sample_t *s)
{
    lisa_free(&s->id);
    lisa_free(&s->data_source);
    lisa_free(&s->problem);
    lisa_free(&s->ground_truth);
    lisa_free(&s->extra_json);
    for (size_t i = 0; i < s->n_docs; i++) {
        lisa_free(&s->docs[i].name);
        lisa_free(&s->docs[i].content);
    }
    lisa_free(&s->docs);
}

static char *
s_dump(const json_t *v)
{
    char *t = NULL;
    if (lisa_json_dump(v, JSON_COMPACT | JSON_SORT_KEYS, TRN_DATA_MAX_LINE,
                       &t) != LISA_OK)
        return NULL;
    return t;
}

static lisa_rc_t
s_docs(json_t *files, trn_sample_t *s, char *why, size_t whylen)
{
    json_t *obj = NULL;
    lisa_rc_t rc = LISA_OK;
    if (!files || json_is_null(files))
        return LISA_OK;
    if (json_is_string(files)) {
        const char *txt = json_string_value(files);
        if (!*txt)
            return LISA_OK;
        char e[200];
        if (lisa_json_load_buf(txt, json_string_length(files),
                               TRN_DATA_MAX_LINE, "input_files", &obj, e,
                               sizeof e) != LISA_OK) {
            snprintf(why, whylen, "extra_info.input_files: %s", e);
            return LISA_INVALID;
        }
    } else {
        obj = json_incref(files);
    }
    if (!json_is_object(obj)) {
        snprintf(why, whylen, "extra_info.input_files: expected an object");
        rc = LISA_INVALID;
        goto out;
    }
    s->docs = lisa_calloc(json_object_size(obj) + 1, sizeof *s->docs);
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        if (!json_is_string(v)) {
            snprintf(why, whylen, "extra_info.input_files[%s]: expected text",
                     k);
            rc = LISA_INVALID;
            goto out;
        }
        trn_doc_t *d = &s->docs[s->n_docs++];
        d->name = lisa_strdup(k);
        d->len = json_string_length(v);
        d->content = lisa_memdup(json_string_value(v), d->len + 1);
    }
out:
    json_decref(obj);
    return rc;
}

/* One record -> sample; why says what is wrong. */
static lisa_rc_t
s_record(const json_t *r, const char *file, size_t idx, trn_sample_t *s,
         char *why, size_t whylen)
{
    memset(s, 0, sizeof *s);
    if (!json_is_object(r)) {
        snprintf(why, whylen, "expected an object, got %s",
                 lisa_json_type_str(r));
        return LISA_INVALID;
    }
    json_t *ds = json_object_get(r, "data_source");
    if (!json_is_string(ds) || !json_string_length(ds)) {
        snprintf(why, whylen, "data_source: required string");
        return LISA_INVALID;
    }
    json_t *gt = lisa_json_path(r, "reward_model.ground_truth");
    if (!gt || json_is_null(gt)) {
        snprintf(why, whylen, "reward_model.ground_truth: required");
        return LISA_INVALID;
    }
    json_t *ex = json_object_get(r, "extra_info");
    if (ex && !json_is_null(ex) && !json_is_object(ex)) {
        snprintf(why, whylen, "extra_info: expected an object");
        return LISA_INVALID;
    }
    json_t *ps = ex ? json_object_get(ex, "problem_statement") : NULL;
    if (!json_is_string(ps)) {
        json_t *pr = json_object_get(r, "prompt");
        size_t np = json_is_array(pr) ? json_array_size(pr) : 0;
        ps = np ? json_object_get(json_array_get(pr, np - 1), "content") : NULL;
    }
    if (!json_is_string(ps) || !json_string_length(ps)) {
        snprintf(why, whylen,
                 "extra_info.problem_statement: required (or a prompt "
                 "message with content)");
        return LISA_INVALID;
    }
    lisa_rc_t rc = LISA_OK;
    s->data_source = lisa_strdup(json_string_value(ds));
    s->problem = lisa_strdup(json_string_value(ps));
    s->ground_truth =
        json_is_string(gt) ? lisa_strdup(json_string_value(gt)) : s_dump(gt);
    json_t *id = ex ? json_object_get(ex, "id") : NULL;
    if (json_is_string(id)) {
        s->id = lisa_strdup(json_string_value(id));
    } else if (json_is_integer(id)) {
        char b[32];
        snprintf(b, sizeof b, "%lld", (long long) json_integer_value(id));
        s->id = lisa_strdup(b);
    } else {
        const char *base = strrchr(file, '/');
        char b[512];
        snprintf(b, sizeof b, "%s#%zu", base ? base + 1 : file, idx);
        s->id = lisa_strdup(b);
    }
    json_t *copy = ex ? json_deep_copy(ex) : json_object();
    json_object_del(copy, "ground_truth");
    json_t *files = json_object_get(copy, "input_files");
    rc = s_docs(files, s, why, whylen);
    json_object_del(copy, "input_files");
    s->extra_json = s_dump(copy);
    json_decref(copy);
    if (rc == LISA_OK && (!s->ground_truth || !s->extra_json)) {
        snprintf(why, whylen, "record too large");
        rc = LISA_TOOLARGE;
    }
    if (rc != LISA_OK)
        s_sample_free(s);
    return rc;
}

static lisa_rc_t
s_add(trn_data_t *d, const json_t *r, const char *file, size_t idx,
      const char *where, char *err, size_t errlen)
{
    char why[300];
    trn_sample_t s;
    if (d->n >= TRN_DATA_MAX_RECORDS) {
        s_err(err, errlen, "%s: more than %u records", file,
              TRN_DATA_MAX_RECORDS);
        return LISA_TOOLARGE;
    }
    lisa_rc_t rc = s_record(r, file, idx, &s, why, sizeof why);
    if (rc != LISA_OK) {
        s_err(err, errlen, "%s: %s: %s", file, where, why);
        return rc;
    }
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 64;
        d->s = lisa_realloc(d->s, d->cap * sizeof *d->s);
    }
    d->s[d->n++] = s;
    return LISA_OK;
}

static lisa_rc_t
s_load_file(trn_data_t *d, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        s_err(err, errlen, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? LISA_NOTFOUND : LISA_ERR;
    }
    int c;
    do {
        c = fgetc(f);
    } while (c == ' ' || c == '\n' || c == '\r' || c == '\t');
    fclose(f);
    size_t before = d->n;
    char e[400], where[64];
    if (c == '[') {
        json_t *root = NULL;
        lisa_rc_t rc =
            lisa_json_load_file(path, TRN_DATA_MAX_FILE, &root, e, sizeof e);
        if (rc != LISA_OK) {
            s_err(err, errlen, "%s: %s", path, e);
            return rc;
        }
        for (size_t i = 0; i < json_array_size(root); i++) {
            snprintf(where, sizeof where, "record %zu", i);
            rc = s_add(d, json_array_get(root, i), path, i, where, err, errlen);
            if (rc != LISA_OK) {
                json_decref(root);
                return rc;
            }
        }
        json_decref(root);
    } else {
        lisa_jsonl_t *r = NULL;
        lisa_rc_t rc =
            lisa_jsonl_open(path, TRN_DATA_MAX_LINE, &r, e, sizeof e);
        if (rc != LISA_OK) {
            s_err(err, errlen, "%s: %s", path, e);
            return rc;
        }
        size_t i = 0;
        for (;;) {
            json_t *v = NULL;
            rc = lisa_jsonl_next(r, &v, e, sizeof e);
            if (rc == LISA_NOTFOUND)
                break;
            if (rc != LISA_OK) {
                s_err(err, errlen, "%s: record %zu: %s", path, i, e);
                lisa_jsonl_destroy(&r);
                return rc == LISA_ERR ? LISA_ERR : LISA_INVALID;
            }
            snprintf(where, sizeof where, "record %zu (line %llu)", i,
                     (unsigned long long) lisa_jsonl_line(r));
            rc = s_add(d, v, path, i, where, err, errlen);
            json_decref(v);
            if (rc != LISA_OK) {
                lisa_jsonl_destroy(&r);
                return rc;
            }
            i++;
        }
        lisa_jsonl_destroy(&r);
    }
    if (d->n == before) {
        s_err(err, errlen, "%s: no records", path);
        return LISA_INVALID;
    }
    return LISA_OK;
}

static int
s_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *) a, *(char *const *) b);
}

static lisa_rc_t
s_load_path(trn_data_t *d, const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        s_err(err, errlen, "%s: %s", path, strerror(errno));
        return errno == ENOENT ? LISA_NOTFOUND : LISA_ERR;
    }
    if (!S_ISDIR(st.st_mode))
        return s_load_file(d, path, err, errlen);
    DIR *dir = opendir(path);
    if (!dir) {
        s_err(err, errlen, "%s: %s", path, strerror(errno));
        return LISA_ERR;
    }
    char *names[TRN_DATA_MAX_FILES];
    size_t n = 0;
    lisa_rc_t rc = LISA_OK;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        size_t l = strlen(e->d_name);
        bool json = l > 5 && strcmp(e->d_name + l - 5, ".json") == 0;
        bool jsonl = l > 6 && strcmp(e->d_name + l - 6, ".jsonl") == 0;
        if (!json && !jsonl)
            continue;
        if (n == TRN_DATA_MAX_FILES) {
            s_err(err, errlen, "%s: more than %u files", path,
                  TRN_DATA_MAX_FILES);
            rc = LISA_TOOLARGE;
            break;
        }
        size_t pl = strlen(path) + l + 2;
        names[n] = lisa_malloc(pl);
        snprintf(names[n], pl, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(dir);
    if (rc == LISA_OK && n == 0) {
        s_err(err, errlen, "%s: no *.json or *.jsonl files", path);
        rc = LISA_INVALID;
    }
    qsort(names, n, sizeof names[0], s_cmp_str);
    for (size_t i = 0; i < n && rc == LISA_OK; i++)
        rc = s_load_file(d, names[i], err, errlen);
    for (size_t i = 0; i < n; i++)
        lisa_free(&names[i]);
    return rc;
}

lisa_rc_t
trn_data_load(const char *list, trn_data_t **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!list || !*list) {
        s_err(err, errlen, "no data files given");
        return LISA_INVALID;
    }
    trn_data_t *d = lisa_calloc(1, sizeof *d);
    char *copy = lisa_strdup(list);
    lisa_rc_t rc = LISA_OK;
    char *save = NULL;
    size_t parts = 0;
    for (char *p = strtok_r(copy, ",", &save); p && rc == LISA_OK;
         p = strtok_r(NULL, ",", &save)) {
        while (*p == ' ')
            p++;
        if (!*p)
            continue;
        parts++;
        rc = s_load_path(d, p, err, errlen);
    }
    lisa_free(&copy);
    if (rc == LISA_OK && parts == 0) {
        s_err(err, errlen, "no data files given");
        rc = LISA_INVALID;
    }
    if (rc != LISA_OK) {
        trn_data_destroy(&d);
        return rc;
    }
    *out = d;
    return LISA_OK;
}

void
trn_data_destroy(trn_data_t **dp)
{
    if (!dp || !*dp)
        return;
    trn_data_t *d = *dp;
    for (size_t i = 0; i < d->n; i++)
        s_sample_free(&d->s[i]);
    lisa_free(&d->s);
    lisa_free(dp);
}

size_t
trn_data_len(const trn_data_t *d)
{
    return d ? d->n : 0;
}

const trn_sample_t *
trn_data_get(const trn_data_t *d, size_t i)
{
    return (d && i < d->n) ? &d->s[i] : NULL;
}

static uint64_t
s_mix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void
trn_data_order(size_t n, bool shuffle, uint64_t seed, uint64_t epoch,
               size_t *perm)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    if (!shuffle || n < 2)
        return;
    uint64_t st = seed * 0x100000001B3ull + epoch * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t) (s_mix(&st) % (uint64_t) (i + 1));
        size_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}
