/*
 * ctl_outcome: what an ended sandbox means for its attempt, as a table.
 *
 * The agent's exit codes (docs/agent-api.md) say whether it already posted
 * a result (nothing to report), failed on its own (terminal), or hit an
 * infrastructure failure (the broker retries it). The backend adds what
 * the agent cannot say: killed by the memory limit, killed at the
 * deadline, killed by a signal, or vanished.
 */
#ifndef CTL_OUTCOME_H
#define CTL_OUTCOME_H

#include "ctl_backend.h"
#include "lisa.pb-c.h"

#include <stdbool.h>

typedef struct {
    bool report;            /* send AttemptFail to the broker */
    Lisa__FailureKind kind; /* when report */
    const char *why;        /* static text for the reason */
} ctl_outcome_t;

/* Outcome of an EXITED sandbox. */
ctl_outcome_t ctl_outcome_of(const ctl_sandbox_t *sb);

#endif
