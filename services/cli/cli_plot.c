/*
 * cli_plot: `lisa plot METRICS.jsonl [-o OUT.svg] [--title T] [--no-png]
 * [--panel PATTERN ...]`: training curves as a self-contained SVG, and a
 * PNG beside it where a converter is installed.
 *
 * The trainer writes one JSON object per step (metrics.jsonl; verl's
 * files work too). By default each numeric key goes to the one panel of
 * its kind, so quantities of different scales never share an axis:
 * reward (train and validation, overall and per data source; a key's
 * std, else min..max, drawn as a band around its mean; the axis is 0..1
 * when everything fits in it, else the data's range), rollout counts,
 * response length (banded too), tokens, times, entropy, grad norm, KL,
 * clip fractions and losses. Keys of no panel are not drawn. With
 * --panel, each panel gathers the keys that contain its pattern instead,
 * as plain lines. Every panel's group carries its axis range
 * (data-y0/data-y1) for readers of the SVG.
 *
 * The PNG: rsvg-convert, else ImageMagick (magick, or a convert that says
 * it is ImageMagick), run with a 60 s limit; its path is printed on the
 * line after the SVG's. Non-numeric values, unparsable lines and
 * non-finite numbers are skipped (and counted in the caption); sizes are
 * bounded (S_MAX_*), so a huge file cannot exhaust memory.
 */
#include "cli.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

#define S_MAX_LINE   (1u << 20) /* bytes of one metrics line */
#define S_MAX_POINTS 100000     /* steps kept per series */
#define S_MAX_SERIES 24         /* lines (and band parts) per panel */
#define S_MAX_PANELS 12
#define S_PANEL_W    520
#define S_PANEL_H    300
#define S_MARGIN_L   64
#define S_MARGIN_R   16
#define S_MARGIN_T   34
#define S_MARGIN_B   36
#define S_LEGEND_W   250
#define S_CONVERT_MS 60000 /* the PNG converter's limit */

static const char *const s_colors[] = {
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};

typedef struct {
    char *key;
    double *x, *y;
    size_t *rec; /* the record each point came from (joins bands) */
    size_t n, cap;
} s_series_t;

typedef struct {
    const char *title;
    const char *pattern; /* --panel: keys containing it; NULL: by kind */
    bool unit;           /* 0..1 when the data fits */
    bool banded;         /* .../std, /min, /max are bands of .../mean */
    s_series_t s[S_MAX_SERIES];
    size_t n;
    s_series_t b[S_MAX_SERIES]; /* band parts */
    size_t nb;
    size_t dropped; /* keys beyond S_MAX_SERIES */
} s_panel_t;

/* The default panels, in drawing order (s_kind returns an index). */
enum {
    S_P_REWARD,
    S_P_COUNTS,
    S_P_LENGTH,
    S_P_TOKENS,
    S_P_TIME,
    S_P_ENTROPY,
    S_P_GRAD,
    S_P_KL,
    S_P_CLIP,
    S_P_LOSS,
    S_P_N
};
static const char *const s_titles[S_P_N] = {
    "reward",    "rollouts", "response length", "tokens", "time (s)", "entropy",
    "grad norm", "KL",       "clip fractions",  "loss"};

static void
s_push(s_series_t *s, double x, double y, size_t rec)
{
    if (s->n == S_MAX_POINTS)
        return;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->x = lisa_realloc(s->x, s->cap * sizeof *s->x);
        s->y = lisa_realloc(s->y, s->cap * sizeof *s->y);
        s->rec = lisa_realloc(s->rec, s->cap * sizeof *s->rec);
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->rec[s->n] = rec;
    s->n++;
}

static s_series_t *
s_find(s_series_t *set, size_t *n, size_t *dropped, const char *key)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(set[i].key, key) == 0)
            return &set[i];
    if (*n == S_MAX_SERIES) {
        (*dropped)++;
        return NULL;
    }
    s_series_t *s = &set[(*n)++];
    memset(s, 0, sizeof *s);
    s->key = lisa_strdup(key);
    return s;
}

