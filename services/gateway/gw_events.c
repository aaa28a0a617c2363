/*
 * gw_events: the broker's rollout events into the fence (see gw_events.h).
 */
#include "gw_events.h"

#include "lisa/lisa_events.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <inttypes.h>

struct gw_events_t {
    zloop_t *loop;
    zsock_t *sub;
    gw_fence_t *fence;
    gw_metrics_t *m;
    uint64_t last_seq; /* of the last event seen; 0: none yet */
};

static void
s_on_event(void *arg, const Lisa__Event *ev)
{
    gw_events_t *self = arg;
    gw_metrics_add(self->m, "lisa_gateway_events_total", NULL, 1);
    if (self->last_seq && ev->seq != self->last_seq + 1) {
        gw_metrics_add(self->m, "lisa_gateway_event_gaps_total", NULL, 1);
        lisa_log_warn("gateway: broker events %" PRIu64 "..%" PRIu64
                      " missed; every attempt is checked with the broker "
                      "again",
                      self->last_seq + 1, ev->seq - 1);
        gw_fence_gap(self->fence);
    }
    self->last_seq = ev->seq;
    if (ev->body_case == LISA__EVENT__BODY_ROLLOUT)
        gw_fence_event(self->fence, ev->rollout);
}

static int
s_on_sub(zloop_t *loop, zsock_t *sock, void *arg)
{
    (void) loop;
    lisa_events_drain(sock, s_on_event, arg, NULL);
    return 0;
}

gw_events_t *
gw_events_new(const char *endpoint, zloop_t *loop, gw_fence_t *fence,
              gw_metrics_t *m)
{
    gw_events_t *self = lisa_calloc(1, sizeof *self);
    self->loop = loop;
    self->fence = fence;
    self->m = m;
    /* every topic: the sequence numbers run across rollout, policy and
     * engine events, so a subscription to rollouts alone would see a gap
     * at every policy or engine event (and ask the broker about every
     * attempt again each training step); only rollouts go to the fence */
    self->sub = lisa_events_sub(endpoint, "");
    if (!self->sub || zloop_reader(loop, self->sub, s_on_sub, self) != 0) {
        lisa_log_error("gateway: cannot subscribe to broker events at %s",
                       endpoint);
        zsock_destroy(&self->sub);
        lisa_free(&self);
        return NULL;
    }
    return self;
}

void
gw_events_destroy(gw_events_t **self)
{
    if (!self || !*self)
        return;
    if ((*self)->sub)
        zloop_reader_end((*self)->loop, (*self)->sub);
    zsock_destroy(&(*self)->sub);
    lisa_free(self);
}
