/*
 * lisa_events: a service's subscription to the broker's events. The
 * broker publishes each event as two frames, a topic ("rollout",
 * "policy", "engine") and a Lisa.Event; a subscriber connects with the
 * process's CURVE identity (a CURVE broker publishes to listed keys only)
 * and reads what is waiting from its loop, a bounded batch at a time, so
 * a flood of events cannot hold the loop. A message that is not a
 * bounded, valid event is dropped.
 */
#ifndef LISA_EVENTS_H
#define LISA_EVENTS_H

#include "lisa/lisa_codec.h"

#include <czmq.h>
#include <stddef.h>

/* Messages one lisa_events_drain reads at the most. */
#define LISA_EVENTS_BATCH 1000

/* One decoded event, borrowed for the call. */
typedef void lisa_events_fn(void *arg, const Lisa__Event *ev);

/* A SUB socket with the process's CURVE client identity, subscribed to
 * `topic` and connected to `endpoint`; the caller's. NULL when it cannot
 * be made or connected. */
zsock_t *lisa_events_sub(const char *endpoint, const char *topic);

/* Reads the messages waiting on `sub` (up to LISA_EVENTS_BATCH) and hands
 * each that decodes as an event (LISA_MAX_EVENT_FRAME at the most) to fn;
 * refusals are counted in `stats` (may be NULL). Returns how many events
 * were handed on. */
size_t lisa_events_drain(zsock_t *sub, lisa_events_fn *fn, void *arg,
                         lisa_codec_stats_t *stats);

#endif