static void
s_series_free(s_series_t *s)
{
    lisa_free(&s->key);
    lisa_free(&s->x);
    lisa_free(&s->y);
    lisa_free(&s->rec);
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

/* The last '/' component of k. */
static const char *
s_leaf(const char *k)
{
    const char *s = strrchr(k, '/');
    return s ? s + 1 : k;
}

/* Whether one '/' component of k is exactly w. */
static bool
s_has_part(const char *k, const char *w)
{
    size_t wl = strlen(w);
    for (const char *p = k; (p = strstr(p, w)) != NULL; p += wl)
        if ((p == k || p[-1] == '/') && (p[wl] == '\0' || p[wl] == '/'))
            return true;
    return false;
}

static bool
s_prefix(const char *k, const char *p)
{
    return strncmp(k, p, strlen(p)) == 0;
}

/* The default panel of a key (lisa's and verl's names), or -1. */
static int
s_kind(const char *k)
{
    const char *leaf = s_leaf(k);
    if (!strcmp(leaf, "count") || s_prefix(k, "rollouts/") ||
        s_prefix(k, "groups/") || !strcmp(k, "val/rollouts") ||
        !strcmp(k, "val/failed") || !strcmp(k, "batch/sequences"))
        return S_P_COUNTS;
    if (s_has_part(k, "reward") || s_has_part(k, "rewards") ||
        s_has_part(k, "score") || (s_prefix(k, "val-") && strstr(k, "reward")))
        return S_P_REWARD;
    if (s_prefix(k, "response_length/") || s_prefix(k, "prompt_length/"))
        return S_P_LENGTH;
    if (!strcmp(k, "batch/tokens") || !strcmp(k, "batch/response_tokens") ||
        !strcmp(k, "actor/tokens"))
        return S_P_TOKENS;
    if (s_prefix(k, "time/") || s_prefix(k, "timing_s/"))
        return S_P_TIME;
    if (strstr(k, "entropy"))
        return S_P_ENTROPY;
    if (strstr(k, "grad_norm"))
        return S_P_GRAD;
    if (strstr(k, "clipfrac"))
        return S_P_CLIP;
    if (strstr(leaf, "kl"))
        return S_P_KL;
    if (s_prefix(k, "loss/") || strstr(leaf, "loss"))
        return S_P_LOSS;
    return -1;
}

static bool
s_band_part(const char *k)
{
    const char *l = s_leaf(k);
    return l != k &&
           (!strcmp(l, "std") || !strcmp(l, "min") || !strcmp(l, "max"));
}

static void
s_add(s_panel_t *p, const char *k, double x, double y, size_t rec)
{
    s_series_t *s = p->banded && s_band_part(k)
                        ? s_find(p->b, &p->nb, &p->dropped, k)
                        : s_find(p->s, &p->n, &p->dropped, k);
    if (s)
        s_push(s, x, y, rec);
}

/* The band part `leaf` beside line key (".../mean" -> ".../std"). */
static const s_series_t *
s_part(const s_panel_t *p, const char *key, const char *leaf)
{
    const char *l = s_leaf(key);
    if (l == key || strncmp(l, "mean", 4) != 0)
        return NULL;
    size_t bl = (size_t) (l - key);
    for (size_t i = 0; i < p->nb; i++)
        if (strncmp(p->b[i].key, key, bl) == 0 &&
            !strcmp(p->b[i].key + bl, leaf))
            return &p->b[i];
    return NULL;
}

/* Band parts that belong to no line are drawn as lines. */
static void
s_orphans(s_panel_t *p)
{
    for (size_t i = 0; i < p->nb; i++) {
        const char *l = s_leaf(p->b[i].key);
        size_t bl = (size_t) (l - p->b[i].key);
        bool owned = false;
        for (size_t j = 0; j < p->n && !owned; j++)
            owned = strncmp(p->s[j].key, p->b[i].key, bl) == 0 &&
                    !strncmp(p->s[j].key + bl, "mean", 4);
        if (!owned && p->n < S_MAX_SERIES) {
            p->s[p->n++] = p->b[i];
            p->b[i--] = p->b[--p->nb];
        }
    }
}

/* The band of line s: lo/hi per point (NAN where the record has none);
 * false when it has no band. kind: "std" or "min-max". */
static bool
s_band(const s_panel_t *p, const s_series_t *s, double *lo, double *hi,
       const char **kind)
{
    const s_series_t *sd = s_part(p, s->key, "std");
    const s_series_t *mn = sd ? NULL : s_part(p, s->key, "min");
    const s_series_t *mx = sd ? NULL : s_part(p, s->key, "max");
    if (!sd && !(mn && mx))
        return false;
    *kind = sd ? "std" : "min-max";
    size_t a = 0, b = 0;
    for (size_t j = 0; j < s->n; j++) {
        lo[j] = hi[j] = NAN;
        if (sd) {
            while (a < sd->n && sd->rec[a] < s->rec[j])
                a++;
            if (a < sd->n && sd->rec[a] == s->rec[j]) {
                lo[j] = s->y[j] - sd->y[a];
                hi[j] = s->y[j] + sd->y[a];
            }
            continue;
        }
        while (a < mn->n && mn->rec[a] < s->rec[j])
            a++;
        while (b < mx->n && mx->rec[b] < s->rec[j])
            b++;
        if (a < mn->n && mn->rec[a] == s->rec[j] && b < mx->n &&
            mx->rec[b] == s->rec[j]) {
            lo[j] = mn->y[a];
            hi[j] = mx->y[b];
        }
    }
    return true;
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

/* A panel's geometry: data ranges and the plot area. */
typedef struct {
    double x0, x1, y0, y1, pw, ph;
} s_frame_t;

static double
s_px(const s_frame_t *g, double x)
{
    return S_MARGIN_L + (x - g->x0) / (g->x1 - g->x0) * g->pw;
}

static double
s_py(const s_frame_t *g, double y)
{
    return S_MARGIN_T + g->ph - (y - g->y0) / (g->y1 - g->y0) * g->ph;
}

/* The ranges of a panel's lines and bands; false when it has no data.
 * A unit panel whose lines and min-max bands fit in 0..1 gets exactly
 * 0..1, with std bands clipped to it. */
static bool
s_range(const s_panel_t *p, s_frame_t *g, bool *clip)
{
    g->x0 = g->y0 = INFINITY;
    g->x1 = g->y1 = -INFINITY;
    double fy0 = INFINITY, fy1 = -INFINITY; /* what must fit in 0..1 */
    for (size_t i = 0; i < p->n; i++) {
        const s_series_t *s = &p->s[i];
        double *lo = lisa_calloc(s->n ? s->n : 1, sizeof *lo);
        double *hi = lisa_calloc(s->n ? s->n : 1, sizeof *hi);
        const char *kind = NULL;
        bool band = s_band(p, s, lo, hi, &kind);
        bool mm = band && !strcmp(kind, "min-max");
        for (size_t j = 0; j < s->n; j++) {
            g->x0 = fmin(g->x0, s->x[j]);
            g->x1 = fmax(g->x1, s->x[j]);
            fy0 = fmin(fy0, s->y[j]);
            fy1 = fmax(fy1, s->y[j]);
            if (band && !isnan(lo[j])) {
                g->y0 = fmin(g->y0, lo[j]);
                g->y1 = fmax(g->y1, hi[j]);
                if (mm) {
                    fy0 = fmin(fy0, lo[j]);
                    fy1 = fmax(fy1, hi[j]);
                }
            }
        }
        lisa_free(&lo);
        lisa_free(&hi);
    }
    if (!isfinite(g->x0))
        return false;
    g->y0 = fmin(g->y0, fy0);
    g->y1 = fmax(g->y1, fy1);
    *clip = p->unit && fy0 >= 0 && fy1 <= 1;
    if (*clip) {
        g->y0 = 0;
        g->y1 = 1;
    }
    if (g->x1 == g->x0) {
        g->x0 -= 0.5;
        g->x1 += 0.5;
    }
    if (!*clip) {
        if (g->y1 == g->y0) {
            double d = fabs(g->y0) > 0 ? fabs(g->y0) * 0.1 : 0.5;
            g->y0 -= d;
            g->y1 += d;
        }
        double pad = (g->y1 - g->y0) * 0.05;
        g->y0 -= pad;
        g->y1 += pad;
    }
    return true;
}

static void
s_grid(FILE *f, const s_frame_t *g)
{
    double ty = s_tick(g->y1 - g->y0, 5), tx = s_tick(g->x1 - g->x0, 6);
    for (double v = ceil(g->y0 / ty) * ty; v <= g->y1 + ty * 1e-9; v += ty) {
        double py = s_py(g, v);
        fprintf(f,
                "<line x1=\"%d\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" "
                "stroke=\"#e0e0e0\"/><text class=\"ytick\" x=\"%d\" "
                "y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.4g</text>\n",
                S_MARGIN_L, S_MARGIN_L + g->pw, py, py, S_MARGIN_L - 4, py + 4,
                fabs(v) < ty * 1e-6 ? 0.0 : v);
    }
    for (double v = ceil(g->x0 / tx) * tx; v <= g->x1 + tx * 1e-9; v += tx) {
        double px = s_px(g, v);
        fprintf(f,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.1f\" "
                "stroke=\"#e0e0e0\"/><text x=\"%.1f\" y=\"%.1f\" "
                "font-size=\"11\" text-anchor=\"middle\">%.6g</text>\n",
                px, px, S_MARGIN_T, S_MARGIN_T + g->ph, px,
                S_MARGIN_T + g->ph + 14, v);
    }
    fprintf(f,
            "<text x=\"%.0f\" y=\"%d\" font-size=\"11\" "
            "text-anchor=\"middle\">step</text>\n",
            S_MARGIN_L + g->pw / 2, S_PANEL_H - 4);
}

/* The band polygon of line s (upper edge forward, lower edge back). */
static void
s_draw_band(FILE *f, const s_frame_t *g, const s_series_t *s, double *lo,
            double *hi, bool clip, const char *kind, const char *c)
{
    fputs("<polygon class=\"band\" data-key=\"", f);
    s_escape(f, s->key);
    fprintf(f,
            "\" data-kind=\"%s\" fill=\"%s\" fill-opacity=\"0.15\" "
            "stroke=\"none\" points=\"",
            kind, c);
    bool first = true;
    for (size_t j = 0; j < s->n; j++) {
        if (isnan(hi[j]))
            continue;
        fprintf(f, "%s%.1f,%.1f", first ? "" : " ", s_px(g, s->x[j]),
                s_py(g, clip ? fmin(hi[j], 1) : hi[j]));
        first = false;
    }
    for (size_t j = s->n; j-- > 0;)
        if (!isnan(lo[j]))
            fprintf(f, " %.1f,%.1f", s_px(g, s->x[j]),
                    s_py(g, clip ? fmax(lo[j], 0) : lo[j]));
    fputs("\"/>\n", f);
}

static void
s_draw_line(FILE *f, const s_frame_t *g, const s_series_t *s, size_t i,
            const char *band, const char *c)
{
    fprintf(f, "<polyline class=\"series\" data-key=\"");
    s_escape(f, s->key);
    /* validation dashed: it is sampled otherwise, and less often */
    bool val = s_prefix(s->key, "val/") || s_prefix(s->key, "val-");
    fprintf(f,
            "\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s "
            "points=\"",
            c, val ? " stroke-dasharray=\"6,3\"" : "");
    for (size_t j = 0; j < s->n; j++)
        fprintf(f, "%s%.1f,%.1f", j ? " " : "", s_px(g, s->x[j]),
                s_py(g, s->y[j]));
    fputs("\"/>\n", f);
    if (s->n == 1)
        fprintf(f,
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" "
                "fill=\"%s\"/>\n",
                s_px(g, s->x[0]), s_py(g, s->y[0]), c);
    double ly = S_MARGIN_T + 6 + 15.0 * (double) i;
    fprintf(f,
            "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" "
            "stroke=\"%s\" stroke-width=\"3\"%s/><text x=\"%d\" "
            "y=\"%.1f\" font-size=\"11\">",
            S_PANEL_W + 4, S_PANEL_W + 22, ly, ly, c,
            val ? " stroke-dasharray=\"6,3\"" : "", S_PANEL_W + 26, ly + 4);
    s_escape(f, s->key);
    fprintf(f, "%s%s (last %.4g)</text>\n", band ? " \xc2\xb1" : "",
            band ? band : "", s->y[s->n - 1]);
}

static void
s_draw_panel(FILE *f, const s_panel_t *p, double ox, double oy)
{
    s_frame_t g = {.pw = S_PANEL_W - S_MARGIN_L - S_MARGIN_R,
                   .ph = S_PANEL_H - S_MARGIN_T - S_MARGIN_B};
    bool clip = false, data = s_range(p, &g, &clip);
    fprintf(f, "<g class=\"panel\" data-title=\"");
    s_escape(f, p->title);
    if (data)
        fprintf(f, "\" data-y0=\"%.9g\" data-y1=\"%.9g", g.y0, g.y1);
    fprintf(f, "\" transform=\"translate(%.0f,%.0f)\">\n", ox, oy);
    fprintf(f,
            "<text class=\"title\" x=\"%d\" y=\"20\" font-size=\"15\" "
            "font-weight=\"bold\">",
            S_MARGIN_L);
    s_escape(f, p->title);
    fputs("</text>\n", f);
    fprintf(f,
            "<rect class=\"frame\" x=\"%d\" y=\"%d\" width=\"%.0f\" "
            "height=\"%.0f\" fill=\"#fafafa\" stroke=\"#888\"/>\n",
            S_MARGIN_L, S_MARGIN_T, g.pw, g.ph);
    if (!data) {
        fprintf(f,
                "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" "
                "fill=\"#888\">no data</text>\n</g>\n",
                S_MARGIN_L + g.pw / 2, S_MARGIN_T + g.ph / 2);
        return;
    }
    s_grid(f, &g);
    /* the bands first, so that no band covers another key's line */
    const char *kinds[S_MAX_SERIES] = {NULL};
    for (size_t i = 0; i < p->n; i++) {
        const s_series_t *s = &p->s[i];
        double *lo = lisa_calloc(s->n, sizeof *lo);
        double *hi = lisa_calloc(s->n, sizeof *hi);
        if (s_band(p, s, lo, hi, &kinds[i]))
            s_draw_band(f, &g, s, lo, hi, clip, kinds[i],
                        s_colors[i % (sizeof s_colors / sizeof s_colors[0])]);
        lisa_free(&lo);
        lisa_free(&hi);
    }
    for (size_t i = 0; i < p->n; i++)
        s_draw_line(f, &g, &p->s[i], i, kinds[i],
                    s_colors[i % (sizeof s_colors / sizeof s_colors[0])]);
    if (p->dropped)
        fprintf(f,
                "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"#888\">"
                "+%zu more keys</text>\n",
                S_PANEL_W + 4, S_MARGIN_T + 6 + 15.0 * (double) p->n + 4,
                p->dropped);
    fputs("</g>\n", f);
}

/* Runs argv (output to /dev/null) within S_CONVERT_MS; its exit status,
 * or -1 when it could not start or ran past the limit. */
static int
s_run(char *const argv[])
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0)
        return -1;
    struct timespec tick = {0, 10 * 1000 * 1000};
    for (int waited = 0;; waited += 10) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (w < 0 && errno != EINTR)
            return -1;
        if (waited >= S_CONVERT_MS) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        nanosleep(&tick, NULL);
    }
}

