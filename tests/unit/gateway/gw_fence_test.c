/*
 * gw_fence tests: which attempts the broker's rollout events end. Admission
 * through the HTTP layer (gw_fence_enter) is tested against a real gateway
 * in tests/integration/gateway/test_edges.py. The first test is the usage
 * example.
 */
#include "gw_fence.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static Lisa__RolloutEvent
s_ev(const char *rollout, uint32_t attempt, Lisa__RolloutState st,
     Lisa__AttemptState ast)
{
    Lisa__RolloutEvent ev = LISA__ROLLOUT_EVENT__INIT;
    ev.rollout_id = (char *) rollout;
    ev.attempt = attempt;
    ev.state = st;
    ev.attempt_state = ast;
    return ev;
}

Test(gw_fence, usage)
{
    gw_fence_t *f = gw_fence_new(8);
    /* the broker says attempt 1 of r-1 was cancelled */
    Lisa__RolloutEvent ev =
        s_ev("r-1", 1, LISA__ROLLOUT_STATE__ROLLOUT_CANCELLED,
             LISA__ATTEMPT_STATE__ATTEMPT_CANCELLED);
    gw_fence_event(f, &ev);
    cr_assert(gw_fence_ended(f, "r-1", 1));
    cr_assert_not(gw_fence_ended(f, "r-2", 1)); /* nothing said about it */
    cr_assert_eq(gw_fence_size(f), 1);
    gw_fence_destroy(&f);
    cr_assert_null(f);
    gw_fence_destroy(&f); /* safe twice */
}

Test(gw_fence, running_attempts_stay_open)
{
    gw_fence_t *f = gw_fence_new(0);
    Lisa__RolloutEvent ev = s_ev("r-1", 1, LISA__ROLLOUT_STATE__ROLLOUT_RUNNING,
                                 LISA__ATTEMPT_STATE__ATTEMPT_RUNNING);
    gw_fence_event(f, &ev);
    cr_assert_not(gw_fence_ended(f, "r-1", 1));
    ev = s_ev("r-1", 1, LISA__ROLLOUT_STATE__ROLLOUT_SCORING,
              LISA__ATTEMPT_STATE__ATTEMPT_SCORING);
    gw_fence_event(f, &ev);
    cr_assert_not(gw_fence_ended(f, "r-1", 1));
    gw_fence_destroy(&f);
}

Test(gw_fence, a_retry_ends_the_attempts_before_it)
{
    gw_fence_t *f = gw_fence_new(0);
    /* attempt 1 failed (lease), the rollout is queued for attempt 2 */
    Lisa__RolloutEvent ev = s_ev("r-1", 1, LISA__ROLLOUT_STATE__ROLLOUT_QUEUED,
                                 LISA__ATTEMPT_STATE__ATTEMPT_FAILED);
    gw_fence_event(f, &ev);
    cr_assert(gw_fence_ended(f, "r-1", 1));
    cr_assert_not(gw_fence_ended(f, "r-1", 2));
    /* a later event about attempt 3 alone ends attempt 2 too */
    ev = s_ev("r-1", 3, LISA__ROLLOUT_STATE__ROLLOUT_CLAIMED,
              LISA__ATTEMPT_STATE__ATTEMPT_CLAIMED);
    gw_fence_event(f, &ev);
    cr_assert(gw_fence_ended(f, "r-1", 2));
    cr_assert_not(gw_fence_ended(f, "r-1", 3));
    /* an event out of order never reopens an attempt */
    ev = s_ev("r-1", 1, LISA__ROLLOUT_STATE__ROLLOUT_RUNNING,
              LISA__ATTEMPT_STATE__ATTEMPT_RUNNING);
    gw_fence_event(f, &ev);
    cr_assert(gw_fence_ended(f, "r-1", 2));
    /* a terminal rollout ends every attempt, later numbers too */
    ev = s_ev("r-1", 3, LISA__ROLLOUT_STATE__ROLLOUT_SUCCEEDED,
              LISA__ATTEMPT_STATE__ATTEMPT_SUCCEEDED);
    gw_fence_event(f, &ev);
    cr_assert(gw_fence_ended(f, "r-1", 3));
    cr_assert(gw_fence_ended(f, "r-1", 9));
    cr_assert_eq(gw_fence_size(f), 1);
    gw_fence_destroy(&f);
}

Test(gw_fence, bad_events_are_ignored)
{
    gw_fence_t *f = gw_fence_new(0);
    gw_fence_event(f, NULL);
    Lisa__RolloutEvent ev = s_ev("", 1, LISA__ROLLOUT_STATE__ROLLOUT_CANCELLED,
                                 LISA__ATTEMPT_STATE__ATTEMPT_CANCELLED);
    gw_fence_event(f, &ev);
    char longid[300];
    memset(longid, 'x', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    ev.rollout_id = longid;
    gw_fence_event(f, &ev);
    ev.rollout_id = NULL;
    gw_fence_event(f, &ev);
    cr_assert_eq(gw_fence_size(f), 0);
    gw_fence_destroy(&f);
}

Test(gw_fence, the_table_is_bounded)
{
    gw_fence_t *f = gw_fence_new(0);
    char id[32];
    for (unsigned i = 0; i < 70000; i++) {
        snprintf(id, sizeof id, "r-%u", i);
        Lisa__RolloutEvent ev = s_ev(id, 1, LISA__ROLLOUT_STATE__ROLLOUT_FAILED,
                                     LISA__ATTEMPT_STATE__ATTEMPT_FAILED);
        gw_fence_event(f, &ev);
    }
    cr_assert_eq(gw_fence_size(f), 65536);
    cr_assert_not(gw_fence_ended(f, "r-0", 1)); /* the oldest went first */
    cr_assert(gw_fence_ended(f, "r-69999", 1));
    gw_fence_destroy(&f);
}

Test(gw_fence, attempts_are_checked_once_per_epoch)
{
    gw_fence_t *f = gw_fence_new(0);
    lisa_token_claims_t who = {.attempt = 2};
    snprintf(who.rollout_id, sizeof who.rollout_id, "r-1");
    cr_assert_not(gw_fence_known(f, &who)); /* a fresh gateway knows nothing */
    gw_fence_rollout(f, &who, LISA__ROLLOUT_STATE__ROLLOUT_RUNNING, 2);
    cr_assert(gw_fence_known(f, &who));
    cr_assert_not(gw_fence_ended(f, "r-1", 2));
    cr_assert(gw_fence_ended(f, "r-1", 1)); /* attempt 2 runs: 1 is over */
    gw_fence_gap(f); /* events were missed: check again */
    cr_assert_not(gw_fence_known(f, &who));
    /* queued again: attempt 2 failed and waits for its retry */
    gw_fence_rollout(f, &who, LISA__ROLLOUT_STATE__ROLLOUT_QUEUED, 2);
    cr_assert(gw_fence_ended(f, "r-1", 2));
    cr_assert(gw_fence_known(f, &who));
    gw_fence_gap(f);
    cr_assert(gw_fence_known(f, &who)); /* an ended attempt stays known */
    lisa_token_claims_t other = {.attempt = 1};
    snprintf(other.rollout_id, sizeof other.rollout_id, "r-2");
    gw_fence_rollout(f, &other, LISA__ROLLOUT_STATE__ROLLOUT_CANCELLED, 1);
    cr_assert(gw_fence_ended(f, "r-2", 1));
    gw_fence_destroy(&f);
}
