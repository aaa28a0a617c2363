/*
 * rwd_lines: `lisa-reward score`, JSON lines in, JSON lines out.
 *
 * Each input line is one object {"data_source", "answer", "ground_truth",
 * "extra_info"}; each output line is {"reward", "rule", "extracted",
 * "explanation"} for it, in the same order. A line that cannot be scored
 * (not JSON, missing fields, unknown data source, too long) produces
 * {"error", "code"} and processing goes on. Blank lines are skipped. Lines
 * are bounded (RWD_LINES_MAX bytes); a longer line is consumed to its end
 * and answered with a CODE_TOO_LARGE error.
 */
#ifndef RWD_LINES_H
#define RWD_LINES_H

#include "lisa/lisa_rc.h"
#include "rwd_score.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define RWD_LINES_MAX (4u << 20)

typedef struct {
    uint64_t lines;  /* non-blank input lines */
    uint64_t scored; /* lines answered with a reward */
    uint64_t errors; /* lines answered with an error */
} rwd_lines_stats_t;

/* Scores every line of `in` onto `out` until EOF. `budget_ms` bounds each
 * line (0: none). Returns LISA_OK at EOF, LISA_ERR on an I/O error. */
lisa_rc_t rwd_lines_run(const rwd_scorer_t *s, FILE *in, FILE *out,
                        int64_t budget_ms, rwd_lines_stats_t *stats);

/* Scores one line (without its newline) and returns the output line
 * (caller frees, no newline). Never NULL. */
char *rwd_lines_one(const rwd_scorer_t *s, const char *line, size_t len,
                    int64_t budget_ms, bool *ok);

#endif
