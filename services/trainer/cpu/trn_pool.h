/*
 * trn_pool: a small fixed pool of worker threads for data-parallel loops.
 *
 * The CPU backend splits each big matmul into independent tasks; the pool
 * runs task indices 0..n-1 on its workers and the calling thread, and
 * returns when all are done. Tasks must not depend on each other. One
 * parallel loop runs at a time per pool (the model owns its pool).
 */
#ifndef TRN_POOL_H
#define TRN_POOL_H

#include <stddef.h>

typedef struct trn_pool trn_pool_t;

/* A task: called with the loop's context and a task index. */
typedef void (*trn_task_fn)(void *ctx, size_t task);

/* A pool running loops on `threads` threads in all (the caller counts as
 * one; threads <= 1 means no workers). */
trn_pool_t *trn_pool_new(int threads);

/* Stops and joins the workers; safe on NULL and twice. */
void trn_pool_destroy(trn_pool_t **pool);

/* Threads a loop runs on (workers + the caller). */
int trn_pool_threads(const trn_pool_t *pool);

/* Runs fn(ctx, i) for i in [0, n) and waits for all of them. */
void trn_pool_run(trn_pool_t *pool, size_t n, trn_task_fn fn, void *ctx);

#endif