/* Whether `convert` on the PATH is ImageMagick's. */
static bool
s_is_imagemagick(void)
{
    FILE *p = popen("convert -version 2>/dev/null", "r");
    if (!p)
        return false;
    char line[256] = "";
    bool im = fgets(line, sizeof line, p) &&
              strncmp(line, "Version: ImageMagick", 20) == 0;
    while (fgets(line, sizeof line, p)) /* drain it */
        ;
    pclose(p);
    return im;
}

static bool
s_is_png(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    unsigned char h[8];
    bool ok = fread(h, 1, 8, f) == 8 && memcmp(h, "\x89PNG\r\n\x1a\n", 8) == 0;
    fclose(f);
    return ok;
}

/* The PNG beside svg: its path (caller frees), or NULL when no converter
 * is installed or it failed. */
static char *
s_png(const char *svg)
{
    size_t n = strlen(svg);
    char *png = lisa_malloc(n + 5);
    if (n > 4 && !strcmp(svg + n - 4, ".svg"))
        snprintf(png, n + 5, "%.*s.png", (int) (n - 4), svg);
    else
        snprintf(png, n + 5, "%s.png", svg);
    char *in = lisa_strdup(svg);
    static char rsvg_c[] = "rsvg-convert", bg[] = "-b", white[] = "white",
                o[] = "-o", magick_c[] = "magick", convert_c[] = "convert";
    char *rsvg[] = {rsvg_c, bg, white, o, png, in, NULL};
    char *magick[] = {magick_c, in, png, NULL};
    char *convert[] = {convert_c, in, png, NULL};
    int rc = s_run(rsvg);
    if (rc == -1)
        rc = s_run(magick);
    if (rc == -1 && s_is_imagemagick())
        rc = s_run(convert);
    lisa_free(&in);
    if (rc == 0 && s_is_png(png))
        return png;
    if (rc != -1)
        lisa_log_warn("plot: the PNG converter failed on %s", svg);
    remove(png);
    lisa_free(&png);
    return NULL;
}

