/*
 * trn_progress: step lines and the live line (see trn_progress.h).
 *
 * Lines are built with s_cat, which appends within the buffer and stops
 * at its end, so a record with unexpected keys can only shorten a line.
 * The live line is written to a temporary file and renamed over
 * progress.now: a reader sees the old line or the new one, never half.
 */
#include "trn_progress.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define S_SOURCES_SHOWN 4 /* data sources named on a step line */

struct trn_progress {
    FILE *log;
    char *now, *tmp;
    uint64_t total;
    bool console;
};

static void s_cat(char *b, size_t len, const char *fmt, ...) LISA_PRINTF(3, 4);
static void
s_cat(char *b, size_t len, const char *fmt, ...)
{
    size_t off = strnlen(b, len);
    if (off + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b + off, len - off, fmt, ap);
    va_end(ap);
}

/* 4.2s, 1m05s, 2h03m */
static void
s_dur(char *b, size_t len, double s)
{
    if (!(s >= 0) || !isfinite(s))
        snprintf(b, len, "-");
    else if (s < 59.95)
        snprintf(b, len, "%.1fs", s);
    else if (s < 3600)
        snprintf(b, len, "%dm%02ds", (int) s / 60, (int) s % 60);
    else
        snprintf(b, len, "%dh%02dm", (int) (s / 3600),
                 (int) fmod(s, 3600) / 60);
}

/* 950, 3.4k, 1.23M */
static void
s_count(char *b, size_t len, uint64_t n)
{
    if (n < 1000)
        snprintf(b, len, "%llu", (unsigned long long) n);
    else if (n < 1000000)
        snprintf(b, len, "%.1fk", (double) n / 1e3);
    else
        snprintf(b, len, "%.2fM", (double) n / 1e6);
}

static void
s_step_head(char *b, size_t len, uint64_t step, uint64_t total)
{
    if (total > 0)
        s_cat(b, len, "step %llu of %llu", (unsigned long long) step,
              (unsigned long long) total);
    else
        s_cat(b, len, "step %llu", (unsigned long long) step);
}

void
trn_progress_live_line(const trn_progress_state_t *st, char *b, size_t len)
{
    if (len == 0)
        return;
    b[0] = '\0';
    char el[32], eta[32], tok[32];
    s_dur(el, sizeof el, st->elapsed_s);
    s_cat(b, len, "  ");
    bool val = st->phase && strcmp(st->phase, "validation") == 0;
    s_step_head(b, len, st->step, val ? 0 : st->total_steps);
    if (val)
        s_cat(b, len, " validation");
    if (st->phase && strcmp(st->phase, "training") == 0) {
        s_cat(b, len, ": training on %zu sequences, %s", st->sequences, el);
        return;
    }
    double left = NAN;
    if (st->done > 0 && st->done < st->total)
        left =
            st->elapsed_s * (double) (st->total - st->done) / (double) st->done;
    else if (st->done >= st->total)
        left = 0;
    s_dur(eta, sizeof eta, left);
    s_count(tok, sizeof tok, st->tokens);
    /* within 80 columns: a terminal's line redrawn in place must not wrap */
    s_cat(b, len, ": rollouts %zu/%zu (%zu failed), %s tokens, %s, ETA %s",
          st->done, st->total, st->failed, tok, el, eta);
}

typedef struct {
    const char *prefix; /* "reward/" or "val/reward/" */
    char *b;
    size_t len;
    int n;
} s_src_t;

/* prefix<ds>/mean keys: the per-data-source means */
static void
s_source(const char *k, double v, void *ud)
{
    s_src_t *s = ud;
    size_t pl = strlen(s->prefix), kl = strlen(k);
    if (strncmp(k, s->prefix, pl) != 0 || kl < pl + 6 ||
        strcmp(k + kl - 5, "/mean") != 0)
        return;
    const char *ds = k + pl;
    int dl = (int) (kl - pl - 5);
    if (memchr(ds, '/', (size_t) dl)) /* e.g. nested keys: not a source */
        return;
    s->n++;
    if (s->n <= S_SOURCES_SHOWN)
        s_cat(s->b, s->len, "%s%.*s %.3f", s->n > 1 ? ", " : "", dl, ds, v);
    else if (s->n == S_SOURCES_SHOWN + 1)
        s_cat(s->b, s->len, ", ...");
}

