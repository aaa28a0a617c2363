/*
 * trn_pool tests: every task runs exactly once per loop, loops can follow
 * each other on the same pool, and a one-thread pool runs inline. The
 * first test is the usage example.
 */
#include "trn_pool.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <string.h>

static void
square(void *ctx, size_t i)
{
    long *out = ctx;
    out[i] = (long) (i * i);
}

Test(trn_pool, usage)
{
    trn_pool_t *pool = trn_pool_new(3);
    cr_assert_eq(trn_pool_threads(pool), 3);
    long out[100];
    trn_pool_run(pool, 100, square, out);
    for (size_t i = 0; i < 100; i++)
        cr_assert_eq(out[i], (long) (i * i));
    trn_pool_destroy(&pool);
    cr_assert_null(pool);
    trn_pool_destroy(&pool);
}

typedef struct {
    atomic_int hits[257];
} counts_t;

static void
count(void *ctx, size_t i)
{
    counts_t *c = ctx;
    atomic_fetch_add(&c->hits[i], 1);
}

Test(trn_pool, every_task_once_over_many_loops)
{
    trn_pool_t *pool = trn_pool_new(4);
    counts_t c;
    for (int i = 0; i < 257; i++)
        atomic_init(&c.hits[i], 0);
    for (int loop = 0; loop < 200; loop++)
        trn_pool_run(pool, (size_t) (loop % 257) + 1, count, &c);
    long total = 0;
    for (int i = 0; i < 257; i++)
        total += atomic_load(&c.hits[i]);
    long want = 0;
    for (int loop = 0; loop < 200; loop++)
        want += loop % 257 + 1;
    cr_assert_eq(total, want);
    cr_assert_eq(atomic_load(&c.hits[0]), 200);
    trn_pool_run(pool, 0, count, &c); /* nothing to do */
    trn_pool_destroy(&pool);
}

Test(trn_pool, single_thread_runs_inline)
{
    trn_pool_t *pool = trn_pool_new(0);
    cr_assert_eq(trn_pool_threads(pool), 1);
    long out[10];
    trn_pool_run(pool, 10, square, out);
    cr_assert_eq(out[9], 81);
    trn_pool_destroy(&pool);
}
