/*
 * gw_metrics: a small Prometheus registry (see the header). Series live in
 * one hash keyed by "name{labels}"; rendering walks the family table in
 * order and prints each family's series sorted, so output is stable.
 */
#include "gw_metrics.h"

#include "lisa/lisa_mem.h"
#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef enum { S_COUNTER, S_GAUGE, S_HISTOGRAM } s_kind_t;

typedef struct {
    const char *name;
    s_kind_t kind;
    const char *help;
} s_family_t;

/* Every metric the gateway exports. */
static const s_family_t s_families[] = {
    {"lisa_gateway_requests_total", S_COUNTER,
     "HTTP requests answered, by route and status code"},
    {"lisa_gateway_request_seconds", S_HISTOGRAM,
     "time from request to answer, by route"},
    {"lisa_gateway_upstream_seconds", S_HISTOGRAM,
     "engine call latency, by engine"},
    {"lisa_gateway_stage_seconds", S_HISTOGRAM,
     "gateway time of a chat call outside the engine, by stage (prepare: "
     "request to engine call; finish: engine answer to reply; respond: "
     "handing the reply to the HTTP layer)"},
    {"lisa_gateway_upstream_errors_total", S_COUNTER,
     "failed engine calls, by engine and kind"},
    {"lisa_gateway_upstream_retries_total", S_COUNTER,
     "engine calls retried after a connection error"},
    {"lisa_gateway_tokens_in_total", S_COUNTER,
     "prompt tokens sent to engines (appended ids only)"},
    {"lisa_gateway_tokens_out_total", S_COUNTER, "tokens sampled by engines"},
    {"lisa_gateway_prompt_tokens_total", S_COUNTER,
     "full prompt tokens of engine calls"},
    {"lisa_gateway_answered_prompt_tokens_total", S_COUNTER,
     "prompt tokens of answered chat calls"},
    {"lisa_gateway_cached_tokens_total", S_COUNTER,
     "prompt tokens of answered chat calls the engine had in its prefix "
     "cache (usage.prompt_tokens_details.cached_tokens)"},
    {"lisa_gateway_prefix_cache_hit_rate", S_GAUGE,
     "cached / prompt tokens of the chat calls answered since start"},
    {"lisa_gateway_segments_total", S_COUNTER,
     "new segments started because the agent rewrote history"},
    {"lisa_gateway_sampling_overridden_total", S_COUNTER,
     "chat calls whose temperature / top_p / top_k gave way to the run's"},
    {"lisa_gateway_spans_total", S_COUNTER, "spans, by outcome"},
    {"lisa_gateway_spans_pending", S_GAUGE,
     "spans not yet acknowledged by the broker"},
    {"lisa_gateway_active_attempts", S_GAUGE, "attempts with token state"},
    {"lisa_gateway_inflight_requests", S_GAUGE,
     "HTTP requests waiting for an answer"},
    {"lisa_gateway_engine_inflight", S_GAUGE, "open calls per engine"},
    {"lisa_gateway_engine_up", S_GAUGE, "1 when the engine is usable"},
    {"lisa_gateway_auth_failures_total", S_COUNTER,
     "requests refused for their token, by reason"},
    {"lisa_gateway_attempt_refusals_total", S_COUNTER,
     "token calls refused for their attempt, by reason (ended: the broker's "
     "events said it is over; inflight: too many calls open)"},
    {"lisa_gateway_http_connections_open", S_GAUGE,
     "client connections open now (all listeners)"},
    {"lisa_gateway_http_refusals", S_GAUGE,
     "connections and requests the HTTP layer refused since start, by "
     "reason (evicted: displaced while idle by a new connection; refused: "
     "full of busy connections; framing: ambiguous body framing; "
     "too_large: body over gateway.max_body; timeout: request not complete "
     "within gateway.request_timeout)"},
    {"lisa_gateway_event_gaps_total", S_COUNTER,
     "broker events missed (sequence gaps)"},
    {"lisa_gateway_events_total", S_COUNTER,
     "broker events received (every topic: rollout, policy, engine)"},
    {"lisa_gateway_broker_errors_total", S_COUNTER,
     "broker RPCs that failed, by request"},
    {"lisa_gateway_proxy_requests_total", S_COUNTER,
     "package proxy requests, by outcome"},
    {"lisa_gateway_proxy_bytes_total", S_COUNTER,
     "bytes the package proxy relayed (both directions)"},
    {"lisa_gateway_metrics_unknown_total", S_COUNTER,
     "updates to undeclared metrics (a bug)"},
};

#define S_NFAM (sizeof s_families / sizeof s_families[0])

static const double s_buckets[] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25,   0.5,     1,      2.5,   5,      10,    30,   60,    120,  300};
#define S_NB (sizeof s_buckets / sizeof s_buckets[0])

typedef struct {
    size_t family;
    char *labels;
    double value;
    uint64_t counts[S_NB + 1];
    double sum;
    uint64_t n;
} s_series_t;

struct gw_metrics_t {
    zhashx_t *series;
};

static void
s_series_free(void **item)
{
    s_series_t *s = *item;
    if (!s)
        return;
    lisa_free(&s->labels);
    lisa_free(&s);
    *item = NULL;
}

gw_metrics_t *
gw_metrics_new(void)
{
    gw_metrics_t *self = lisa_calloc(1, sizeof *self);
    self->series = zhashx_new();
    zhashx_set_destructor(self->series, s_series_free);
    return self;
}

void
gw_metrics_destroy(gw_metrics_t **self)
{
    if (!self || !*self)
        return;
    zhashx_destroy(&(*self)->series);
    lisa_free(self);
}

