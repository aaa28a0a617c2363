/*
 * ctl_server: the controller's reconcile loop.
 *
 * One thread, one zloop: the broker's event stream (SUB, topic
 * "rollout"), the replies of asynchronous broker calls, the backend's
 * HTTP transfers (lisa_http_client, for docker and k8s) or its wake
 * descriptor (local: a child ended), and a tick. A change (a sandbox
 * ended, an attempt ended at the broker, new work queued) runs the
 * reconcile pass at once; otherwise it runs every tick. A pass is
 * asynchronous too: it asks the backend for its listing and acts on the
 * answer when it comes; one pass runs at a time. Each pass makes the
 * world match the broker:
 *   - an exited sandbox is mapped through ctl_outcome: a failure is
 *     reported (AttemptFail), then the sandbox is removed;
 *   - a sandbox past its deadline (plus grace) is killed and reported as
 *     DEADLINE;
 *   - a sandbox whose attempt the broker ended (event, or the periodic
 *     cross-check) is removed without a report;
 *   - a labelled sandbox nobody knows is adopted after the broker confirms
 *     its attempt (restart), or reaped when past its deadline;
 *   - a sandbox still pending (pulling, scheduling) gets its attempt's
 *     lease renewed every verify period, since its agent cannot yet;
 *   - free capacity is claimed (up to the concurrency cap and the token
 *     bucket of creations) and each claim becomes a sandbox, confirmed
 *     with AttemptStart.
 * A backend that fails pauses claiming with exponential backoff. Claims
 * and start confirmations are asynchronous (one claim in flight; its
 * reply starts the sandboxes, whose confirmations are sent without
 * waiting), so a batch of starts costs one broker round trip. Every other
 * broker call (reports, cross-check queries, lease renewals) is
 * asynchronous too, with a deadline each: the loop never waits on the
 * broker, and a broker that answers late delays only what depends on its
 * answer. On stop, a claim still in flight is awaited and its attempts
 * handed back, and the last reports are given a bounded time to be
 * answered.
 */
#ifndef CTL_SERVER_H
#define CTL_SERVER_H

#include "ctl_backend.h"
#include "ctl_config.h"

#include <signal.h>
#include <stdint.h>

typedef struct ctl_server ctl_server_t;

/* Counters, for logs and tests. */
typedef struct {
    uint64_t claimed;        /* attempts received from the broker */
    uint64_t started;        /* sandboxes started */
    uint64_t start_failed;   /* starts that failed */
    uint64_t exited;         /* sandboxes seen ended */
    uint64_t reported;       /* AttemptFail reports sent */
    uint64_t deadline_kills; /* killed past their deadline */
    uint64_t stopped;        /* removed because the attempt ended */
    uint64_t reaped;         /* unknown sandboxes past their deadline */
    uint64_t adopted;        /* sandboxes taken over after a restart */
    uint64_t pauses;         /* claim pauses after backend failures */
    uint64_t heartbeats;     /* lease renewals for pending sandboxes */
    uint64_t events;         /* broker events read */
    uint64_t event_gaps;     /* sequence gaps seen */
} ctl_stats_t;

/* New server owning *backend (consumed). NULL when the broker endpoints
 * are unusable. */
ctl_server_t *ctl_server_new(const ctl_config_t *cfg, ctl_backend_t *backend);
/* Stops nothing, frees everything; safe on NULL; sets *s to NULL. */
void ctl_server_destroy(ctl_server_t **s);
/* Runs until *stop becomes nonzero; then, when sandboxes die with the
 * controller, removes them and reports their attempts (INFRA, retried). */
lisa_rc_t ctl_server_run(ctl_server_t *s, volatile sig_atomic_t *stop);
/* The counters. */
const ctl_stats_t *ctl_server_stats(const ctl_server_t *s);

#endif
