/*
 * rwd_rouge: ROUGE-L F-measure with Porter stemming, as rouge-score does.
 *
 * Open-ended answers that are not mathematically equal to the reference get
 * partial credit: the F-measure of the longest common subsequence of the
 * two token sequences. Tokens follow rouge-score 0.1.2: lowercase, every
 * run of characters other than [a-z0-9] is a separator, tokens longer than
 * three characters are stemmed (rwd_porter). Python's lowercasing of the
 * two non-ASCII letters that become ASCII (U+0130, U+212A) is reproduced.
 *
 * The LCS length is computed bit-parallel (a bit vector over the reference
 * tokens, one add and one subtract per candidate token), so the cost is
 * |candidate| x |reference| / 64 word operations and memory is linear.
 * Each side is capped at RWD_ROUGE_MAX_TOKENS tokens; longer texts are
 * truncated and the result says so.
 */
#ifndef RWD_ROUGE_H
#define RWD_ROUGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RWD_ROUGE_MAX_TOKENS 65536u

typedef struct {
    size_t target_tokens; /* reference tokens used */
    size_t pred_tokens;   /* candidate tokens used */
    size_t lcs;           /* LCS length */
    double precision;     /* lcs / pred_tokens */
    double recall;        /* lcs / target_tokens */
    bool truncated;       /* a side was capped at RWD_ROUGE_MAX_TOKENS */
    bool timed_out;       /* the deadline passed; the result is 0 */
} rwd_rouge_info_t;

/* ROUGE-L F-measure of `pred` against `target` (0 when either has no
 * token). `deadline_ms` is a zclock_mono() time (0: none); past it the
 * computation stops and info->timed_out is set. `info` may be NULL. */
double rwd_rouge_l(const char *target, size_t tlen, const char *pred,
                   size_t plen, int64_t deadline_ms, rwd_rouge_info_t *info);

/* Tokenizes like rouge-score (with stemming) and writes the tokens joined by
 * single spaces into out (at most cap bytes, NUL-terminated, truncated at a
 * token boundary). Returns the number of tokens written. For tests. */
size_t rwd_rouge_tokens(const char *text, size_t len, char *out, size_t cap);

#endif