static long
s_family(const char *name)
{
    /* callers pass the table's literals: their address usually matches */
    for (size_t i = 0; i < S_NFAM; i++)
        if (s_families[i].name == name)
            return (long) i;
    for (size_t i = 0; i < S_NFAM; i++)
        if (strcmp(s_families[i].name, name) == 0)
            return (long) i;
    return -1;
}

/* "name{labels}" into key (room for 512 bytes, cut like snprintf). */
static void
s_key(char *key, const char *name, const char *labels)
{
    size_t nn = strlen(name), ln = labels ? strlen(labels) : 0;
    if (nn > 509)
        nn = 509;
    if (ln > 509 - nn)
        ln = 509 - nn;
    memcpy(key, name, nn);
    key[nn] = '{';
    if (ln)
        memcpy(key + nn + 1, labels, ln);
    key[nn + 1 + ln] = '}';
    key[nn + 2 + ln] = '\0';
}

static s_series_t *
s_get(gw_metrics_t *self, const char *name, const char *labels, s_kind_t kind)
{
    long f = s_family(name);
    if (f < 0 || s_families[f].kind != kind) {
        if (strcmp(name, "lisa_gateway_metrics_unknown_total") != 0)
            gw_metrics_add(self, "lisa_gateway_metrics_unknown_total", NULL, 1);
        return NULL;
    }
    char key[512];
    s_key(key, name, labels);
    s_series_t *s = zhashx_lookup(self->series, key);
    if (!s) {
        s = lisa_calloc(1, sizeof *s);
        s->family = (size_t) f;
        s->labels = lisa_strdup(labels ? labels : "");
        zhashx_insert(self->series, key, s);
    }
    return s;
}

void
gw_metrics_add(gw_metrics_t *self, const char *name, const char *labels,
               double v)
{
    s_series_t *s = s_get(self, name, labels, S_COUNTER);
    if (s)
        s->value += v;
}

void
gw_metrics_set(gw_metrics_t *self, const char *name, const char *labels,
               double v)
{
    s_series_t *s = s_get(self, name, labels, S_GAUGE);
    if (s)
        s->value = v;
}

void
gw_metrics_observe(gw_metrics_t *self, const char *name, const char *labels,
                   double seconds)
{
    s_series_t *s = s_get(self, name, labels, S_HISTOGRAM);
    if (!s)
        return;
    size_t b = 0;
    while (b < S_NB && seconds > s_buckets[b])
        b++;
    s->counts[b]++;
    s->sum += seconds;
    s->n++;
}

double
gw_metrics_get(const gw_metrics_t *self, const char *name, const char *labels)
{
    char key[512];
    s_key(key, name, labels);
    s_series_t *s = zhashx_lookup(self->series, key);
    return s ? s->value : 0.0;
}

typedef struct {
    char *buf;
    size_t len, cap;
} s_out_t;

static void LISA_PRINTF(2, 3) s_printf(s_out_t *o, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t) n < o->cap - o->len) {
            o->len += (size_t) n;
            return;
        }
        o->cap = o->cap * 2 + (n > 0 ? (size_t) n : 0);
        o->buf = lisa_realloc(o->buf, o->cap);
    }
}

static int
s_cmp(const void *a, const void *b)
{
    const s_series_t *x = *(s_series_t *const *) a;
    const s_series_t *y = *(s_series_t *const *) b;
    return strcmp(x->labels, y->labels);
}

static void
s_render_series(s_out_t *o, const char *name, const s_series_t *s)
{
    const char *l = s->labels;
    const char *sep = l[0] ? "," : "";
    if (s_families[s->family].kind != S_HISTOGRAM) {
        if (l[0])
            s_printf(o, "%s{%s} %.17g\n", name, l, s->value);
        else
            s_printf(o, "%s %.17g\n", name, s->value);
        return;
    }
    uint64_t cum = 0;
    for (size_t b = 0; b < S_NB; b++) {
        cum += s->counts[b];
        s_printf(o, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, l, sep,
                 s_buckets[b], (unsigned long long) cum);
    }
    cum += s->counts[S_NB];
    s_printf(o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, l, sep,
             (unsigned long long) cum);
    s_printf(o, "%s_sum%s%s%s %.17g\n", name, l[0] ? "{" : "", l,
             l[0] ? "}" : "", s->sum);
    s_printf(o, "%s_count%s%s%s %llu\n", name, l[0] ? "{" : "", l,
             l[0] ? "}" : "", (unsigned long long) s->n);
}

char *
gw_metrics_render(const gw_metrics_t *self, size_t *len)
{
    static const char *const kinds[] = {"counter", "gauge", "histogram"};
    s_out_t o = {lisa_malloc(4096), 0, 4096};
    o.buf[0] = '\0';
    size_t n = zhashx_size(self->series);
    s_series_t **all = lisa_calloc(n ? n : 1, sizeof *all);
    for (size_t f = 0; f < S_NFAM; f++) {
        size_t k = 0;
        for (s_series_t *s = zhashx_first(self->series); s;
             s = zhashx_next(self->series))
            if (s->family == f)
                all[k++] = s;
        s_printf(&o, "# HELP %s %s\n# TYPE %s %s\n", s_families[f].name,
                 s_families[f].help, s_families[f].name,
                 kinds[s_families[f].kind]);
        qsort(all, k, sizeof *all, s_cmp);
        for (size_t i = 0; i < k; i++)
            s_render_series(&o, s_families[f].name, all[i]);
    }
    lisa_free(&all);
    *len = o.len;
    return o.buf;
}
