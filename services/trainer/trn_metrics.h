/*
 * trn_metrics: one JSON object per training step, written as one line of a
 * metrics file (JSON Lines), with the summary statistics the loop reports
 * (mean / std / min / max of a series, means per data source). Keys keep
 * the order they were set in; non-finite numbers are written as null.
 */
#ifndef TRN_METRICS_H
#define TRN_METRICS_H

#include "lisa/lisa_rc.h"

#include <stddef.h>
#include <stdio.h>

typedef struct trn_metrics trn_metrics_t;

/* An empty record. */
trn_metrics_t *trn_metrics_new(void);
/* Frees it; safe on NULL and twice. */
void trn_metrics_destroy(trn_metrics_t **m);

/* Sets key to a number (replacing an earlier value). */
void trn_metrics_set(trn_metrics_t *m, const char *key, double v);
/* Sets key to a string. */
void trn_metrics_set_str(trn_metrics_t *m, const char *key, const char *v);

/* prefix/mean, prefix/std (population), prefix/min, prefix/max of x[n]
 * (nothing when n is 0). */
void trn_metrics_stats(trn_metrics_t *m, const char *prefix, const double *x,
                       size_t n);

/* prefix/<group>/mean and prefix/<group>/count for each distinct
 * group[i] of x[n]. */
void trn_metrics_by_group(trn_metrics_t *m, const char *prefix,
                          const char *const *group, const double *x, size_t n);

/* The value set for key (NaN when absent); for tests and callers. */
double trn_metrics_get(const trn_metrics_t *m, const char *key);

/* Calls fn(key, value, ud) for each number of the record, in the order
 * the keys were set (strings and nulls are skipped). */
void trn_metrics_each(const trn_metrics_t *m,
                      void (*fn)(const char *key, double v, void *ud),
                      void *ud);

/* The record as one line of compact JSON (caller frees with lisa_free). */
char *trn_metrics_line(const trn_metrics_t *m);

/* Appends the line and a newline to f and flushes. LISA_ERR on I/O. */
lisa_rc_t trn_metrics_write(const trn_metrics_t *m, FILE *f) LISA_NODISCARD;

#endif
