/*
 * ctl_backend: the one small interface every sandbox backend implements
 * (local bubblewrap, Docker Engine, Kubernetes Jobs), as a table of
 * function pointers.
 *
 * A backend knows nothing about the broker. It starts a sandbox from a
 * spec, lists every sandbox labelled as this controller's (with its phase
 * and exit status), and removes one (killing it if it still runs). Labels
 * (run, rollout, attempt, controller, deadline) travel with each sandbox,
 * so a restarted controller can rebuild its view from the backend alone
 * and reap what outlived its deadline. Names are deterministic (rollout +
 * attempt), so a repeated start of the same attempt is refused with
 * LISA_CONFLICT instead of making a twin.
 *
 * Two faces. A backend whose work is local and quick (bubblewrap children)
 * answers each call before it returns. A backend that talks HTTP (the
 * Docker Engine, the Kubernetes API server) is asynchronous: `attach`
 * hands it the controller's loop, and from then on the controller uses
 * the *_async calls, which send their requests (common's
 * lisa_http_client, on that loop) and return at once; each one's `done`
 * runs once, from the loop, when the answers are in (or their deadline
 * passed), and may also run before the call returns. So the controller's
 * loop never waits on a backend.
 */
#ifndef CTL_BACKEND_H
#define CTL_BACKEND_H

#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CTL_ID_MAX   129 /* identifiers: at most 128 bytes + NUL */
#define CTL_NAME_MAX 64  /* sandbox names: a DNS label (63) + NUL */

/* What to start. Strings are borrowed for the call. */
typedef struct {
    const char *name; /* deterministic, ctl_backend_name() */
    const char *controller_id;
    const char *run_id;
    const char *rollout_id;
    unsigned attempt;
    const char *token;    /* the attempt token, for the agent only */
    uint64_t created_ms;  /* Unix ms */
    uint64_t deadline_ms; /* Unix ms; the sandbox dies by then */
    uint32_t cpu_millis;
    uint64_t memory_bytes;
    uint32_t pids;
    uint64_t disk_bytes;
} ctl_spec_t;

typedef enum {
    CTL_PHASE_PENDING = 0, /* accepted, not running yet (pulling, scheduling) */
    CTL_PHASE_RUNNING = 1,
    CTL_PHASE_EXITED = 2
} ctl_phase_t;

/* One sandbox as the backend reports it. */
typedef struct {
    char name[CTL_NAME_MAX];
    char controller_id[CTL_ID_MAX];
    char run_id[CTL_ID_MAX];
    char rollout_id[CTL_ID_MAX];
    unsigned attempt;
    uint64_t created_ms;
    uint64_t deadline_ms;
    ctl_phase_t phase;
    int exit_code; /* EXITED: status, 128+N after signal N, -1 unknown */
    bool oom;      /* EXITED: killed by the memory limit */
    bool deadline_exceeded; /* EXITED: the backend's own deadline killed it */
} ctl_sandbox_t;

/* Completions of the asynchronous face (see the file comment). */
typedef void(ctl_rc_fn)(void *arg, lisa_rc_t rc);
/* `list` is borrowed for the call (the callee copies what it keeps). */
typedef void(ctl_list_fn)(void *arg, lisa_rc_t rc, const ctl_sandbox_t *list,
                          size_t n);
/* rcs[i] answers specs[i] of the start. */
typedef void(ctl_rcs_fn)(void *arg, const lisa_rc_t *rcs, size_t n);
/* The last line of a sandbox's output ("" when none). */
typedef void(ctl_text_fn)(void *arg, const char *text);
/* A sandbox may have changed: list soon. */
typedef void(ctl_wake_fn)(void *ctx);

typedef struct {
    const char *name;
    /* LISA_OK when the backend can take work, LISA_UNAVAILABLE when not. */
    lisa_rc_t (*ping)(void *impl);
    /* Starts a sandbox. LISA_OK, LISA_CONFLICT (name exists),
     * LISA_UNAVAILABLE (backend down: pause), LISA_INVALID/LISA_ERR. */
    lisa_rc_t (*start)(void *impl, const ctl_spec_t *spec);
    /* Every sandbox labelled with this controller's id; *out is the
     * caller's (lisa_free). */
    lisa_rc_t (*list)(void *impl, ctl_sandbox_t **out, size_t *n);
    /* Kills (if running) and deletes a sandbox; LISA_NOTFOUND when gone. */
    lisa_rc_t (*remove)(void *impl, const char *name);
    /* Starts n sandboxes at once; rcs[i] is what start() would answer
     * for specs[i]. May be NULL (start() one after another). */
    void (*start_many)(void *impl, const ctl_spec_t *specs, size_t n,
                       lisa_rc_t *rcs);
    /* Removes n sandboxes at once, as remove() each. May be NULL. */
    void (*remove_many)(void *impl, const char *const *names, size_t n);
    /* Last line of a sandbox's output into buf ("" when none); may be
     * NULL when the backend keeps no output. */
    void (*log_tail)(void *impl, const char *name, char *buf, size_t len);
    /* Frees the backend. */
    void (*destroy)(void *impl);
    /* A descriptor that polls readable when a sandbox may have changed
     * (a local child exited, an engine event arrived), so the controller
     * lists at once instead of at its next tick; -1 when there is none.
     * Listing consumes the readiness. May be NULL. */
    int (*wake_fd)(void *impl);
    /* True when sandboxes die with the controller (local backend). */
    bool dies_with_controller;
    /* --- the asynchronous face; NULL for a backend without one -------- */
    /* Binds the backend to `loop`; `wake` (may be NULL) is called when a
     * sandbox may have changed. LISA_OK or LISA_ERR. */
    lisa_rc_t (*attach)(void *impl, zloop_t *loop, ctl_wake_fn *wake,
                        void *wake_ctx);
    void (*ping_async)(void *impl, ctl_rc_fn *done, void *arg);
    void (*list_async)(void *impl, ctl_list_fn *done, void *arg);
    /* specs are copied (as far as needed) before the call returns. */
    void (*start_async)(void *impl, const ctl_spec_t *specs, size_t n,
                        ctl_rcs_fn *done, void *arg);
    /* Removes every named sandbox; done's rc is LISA_OK when each went or
     * was gone already. */
    void (*remove_async)(void *impl, const char *const *names, size_t n,
                         ctl_rc_fn *done, void *arg);
    void (*log_tail_async)(void *impl, const char *name, ctl_text_fn *done,
                           void *arg);
} ctl_backend_ops_t;

typedef struct {
    const ctl_backend_ops_t *ops;
    void *impl;
} ctl_backend_t;

/* Deterministic sandbox name for (rollout, attempt): "lisa-" + the rollout
 * id lowered to [a-z0-9-] + "-a<attempt>", at most 63 bytes (a long id is
 * cut and suffixed with a hash of the whole id). */
void ctl_backend_name(const char *rollout_id, unsigned attempt,
                      char out[CTL_NAME_MAX]);

/* URL-encodes s (RFC 3986 unreserved kept). Caller frees (lisa_free). */
char *ctl_backend_escape(const char *s);

#endif
