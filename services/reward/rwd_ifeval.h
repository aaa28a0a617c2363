/*
 * rwd_ifeval: instruction-following verdicts (IFEval and IFBench checks).
 *
 * The recipe's instruct_follow records carry a ground truth of the form
 * {"instruction_id_list": [...], "kwargs": [{...}, ...]}: each id names a
 * verifiable instruction ("count:unique_word_count", "punctuation:no_comma")
 * and its kwargs object parameterises it (null values mean "not used").
 * rwd_ifeval_new parses and validates that once (ids known, required
 * kwargs present and of the right type, bounded counts); an unknown id
 * is an error there, and an id the table marks as refused (none is, now:
 * IFEval's 25 and IFBench's 58 are all checked) would be refused with a
 * reason naming it, so a reward is never guessed.
 *
 * rwd_ifeval_judge then gives, per instruction, the strict verdict (the
 * response as it is) and the loose one (IFEval's: also the response with
 * its first line, last line or both removed, each with and without '*').
 * The checks themselves live in rwd_ifcheck_classic.c (IFEval's families),
 * rwd_ifcheck_bench.c and rwd_ifcheck_custom.c (IFBench's); rwd_ifcheck.h
 * is their table.
 *
 * A parsed set is immutable and may be shared by threads.
 */
#ifndef RWD_IFEVAL_H
#define RWD_IFEVAL_H

#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stddef.h>

#define RWD_IF_MAX_INSTRUCTIONS 32u        /* instructions per record */
#define RWD_IF_MAX_RESPONSE     (1u << 20) /* bytes of response checked */

typedef struct rwd_ifeval rwd_ifeval_t;

typedef struct {
    size_t count;
    bool strict[RWD_IF_MAX_INSTRUCTIONS];
    bool loose[RWD_IF_MAX_INSTRUCTIONS];
    size_t strict_passed;
    size_t loose_passed;
} rwd_ifeval_verdict_t;

/* Parses a ground truth of `len` bytes. NULL on error, with the reason in
 * err (LISA_INVALID: malformed, unknown id, bad kwargs; LISA_UNSUPPORTED:
 * a known id lisa refuses to check) and *rc set. */
rwd_ifeval_t *rwd_ifeval_new(const char *truth, size_t len, lisa_rc_t *rc,
                             char *err, size_t errlen);

/* Frees *e and sets it to NULL; safe on NULL and twice. */
void rwd_ifeval_destroy(rwd_ifeval_t **e);

/* Number of instructions (at least 1). */
size_t rwd_ifeval_count(const rwd_ifeval_t *e);

/* Id of instruction i (borrowed). */
const char *rwd_ifeval_id(const rwd_ifeval_t *e, size_t i);

/* Strict check of instruction i on one response (false when the response
 * is blank, as in IFEval). */
bool rwd_ifeval_check(const rwd_ifeval_t *e, size_t i, const char *resp,
                      size_t n);

/* Strict and loose verdicts of every instruction. LISA_TOOLARGE when the
 * response is over RWD_IF_MAX_RESPONSE. */
lisa_rc_t rwd_ifeval_judge(const rwd_ifeval_t *e, const char *resp, size_t n,
                           rwd_ifeval_verdict_t *v) LISA_NODISCARD;

/* Whether lisa checks `id`; when not, *why (static) says why: NULL for an
 * id it does not know. */
bool rwd_ifeval_supported(const char *id, const char **why);

#endif
