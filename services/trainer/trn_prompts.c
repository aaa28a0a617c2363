/*
 * trn_prompts: prompt sets read with libyaml, rendered as llm-in-sandbox
 * renders them (see trn_prompts.h).
 */
#include "trn_prompts.h"

#include "lisa/lisa_buf.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

/* One config.yaml. */
typedef struct {
    char *name; /* data source prefix; "" for the set's default */
    char *system, *instance;
    char *working_dir, *input_dir, *output_dir;
} s_prompt_t;

struct trn_prompts_t {
    s_prompt_t *p;
    size_t n;
};

static void s_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void
s_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static void
s_prompt_clear(s_prompt_t *p)
{
    lisa_free(&p->name);
    lisa_free(&p->system);
    lisa_free(&p->instance);
    lisa_free(&p->working_dir);
    lisa_free(&p->input_dir);
    lisa_free(&p->output_dir);
}

/* ---- rendering ---------------------------------------------------------- */

/* Appends `s` with every `key` replaced by `val` (Python's str.replace). */
static void
s_replace(lisa_buf_t *b, const char *s, const char *key, const char *val)
{
    size_t kl = strlen(key);
    const char *p;
    while ((p = strstr(s, key)) != NULL) {
        lisa_buf_put(b, s, (size_t) (p - s));
        lisa_buf_puts(b, val);
        s = p + kl;
    }
    lisa_buf_puts(b, s);
}

/* Python's str.format(**kw) over `t` for the names[n] / values[n] given:
 * {{ and }} are braces, {name} is its value; anything else in braces (an
 * unknown or empty name, a conversion, a format spec) and a lone brace
 * are errors, as they are in Python (KeyError, IndexError, ValueError). */
static lisa_rc_t
s_format(lisa_buf_t *b, const char *t, const char *const *names,
         const char *const *values, size_t n, char *err, size_t errlen)
{
    while (*t) {
        const char *o = strpbrk(t, "{}");
        if (!o) {
            lisa_buf_puts(b, t);
            break;
        }
        lisa_buf_put(b, t, (size_t) (o - t));
        if (o[0] == o[1]) { /* {{ or }} */
            lisa_buf_put(b, o, 1);
            t = o + 2;
            continue;
        }
        if (*o == '}') {
            s_errf(err, errlen, "a single '}' in the template");
            return LISA_INVALID;
        }
        const char *c = strpbrk(o + 1, "{}");
        if (!c || *c != '}') {
            s_errf(err, errlen, "a '{' without its '}' in the template");
            return LISA_INVALID;
        }
        size_t fl = (size_t) (c - o - 1);
        size_t i = 0;
        for (; i < n; i++)
            if (strlen(names[i]) == fl && strncmp(o + 1, names[i], fl) == 0)
                break;
        if (i == n) {
            s_errf(err, errlen,
                   "placeholder {%.*s} is not one this prompt has (%s%s%s)",
                   (int) (fl > 64 ? 64 : fl), o + 1, n ? names[0] : "",
                   n > 1 ? ", " : "", n > 1 ? names[1] : "");
            return LISA_INVALID;
        }
        lisa_buf_puts(b, values[i]);
        t = c + 1;
    }
    return LISA_OK;
}

/* One template rendered: the directories replaced, then formatted. */
static lisa_rc_t
s_render_one(const s_prompt_t *p, const char *tmpl, const char *const *names,
             const char *const *values, size_t n, char **out, char *err,
             size_t errlen)
{
    *out = NULL;
    lisa_buf_t a = LISA_BUF(TRN_PROMPTS_RENDER_MAX);
    lisa_buf_t b = LISA_BUF(TRN_PROMPTS_RENDER_MAX);
    s_replace(&a, tmpl, "{working_dir}", p->working_dir);
    s_replace(&b, a.p ? a.p : "", "{input_dir}", p->input_dir);
    lisa_buf_free(&a);
    s_replace(&a, b.p ? b.p : "", "{output_dir}", p->output_dir);
    lisa_buf_free(&b);
    lisa_rc_t rc = LISA_TOOLARGE;
    if (!a.full)
        rc = s_format(&b, a.p ? a.p : "", names, values, n, err, errlen);
    if (rc == LISA_OK && b.full)
        rc = LISA_TOOLARGE;
    if (rc == LISA_TOOLARGE)
        s_errf(err, errlen, "rendered prompt over %u bytes",
               TRN_PROMPTS_RENDER_MAX);
    if (rc == LISA_OK)
        *out = lisa_buf_take(&b);
    lisa_buf_free(&a);
    lisa_buf_free(&b);
    return rc;
}

