/*
 * rwd_ifcheck: the table of instruction checks behind rwd_ifeval.
 *
 * A row names an instruction id, the kwargs it needs and the function that
 * decides one response. rwd_ifeval validates the kwargs against the row's
 * argument spec before any check runs, so a check may read its arguments
 * with rwd_ifarg_* without testing for their presence. Most checks count
 * something and compare the count with a kwarg: such a row names its
 * counter and the relation (`count`) instead of a function, and
 * rwd_ifcount_check makes the comparison for all of them. A row with
 * neither is an id lisa knows but refuses, with the reason in `refused`.
 * The rows live in rwd_ifcheck_classic.c (IFEval's instruction families),
 * rwd_ifcheck_bench.c (IFBench's) and rwd_ifcheck_custom.c (IFBench's
 * one-off tasks).
 */
#ifndef RWD_IFCHECK_H
#define RWD_IFCHECK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* One check: true when s[0..n) follows the instruction. */
typedef bool (*rwd_ifcheck_fn)(const json_t *kw, const char *s, size_t n);

/* A count of s[0..n) (kw for its parameters); NaN when the reference's
 * ratio is undefined (no words), which follows no relation. */
typedef double (*rwd_ifcounter_fn)(const json_t *kw, const char *s, size_t n);

typedef enum {
    RWD_IFREL_AT_LEAST, /* count >= kw[key] */
    RWD_IFREL_AT_MOST,  /* count <= kw[key] */
    RWD_IFREL_EQUAL,    /* count == kw[key] */
    RWD_IFREL_RANGE,    /* kw[key] <= count <= kw[key2] */
    RWD_IFREL_NEAR,     /* kw[key] - 2 <= count <= kw[key] + 2 */
    RWD_IFREL_NAMED,    /* kw[key2] "less than": count < kw[key]; else >= */
} rwd_ifrel_t;

/* A counted check: counter, the kwarg(s) it is compared with, relation. */
typedef struct {
    rwd_ifcounter_fn counter;
    const char *key;
    const char *key2;
    rwd_ifrel_t rel;
} rwd_ifcount_t;

typedef struct {
    const char *id;
    /* Space-separated "name:type"; types: n number, p positive integer,
     * i non-negative integer, s string, c one ASCII letter, l list of
     * strings, r relation ("less than" / "at least"); a leading '?' marks
     * an optional argument. NULL: none. */
    const char *args;
    rwd_ifcheck_fn fn;          /* NULL: counted or refused */
    const char *refused;        /* static reason when refused */
    const rwd_ifcount_t *count; /* a counted check (fn NULL) */
} rwd_ifcheck_t;

/* Whether the row is checked (a function or a count). */
bool rwd_ifcheck_checked(const rwd_ifcheck_t *row);

/* Runs the row's check on s[0..n). */
bool rwd_ifcheck_run(const rwd_ifcheck_t *row, const json_t *kw, const char *s,
                     size_t n);

/* IFEval's families: keywords, language, length_constraints,
 * detectable_content, detectable_format, combination, startend,
 * change_case, punctuation. */
const rwd_ifcheck_t *rwd_ifcheck_classic(size_t *count);

/* IFBench's out-of-distribution instructions. */
const rwd_ifcheck_t *rwd_ifcheck_bench(size_t *count);

/* IFBench's one-off tasks (the "custom:" ids). */
const rwd_ifcheck_t *rwd_ifcheck_custom(size_t *count);

/* Validated kwargs (see rwd_ifeval.c). */
double rwd_ifarg_num(const json_t *kw, const char *key);
const char *rwd_ifarg_str(const json_t *kw, const char *key, size_t *len);
const json_t *rwd_ifarg_list(const json_t *kw, const char *key);
bool rwd_ifarg_less(const json_t *kw, const char *key);

#endif
