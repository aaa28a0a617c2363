/*
 * trn_metrics: step records as JSON lines (see trn_metrics.h).
 */
#include "trn_metrics.h"

#include "lisa/lisa_mem.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct trn_metrics {
    json_t *o;
};

trn_metrics_t *
trn_metrics_new(void)
{
    trn_metrics_t *m = lisa_calloc(1, sizeof *m);
    m->o = json_object();
    return m;
}

void
trn_metrics_destroy(trn_metrics_t **m)
{
    if (!m || !*m)
        return;
    json_decref((*m)->o);
    lisa_free(m);
}

void
trn_metrics_set(trn_metrics_t *m, const char *key, double v)
{
    json_t *j;
    if (!isfinite(v))
        j = json_null();
    else if (v == floor(v) && fabs(v) < 9007199254740992.0)
        j = json_integer((json_int_t) v); /* counts and steps stay integers */
    else
        j = json_real(v);
    json_object_set_new(m->o, key, j);
}

void
trn_metrics_set_str(trn_metrics_t *m, const char *key, const char *v)
{
    json_object_set_new(m->o, key, json_string(v ? v : ""));
}

static void
s_key(char *b, size_t bl, const char *p, const char *mid, const char *s)
{
    snprintf(b, bl, "%s%s%s%s%s", p, mid ? "/" : "", mid ? mid : "", "/", s);
}

void
trn_metrics_stats(trn_metrics_t *m, const char *prefix, const double *x,
                  size_t n)
{
    if (n == 0)
        return;
    double sum = 0, mn = x[0], mx = x[0];
    for (size_t i = 0; i < n; i++) {
        sum += x[i];
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    double mean = sum / (double) n, var = 0;
    for (size_t i = 0; i < n; i++)
        var += (x[i] - mean) * (x[i] - mean);
    var /= (double) n;
    char k[256];
    s_key(k, sizeof k, prefix, NULL, "mean");
    trn_metrics_set(m, k, mean);
    s_key(k, sizeof k, prefix, NULL, "std");
    trn_metrics_set(m, k, sqrt(var));
    s_key(k, sizeof k, prefix, NULL, "min");
    trn_metrics_set(m, k, mn);
    s_key(k, sizeof k, prefix, NULL, "max");
    trn_metrics_set(m, k, mx);
}

void
trn_metrics_by_group(trn_metrics_t *m, const char *prefix,
                     const char *const *group, const double *x, size_t n)
{
    bool *done = lisa_calloc(n ? n : 1, sizeof *done);
    for (size_t i = 0; i < n; i++) {
        if (done[i])
            continue;
        double sum = 0;
        size_t c = 0;
        for (size_t j = i; j < n; j++)
            if (!done[j] && strcmp(group[j], group[i]) == 0) {
                done[j] = true;
                sum += x[j];
                c++;
            }
        char k[256];
        s_key(k, sizeof k, prefix, group[i], "mean");
        trn_metrics_set(m, k, sum / (double) c);
        s_key(k, sizeof k, prefix, group[i], "count");
        trn_metrics_set(m, k, (double) c);
    }
    lisa_free(&done);
}

double
trn_metrics_get(const trn_metrics_t *m, const char *key)
{
    json_t *v = json_object_get(m->o, key);
    return json_is_number(v) ? json_number_value(v) : (double) NAN;
}

void
trn_metrics_each(const trn_metrics_t *m,
                 void (*fn)(const char *key, double v, void *ud), void *ud)
{
    /* jansson's iteration order is the insertion order */
    const char *k;
    json_t *v;
    json_object_foreach(m->o, k, v)
    {
        if (json_is_number(v))
            fn(k, json_number_value(v), ud);
    }
}

char *
trn_metrics_line(const trn_metrics_t *m)
{
    char *t = json_dumps(m->o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!t)
        return NULL;
    char *r = lisa_strdup(t);
    free(t);
    return r;
}

lisa_rc_t
trn_metrics_write(const trn_metrics_t *m, FILE *f)
{
    char *l = trn_metrics_line(m);
    if (!l)
        return LISA_ERR;
    int ok = fputs(l, f) >= 0 && fputc('\n', f) != EOF && fflush(f) == 0;
    lisa_free(&l);
    return ok ? LISA_OK : LISA_ERR;
}