/* reward M ±S (per source, when there are several) */
static void
s_reward(char *b, size_t len, const trn_metrics_t *m, const char *pre)
{
    char k[64];
    snprintf(k, sizeof k, "%smean", pre);
    double mean = trn_metrics_get(m, k);
    snprintf(k, sizeof k, "%sstd", pre);
    double sd = trn_metrics_get(m, k);
    if (isnan(mean)) {
        s_cat(b, len, "reward -");
        return;
    }
    s_cat(b, len, "reward %.3f", mean);
    if (!isnan(sd))
        s_cat(b, len, " \u00b1%.3f", sd);
    /* the sources, only when there are at least two */
    char src[256] = "";
    s_src_t s = {.prefix = pre, .b = src, .len = sizeof src, .n = 0};
    trn_metrics_each(m, s_source, &s);
    if (s.n > 1)
        s_cat(b, len, " (%s)", src);
}

static void
s_num(char *b, size_t len, const trn_metrics_t *m, const char *key,
      const char *name)
{
    double v = trn_metrics_get(m, key);
    if (!isnan(v))
        s_cat(b, len, "  %s %.3g", name, v);
}

void
trn_progress_step_line(const trn_metrics_t *m, uint64_t total_steps, char *b,
                       size_t len)
{
    if (len == 0)
        return;
    b[0] = '\0';
    double step = trn_metrics_get(m, "step");
    uint64_t st = step >= 0 ? (uint64_t) step : 0;
    bool val = !isnan(trn_metrics_get(m, "val/rollouts"));
    if (val) {
        s_step_head(b, len, st, 0);
        s_cat(b, len, " validation: ");
        s_reward(b, len, m, "val/reward/");
        double n = trn_metrics_get(m, "val/rollouts");
        double f = trn_metrics_get(m, "val/failed");
        s_cat(b, len, "  rollouts %.0f (%.0f failed)  %.1fs", n,
              isnan(f) ? 0 : f, trn_metrics_get(m, "time/val_s"));
        return;
    }
    s_step_head(b, len, st, total_steps);
    s_cat(b, len, "  ");
    s_reward(b, len, m, "reward/");
    double ok = trn_metrics_get(m, "rollouts/succeeded");
    double tot = trn_metrics_get(m, "rollouts/total");
    double fail = trn_metrics_get(m, "rollouts/failed");
    s_cat(b, len, "  rollouts %.0f/%.0f", ok, tot);
    if (fail > 0)
        s_cat(b, len, " (%.0f failed)", fail);
    if (isnan(trn_metrics_get(m, "actor/entropy")))
        s_cat(b, len, "  no update");
    s_num(b, len, m, "actor/entropy", "entropy");
    s_num(b, len, m, "actor/grad_norm", "grad_norm");
    s_cat(b, len, "  step %.1fs (rollouts %.1fs, train %.1fs)",
          trn_metrics_get(m, "time/step_s"),
          trn_metrics_get(m, "time/rollout_s"),
          trn_metrics_get(m, "time/train_s"));
}

trn_progress_t *
trn_progress_new(const char *dir, uint64_t total_steps, bool console)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/progress.log", dir);
    FILE *f = fopen(path, "a");
    if (!f) {
        lisa_log_warn("progress: cannot open %s", path);
        return NULL;
    }
    trn_progress_t *p = lisa_calloc(1, sizeof *p);
    p->log = f;
    p->total = total_steps;
    p->console = console;
    snprintf(path, sizeof path, "%s/progress.now", dir);
    p->now = lisa_strdup(path);
    snprintf(path, sizeof path, "%s/progress.now.tmp", dir);
    p->tmp = lisa_strdup(path);
    return p;
}

void
trn_progress_destroy(trn_progress_t **p)
{
    if (!p || !*p)
        return;
    remove((*p)->now);
    fclose((*p)->log);
    lisa_free(&(*p)->now);
    lisa_free(&(*p)->tmp);
    lisa_free(p);
}

void
trn_progress_live(trn_progress_t *p, const trn_progress_state_t *st)
{
    if (!p)
        return;
    char line[512];
    trn_progress_live_line(st, line, sizeof line);
    FILE *f = fopen(p->tmp, "w");
    if (!f)
        return;
    int ok = fprintf(f, "%s\n", line) > 0;
    if (fclose(f) != 0 || !ok || rename(p->tmp, p->now) != 0)
        remove(p->tmp);
}

void
trn_progress_step(trn_progress_t *p, const trn_metrics_t *m)
{
    if (!p)
        return;
    char line[1024];
    trn_progress_step_line(m, p->total, line, sizeof line);
    if (fprintf(p->log, "%s\n", line) < 0 || fflush(p->log) != 0)
        lisa_log_warn("progress: cannot write progress.log");
    if (p->console)
        lisa_log_info("%s", line);
    remove(p->now);
}