static lisa_rc_t
s_render(const s_prompt_t *p, const char *problem, char **system, char **user,
         char *err, size_t errlen)
{
    static const char *const snames[] = {"command_docs", "demo"};
    static const char *const svals[] = {"", ""};
    static const char *const inames[] = {"problem_statement"};
    const char *ivals[] = {problem};
    *system = *user = NULL;
    lisa_rc_t rc =
        s_render_one(p, p->system, snames, svals, 2, system, err, errlen);
    if (rc != LISA_OK)
        return rc;
    if (!*p->instance) { /* upstream: no instance prompt, the statement */
        *user = lisa_strdup(problem);
        return LISA_OK;
    }
    rc = s_render_one(p, p->instance, inames, ivals, 1, user, err, errlen);
    if (rc != LISA_OK)
        lisa_free(system);
    return rc;
}

/* ---- loading ------------------------------------------------------------ */

/* A scalar's text (borrowed), or NULL for any other node. */
static const char *
s_scalar(yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE
               ? (const char *) n->data.scalar.value
               : NULL;
}

/* Reads the keys of one config.yaml into p. */
static lisa_rc_t
s_parse(const char *path, const unsigned char *text, size_t len, s_prompt_t *p,
        char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        s_errf(err, errlen, "%s: out of memory", path);
        return LISA_ERR;
    }
    yaml_parser_set_input_string(&parser, text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        s_errf(err, errlen, "%s: not YAML: %s at line %zu", path,
               parser.problem ? parser.problem : "error",
               (size_t) parser.problem_mark.line + 1);
        yaml_parser_delete(&parser);
        return LISA_INVALID;
    }
    lisa_rc_t rc = LISA_OK;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root || root->type != YAML_MAPPING_NODE) {
        s_errf(err, errlen, "%s: the top level is not a mapping", path);
        rc = LISA_INVALID;
        goto out;
    }
    static const char *const keys[] = {"system_prompt", "instance_prompt",
                                       "working_dir", "input_dir",
                                       "output_dir"};
    char **slots[] = {&p->system, &p->instance, &p->working_dir, &p->input_dir,
                      &p->output_dir};
    for (yaml_node_pair_t *pr = root->data.mapping.pairs.start;
         pr < root->data.mapping.pairs.top; pr++) {
        const char *k = s_scalar(yaml_document_get_node(&doc, pr->key));
        yaml_node_t *vn = yaml_document_get_node(&doc, pr->value);
        for (size_t i = 0; k && i < sizeof keys / sizeof keys[0]; i++) {
            if (strcmp(k, keys[i]) != 0)
                continue;
            const char *v = s_scalar(vn);
            if (!v) {
                s_errf(err, errlen, "%s: %s is not text", path, k);
                rc = LISA_INVALID;
                goto out;
            }
            lisa_free(slots[i]);
            *slots[i] = lisa_strdup(v);
        }
    }
    if (!p->system) {
        s_errf(err, errlen, "%s: no system_prompt", path);
        rc = LISA_INVALID;
        goto out;
    }
    if (!p->instance)
        p->instance = lisa_strdup("");
    if (!p->working_dir)
        p->working_dir = lisa_strdup("/testbed");
    if (!p->input_dir)
        p->input_dir = lisa_strdup("/testbed/documents");
    if (!p->output_dir)
        p->output_dir = lisa_strdup("/testbed");
out:
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return rc;
}

