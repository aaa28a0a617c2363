/*
 * cli_plot: `lisa plot METRICS.jsonl [-o OUT.svg] [--title T]
 * [--panel PATTERN ...]`: training curves as a self-contained SVG.
 *
 * The trainer writes one JSON object per step (metrics.jsonl). Each panel
 * gathers the numeric keys whose name contains its pattern and draws one
 * line per key against the step ("step", else "training/global_step",
 * else the line number). Default panels: reward (overall and per data
 * source), loss, entropy, grad_norm. Non-numeric values, unparsable lines
 * and non-finite numbers are skipped (and counted in the caption);
 * sizes are bounded (S_MAX_*), so a huge file cannot exhaust memory.
 */
#include "cli.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_LINE   (1u << 20) /* bytes of one metrics line */
#define S_MAX_POINTS 100000     /* steps kept per series */
#define S_MAX_SERIES 24         /* lines per panel */
#define S_MAX_PANELS 8
#define S_PANEL_W    520
#define S_PANEL_H    300
#define S_MARGIN_L   64
#define S_MARGIN_R   16
#define S_MARGIN_T   34
#define S_MARGIN_B   36
#define S_LEGEND_W   250

static const char *const s_default_panels[] = {"reward", "loss", "entropy",
                                               "grad_norm"};
static const char *const s_colors[] = {
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};

typedef struct {
    char *key;
    double *x, *y;
    size_t n, cap;
} s_series_t;

typedef struct {
    const char *pattern;
    s_series_t s[S_MAX_SERIES];
    size_t n;
    size_t dropped; /* keys beyond S_MAX_SERIES */
} s_panel_t;

static void
s_push(s_series_t *s, double x, double y)
{
    if (s->n == S_MAX_POINTS)
        return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->x = lisa_realloc(s->x, s->cap * sizeof *s->x);
        s->y = lisa_realloc(s->y, s->cap * sizeof *s->y);
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
}

static s_series_t *
s_find(s_panel_t *p, const char *key)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->s[i].key, key) == 0)
            return &p->s[i];
    if (p->n == S_MAX_SERIES) {
        p->dropped++;
        return NULL;
    }
    s_series_t *s = &p->s[p->n++];
    memset(s, 0, sizeof *s);
    s->key = lisa_strdup(key);
    return s;
}

static bool
s_number(json_t *v, double *out)
{
    if (!json_is_number(v))
        return false;
    *out = json_number_value(v);
    return isfinite(*out);
}

/* The step of a record, or `fallback`. */
static double
s_step(json_t *rec, double fallback)
{
    static const char *const keys[] = {"step", "training/global_step",
                                       "global_step"};
    double v;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (s_number(json_object_get(rec, keys[i]), &v))
            return v;
    return fallback;
}

static bool
s_is_step_key(const char *k)
{
    return !strcmp(k, "step") || !strcmp(k, "training/global_step") ||
           !strcmp(k, "global_step");
}

/* "Nice" tick spacing for a range (1, 2 or 5 times a power of ten). */
static double
s_tick(double span, int want)
{
    if (!(span > 0))
        return 1;
    double raw = span / want, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void
s_escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            if ((unsigned char) *s >= 0x20)
                fputc(*s, f);
        }
    }
}

