/*
 * rwd_math: mathematical equivalence of two answers.
 *
 * The math and physics rules (and the first step of open-ended questions)
 * ask one thing: does the candidate's final answer mean the same as the
 * reference answer? This module extracts the final answer (the content of
 * the last brace-balanced \boxed{...}, else the whole text), normalises both
 * sides (LaTeX wrappers, \text{} and units, degrees, percent, thousands
 * separators, "x = ..." assignments), splits them into structures (sets,
 * tuples, intervals, unions, plain lists) and compares the elements by
 * value with rwd_expr, or as letters or normalised text when they are not
 * expressions. docs/reward.md states the contract and every deliberate
 * difference from math-verify.
 *
 * Every pass is linear in the input; inputs longer than the bounds below
 * are compared as text only.
 */
#ifndef RWD_MATH_H
#define RWD_MATH_H

#include <stdbool.h>
#include <stddef.h>

#define RWD_MATH_MAX_LEN                                                       \
    4096u /* normalised answers longer than this are text */
#define RWD_MATH_MAX_ITEMS 64u /* elements of a set/tuple compared */

/* How an equivalence verdict was reached (static strings). */
typedef struct {
    const char *how;  /* "integer", "number", "expression", "set", "tuple",
                         "interval", "letter", "text", "percent", "none" */
    bool gold_parsed; /* the reference parsed as a math value */
    bool pred_parsed; /* the candidate parsed as a math value */
} rwd_math_why_t;

/* Finds the content of the last \boxed{...} (or \fbox{...}) in s[0..len).
 * Returns true and sets [*off, *off + *n) when its braces balance; false
 * when there is none or it is unbalanced (the recipe then uses the whole
 * text). Linear in len. */
bool rwd_math_last_boxed(const char *s, size_t len, size_t *off, size_t *n);

/* True when pred means the same as gold. Both are final answers (no
 * extraction happens here; a gold wrapped in \boxed{} is unwrapped).
 * `why` (may be NULL) tells which comparison decided. */
bool rwd_math_equal(const char *gold, size_t glen, const char *pred,
                    size_t plen, rwd_math_why_t *why);

/* True when s is a math value this module can compare by value (a number,
 * expression or structure of them), not just text. */
bool rwd_math_parses(const char *s, size_t len);

#endif
