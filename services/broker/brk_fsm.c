/*
 * brk_fsm: the rollout state table.
 *
 * Reading guide. A rollout waits QUEUED until a controller claims it; the
 * claim creates attempt k (1-based) with a lease and a deadline. The
 * sandbox start, the agent's first heartbeat or its task fetch move it to
 * RUNNING. The agent's result moves it to SCORING and queues a score
 * request; the reward ends it SUCCEEDED. Retryable failures (infra, lost
 * lease, sandbox) end the attempt and send the rollout back to QUEUED after
 * a backoff while attempts are left; everything else ends it FAILED. A
 * cancel ends any open rollout. Terminal states have no rows: every event
 * on them is a conflict.
 */
#include "brk_fsm.h"

#define Q  LISA__ROLLOUT_STATE__ROLLOUT_QUEUED
#define C  LISA__ROLLOUT_STATE__ROLLOUT_CLAIMED
#define R  LISA__ROLLOUT_STATE__ROLLOUT_RUNNING
#define S  LISA__ROLLOUT_STATE__ROLLOUT_SCORING
#define OK LISA__ROLLOUT_STATE__ROLLOUT_SUCCEEDED
#define F  LISA__ROLLOUT_STATE__ROLLOUT_FAILED
#define X  LISA__ROLLOUT_STATE__ROLLOUT_CANCELLED

#define A_SAME LISA__ATTEMPT_STATE__ATTEMPT_STATE_UNSPECIFIED
#define A_CLM  LISA__ATTEMPT_STATE__ATTEMPT_CLAIMED
#define A_RUN  LISA__ATTEMPT_STATE__ATTEMPT_RUNNING
#define A_SCO  LISA__ATTEMPT_STATE__ATTEMPT_SCORING
#define A_OK   LISA__ATTEMPT_STATE__ATTEMPT_SUCCEEDED
#define A_F    LISA__ATTEMPT_STATE__ATTEMPT_FAILED
#define A_X    LISA__ATTEMPT_STATE__ATTEMPT_CANCELLED

#define END   (BRK_A_END_ATTEMPT | BRK_A_RECORD)
#define FIN   (BRK_A_END_ATTEMPT | BRK_A_FINISH | BRK_A_RECORD)
#define RENEW BRK_A_RENEW_LEASE

static const brk_fsm_row_t s_table[] = {
    /* from  event                  to  attempt  actions */
    {Q, BRK_EV_CLAIM, C, A_CLM, BRK_A_NEW_ATTEMPT | RENEW | BRK_A_RECORD},
    {Q, BRK_EV_CANCEL, X, A_SAME, BRK_A_FINISH | BRK_A_RECORD},

    {C, BRK_EV_START, R, A_RUN, BRK_A_SET_SANDBOX | RENEW | BRK_A_RECORD},
    {C, BRK_EV_HEARTBEAT, R, A_RUN, RENEW | BRK_A_RECORD},
    {C, BRK_EV_GET_TASK, R, A_RUN, RENEW | BRK_A_RECORD},
    {C, BRK_EV_COMPLETE, S, A_SCO,
     BRK_A_SAVE_RESULT | BRK_A_DISPATCH | BRK_A_RECORD},
    {C, BRK_EV_FAIL_RETRY, Q, A_F, END | BRK_A_REQUEUE},
    {C, BRK_EV_FAIL_FINAL, F, A_F, FIN},
    {C, BRK_EV_DEADLINE, F, A_F, FIN},
    {C, BRK_EV_CANCEL, X, A_X, FIN},

    {R, BRK_EV_START, R, A_SAME, BRK_A_SET_SANDBOX | RENEW},
    {R, BRK_EV_HEARTBEAT, R, A_SAME, RENEW},
    {R, BRK_EV_GET_TASK, R, A_SAME, RENEW},
    {R, BRK_EV_COMPLETE, S, A_SCO,
     BRK_A_SAVE_RESULT | BRK_A_DISPATCH | BRK_A_RECORD},
    {R, BRK_EV_FAIL_RETRY, Q, A_F, END | BRK_A_REQUEUE},
    {R, BRK_EV_FAIL_FINAL, F, A_F, FIN},
    {R, BRK_EV_DEADLINE, F, A_F, FIN},
    {R, BRK_EV_CANCEL, X, A_X, FIN},

    {S, BRK_EV_HEARTBEAT, S, A_SAME, 0},
    {S, BRK_EV_SCORED, OK, A_OK, BRK_A_SAVE_REWARD | FIN},
    {S, BRK_EV_REWARD_INVALID, F, A_F, FIN},
    {S, BRK_EV_DEADLINE, F, A_F, BRK_A_DROP_JOB | FIN},
    {S, BRK_EV_CANCEL, X, A_X, BRK_A_DROP_JOB | FIN},
};

#define S_NROWS (sizeof s_table / sizeof s_table[0])

const brk_fsm_row_t *
brk_fsm_lookup(Lisa__RolloutState from, brk_event_t event)
{
    for (size_t i = 0; i < S_NROWS; i++)
        if (s_table[i].from == from && s_table[i].event == event)
            return &s_table[i];
    return NULL;
}

const brk_fsm_row_t *
brk_fsm_rows(size_t *n)
{
    *n = S_NROWS;
    return s_table;
}

bool
brk_fsm_retryable(Lisa__FailureKind kind)
{
    return kind == LISA__FAILURE_KIND__FAILURE_INFRA ||
           kind == LISA__FAILURE_KIND__FAILURE_LEASE ||
           kind == LISA__FAILURE_KIND__FAILURE_SANDBOX;
}

brk_event_t
brk_fsm_fail_event(Lisa__FailureKind kind, uint32_t attempts,
                   uint32_t max_attempts)
{
    if (brk_fsm_retryable(kind) && attempts < max_attempts)
        return BRK_EV_FAIL_RETRY;
    return BRK_EV_FAIL_FINAL;
}

bool
brk_fsm_terminal(Lisa__RolloutState s)
{
    return s == OK || s == F || s == X;
}

const char *
brk_fsm_event_name(brk_event_t ev)
{
    static const char *const names[BRK_EV__COUNT] = {
        "claim",    "start",          "heartbeat", "get_task",
        "complete", "fail_retry",     "fail",      "deadline",
        "scored",   "reward_invalid", "cancel"};
    return (unsigned) ev < BRK_EV__COUNT ? names[ev] : "?";
}

const char *
brk_fsm_state_name(Lisa__RolloutState s)
{
    switch (s) {
    case Q:
        return "queued";
    case C:
        return "claimed";
    case R:
        return "running";
    case S:
        return "scoring";
    case OK:
        return "succeeded";
    case F:
        return "failed";
    case X:
        return "cancelled";
    default:
        return "unspecified";
    }
}

const char *
brk_fsm_attempt_state_name(Lisa__AttemptState s)
{
    switch (s) {
    case A_CLM:
        return "claimed";
    case A_RUN:
        return "running";
    case A_SCO:
        return "scoring";
    case A_OK:
        return "succeeded";
    case A_F:
        return "failed";
    case A_X:
        return "cancelled";
    default:
        return "unspecified";
    }
}

const char *
brk_fsm_failure_name(Lisa__FailureKind k)
{
    static const char *const names[] = {
        "none",       "infra",    "lease", "sandbox", "agent",
        "turn_limit", "deadline", "oom",   "reward",  "cancelled"};
    return (unsigned) k < sizeof names / sizeof names[0] ? names[k] : "?";
}
