/*
 * trn_pool: workers wait on a condition variable for a new loop
 * (a generation counter), then take task indices from a shared atomic
 * counter until none are left; the last one to finish wakes the caller.
 * Dynamic claiming keeps threads busy when tasks differ in cost (causal
 * attention rows, for one).
 */
#include "trn_pool.h"

#include "lisa/lisa_mem.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct trn_pool {
    int nworkers;
    pthread_t *workers;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    unsigned long gen;
    bool stop;
    trn_task_fn fn;
    void *ctx;
    size_t n;
    atomic_size_t next;
    int busy; /* workers still inside the current loop */
};

static void
s_drain(trn_pool_t *p)
{
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n)
            break;
        p->fn(p->ctx, i);
    }
}

static void *
s_worker(void *arg)
{
    trn_pool_t *p = arg;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        s_drain(p);
        pthread_mutex_lock(&p->mu);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

trn_pool_t *
trn_pool_new(int threads)
{
    trn_pool_t *p = lisa_calloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next, 0);
    int nw = threads > 1 ? threads - 1 : 0;
    p->workers = lisa_calloc((size_t) (nw ? nw : 1), sizeof *p->workers);
    for (int i = 0; i < nw; i++) {
        if (pthread_create(&p->workers[i], NULL, s_worker, p) != 0)
            break;
        p->nworkers++;
    }
    return p;
}

void
trn_pool_destroy(trn_pool_t **pp)
{
    if (!pp || !*pp)
        return;
    trn_pool_t *p = *pp;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++)
        pthread_join(p->workers[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    lisa_free(&p->workers);
    lisa_free(pp);
}

int
trn_pool_threads(const trn_pool_t *p)
{
    return p->nworkers + 1;
}

void
trn_pool_run(trn_pool_t *p, size_t n, trn_task_fn fn, void *ctx)
{
    if (n == 0)
        return;
    if (p->nworkers == 0 || n == 1) {
        for (size_t i = 0; i < n; i++)
            fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    atomic_store(&p->next, 0);
    p->busy = p->nworkers;
    p->gen++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    s_drain(p);
    pthread_mutex_lock(&p->mu);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
