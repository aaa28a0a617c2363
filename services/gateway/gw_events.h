/*
 * gw_events: the gateway's subscription to the broker's rollout events
 * (a SUB socket on the bus, with the process's CURVE identity). Each
 * event goes to gw_fence, so the tokens of attempts that ended are
 * refused; a gap in the events' sequence numbers is counted and makes the
 * fence check every attempt with the broker again.
 */
#ifndef GW_EVENTS_H
#define GW_EVENTS_H

#include "gw_fence.h"
#include "gw_metrics.h"
#include "lisa/lisa_rc.h"

#include <czmq.h>

typedef struct gw_events_t gw_events_t;

/* Subscribes to `endpoint`'s "rollout" events on `loop`, feeding `fence`
 * and counting gaps in `m` (both borrowed, outliving the subscription).
 * NULL (logged) when the socket cannot be made or read. */
gw_events_t *gw_events_new(const char *endpoint, zloop_t *loop,
                           gw_fence_t *fence, gw_metrics_t *m);

/* Stops reading and closes the socket; NULL-safe, sets *self to NULL. */
void gw_events_destroy(gw_events_t **self);

#endif
