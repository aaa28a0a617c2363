/*
 * lisa_http_server tests in loop-driven mode: the whole lisa_http_server
 * suite (limits, slow-loris cut, deferred answers from other threads, SSE
 * streams, shutdown) runs again with every server driven by a zloop on a
 * thread of its own (config.loop_driven), created and destroyed on that
 * thread as the contract asks. Tests that bring their own loop keep it.
 */
#include "lisa/lisa_http_client.h"
#include "lisa/lisa_http_server.h"

#include <czmq.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct {
    const lisa_http_server_config_t *cfg;
    lisa_http_server_t *srv;
    pthread_t th;
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    bool ready;
    atomic_bool stop;
} s_driver_t;

#define S_DRIVERS 16
static s_driver_t *s_drivers[S_DRIVERS];
static pthread_mutex_t s_drivers_mtx = PTHREAD_MUTEX_INITIALIZER;

static int
s_driver_check(zloop_t *loop, int timer_id, void *arg)
{
    (void) loop;
    (void) timer_id;
    s_driver_t *d = arg;
    return atomic_load(&d->stop) ? -1 : 0;
}

static void *
s_driver_main(void *arg)
{
    s_driver_t *d = arg;
    zloop_t *loop = zloop_new();
    lisa_http_server_config_t cfg = *d->cfg;
    cfg.loop = loop;
    cfg.loop_driven = true;
    lisa_http_server_t *srv = lisa_http_server_new(&cfg);
    pthread_mutex_lock(&d->mtx);
    d->srv = srv;
    d->ready = true;
    pthread_cond_signal(&d->cond);
    pthread_mutex_unlock(&d->mtx);
    if (srv) {
        zloop_timer(loop, 2, 0, s_driver_check, d);
        while (!atomic_load(&d->stop))
            (void) zloop_start(loop);
        lisa_http_server_destroy(&srv);
    }
    zloop_destroy(&loop);
    return NULL;
}

static lisa_http_server_t *
s_driven_new(const lisa_http_server_config_t *cfg)
{
    if (cfg->loop)
        return lisa_http_server_new(cfg);
    s_driver_t *d = calloc(1, sizeof(*d));
    d->cfg = cfg;
    pthread_mutex_init(&d->mtx, NULL);
    pthread_cond_init(&d->cond, NULL);
    pthread_create(&d->th, NULL, s_driver_main, d);
    pthread_mutex_lock(&d->mtx);
    while (!d->ready)
        pthread_cond_wait(&d->cond, &d->mtx);
    pthread_mutex_unlock(&d->mtx);
    lisa_http_server_t *srv = d->srv;
    if (!srv) {
        pthread_join(d->th, NULL);
        free(d);
        return NULL;
    }
    pthread_mutex_lock(&s_drivers_mtx);
    for (int i = 0; i < S_DRIVERS; i++)
        if (!s_drivers[i]) {
            s_drivers[i] = d;
            break;
        }
    pthread_mutex_unlock(&s_drivers_mtx);
    return srv;
}

static void
s_driven_destroy(lisa_http_server_t **srv_p)
{
    if (!srv_p || !*srv_p)
        return;
    s_driver_t *d = NULL;
    pthread_mutex_lock(&s_drivers_mtx);
    for (int i = 0; i < S_DRIVERS; i++)
        if (s_drivers[i] && s_drivers[i]->srv == *srv_p) {
            d = s_drivers[i];
            s_drivers[i] = NULL;
            break;
        }
    pthread_mutex_unlock(&s_drivers_mtx);
    if (!d) {
        lisa_http_server_destroy(srv_p);
        return;
    }
    *srv_p = NULL;
    atomic_store(&d->stop, true);
    pthread_join(d->th, NULL);
    pthread_mutex_destroy(&d->mtx);
    pthread_cond_destroy(&d->cond);
    free(d);
}

#define lisa_http_server_new     s_driven_new
#define lisa_http_server_destroy s_driven_destroy
#define S_LOOP_DRIVEN            true

#include "lisa_http_server_test.c"
