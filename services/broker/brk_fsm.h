/*
 * brk_fsm: the rollout lifecycle as one static table.
 *
 * A row says: in rollout state S, event E moves the rollout to state S',
 * the current attempt to attempt state A' (or leaves it), and runs the
 * actions in a bit set. The broker looks a (state, event) pair up and
 * either applies the row or answers CODE_CONFLICT; no transition exists
 * anywhere else. Failure reports are turned into FAIL_RETRY or FAIL_FINAL
 * by brk_fsm_fail_event before the lookup, so the retry policy is one
 * function and the table stays a table.
 */
#ifndef BRK_FSM_H
#define BRK_FSM_H

#include "lisa.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    BRK_EV_CLAIM = 0,      /* a controller claimed the rollout */
    BRK_EV_START,          /* the controller confirmed the sandbox started */
    BRK_EV_HEARTBEAT,      /* lease renewal */
    BRK_EV_GET_TASK,       /* the agent fetched its task */
    BRK_EV_COMPLETE,       /* the agent posted its result */
    BRK_EV_FAIL_RETRY,     /* infra/lease/sandbox failure, attempts left */
    BRK_EV_FAIL_FINAL,     /* any other failure, or no attempts left */
    BRK_EV_DEADLINE,       /* the attempt's deadline passed */
    BRK_EV_SCORED,         /* a reward worker returned a reward */
    BRK_EV_REWARD_INVALID, /* a reward worker could not score it */
    BRK_EV_CANCEL,         /* a client cancelled the rollout */
    BRK_EV__COUNT
} brk_event_t;

/* Actions of a row (bit set). */
enum {
    BRK_A_NEW_ATTEMPT = 1u << 0, /* number and store a new attempt, token */
    BRK_A_RENEW_LEASE = 1u << 1, /* lease_expiry = now + lease */
    BRK_A_SET_SANDBOX = 1u << 2, /* record sandbox id and start time */
    BRK_A_SAVE_RESULT = 1u << 3, /* store the agent's result */
    BRK_A_DISPATCH = 1u << 4,    /* queue a ScoreRequest */
    BRK_A_END_ATTEMPT = 1u << 5, /* the attempt ends (ended_ms, kind) */
    BRK_A_REQUEUE = 1u << 6,     /* back to the queue after a backoff */
    BRK_A_SAVE_REWARD = 1u << 7, /* store the reward on the rollout */
    BRK_A_FINISH = 1u << 8,      /* rollout terminal: ended_ms, wake waits */
    BRK_A_DROP_JOB = 1u << 9,    /* forget the open ScoreRequest */
    BRK_A_RECORD = 1u << 10,     /* write a transitions row and an event */
};

typedef struct {
    Lisa__RolloutState from;
    brk_event_t event;
    Lisa__RolloutState to;
    Lisa__AttemptState attempt_to; /* UNSPECIFIED: unchanged */
    unsigned actions;
} brk_fsm_row_t;

/* The row for (state, event), or NULL when the event is not allowed. */
const brk_fsm_row_t *brk_fsm_lookup(Lisa__RolloutState from, brk_event_t event);

/* The whole table (for docs and tests); *n gets the row count. */
const brk_fsm_row_t *brk_fsm_rows(size_t *n);

/* FAIL_RETRY when `kind` is retryable (INFRA, LEASE, SANDBOX) and the
 * rollout has made fewer than `max_attempts` attempts, else FAIL_FINAL. */
brk_event_t brk_fsm_fail_event(Lisa__FailureKind kind, uint32_t attempts,
                               uint32_t max_attempts);

/* True for INFRA, LEASE and SANDBOX. */
bool brk_fsm_retryable(Lisa__FailureKind kind);

/* True for SUCCEEDED, FAILED and CANCELLED. */
bool brk_fsm_terminal(Lisa__RolloutState s);

/* Short names ("queued", "heartbeat", "infra") for logs and tables. */
const char *brk_fsm_event_name(brk_event_t ev);
const char *brk_fsm_state_name(Lisa__RolloutState s);
const char *brk_fsm_attempt_state_name(Lisa__AttemptState s);
const char *brk_fsm_failure_name(Lisa__FailureKind k);

#endif