static int
s_usage(void)
{
    fprintf(stderr,
            "usage: lisa plot METRICS.jsonl [-o OUT.svg] [--title TEXT] "
            "[--no-png] [--panel PATTERN ...]\n"
            "  default: one panel per kind of metric (reward with its band, "
            "rollouts,\n  response length, tokens, time, entropy, grad norm, "
            "KL, clip fractions,\n  loss); --panel: one panel per pattern, one "
            "line per numeric key containing it\n"
            "  a PNG beside the SVG where rsvg-convert or ImageMagick is "
            "installed\n");
    return 2;
}

/* Reads the records of f into the panels; *records and *bad count. */
static void
s_read(FILE *f, s_panel_t *panels, size_t np, bool custom, size_t *records,
       size_t *bad)
{
    char *line = lisa_malloc(S_MAX_LINE);
    while (fgets(line, (int) S_MAX_LINE, f)) {
        size_t len = strlen(line);
        if (len == S_MAX_LINE - 1 && line[len - 1] != '\n') {
            int c; /* skip the rest of an over-long line */
            while ((c = fgetc(f)) != EOF && c != '\n')
                ;
            (*bad)++;
            continue;
        }
        if (strspn(line, " \t\r\n") == len)
            continue;
        json_t *rec = json_loads(line, 0, NULL);
        if (!json_is_object(rec)) {
            json_decref(rec);
            (*bad)++;
            continue;
        }
        (*records)++;
        double x = s_step(rec, (double) *records);
        const char *k;
        json_t *v;
        json_object_foreach(rec, k, v)
        {
            double y;
            if (s_is_step_key(k) || !s_number(v, &y))
                continue;
            if (!custom) {
                int kind = s_kind(k);
                if (kind >= 0)
                    s_add(&panels[kind], k, x, y, *records);
                continue;
            }
            for (size_t p = 0; p < np; p++)
                if (strstr(k, panels[p].pattern))
                    s_add(&panels[p], k, x, y, *records);
        }
        json_decref(rec);
    }
    lisa_free(&line);
}

