/*
 * rwd_ifcheck: the table of instruction checks behind rwd_ifeval.
 *
 * A row names an instruction id, the kwargs it needs and the function that
 * decides one response. rwd_ifeval validates the kwargs against the row's
 * argument spec before any check runs, so a check may read its arguments
 * with rwd_ifarg_* without testing for their presence. A row without a
 * function is an id lisa knows but refuses, with the reason in `refused`.
 * The rows live in rwd_ifcheck_classic.c (IFEval's instruction families)
 * and rwd_ifcheck_bench.c (IFBench's).
 */
#ifndef RWD_IFCHECK_H
#define RWD_IFCHECK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* One check: true when s[0..n) follows the instruction. */
typedef bool (*rwd_ifcheck_fn)(const json_t *kw, const char *s, size_t n);

typedef struct {
    const char *id;
    /* Space-separated "name:type"; types: n number, p positive integer,
     * i non-negative integer, s string, c one ASCII letter, l list of
     * strings, r relation ("less than" / "at least"); a leading '?' marks
     * an optional argument. NULL: none. */
    const char *args;
    rwd_ifcheck_fn fn;   /* NULL: refused */
    const char *refused; /* static reason when fn is NULL */
} rwd_ifcheck_t;

/* IFEval's families: keywords, language, length_constraints,
 * detectable_content, detectable_format, combination, startend,
 * change_case, punctuation. */
const rwd_ifcheck_t *rwd_ifcheck_classic(size_t *count);

/* IFBench's out-of-distribution instructions. */
const rwd_ifcheck_t *rwd_ifcheck_bench(size_t *count);

/* Validated kwargs (see rwd_ifeval.c). */
double rwd_ifarg_num(const json_t *kw, const char *key);
const char *rwd_ifarg_str(const json_t *kw, const char *key, size_t *len);
const json_t *rwd_ifarg_list(const json_t *kw, const char *key);
bool rwd_ifarg_less(const json_t *kw, const char *key);

#endif
