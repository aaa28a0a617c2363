/*
 * rwd_worker: the reward worker's side of the broker's worker protocol.
 *
 * Majordomo-style over one DEALER socket connected to the broker's ROUTER
 * (proto/lisa.proto, WorkerMsg; one protobuf frame per message, decoded
 * and encoded with lisa_codec):
 *
 *   worker -> broker   WorkerReady{worker_id, capacity, data_sources}
 *   broker -> worker   ScoreRequest{job_id, ...}
 *   worker -> broker   ScoreReply{job_id, code, error, reward}
 *   both ways          WorkerHeartbeat when nothing else was sent for one
 *                      heartbeat interval (default 1 s)
 *   worker -> broker   WorkerDisconnect{reason} on shutdown
 *   broker -> worker   WorkerDisconnect: the worker reconnects
 *
 * Any frame from the broker proves it alive. When the broker is silent for
 * `liveness` intervals (default 3), the worker drops the socket, waits a
 * backoff (doubling from reconnect_ms up to reconnect_max_ms), connects a
 * new socket and says READY again. Requests are scored by a pool of
 * threads; at most `capacity` are held at once, more are answered
 * CODE_BUSY. A frame that is not a valid WorkerMsg is answered with a
 * ScoreReply (job_id 0, CODE_INVALID or CODE_UNSUPPORTED) and counted; the
 * worker never stops on bad input.
 */
#ifndef RWD_WORKER_H
#define RWD_WORKER_H

#include "lisa/lisa_codec.h"
#include "lisa/lisa_rc.h"
#include "rwd_config.h"
#include "rwd_score.h"

#include <stdint.h>

typedef struct rwd_worker rwd_worker_t;

typedef struct {
    uint64_t requests;   /* ScoreRequests received */
    uint64_t replies;    /* ScoreReplies sent */
    uint64_t busy;       /* requests refused with CODE_BUSY */
    uint64_t bad_frames; /* frames refused by the codec */
    uint64_t heartbeats_in;
    uint64_t heartbeats_out;
    uint64_t reconnects;
} rwd_worker_stats_t;

/* New worker for `cfg` scoring with `scorer` (borrowed; must outlive the
 * worker). NULL on a bad config. */
rwd_worker_t *rwd_worker_new(const rwd_config_t *cfg,
                             const rwd_scorer_t *scorer);

/* Frees *w (the worker must not be running) and sets it to NULL. */
void rwd_worker_destroy(rwd_worker_t **w);

/* Runs until rwd_worker_stop or SIGINT/SIGTERM; says WorkerDisconnect on
 * the way out. Returns LISA_OK after a clean stop. */
lisa_rc_t rwd_worker_run(rwd_worker_t *w) LISA_NODISCARD;

/* Asks a running worker to stop (thread-safe, async-signal-safe). */
void rwd_worker_stop(rwd_worker_t *w);

/* Snapshot of the counters (thread-safe). */
void rwd_worker_stats(rwd_worker_t *w, rwd_worker_stats_t *out);

#endif