/* Reads a file of at most TRN_PROMPTS_FILE_MAX bytes (caller frees). */
static unsigned char *
s_read(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        s_errf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    unsigned char *buf = lisa_malloc(TRN_PROMPTS_FILE_MAX + 1);
    size_t n = fread(buf, 1, TRN_PROMPTS_FILE_MAX + 1, f);
    bool bad = ferror(f) != 0;
    fclose(f);
    if (bad || n > TRN_PROMPTS_FILE_MAX) {
        s_errf(err, errlen, "%s: %s", path,
               bad ? "read error" : "larger than 1 MiB");
        lisa_free(&buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Loads one config.yaml as the prompt of `name` and checks it renders. */
static lisa_rc_t
s_load_file(trn_prompts_t *self, const char *path, const char *name, char *err,
            size_t errlen)
{
    size_t len = 0;
    unsigned char *text = s_read(path, &len, err, errlen);
    if (!text)
        return LISA_NOTFOUND;
    s_prompt_t p = {0};
    lisa_rc_t rc = s_parse(path, text, len, &p, err, errlen);
    lisa_free(&text);
    char *sys = NULL, *usr = NULL, why[200] = "";
    if (rc == LISA_OK) {
        rc = s_render(&p, "", &sys, &usr, why, sizeof why);
        if (rc != LISA_OK)
            s_errf(err, errlen, "%s: %s", path, why);
    }
    lisa_free(&sys);
    lisa_free(&usr);
    if (rc != LISA_OK) {
        s_prompt_clear(&p);
        return rc;
    }
    p.name = lisa_strdup(name);
    self->p = lisa_realloc(self->p, (self->n + 1) * sizeof *self->p);
    self->p[self->n++] = p;
    return LISA_OK;
}

static bool
s_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool
s_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* "<dir>/<name>config.yaml" (name "" or ending in '/'), or NULL when
 * longer than PATH_MAX (caller frees). */
static char *
s_config_path(const char *dir, const char *name)
{
    lisa_buf_t b = LISA_BUF(PATH_MAX);
    lisa_buf_printf(&b, "%s/%sconfig.yaml", dir, name);
    if (b.full) {
        lisa_buf_free(&b);
        return NULL;
    }
    return lisa_buf_take(&b);
}

/* A directory set: <dir>/<name>/config.yaml per data source, and
 * <dir>/config.yaml as the default. */
static lisa_rc_t
s_load_dir(trn_prompts_t *self, const char *dir, char *err, size_t errlen)
{
    lisa_rc_t rc = LISA_OK;
    char *path = s_config_path(dir, "");
    if (path && s_exists(path))
        rc = s_load_file(self, path, "", err, errlen);
    lisa_free(&path);
    if (rc != LISA_OK)
        return rc;
    DIR *d = opendir(dir);
    if (!d) {
        s_errf(err, errlen, "%s: %s", dir, strerror(errno));
        return LISA_NOTFOUND;
    }
    struct dirent *e;
    while (rc == LISA_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char sub[300];
        snprintf(sub, sizeof sub, "%.250s/", e->d_name);
        path = s_config_path(dir, sub);
        if (path && s_exists(path)) {
            if (self->n >= TRN_PROMPTS_MAX_SOURCES) {
                s_errf(err, errlen, "%s: more than %u prompt files", dir,
                       TRN_PROMPTS_MAX_SOURCES);
                rc = LISA_TOOLARGE;
            } else {
                rc = s_load_file(self, path, e->d_name, err, errlen);
            }
        }
        lisa_free(&path);
    }
    closedir(d);
    if (rc == LISA_OK && self->n == 0) {
        s_errf(err, errlen, "%s: no config.yaml in it or in a folder under it",
               dir);
        rc = LISA_NOTFOUND;
    }
    return rc;
}

/* A shipped set's directory: <exe dir>/../share/lisa/prompts/<name>. */
static bool
s_shipped(const char *name, char *out, size_t outlen)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return false;
    *slash = '\0';
    lisa_buf_t b = LISA_BUF(outlen - 1);
    lisa_buf_printf(&b, "%s/../share/lisa/prompts/%s", exe, name);
    bool ok = !b.full && b.p && s_is_dir(b.p);
    if (ok)
        memcpy(out, b.p, b.len + 1);
    lisa_buf_free(&b);
    return ok;
}

trn_prompts_t *
trn_prompts_load(const char *path, char *err, size_t errlen)
{
    char shipped[PATH_MAX];
    if (!path || !*path) {
        s_errf(err, errlen, "agent.prompts: empty");
        return NULL;
    }
    if (!s_exists(path) && !strchr(path, '/') && strlen(path) <= 64) {
        if (!s_shipped(path, shipped, sizeof shipped)) {
            s_errf(err, errlen,
                   "agent.prompts: %s is no file or directory here and no "
                   "prompt set shipped with lisa",
                   path);
            return NULL;
        }
        path = shipped;
    }
    trn_prompts_t *self = lisa_calloc(1, sizeof *self);
    lisa_rc_t rc = s_is_dir(path) ? s_load_dir(self, path, err, errlen)
                                  : s_load_file(self, path, "", err, errlen);
    if (rc != LISA_OK) {
        trn_prompts_destroy(&self);
        return NULL;
    }
    return self;
}

void
trn_prompts_destroy(trn_prompts_t **self)
{
    if (!self || !*self)
        return;
    for (size_t i = 0; i < (*self)->n; i++)
        s_prompt_clear(&(*self)->p[i]);
    lisa_free(&(*self)->p);
    lisa_free(self);
}

size_t
trn_prompts_count(const trn_prompts_t *self)
{
    return self ? self->n : 0;
}

lisa_rc_t
trn_prompts_render(const trn_prompts_t *self, const char *data_source,
                   const char *problem, char **system, char **user)
{
    *system = *user = NULL;
    const s_prompt_t *best = NULL;
    size_t best_len = 0;
    const char *ds = data_source ? data_source : "";
    for (size_t i = 0; self && i < self->n; i++) {
        const s_prompt_t *p = &self->p[i];
        size_t l = strlen(p->name);
        if (strncasecmp(ds, p->name, l) != 0)
            continue;
        if (!best || l > best_len) {
            best = p;
            best_len = l;
        }
    }
    if (!best)
        return LISA_NOTFOUND;
    char why[200];
    lisa_rc_t rc =
        s_render(best, problem ? problem : "", system, user, why, sizeof why);
    if (rc != LISA_OK)
        lisa_log_warn("prompts: %s: %s", ds, why);
    return rc;
}
