/*
 * trn_dist: NCCL communicator and collectives with deadlines.
 *
 * The communicator is created with blocking = 0, so ncclCommInitRankConfig
 * and every collective return at once; completion is then polled on the
 * communicator's stream together with ncclCommGetAsyncError until the
 * deadline. On timeout or error the communicator is aborted (the only safe
 * way out of a stuck collective) and the caller gets an error value.
 */
#include "trn_cuda_common.cuh"
#include "trn_dist.h"

#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct trn_dist {
    ncclComm_t comm;
    cudaStream_t stream;
    int rank, world;
    int timeout_ms;
    int broken;     /* aborted: every later call fails fast */
    int pending;    /* reductions started and not yet waited for */
    cudaEvent_t ev; /* orders started reductions after queued work */
};

/* The process's check that the other ranks are still there (see
 * trn_dist_set_peer_check); polled every 10 ms of a wait. */
static int (*s_peers_ok)(void *ctx);
static void *s_peers_ctx;

static double
s_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

static void
s_nap(void)
{
    struct timespec ts = {0, 100000}; /* 0.1 ms */
    nanosleep(&ts, NULL);
}

static void
s_abort(trn_dist_t *d, const char *what, const char *why)
{
    fprintf(stderr, "trainer: NCCL %s failed on rank %d of %d: %s\n", what,
            d->rank, d->world, why);
    if (!d->broken && d->comm)
        ncclCommAbort(d->comm);
    d->comm = NULL;
    d->broken = 1;
}

/* Waits until the communicator is idle and the stream has drained. */
static lisa_rc_t
s_wait(trn_dist_t *d, const char *what, int need_stream)
{
    double deadline = s_now_ms() + d->timeout_ms, next_check = 0;
    for (;;) {
        ncclResult_t st = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(d->comm, &st);
        if (r != ncclSuccess || (st != ncclSuccess && st != ncclInProgress)) {
            s_abort(d, what, ncclGetErrorString(r != ncclSuccess ? r : st));
            return LISA_ERR;
        }
        if (st == ncclSuccess) {
            if (!need_stream)
                return LISA_OK;
            cudaError_t q = cudaStreamQuery(d->stream);
            if (q == cudaSuccess)
                return LISA_OK;
            if (q != cudaErrorNotReady) {
                s_abort(d, what, cudaGetErrorString(q));
                return LISA_ERR;
            }
        }
        double now = s_now_ms();
        if (now > deadline) {
            s_abort(d, what, "deadline passed (a peer is gone or stuck)");
            return LISA_TIMEOUT;
        }
        if (s_peers_ok && now >= next_check) {
            next_check = now + 10;
            if (!s_peers_ok(s_peers_ctx)) {
                s_abort(d, what, "another rank went away");
                return LISA_UNAVAILABLE;
            }
        }
        s_nap();
    }
}

extern "C" void
trn_dist_set_peer_check(int (*ok)(void *ctx), void *ctx)
{
    s_peers_ok = ok;
    s_peers_ctx = ctx;
}

extern "C" lisa_rc_t
trn_dist_make_id(uint8_t id[TRN_DIST_ID_BYTES])
{
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        fprintf(stderr, "trainer: ncclGetUniqueId: %s\n",
                ncclGetErrorString(r));
        return LISA_ERR;
    }
    memcpy(id, u.internal, TRN_DIST_ID_BYTES);
    return LISA_OK;
}

extern "C" trn_dist_t *
trn_dist_new(int rank, int world, const uint8_t id[TRN_DIST_ID_BYTES],
             int timeout_ms)
{
    if (world < 1 || rank < 0 || rank >= world || timeout_ms <= 0)
        return NULL;
    trn_dist_t *d = (trn_dist_t *) calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->rank = rank;
    d->world = world;
    d->timeout_ms = timeout_ms;
    if (cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking) !=
        cudaSuccess) {
        free(d);
        return NULL;
    }
    if (cudaEventCreateWithFlags(&d->ev, cudaEventDisableTiming) !=
        cudaSuccess) {
        cudaStreamDestroy(d->stream);
        free(d);
        return NULL;
    }
    ncclUniqueId u;
    memcpy(u.internal, id, TRN_DIST_ID_BYTES);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&d->comm, world, u, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        fprintf(stderr, "trainer: ncclCommInitRankConfig: %s\n",
                ncclGetErrorString(r));
        cudaEventDestroy(d->ev);
        cudaStreamDestroy(d->stream);
        free(d);
        return NULL;
    }
    if (s_wait(d, "communicator init", 0) != LISA_OK) {
        cudaEventDestroy(d->ev);
        cudaStreamDestroy(d->stream);
        free(d);
        return NULL;
    }
    return d;
}

