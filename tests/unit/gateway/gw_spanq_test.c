/*
 * gw_spanq: the bounded queue of spans waiting for the broker's ack.
 */
#include "gw_spanq.h"
#include "gw_trace.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <string.h>

static Lisa__Span *
span(const char *rid, uint32_t att, uint32_t seq)
{
    Lisa__Span *s = lisa_malloc(sizeof *s);
    lisa__span__init(s);
    s->rollout_id = lisa_strdup(rid);
    s->attempt = att;
    s->seq = seq;
    s->finish_reason = lisa_strdup("stop");
    s->engine_id = lisa_strdup("e");
    s->gateway_id = lisa_strdup("g");
    return s;
}

/* Usage: push, take a batch, ack it. */
Test(gw_spanq, usage)
{
    gw_spanq_t *q = gw_spanq_new(8);
    for (uint32_t i = 0; i < 3; i++) {
        Lisa__Span *s = span("r", 1, i);
        cr_assert_eq(gw_spanq_push(q, &s), LISA_OK);
        cr_assert_null(s);
    }
    Lisa__Span *out[8];
    uint64_t batch;
    cr_assert_eq(gw_spanq_take(q, 0, 8, out, &batch), 3);
    cr_assert_eq(out[2]->seq, 2);
    cr_assert_eq(gw_spanq_take(q, 0, 8, out, &batch), 0, "in flight");
    cr_assert_eq(gw_spanq_pending_for(q, "r", 1), 3);
    gw_spanq_acked(q, 1);
    cr_assert_eq(gw_spanq_size(q), 0);
    cr_assert_eq(gw_spanq_acked_total(q), 3);
    gw_spanq_destroy(&q);
    cr_assert_null(q);
}

Test(gw_spanq, backoff_bound_and_refusal)
{
    gw_spanq_t *q = gw_spanq_new(3);
    for (uint32_t i = 0; i < 3; i++) {
        Lisa__Span *s = span(i == 1 ? "bad" : "r", 1, i);
        cr_assert_eq(gw_spanq_push(q, &s), LISA_OK);
    }
    cr_assert_not(gw_spanq_has_room(q, 1));
    Lisa__Span *extra = span("r", 1, 9);
    cr_assert_eq(gw_spanq_push(q, &extra), LISA_TOOLARGE);
    cr_assert_null(extra);
    Lisa__Span *out[8];
    uint64_t b;
    cr_assert_eq(gw_spanq_take(q, 1000, 2, out, &b), 2);
    gw_spanq_failed(q, b, 1000);
    /* not before the backoff */
    cr_assert_eq(gw_spanq_take(q, 1050, 8, out, &b), 1);
    cr_assert_eq(out[0]->seq, 2);
    gw_spanq_failed(q, b, 1050);
    cr_assert_eq(gw_spanq_take(q, 1100, 8, out, &b), 2);
    cr_assert_eq(out[0]->seq, 0);
    /* a refused batch of several is split and resent alone */
    gw_spanq_failed(q, b, 0);
    cr_assert_eq(gw_spanq_take(q, 5000, 8, out, &b), 3);
    cr_assert_eq(gw_spanq_refused(q, b), 0);
    /* one by one now: the good ones are stored, the bad one dropped */
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(gw_spanq_take(q, 5000, 8, out, &b), 1);
        if (strcmp(out[0]->rollout_id, "bad") == 0)
            cr_assert_eq(gw_spanq_refused(q, b), 1);
        else
            gw_spanq_acked(q, b);
    }
    cr_assert_eq(gw_spanq_size(q), 0);
    cr_assert_eq(gw_spanq_acked_total(q), 2);
    gw_spanq_destroy(&q);
}
