/*
 * gw_metrics: the gateway's Prometheus registry.
 *
 * Metric families are declared once in a table (name, type, help) in the
 * .c file; series are created on first use with their label set written
 * out in Prometheus syntax ("route=\"chat\",code=\"200\""). Histograms use
 * one fixed set of latency buckets (seconds). Rendering gives the text
 * exposition format (version 0.0.4) for GET /metrics. Single-threaded: the
 * gateway's loop owns it.
 */
#ifndef GW_METRICS_H
#define GW_METRICS_H

#include <stddef.h>

typedef struct gw_metrics_t gw_metrics_t;

/* New empty registry. */
gw_metrics_t *gw_metrics_new(void);

/* Destroys it; safe on NULL, sets *self to NULL. */
void gw_metrics_destroy(gw_metrics_t **self);

/* Adds `v` to counter `name` with `labels` (NULL or "" for none). Unknown
 * names are ignored (and counted in lisa_gateway_metrics_unknown_total). */
void gw_metrics_add(gw_metrics_t *self, const char *name, const char *labels,
                    double v);

/* Sets gauge `name` with `labels` to `v`. */
void gw_metrics_set(gw_metrics_t *self, const char *name, const char *labels,
                    double v);

/* Records `seconds` in histogram `name` with `labels`. */
void gw_metrics_observe(gw_metrics_t *self, const char *name,
                        const char *labels, double seconds);

/* Current value of a counter or gauge series (0 when absent). */
double gw_metrics_get(const gw_metrics_t *self, const char *name,
                      const char *labels);

/* The exposition text (caller frees); *len gets its length. */
char *gw_metrics_render(const gw_metrics_t *self, size_t *len);

#endif