static int
s_write(const char *out, const char *title, const s_panel_t *panels, size_t np,
        size_t records, size_t bad)
{
    FILE *o = fopen(out, "w");
    if (!o) {
        lisa_log_error("plot: cannot write %s: %s", out, strerror(errno));
        return 1;
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
    s_escape(o, title);
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
        return 1;
    }
    return 0;
}

int
cli_plot(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *title = NULL;
    bool png = true;
    s_panel_t *panels = lisa_calloc(S_MAX_PANELS, sizeof *panels);
    size_t np = 0;
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-o") || !strcmp(a, "--title") ||
             !strcmp(a, "--panel")) &&
            i + 1 >= argc)
            goto out;
        if (!strcmp(a, "-o"))
            out = argv[++i];
        else if (!strcmp(a, "--title"))
            title = argv[++i];
        else if (!strcmp(a, "--no-png"))
            png = false;
        else if (!strcmp(a, "--panel")) {
            if (np == S_MAX_PANELS)
                goto out;
            panels[np].pattern = argv[++i];
            panels[np].title = panels[np].pattern;
            np++;
        } else if (a[0] == '-' || in)
            goto out;
        else
            in = a;
    }
    if (!in)
        goto out;
    bool custom = np > 0;
    if (!custom)
        for (; np < S_P_N; np++) {
            panels[np].title = s_titles[np];
            panels[np].unit = np == S_P_REWARD;
            panels[np].banded = np == S_P_REWARD || np == S_P_LENGTH;
        }
    FILE *f = fopen(in, "r");
    if (!f) {
        lisa_log_error("plot: cannot open %s: %s", in, strerror(errno));
        rc = 1;
        goto out;
    }
    size_t records = 0, bad = 0;
    s_read(f, panels, np, custom, &records, &bad);
    fclose(f);
    for (size_t p = 0; p < np; p++)
        if (panels[p].banded)
            s_orphans(&panels[p]);
    char def_out[4096];
    if (!out) {
        snprintf(def_out, sizeof def_out, "%s.svg", in);
        out = def_out;
    }
    rc = s_write(out, title ? title : in, panels, np, records, bad);
    if (rc == 0) {
        printf("%s\n", out);
        char *pp = png ? s_png(out) : NULL;
        if (pp)
            printf("%s\n", pp);
        lisa_free(&pp);
    }
out:
    if (rc == 2)
        s_usage();
    for (size_t p = 0; p < np; p++) {
        for (size_t i = 0; i < panels[p].n; i++)
            s_series_free(&panels[p].s[i]);
        for (size_t i = 0; i < panels[p].nb; i++)
            s_series_free(&panels[p].b[i]);
    }
    lisa_free(&panels);
    return rc;
}
