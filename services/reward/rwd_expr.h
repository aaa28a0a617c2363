/*
 * rwd_expr: a small expression parser and evaluator for answers.
 *
 * Math answers are compared by value, not by spelling: "\frac{1}{2}",
 * "1/2" and "0.5" are one number, and "(x+1)^2" is "x^2+2x+1". This module
 * turns one answer element (already stripped of sets, units and wrappers by
 * rwd_math) into a tree and evaluates it, with its free variables bound to
 * sample points. It reads both LaTeX (\frac, \sqrt, \pi, \cdot, \sin, ...)
 * and plain notation (a/b, sqrt(x), pi, 2x, 1.5e3).
 *
 * Everything is bounded: the input length, the token count, the tree size
 * and the nesting depth are capped, so parsing and evaluating are linear in
 * the input and cannot recurse without limit. Anything it cannot read is
 * "not an expression" (NULL), never an error that stops scoring.
 */
#ifndef RWD_EXPR_H
#define RWD_EXPR_H

#include <stdbool.h>
#include <stddef.h>

#define RWD_EXPR_MAX_LEN   4096u /* longest input accepted */
#define RWD_EXPR_MAX_NODES 512u  /* largest tree */
#define RWD_EXPR_MAX_DEPTH 64u   /* deepest nesting */
#define RWD_EXPR_MAX_VARS  8u    /* distinct free variables */

typedef struct rwd_expr rwd_expr_t;

/* Parses s[0..len); NULL when it is not an expression or exceeds a bound. */
rwd_expr_t *rwd_expr_parse(const char *s, size_t len);

/* Frees *e and sets it to NULL; safe on NULL and twice. */
void rwd_expr_destroy(rwd_expr_t **e);

/* Number of distinct free variables. */
size_t rwd_expr_nvars(const rwd_expr_t *e);

/* Name of free variable i (e.g. "x", "x_1", "\theta"). */
const char *rwd_expr_var(const rwd_expr_t *e, size_t i);

/* True when the expression contains a decimal literal (an approximation). */
bool rwd_expr_inexact(const rwd_expr_t *e);

/* True when the expression is a plain integer literal (optionally signed);
 * *digits gets its canonical decimal digits (no sign, no leading zeros) and
 * *neg its sign. `cap` bounds digits including the NUL. */
bool rwd_expr_integer(const rwd_expr_t *e, char *digits, size_t cap, bool *neg);

/* Value with variable i bound to vals[i] (vals may be NULL without vars).
 * NaN when undefined (division by zero, sqrt of a negative, ...). */
double rwd_expr_eval(const rwd_expr_t *e, const double *vals);

/* Compares two expressions by value: numbers directly, expressions with
 * free variables at fixed sample points (same variable names required).
 * When either side is inexact, both are rounded to `decimals` places
 * first; otherwise a relative tolerance of 1e-9 applies. */
bool rwd_expr_equal(const rwd_expr_t *a, const rwd_expr_t *b, int decimals);

/* Compares a with b scaled by `scale` (b*scale), as rwd_expr_equal does for
 * closed numbers only; false when either has free variables. */
bool rwd_expr_equal_scaled(const rwd_expr_t *a, const rwd_expr_t *b,
                           double scale, int decimals);

#endif
