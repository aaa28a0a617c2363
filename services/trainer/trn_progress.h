/*
 * trn_progress: what an operator reads while a run goes on.
 *
 * Two kinds of line, both rounded for reading (rewards to 3 decimals,
 * times in seconds to one):
 *  - a step line for each finished step (and validation), from its
 *    metrics record:
 *      step 4 of 20  reward 0.438 ±0.121  rollouts 31/32 (1 failed)
 *      entropy 0.0325  grad_norm 0.812  step 4.2s (rollouts 3.1s,
 *      train 1.0s)                                      (one line)
 *  - a live line for the step that runs, redrawn as its rollouts end
 *    (rollouts ended / all, failed, tokens sampled by this process's
 *    engine since the step began, time, ETA from the rate so far):
 *      step 5 of 20: rollouts 12/32 (1 failed), 3.4k tokens, 1m12s, ETA 1m48s
 *    (it starts with two blanks, so a reader that counts step lines by
 *    "^step N " never counts it, and fits 80 columns).
 * The writer appends step lines to <out>/progress.log and keeps the live
 * line in <out>/progress.now, replaced whole (rename) and removed when
 * the step ends; scripts/run.sh shows both, the live line in place on a
 * terminal. With `console` among trainer.logger the step lines also go to
 * the trainer's log.
 */
#ifndef TRN_PROGRESS_H
#define TRN_PROGRESS_H

#include "trn_metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The state of the running step, for its live line. */
typedef struct {
    const char *phase; /* "rollouts", "validation", "training" */
    uint64_t step, total_steps;
    size_t done, total, failed; /* rollouts */
    uint64_t tokens;            /* sampled since the phase began */
    size_t sequences;           /* training: sequences in the batch */
    double elapsed_s;           /* since the step began */
} trn_progress_state_t;

typedef struct trn_progress trn_progress_t;

/* The live line of st into buf (always terminated; no newline). */
void trn_progress_live_line(const trn_progress_state_t *st, char *buf,
                            size_t len);
/* The step line of a record (kind "train" or "val") into buf. */
void trn_progress_step_line(const trn_metrics_t *m, uint64_t total_steps,
                            char *buf, size_t len);

/* A writer of <dir>/progress.log and <dir>/progress.now; console: also
 * log the step lines. NULL (logged) when progress.log cannot be opened. */
trn_progress_t *trn_progress_new(const char *dir, uint64_t total_steps,
                                 bool console);
/* Removes progress.now and closes; safe on NULL and twice. */
void trn_progress_destroy(trn_progress_t **p);

/* Replaces progress.now with the live line of st. */
void trn_progress_live(trn_progress_t *p, const trn_progress_state_t *st);
/* Appends the record's step line to progress.log (flushed), logs it
 * when console is on, and removes progress.now. */
void trn_progress_step(trn_progress_t *p, const trn_metrics_t *m);

#endif
