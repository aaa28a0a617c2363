/*
 * agt_heartbeat: pthread + condition variable on the monotonic clock, so
 * stop() wakes the thread at once instead of waiting out the period.
 */
#include "agt_heartbeat.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct agt_heartbeat {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    char note[128];
    unsigned interval_ms;
    atomic_bool *cancel;
    agt_gateway_t *gw;
    _Atomic uint64_t acked;
    _Atomic uint64_t failed;
};

static void
s_beat(agt_heartbeat_t *hb)
{
    char note[128];
    pthread_mutex_lock(&hb->mu);
    memcpy(note, hb->note, sizeof note);
    pthread_mutex_unlock(&hb->mu);
    json_t *body = json_pack("{s:s}", "note", note);
    long timeout = hb->interval_ms < 10000 ? (long) hb->interval_ms : 10000L;
    if (timeout < 1000)
        timeout = 1000;
    agt_reply_t rep;
    lisa_rc_t rc = agt_gateway_call(hb->gw, "POST", "/lisa/v1/heartbeat", body,
                                    0, timeout, &rep);
    json_decref(body);
    if (rc == LISA_OK) {
        atomic_fetch_add(&hb->acked, 1);
        if (json_is_true(json_object_get(rep.body, "cancel"))) {
            lisa_log_warn("heartbeat: the gateway cancelled the attempt");
            atomic_store(hb->cancel, true);
        }
    } else {
        atomic_fetch_add(&hb->failed, 1);
        lisa_log_warn("heartbeat failed: %s", rep.error);
        if (rc == LISA_CONFLICT || rc == LISA_UNAUTHORIZED) {
            lisa_log_warn("heartbeat: attempt closed or token refused; "
                          "stopping");
            atomic_store(hb->cancel, true);
        }
    }
    agt_reply_clear(&rep);
}

static void *
s_run(void *arg)
{
    agt_heartbeat_t *hb = arg;
    pthread_mutex_lock(&hb->mu);
    while (!hb->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += hb->interval_ms / 1000;
        ts.tv_nsec += (long) (hb->interval_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        int w = 0;
        while (!hb->stop && w == 0)
            w = pthread_cond_timedwait(&hb->cv, &hb->mu, &ts);
        if (hb->stop)
            break;
        pthread_mutex_unlock(&hb->mu);
        s_beat(hb);
        pthread_mutex_lock(&hb->mu);
    }
    pthread_mutex_unlock(&hb->mu);
    return NULL;
}

agt_heartbeat_t *
agt_heartbeat_start(const agt_gateway_cfg_t *gw, unsigned interval_ms,
                    atomic_bool *cancel)
{
    if (!gw || !interval_ms || !cancel)
        return NULL;
    agt_heartbeat_t *hb = lisa_calloc(1, sizeof *hb);
    hb->gw = agt_gateway_new(gw);
    if (!hb->gw) {
        lisa_free(&hb);
        return NULL;
    }
    hb->interval_ms = interval_ms;
    hb->cancel = cancel;
    snprintf(hb->note, sizeof hb->note, "starting");
    pthread_mutex_init(&hb->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&hb->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&hb->thread, NULL, s_run, hb) != 0) {
        lisa_log_error("heartbeat: cannot start the thread");
        pthread_cond_destroy(&hb->cv);
        pthread_mutex_destroy(&hb->mu);
        agt_gateway_destroy(&hb->gw);
        lisa_free(&hb);
        return NULL;
    }
    return hb;
}

void
agt_heartbeat_note(agt_heartbeat_t *hb, const char *note)
{
    if (!hb || !note)
        return;
    pthread_mutex_lock(&hb->mu);
    snprintf(hb->note, sizeof hb->note, "%s", note);
    pthread_mutex_unlock(&hb->mu);
}

uint64_t
agt_heartbeat_acked(agt_heartbeat_t *hb)
{
    return hb ? atomic_load(&hb->acked) : 0;
}

uint64_t
agt_heartbeat_failed(agt_heartbeat_t *hb)
{
    return hb ? atomic_load(&hb->failed) : 0;
}

void
agt_heartbeat_stop(agt_heartbeat_t **hbp)
{
    if (!hbp || !*hbp)
        return;
    agt_heartbeat_t *hb = *hbp;
    pthread_mutex_lock(&hb->mu);
    hb->stop = 1;
    pthread_cond_signal(&hb->cv);
    pthread_mutex_unlock(&hb->mu);
    pthread_join(hb->thread, NULL);
    pthread_cond_destroy(&hb->cv);
    pthread_mutex_destroy(&hb->mu);
    agt_gateway_destroy(&hb->gw);
    lisa_free(hbp);
}