static void
s_draw_panel(FILE *f, const s_panel_t *p, double ox, double oy)
{
    double pw = S_PANEL_W - S_MARGIN_L - S_MARGIN_R;
    double ph = S_PANEL_H - S_MARGIN_T - S_MARGIN_B;
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (size_t i = 0; i < p->n; i++)
        for (size_t j = 0; j < p->s[i].n; j++) {
            x0 = fmin(x0, p->s[i].x[j]);
            x1 = fmax(x1, p->s[i].x[j]);
            y0 = fmin(y0, p->s[i].y[j]);
            y1 = fmax(y1, p->s[i].y[j]);
        }
    fprintf(f, "<g transform=\"translate(%.0f,%.0f)\">\n", ox, oy);
    fprintf(f, "<text x=\"%d\" y=\"20\" font-size=\"15\" font-weight=\"bold\">",
            S_MARGIN_L);
    s_escape(f, p->pattern);
    fputs("</text>\n", f);
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" "
            "fill=\"#fafafa\" stroke=\"#888\"/>\n",
            S_MARGIN_L, S_MARGIN_T, pw, ph);
    if (p->n == 0 || !isfinite(x0)) {
        fprintf(f,
                "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" "
                "fill=\"#888\">no data</text>\n</g>\n",
                S_MARGIN_L + pw / 2, S_MARGIN_T + ph / 2);
        return;
    }
    if (x1 == x0) {
        x0 -= 0.5;
        x1 += 0.5;
    }
    if (y1 == y0) {
        double d = fabs(y0) > 0 ? fabs(y0) * 0.1 : 0.5;
        y0 -= d;
        y1 += d;
    }
    double pad = (y1 - y0) * 0.05;
    y0 -= pad;
    y1 += pad;
    /* grid and tick labels */
    double ty = s_tick(y1 - y0, 5), tx = s_tick(x1 - x0, 6);
    for (double v = ceil(y0 / ty) * ty; v <= y1 + 1e-12; v += ty) {
        double py = S_MARGIN_T + ph - (v - y0) / (y1 - y0) * ph;
        fprintf(f,
                "<line x1=\"%d\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"#e0e0e0\"/><text x=\"%d\" y=\"%.1f\" "
                "font-size=\"11\" text-anchor=\"end\">%.4g</text>\n",
                S_MARGIN_L, S_MARGIN_L + pw, py, py, S_MARGIN_L - 4, py + 4,
                fabs(v) < ty * 1e-6 ? 0.0 : v);
    }
    for (double v = ceil(x0 / tx) * tx; v <= x1 + 1e-12; v += tx) {
        double px = S_MARGIN_L + (v - x0) / (x1 - x0) * pw;
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.1f\" "
                "stroke=\"#e0e0e0\"/><text x=\"%.1f\" y=\"%.1f\" "
                "font-size=\"11\" text-anchor=\"middle\">%.6g</text>\n",
                px, px, S_MARGIN_T, S_MARGIN_T + ph, px, S_MARGIN_T + ph + 14,
                v);
    }
    fprintf(f,
            "<text x=\"%.0f\" y=\"%d\" font-size=\"11\" "
            "text-anchor=\"middle\">step</text>\n",
            S_MARGIN_L + pw / 2, S_PANEL_H - 4);
    for (size_t i = 0; i < p->n; i++) {
        const s_series_t *s = &p->s[i];
        const char *c = s_colors[i % (sizeof s_colors / sizeof s_colors[0])];
        fprintf(f, "<polyline class=\"series\" data-key=\"");
        s_escape(f, s->key);
        fprintf(f,
                "\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" "
                "points=\"",
                c);
        for (size_t j = 0; j < s->n; j++)
            fprintf(f, "%s%.1f,%.1f", j ? " " : "",
                    S_MARGIN_L + (s->x[j] - x0) / (x1 - x0) * pw,
                    S_MARGIN_T + ph - (s->y[j] - y0) / (y1 - y0) * ph);
        fputs("\"/>\n", f);
        if (s->n == 1)
            fprintf(f,
                    "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" "
                    "fill=\"%s\"/>\n",
                    S_MARGIN_L + (s->x[0] - x0) / (x1 - x0) * pw,
                    S_MARGIN_T + ph - (s->y[0] - y0) / (y1 - y0) * ph, c);
        double ly = S_MARGIN_T + 6 + 15.0 * (double) i;
        fprintf(f,
                "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"%s\" stroke-width=\"3\"/><text x=\"%d\" "
                "y=\"%.1f\" font-size=\"11\">",
                S_PANEL_W + 4, S_PANEL_W + 22, ly, ly, c, S_PANEL_W + 26,
                ly + 4);
        s_escape(f, s->key);
        fprintf(f, " (last %.4g)</text>\n", s->y[s->n - 1]);
    }
    if (p->dropped)
        fprintf(f,
                "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"#888\">"
                "+%zu more keys</text>\n",
                S_PANEL_W + 4, S_MARGIN_T + 6 + 15.0 * (double) p->n + 4,
                p->dropped);
    fputs("</g>\n", f);
}

