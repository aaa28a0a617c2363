/*
 * rwd_score: one scoring request in, one reward out, routed by data source.
 *
 * This is the reward rule of the recipe as one table: the data source's
 * prefix picks the rule (math/physics: equivalence of the final boxed
 * answer; chem/biomed: multiple-choice letter; instruct_pretrain and
 * long_context: by qa_type, multiple choice, multi-answer F1 or
 * open-ended equivalence-then-ROUGE-L; instruct_follow: the IFEval/IFBench
 * instruction checks of rwd_ifeval, loose, all must pass), and configured
 * prefixes may go to an LLM judge instead. Empty answers score 0; an unknown
 * data source is LISA_INVALID, never a silent 0. Inputs over their bounds are
 * LISA_TOOLARGE. The result carries what was extracted, which rule decided
 * and a JSON explanation, so a reward can be audited later.
 *
 * A scorer is immutable after rwd_scorer_new and may be shared by threads.
 */
#ifndef RWD_SCORE_H
#define RWD_SCORE_H

#include "lisa/lisa_rc.h"
#include "rwd_judge.h"

#include <stddef.h>
#include <stdint.h>

#define RWD_MAX_ANSWER    (1u << 20)  /* bytes of answer accepted */
#define RWD_MAX_TRUTH     (64u << 10) /* bytes of ground truth */
#define RWD_MAX_EXTRA     (1u << 20)  /* bytes of extra_info JSON */
#define RWD_MAX_EXTRACTED 512u        /* bytes of `extracted` reported */
#define RWD_MAX_ERROR     256u

typedef struct {
    const char
        *judge_sources; /* comma-separated prefixes judged by LLM; NULL: none */
    rwd_judge_config_t judge;
} rwd_scorer_config_t;

typedef struct rwd_scorer rwd_scorer_t;

typedef struct {
    const char *data_source;
    const char *answer;
    size_t answer_len;
    const char *ground_truth;
    size_t truth_len;
    const char *extra_info_json; /* may be NULL or "" */
    int64_t deadline_ms;         /* zclock_mono() time; 0: none */
} rwd_input_t;

typedef struct {
    double reward;
    const char *rule;       /* static: "math_equiv", "mc_letter", "mc_f1",
                               "open_equiv", "rouge_l", "ifeval_loose", "judge",
                               "empty" */
    char *extracted;        /* owned; what was read from the answer */
    char *explanation_json; /* owned; JSON object */
    char error[RWD_MAX_ERROR];
} rwd_result_t;

/* New scorer (copies the config strings); NULL on a bad config. */
rwd_scorer_t *rwd_scorer_new(const rwd_scorer_config_t *cfg);

/* Frees *s and sets it to NULL; safe on NULL and twice. */
void rwd_scorer_destroy(rwd_scorer_t **s);

/* Scores one input. On LISA_OK the result is filled; otherwise
 * result->error says why (LISA_INVALID: unknown data source or malformed
 * extra_info; LISA_TOOLARGE: input over a bound; LISA_TIMEOUT: deadline;
 * LISA_UNAVAILABLE: the judge could not be reached). Always release the
 * result with rwd_result_clear. */
lisa_rc_t rwd_score(const rwd_scorer_t *s, const rwd_input_t *in,
                    rwd_result_t *result) LISA_NODISCARD;

/* Frees the owned strings of a result and zeroes it. */
void rwd_result_clear(rwd_result_t *r);

/* The i-th data-source prefix of the routing table; NULL past the end. */
const char *rwd_score_prefix(size_t i);

/* Name of the rule that routes data_source, or NULL when unknown. */
const char *rwd_score_route(const char *data_source);

#endif
