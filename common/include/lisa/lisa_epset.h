/*
 * lisa_epset: an epoll set run inside a czmq zloop.
 *
 * A client that watches many sockets keeps them in one epoll set of its
 * own, and the zloop polls only that set's descriptor: adding, changing or
 * dropping interest in a socket is one epoll_ctl, never a rebuild of the
 * zloop's poll set. When the set is readable, one bounded batch of ready
 * events (LISA_EPSET_BATCH) is taken with a non-blocking epoll_wait and
 * each is handed to on_event, on the loop's thread, with the data it was
 * registered with; on_batch (optional) then runs once, after the batch,
 * where a client frees what its events closed. Events beyond one batch stay
 * ready and come on the loop's next turn.
 *
 * The set owns nothing of what it watches: closing a descriptor is the
 * caller's, after lisa_epset_del. Nothing is allocated per event.
 *
 *     lisa_epset_t *set = lisa_epset_new(loop, on_event, NULL, self);
 *     lisa_epset_add(set, fd, EPOLLIN, (epoll_data_t){.ptr = conn});
 *     ...  on_event(data, events, self) runs from zloop_start ...
 *     lisa_epset_del(set, fd);
 *     lisa_epset_destroy(&set);
 */
#ifndef LISA_EPSET_H
#define LISA_EPSET_H

#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#define LISA_EPSET_BATCH 64 /* events taken per readable turn */

typedef struct lisa_epset lisa_epset_t;

/* One ready descriptor: data as registered, events as epoll reports them
 * (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP ...). */
typedef void(lisa_epset_event_fn)(epoll_data_t data, uint32_t events,
                                  void *arg);

/* After each batch of on_event calls. */
typedef void(lisa_epset_batch_fn)(void *arg);

/* A new empty set polled by loop (tolerant: an error on the set's
 * descriptor does not end the loop). on_event is required, on_batch may be
 * NULL. NULL (logged) when the set or its poller cannot be made. */
lisa_epset_t *lisa_epset_new(zloop_t *loop, lisa_epset_event_fn *on_event,
                             lisa_epset_batch_fn *on_batch, void *arg);

/* Ends the poller and closes the set's descriptor; *self_p becomes NULL.
 * The descriptors still in the set are left open. NULL is a no-op. */
void lisa_epset_destroy(lisa_epset_t **self_p);

/* Watches fd for events with data. LISA_ERR (errno kept: EEXIST when fd is
 * in the set already) or LISA_INVALID. */
lisa_rc_t lisa_epset_add(lisa_epset_t *self, int fd, uint32_t events,
                         epoll_data_t data);

/* Changes what fd is watched for, and its data. LISA_ERR (errno kept:
 * ENOENT when fd is not in the set) or LISA_INVALID. */
lisa_rc_t lisa_epset_mod(lisa_epset_t *self, int fd, uint32_t events,
                         epoll_data_t data);

/* Stops watching fd; one not in the set (or a NULL set) is ignored. */
void lisa_epset_del(lisa_epset_t *self, int fd);

/* Whether registered data belongs to key (lisa_epset_skip's test). */
typedef bool(lisa_epset_match_fn)(epoll_data_t data, const void *key);

/* From inside on_event: the later events of the current batch whose data
 * match(data, key) are not handed out (a client whose event may close a
 * connection with several descriptors drops that connection's other
 * events; level-triggered, what is still ready comes again). Outside a
 * batch, nothing. */
void lisa_epset_skip(lisa_epset_t *self, lisa_epset_match_fn *match,
                     const void *key);

#endif
