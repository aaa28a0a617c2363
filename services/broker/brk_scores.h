/*
 * brk_scores: reward workers and the score jobs they run.
 *
 * A rollout whose attempt posted its result enters SCORING and gets a
 * score job once that is durable. Reward workers connect to the worker
 * ROUTER (READY with a capacity and the data-source prefixes they score),
 * exchange heartbeats, and get ScoreRequests: each queued job goes to the
 * least loaded live worker that serves its data source. A reward moves
 * the rollout on (SCORED); an unscorable answer, too many worker errors,
 * no answer in time, or no connected worker serving its data source for
 * score_unroutable_ms ends it with FAILURE_REWARD. A worker that misses
 * heartbeats is forgotten and its jobs go back to the queue. Jobs live in
 * memory: at start-up every rollout left in SCORING gets a new one.
 */
#ifndef BRK_SCORES_H
#define BRK_SCORES_H

#include "brk_call.h"
#include "brk_lifecycle.h"

typedef struct brk_scores_t brk_scores_t;

/* `wrk` is the worker ROUTER; `lc` applies the score results (both
 * borrowed). */
brk_scores_t *brk_scores_new(const brk_env_t *env, brk_lifecycle_t *lc,
                             zsock_t *wrk);
void brk_scores_destroy(brk_scores_t **self);

/* Queues a job for every rollout in SCORING (start-up). */
lisa_rc_t brk_scores_recover(brk_scores_t *self) LISA_NODISCARD;

/* One message of the worker socket. */
void brk_scores_on_msg(brk_scores_t *self, zmsg_t *m);

/* A durable SCORING rollout: queue its job; and the reverse. */
void brk_scores_adopt(brk_scores_t *self, const char *rollout_id,
                      uint32_t attempt, const char *data_source);
void brk_scores_drop(brk_scores_t *self, const char *rollout_id);

/* Sends queued jobs to workers with room (after a COMMIT). */
void brk_scores_dispatch(brk_scores_t *self);

/* Heartbeats out, dead workers out, overdue and unroutable jobs. */
void brk_scores_tick(brk_scores_t *self, int64_t mono);

size_t brk_scores_workers(const brk_scores_t *self);
size_t brk_scores_jobs(const brk_scores_t *self);
uint64_t brk_scores_stale(const brk_scores_t *self);
/* Frames of the worker socket refused by the codec. */
uint64_t brk_scores_bad_frames(const brk_scores_t *self);

#endif