extern "C" void
trn_dist_destroy(trn_dist_t **dp)
{
    if (!dp || !*dp)
        return;
    trn_dist_t *d = *dp;
    if (d->pending && !d->broken && trn_dist_wait(d) != LISA_OK)
        d->broken = 1; /* aborted by the wait; nothing left to finalize */
    if (d->comm && !d->broken) {
        ncclCommFinalize(d->comm);
        if (s_wait(d, "finalize", 0) == LISA_OK)
            ncclCommDestroy(d->comm);
    }
    cudaEventDestroy(d->ev);
    cudaStreamDestroy(d->stream);
    free(d);
    *dp = NULL;
}

extern "C" int
trn_dist_rank(const trn_dist_t *d)
{
    return d->rank;
}

extern "C" int
trn_dist_world(const trn_dist_t *d)
{
    return d->world;
}

extern "C" void
trn_dist_set_timeout(trn_dist_t *d, int timeout_ms)
{
    if (timeout_ms > 0)
        d->timeout_ms = timeout_ms;
}

/* Orders the collective after work already queued on the default stream
 * (and after started reductions, waited for under the deadline first, so
 * the device-wide synchronisation cannot wait on a missing peer). */
static lisa_rc_t
s_begin(trn_dist_t *d)
{
    if (d->broken)
        return LISA_UNAVAILABLE;
    if (d->pending) {
        lisa_rc_t rc = trn_dist_wait(d);
        if (rc != LISA_OK)
            return rc;
    }
    TRN_CUDA_TRY(cudaDeviceSynchronize());
    return LISA_OK;
}

static lisa_rc_t
s_issue(trn_dist_t *d, const char *what, ncclResult_t r)
{
    if (r != ncclSuccess && r != ncclInProgress) {
        s_abort(d, what, ncclGetErrorString(r));
        return LISA_ERR;
    }
    return s_wait(d, what, 1);
}

extern "C" lisa_rc_t
trn_dist_allreduce_sum(trn_dist_t *d, float *buf, size_t n)
{
    lisa_rc_t rc = s_begin(d);
    if (rc != LISA_OK || n == 0)
        return rc;
    return s_issue(
        d, "all-reduce",
        ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, d->comm, d->stream));
}

extern "C" lisa_rc_t
trn_dist_reduce_scatter_sum(trn_dist_t *d, const float *send, float *recv,
                            size_t shard)
{
    lisa_rc_t rc = s_begin(d);
    if (rc != LISA_OK || shard == 0)
        return rc;
    return s_issue(d, "reduce-scatter",
                   ncclReduceScatter(send, recv, shard, ncclFloat32, ncclSum,
                                     d->comm, d->stream));
}

extern "C" lisa_rc_t
trn_dist_allgather_f32(trn_dist_t *d, float *buf, size_t shard)
{
    lisa_rc_t rc = s_begin(d);
    if (rc != LISA_OK || shard == 0)
        return rc;
    return s_issue(d, "all-gather",
                   ncclAllGather(buf + (size_t) d->rank * shard, buf, shard,
                                 ncclFloat32, d->comm, d->stream));
}

extern "C" lisa_rc_t
trn_dist_allgather_bf16(trn_dist_t *d, trn_bf16_t *buf, size_t shard)
{
    lisa_rc_t rc = s_begin(d);
    if (rc != LISA_OK || shard == 0)
        return rc;
    return s_issue(d, "all-gather",
                   ncclAllGather(buf + (size_t) d->rank * shard, buf, shard,
                                 ncclBfloat16, d->comm, d->stream));
}

extern "C" lisa_rc_t
trn_dist_reduce_to_owners(trn_dist_t *d, const float *send, float *recv,
                          size_t shard, size_t begin, size_t end)
{
    if (d->broken)
        return LISA_UNAVAILABLE;
    if (begin >= end || shard == 0)
        return LISA_OK;
    if (end > shard * (size_t) d->world)
        return LISA_INVALID;
    TRN_CUDA_TRY(cudaEventRecord(d->ev, 0));
    TRN_CUDA_TRY(cudaStreamWaitEvent(d->stream, d->ev, 0));
    ncclResult_t r = ncclGroupStart();
    for (size_t p = begin; p < end && r == ncclSuccess;) {
        int owner = (int) (p / shard);
        size_t stop = ((size_t) owner + 1) * shard;
        stop = stop < end ? stop : end;
        /* other ranks: in place, so nothing of theirs is written */
        float *dst = owner == d->rank ? recv + (p - (size_t) owner * shard)
                                      : (float *) send + p;
        r = ncclReduce(send + p, dst, stop - p, ncclFloat32, ncclSum, owner,
                       d->comm, d->stream);
        p = stop;
    }
    ncclResult_t g = ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress)
        r = g;
    if (r != ncclSuccess && r != ncclInProgress) {
        s_abort(d, "reduce", ncclGetErrorString(r));
        return LISA_ERR;
    }
    d->pending = 1;
    return s_wait(d, "reduce", 0); /* enqueued; the stream runs on */
}

extern "C" lisa_rc_t
trn_dist_wait(trn_dist_t *d)
{
    if (d->broken)
        return LISA_UNAVAILABLE;
    if (!d->pending)
        return LISA_OK;
    lisa_rc_t rc = s_wait(d, "gradient reduction", 1);
    d->pending = 0;
    return rc;
}