static int
s_usage(void)
{
    fprintf(stderr,
            "usage: lisa plot METRICS.jsonl [-o OUT.svg] [--title TEXT] "
            "[--panel PATTERN ...]\n"
            "  one panel per pattern (default: reward, loss, entropy, "
            "grad_norm),\n  one line per numeric key containing it, "
            "against the step\n");
    return 2;
}

int
cli_plot(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *title = NULL;
    s_panel_t panels[S_MAX_PANELS];
    size_t np = 0;
    memset(panels, 0, sizeof panels);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-o") || !strcmp(a, "--title") ||
             !strcmp(a, "--panel")) &&
            i + 1 >= argc)
            return s_usage();
        if (!strcmp(a, "-o"))
            out = argv[++i];
        else if (!strcmp(a, "--title"))
            title = argv[++i];
        else if (!strcmp(a, "--panel")) {
            if (np == S_MAX_PANELS)
                return s_usage();
            panels[np++].pattern = argv[++i];
        } else if (a[0] == '-' || in)
            return s_usage();
        else
            in = a;
    }
    if (!in)
        return s_usage();
    if (np == 0)
        for (; np < sizeof s_default_panels / sizeof s_default_panels[0]; np++)
            panels[np].pattern = s_default_panels[np];
    FILE *f = fopen(in, "r");
    if (!f) {
        lisa_log_error("plot: cannot open %s: %s", in, strerror(errno));
        return 1;
    }
    char *line = lisa_malloc(S_MAX_LINE);
    size_t lines = 0, bad = 0, records = 0;
    while (fgets(line, (int) S_MAX_LINE, f)) {
        size_t len = strlen(line);
        if (len == S_MAX_LINE - 1 && line[len - 1] != '\n') {
            int c; /* skip the rest of an over-long line */
            while ((c = fgetc(f)) != EOF && c != '\n')
                ;
            bad++;
            continue;
        }
        lines++;
        if (strspn(line, " \t\r\n") == len)
            continue;
        json_t *rec = json_loads(line, 0, NULL);
        if (!json_is_object(rec)) {
            json_decref(rec);
            bad++;
            continue;
        }
        records++;
        double x = s_step(rec, (double) records);
        const char *k;
        json_t *v;
        json_object_foreach(rec, k, v)
        {
            double y;
            if (s_is_step_key(k) || !s_number(v, &y))
                continue;
            for (size_t p = 0; p < np; p++)
                if (strstr(k, panels[p].pattern)) {
                    s_series_t *s = s_find(&panels[p], k);
                    if (s)
                        s_push(s, x, y);
                }
        }
        json_decref(rec);
    }
    fclose(f);
    lisa_free(&line);
    char def_out[4096];
    if (!out) {
        snprintf(def_out, sizeof def_out, "%s.svg", in);
        out = def_out;
    }
    FILE *o = fopen(out, "w");
    int rc = 0;
    if (!o) {
        lisa_log_error("plot: cannot write %s: %s", out, strerror(errno));
        rc = 1;
        goto out;
    }
    int cols = np > 1 ? 2 : 1;
    int rows = (int) (np + 1) / 2;
    int cw = S_PANEL_W + S_LEGEND_W;
    int w = cols * cw, h = rows * S_PANEL_H + 50;
    fprintf(o,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
            "height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"16\" y=\"26\" font-size=\"18\">",
            w, h, w, h);
    s_escape(o, title ? title : in);
    fprintf(o,
            "</text>\n<text x=\"16\" y=\"44\" font-size=\"11\" "
            "fill=\"#666\">%zu records, %zu skipped lines</text>\n",
            records, bad);
    for (size_t p = 0; p < np; p++)
        s_draw_panel(o, &panels[p], (double) ((int) (p % 2) * cw),
                     50.0 + (double) (p / 2) * S_PANEL_H);
    fputs("</svg>\n", o);
    if (fclose(o) != 0) {
        lisa_log_error("plot: cannot write %s", out);
        rc = 1;
    } else {
        printf("%s\n", out);
    }
out:
    for (size_t p = 0; p < np; p++)
        for (size_t i = 0; i < panels[p].n; i++) {
            lisa_free(&panels[p].s[i].key);
            lisa_free(&panels[p].s[i].x);
            lisa_free(&panels[p].s[i].y);
        }
    return rc;
}
