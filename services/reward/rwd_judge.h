/*
 * rwd_judge: the optional LLM-as-judge reward.
 *
 * The recipe's official evaluation of physics and long-context answers asks
 * a judge model whether the candidate answer is consistent with the
 * official answer, and reads CORRECT or INCORRECT from its reply (the last
 * verdict word wins). This module speaks that protocol to any
 * OpenAI-compatible endpoint (POST {base_url}/chat/completions) with
 * libcurl: every call has a timeout bounded by the request's deadline, and
 * failures (transport errors, HTTP 429/5xx, replies without a verdict) are
 * retried a bounded number of times with exponential backoff.
 */
#ifndef RWD_JUDGE_H
#define RWD_JUDGE_H

#include "lisa/lisa_rc.h"

#include <stdint.h>

#define RWD_JUDGE_MAX_REPLY (1u << 20) /* bytes of one HTTP reply kept */

typedef struct {
    const char *base_url; /* e.g. http://127.0.0.1:8000/v1 */
    const char *model;    /* model name sent in the request */
    const char *api_key;  /* bearer token; NULL or "" for none */
    int64_t timeout_ms;   /* per HTTP call */
    unsigned retries;     /* extra attempts after the first */
    int64_t backoff_ms;   /* first retry delay; doubles each time */
    double temperature;   /* sampling temperature (recipe: 0.7) */
    long max_tokens;      /* reply budget (recipe: 16384) */
} rwd_judge_config_t;

/* Asks the judge about one answer. On LISA_OK *reward is 1.0 (CORRECT) or
 * 0.0 (INCORRECT) and *verdict (caller frees; may be NULL) holds the last
 * verdict word. `deadline_ms` is a zclock_mono() time (0: none). Returns
 * LISA_UNAVAILABLE when the endpoint could not be reached or never gave a
 * verdict within the retries, LISA_TIMEOUT when the deadline passed. */
lisa_rc_t rwd_judge_score(const rwd_judge_config_t *cfg, const char *question,
                          const char *official, const char *candidate,
                          int64_t deadline_ms, double *reward,
                          char **verdict) LISA_NODISCARD;

/* The verdict of a judge's reply text: 1 CORRECT, 0 INCORRECT, -1 none
 * (the last of the two words, as whole words, wins). */
int rwd_judge_verdict(const char *text);

#endif
