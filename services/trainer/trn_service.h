/*
 * trn_service: one trainer rank assembled from its parts.
 *
 * `lisa-trainer` reads its settings and decides its rank (trn_ranks);
 * this module then puts the rank together in the order the parts need:
 *
 *   1. the rank group (trn_group): rank 0 binds its bootstrap endpoint
 *      before it launches its node's other ranks, so they find it;
 *   2. the backend (CPU or CUDA) over the model directory, or the
 *      checkpoint being resumed;
 *   3. the generation engine, started paused (its port and advertised URL
 *      per rank of the node);
 *   4. the join: every rank's engine is up, the ranks meet and agree on
 *      the settings digest, then the device communicator forms;
 *   5. the resume: a checkpoint's optimizer and counters are read, the
 *      engine admits at its policy version and its URL is published as
 *      <out>/engine.url (engine-r<r>.url for rank r > 0).
 *
 * Teardown runs in reverse and in an order that matters: the ranks hear
 * the stop, every rank leaves the device communicator, then the group
 * goes and the launched ranks are collected.
 *
 * Each step returns a trn_exit_t, the process's exit status for the
 * failure, and a reason in err (empty when already logged).
 */
#ifndef TRN_SERVICE_H
#define TRN_SERVICE_H

#include "trn_backend.h"
#include "trn_ckpt.h"
#include "trn_data.h"
#include "trn_engine.h"
#include "trn_group.h"
#include "trn_ranks.h"
#include "trn_run_cfg.h"
#include "trn_step.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

/* The trainer's exit statuses. */
typedef enum {
    TRN_EXIT_DONE = 0,
    TRN_EXIT_CONFIG = 1, /* settings, data, ranks that do not fit */
    TRN_EXIT_BROKER = 2, /* the broker gone or too slow */
    TRN_EXIT_MODEL = 3,  /* the model, a checkpoint, a step */
    TRN_EXIT_ENGINE = 4  /* the engine or a launched rank did not start */
} trn_exit_t;

typedef struct trn_service trn_service_t;

typedef struct {
    /* Borrowed for the service's life; engine.listen and engine.url are
     * rewritten for this rank of the node. */
    trn_run_cfg_t *cfg;
    const trn_step_cfg_t *step; /* the digest's step settings */
    const trn_ranks_plan_t *plan;
    bool train;
    int argc; /* the command line, for launched ranks */
    char **argv;
    volatile sig_atomic_t *stop; /* ends the group's waits */
} trn_service_args_t;

/* Steps 1-3. NULL on failure with *code and err set. */
trn_service_t *trn_service_new(const trn_service_args_t *a, trn_exit_t *code,
                               char *err, size_t errlen);

/* Step 4 (nothing to do for one rank). */
trn_exit_t trn_service_join(trn_service_t *s, char *err, size_t errlen);

/* Step 5: *st receives the checkpoint's counters (zero when not
 * resuming); `train_data` (may be NULL) is compared with them. */
trn_exit_t trn_service_resume(trn_service_t *s, const trn_data_t *train_data,
                              trn_ckpt_state_t *st, char *err, size_t errlen);

/* Rank 0 of several: trains through the group from now on (the backend
 * becomes trn_dp's wrapper). */
void trn_service_wrap_dp(trn_service_t *s);

trn_backend_t *trn_service_backend(trn_service_t *s);
trn_engine_t *trn_service_engine(trn_service_t *s);
trn_group_t *trn_service_group(trn_service_t *s); /* NULL for one rank */

/* Tears down (see above) and returns `code`, or TRN_EXIT_MODEL when the
 * run was TRN_EXIT_DONE but a launched rank failed. Safe on NULL. */
trn_exit_t trn_service_destroy(trn_service_t **s_p, trn_exit_t code);

#endif
