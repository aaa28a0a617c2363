/*
 * lisa_epset: an epoll set run inside a czmq zloop (see the header).
 *
 * The zloop polls the set's descriptor for ZMQ_POLLIN; its handler takes
 * at most LISA_EPSET_BATCH events with a zero-timeout epoll_wait into a
 * stack array, so a busy set cannot starve the loop's other pollers and
 * timers, and no event costs an allocation or a syscall of its own.
 */
#include "lisa/lisa_epset.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

struct lisa_epset {
    zloop_t *loop;
    int epfd;
    zmq_pollitem_t item;
    bool polled;
    lisa_epset_event_fn *on_event;
    lisa_epset_batch_fn *on_batch;
    void *arg;
    struct epoll_event *batch; /* the batch being handed out, or NULL */
    int next, n;               /* its next event and its size */
};

static int
s_on_readable(zloop_t *loop, zmq_pollitem_t *item, void *arg)
{
    (void) loop;
    (void) item;
    lisa_epset_t *self = arg;
    struct epoll_event ev[LISA_EPSET_BATCH];
    int n = epoll_wait(self->epfd, ev, LISA_EPSET_BATCH, 0);
    self->batch = ev;
    self->n = n;
    for (int i = 0; i < n; i++) {
        self->next = i + 1;
        if (ev[i].events) /* 0: skipped by lisa_epset_skip */
            self->on_event(ev[i].data, ev[i].events, self->arg);
    }
    self->batch = NULL;
    if (self->on_batch)
        self->on_batch(self->arg);
    return 0;
}

lisa_epset_t *
lisa_epset_new(zloop_t *loop, lisa_epset_event_fn *on_event,
               lisa_epset_batch_fn *on_batch, void *arg)
{
    if (!loop || !on_event)
        return NULL;
    lisa_epset_t *self = lisa_calloc(1, sizeof *self);
    self->loop = loop;
    self->on_event = on_event;
    self->on_batch = on_batch;
    self->arg = arg;
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0) {
        lisa_log_error("epset: epoll: %s", strerror(errno));
        goto fail;
    }
    self->item.fd = self->epfd;
    self->item.events = ZMQ_POLLIN;
    if (zloop_poller(loop, &self->item, s_on_readable, self) != 0) {
        lisa_log_error("epset: cannot poll the epoll descriptor");
        goto fail;
    }
    zloop_poller_set_tolerant(loop, &self->item);
    self->polled = true;
    return self;
fail:
    lisa_epset_destroy(&self);
    return NULL;
}

void
lisa_epset_destroy(lisa_epset_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    lisa_epset_t *self = *self_p;
    *self_p = NULL;
    if (self->polled)
        zloop_poller_end(self->loop, &self->item);
    if (self->epfd >= 0)
        close(self->epfd);
    lisa_free(&self);
}

static lisa_rc_t
s_ctl(lisa_epset_t *self, int op, int fd, uint32_t events, epoll_data_t data)
{
    if (!self || fd < 0)
        return LISA_INVALID;
    struct epoll_event e = {.events = events, .data = data};
    return epoll_ctl(self->epfd, op, fd, &e) == 0 ? LISA_OK : LISA_ERR;
}

lisa_rc_t
lisa_epset_add(lisa_epset_t *self, int fd, uint32_t events, epoll_data_t data)
{
    return s_ctl(self, EPOLL_CTL_ADD, fd, events, data);
}

lisa_rc_t
lisa_epset_mod(lisa_epset_t *self, int fd, uint32_t events, epoll_data_t data)
{
    return s_ctl(self, EPOLL_CTL_MOD, fd, events, data);
}

void
lisa_epset_del(lisa_epset_t *self, int fd)
{
    if (self && fd >= 0)
        (void) epoll_ctl(self->epfd, EPOLL_CTL_DEL, fd, NULL);
}

void
lisa_epset_skip(lisa_epset_t *self, lisa_epset_match_fn *match, const void *key)
{
    if (!self || !self->batch || !match)
        return;
    for (int j = self->next; j < self->n; j++)
        if (self->batch[j].events && match(self->batch[j].data, key))
            self->batch[j].events = 0;
}
