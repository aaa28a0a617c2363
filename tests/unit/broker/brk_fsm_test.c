/*
 * brk_fsm tests: properties of the rollout state table. The first test is
 * the usage example.
 */
#include "brk_fsm.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#define Q  LISA__ROLLOUT_STATE__ROLLOUT_QUEUED
#define C  LISA__ROLLOUT_STATE__ROLLOUT_CLAIMED
#define R  LISA__ROLLOUT_STATE__ROLLOUT_RUNNING
#define S  LISA__ROLLOUT_STATE__ROLLOUT_SCORING
#define OK LISA__ROLLOUT_STATE__ROLLOUT_SUCCEEDED
#define F  LISA__ROLLOUT_STATE__ROLLOUT_FAILED
#define X  LISA__ROLLOUT_STATE__ROLLOUT_CANCELLED

Test(brk_fsm, usage)
{
    /* The broker looks up (state, event) and applies the row, or refuses. */
    const brk_fsm_row_t *row = brk_fsm_lookup(Q, BRK_EV_CLAIM);
    cr_assert_not_null(row);
    cr_assert_eq(row->to, C);
    cr_assert(row->actions & BRK_A_NEW_ATTEMPT);
    cr_assert_null(brk_fsm_lookup(Q, BRK_EV_COMPLETE));

    /* Failures are classified before the lookup. */
    cr_assert_eq(brk_fsm_fail_event(LISA__FAILURE_KIND__FAILURE_LEASE, 1, 3),
                 BRK_EV_FAIL_RETRY);
    cr_assert_eq(brk_fsm_fail_event(LISA__FAILURE_KIND__FAILURE_LEASE, 3, 3),
                 BRK_EV_FAIL_FINAL);
    cr_assert_eq(brk_fsm_fail_event(LISA__FAILURE_KIND__FAILURE_AGENT, 1, 3),
                 BRK_EV_FAIL_FINAL);
}

Test(brk_fsm, terminal_states_have_no_exits)
{
    Lisa__RolloutState terms[] = {OK, F, X};
    for (size_t t = 0; t < 3; t++) {
        cr_assert(brk_fsm_terminal(terms[t]));
        for (int ev = 0; ev < BRK_EV__COUNT; ev++)
            cr_assert_null(brk_fsm_lookup(terms[t], (brk_event_t) ev),
                           "%s has an exit on %s", brk_fsm_state_name(terms[t]),
                           brk_fsm_event_name((brk_event_t) ev));
    }
}

Test(brk_fsm, every_open_state_can_be_cancelled_and_ends_cancelled)
{
    Lisa__RolloutState open[] = {Q, C, R, S};
    for (size_t i = 0; i < 4; i++) {
        const brk_fsm_row_t *row = brk_fsm_lookup(open[i], BRK_EV_CANCEL);
        cr_assert_not_null(row);
        cr_assert_eq(row->to, X);
        cr_assert(row->actions & BRK_A_FINISH);
    }
}

Test(brk_fsm, rows_are_unique_and_consistent)
{
    size_t n = 0;
    const brk_fsm_row_t *rows = brk_fsm_rows(&n);
    cr_assert_gt(n, 10);
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n; j++)
            cr_assert(rows[i].from != rows[j].from ||
                          rows[i].event != rows[j].event,
                      "duplicate row %zu/%zu", i, j);
        /* a row that finishes lands in a terminal state and vice versa */
        cr_assert_eq(!!(rows[i].actions & BRK_A_FINISH),
                     brk_fsm_terminal(rows[i].to), "row %zu", i);
        /* a retry goes back to the queue with a backoff */
        if (rows[i].event == BRK_EV_FAIL_RETRY) {
            cr_assert_eq(rows[i].to, Q);
            cr_assert(rows[i].actions & BRK_A_REQUEUE);
            cr_assert(rows[i].actions & BRK_A_END_ATTEMPT);
        }
        /* every state change is recorded */
        if (rows[i].from != rows[i].to)
            cr_assert(rows[i].actions & BRK_A_RECORD, "row %zu", i);
    }
    Lisa__RolloutState holding[] = {C, R, S};
    for (size_t i = 0; i < 3; i++) {
        const brk_fsm_row_t *d = brk_fsm_lookup(holding[i], BRK_EV_DEADLINE);
        cr_assert_not_null(d);
        cr_assert_eq(d->to, F);
    }
}

Test(brk_fsm, only_scoring_reaches_succeeded)
{
    size_t n = 0;
    const brk_fsm_row_t *rows = brk_fsm_rows(&n);
    for (size_t i = 0; i < n; i++)
        if (rows[i].to == OK) {
            cr_assert_eq(rows[i].from, S);
            cr_assert_eq(rows[i].event, BRK_EV_SCORED);
            cr_assert(rows[i].actions & BRK_A_SAVE_REWARD);
        }
}

Test(brk_fsm, retryable_kinds)
{
    cr_assert(brk_fsm_retryable(LISA__FAILURE_KIND__FAILURE_INFRA));
    cr_assert(brk_fsm_retryable(LISA__FAILURE_KIND__FAILURE_SANDBOX));
    cr_assert(brk_fsm_retryable(LISA__FAILURE_KIND__FAILURE_LEASE));
    cr_assert_not(brk_fsm_retryable(LISA__FAILURE_KIND__FAILURE_OOM));
    cr_assert_not(brk_fsm_retryable(LISA__FAILURE_KIND__FAILURE_DEADLINE));
    cr_assert_not(brk_fsm_retryable(LISA__FAILURE_KIND__FAILURE_REWARD));
    cr_assert_str_eq(brk_fsm_failure_name(LISA__FAILURE_KIND__FAILURE_OOM),
                     "oom");
    cr_assert_str_eq(brk_fsm_failure_name((Lisa__FailureKind) 99), "?");
    cr_assert_str_eq(brk_fsm_event_name((brk_event_t) 99), "?");
}

Test(brk_fsm, docs_protocol_md_draws_this_table)
{
    /* docs/protocol.md must list every row as "| from | event | to |". */
    FILE *f = fopen(LISA_SOURCE_DIR "/docs/protocol.md", "r");
    cr_assert_not_null(f, "docs/protocol.md is missing");
    static char doc[1 << 17];
    size_t n = fread(doc, 1, sizeof doc - 1, f);
    fclose(f);
    doc[n] = '\0';
    size_t rows = 0;
    const brk_fsm_row_t *t = brk_fsm_rows(&rows);
    for (size_t i = 0; i < rows; i++) {
        char want[128];
        snprintf(want, sizeof want, "| %s | %s | %s |",
                 brk_fsm_state_name(t[i].from), brk_fsm_event_name(t[i].event),
                 brk_fsm_state_name(t[i].to));
        cr_assert_not_null(strstr(doc, want), "docs/protocol.md lacks '%s'",
                           want);
    }
}
