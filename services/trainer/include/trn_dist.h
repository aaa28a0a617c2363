/*
 * trn_dist: data-parallel collectives between trainer ranks over NCCL.
 *
 * One process per GPU. Rank 0 makes the NCCL unique id (the trainer sends it
 * to the other ranks over ZeroMQ); every rank then joins the communicator.
 * Every operation here runs under a deadline: the communicator is created
 * non-blocking and each collective is polled, so a dead or stuck peer ends
 * in LISA_TIMEOUT (after aborting the communicator) with a clear log line,
 * never in a silent hang.
 */
#ifndef TRN_DIST_H
#define TRN_DIST_H

#include "lisa/lisa_rc.h"
#include "trn_cuda.h"

#include <stddef.h>
#include <stdint.h>

#define TRN_DIST_ID_BYTES 128

#ifdef __cplusplus
extern "C" {
#endif

typedef struct trn_dist trn_dist_t;

/* A check, polled while any wait of this process runs, that the other
 * ranks are still there (for example their control connection): when it
 * returns 0 the wait aborts the communicator and fails with
 * LISA_UNAVAILABLE instead of waiting for the deadline. NULL: none. */
void trn_dist_set_peer_check(int (*ok)(void *ctx), void *ctx);

/* Makes a fresh NCCL unique id (rank 0 only). */
lisa_rc_t trn_dist_make_id(uint8_t id[TRN_DIST_ID_BYTES]) LISA_NODISCARD;

/* Joins communicator `id` as `rank` of `world` on the current device,
 * waiting at most timeout_ms for every rank to join; NULL on failure. */
trn_dist_t *trn_dist_new(int rank, int world,
                         const uint8_t id[TRN_DIST_ID_BYTES], int timeout_ms);
/* Leaves (or aborts, after a failure) and frees; safe on NULL and twice. */
void trn_dist_destroy(trn_dist_t **d);

int trn_dist_rank(const trn_dist_t *d);
int trn_dist_world(const trn_dist_t *d);
/* Deadline of each later collective, in milliseconds. */
void trn_dist_set_timeout(trn_dist_t *d, int timeout_ms);

/* In-place sum of n fp32 values across ranks. */
lisa_rc_t trn_dist_allreduce_sum(trn_dist_t *d, float *buf,
                                 size_t n) LISA_NODISCARD;
/* Sums `send` (world * shard values) across ranks and leaves this rank's
 * shard (values [rank*shard, (rank+1)*shard)) in `recv`. */
lisa_rc_t trn_dist_reduce_scatter_sum(trn_dist_t *d, const float *send,
                                      float *recv, size_t shard) LISA_NODISCARD;
/* Gathers every rank's `shard` values in place: buf holds world * shard
 * values and this rank's part is at buf + rank * shard. */
lisa_rc_t trn_dist_allgather_f32(trn_dist_t *d, float *buf,
                                 size_t shard) LISA_NODISCARD;
lisa_rc_t trn_dist_allgather_bf16(trn_dist_t *d, trn_bf16_t *buf,
                                  size_t shard) LISA_NODISCARD;
/* Starts summing send[begin, end) across ranks into the owners' shards,
 * as trn_dist_reduce_scatter_sum would for that range: the values of rank
 * r's shard ([r*shard, (r+1)*shard)) land in r's recv at their offset in
 * the shard. Runs after the work queued so far on the default stream and
 * alongside later work (send[begin, end) must not change until it ends);
 * trn_dist_wait, or any later collective, waits for it. Every rank makes
 * the same calls in the same order. */
lisa_rc_t trn_dist_reduce_to_owners(trn_dist_t *d, const float *send,
                                    float *recv, size_t shard, size_t begin,
                                    size_t end) LISA_NODISCARD;
/* Waits, under the deadline, for every reduction started. */
lisa_rc_t trn_dist_wait(trn_dist_t *d) LISA_NODISCARD;

#ifdef __cplusplus
}
#endif

#endif
