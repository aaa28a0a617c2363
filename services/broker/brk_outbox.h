/*
 * brk_outbox: what the broker owes the world once a group commit is
 * durable, and the commit itself.
 *
 * Handlers never send. Their replies, events, newly finished rollouts and
 * score jobs to start or drop go here, pending until the loop iteration's
 * COMMIT. The commit moves them into a batch. With sync "normal" the
 * COMMIT is the durability point and the batch is flushed at once; with
 * sync "full" a syncer thread fdatasyncs the span log and the WAL, and the
 * batch waits for its answer while the loop goes on (several batches may
 * wait; they are flushed in order). If the COMMIT fails, everything
 * pending is thrown away: nothing was acknowledged, and clients retry.
 *
 * A flush publishes the batch's events, hands its score jobs and finished
 * rollouts to the sink (score dispatch, held waits; their replies join
 * the batch) and sends its replies. Span log segments a prune freed are
 * deleted here too, once the prune is durable.
 */
#ifndef BRK_OUTBOX_H
#define BRK_OUTBOX_H

#include "brk_store.h"
#include "lisa.pb-c.h"
#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct brk_outbox_t brk_outbox_t;

/* Who receives a durable batch's effects besides its sockets. */
typedef struct {
    void *arg;
    /* a rollout entered SCORING: start a score job */
    void (*adopt_job)(void *arg, const char *rollout_id, uint32_t attempt,
                      const char *data_source);
    /* a rollout left SCORING otherwise: forget its job */
    void (*drop_job)(void *arg, const char *rollout_id);
    /* rollouts that became terminal (may queue replies) */
    void (*finished)(void *arg, char *const *ids, size_t n);
    /* after batches were flushed: score jobs may be dispatched */
    void (*flushed)(void *arg);
} brk_outbox_sink_t;

/* Positions of the pending lists, to undo a failed request. */
typedef struct {
    size_t events, finished, jobs, drops;
} brk_outbox_mark_t;

/* `rpc` gets the replies and `pub` the events (both borrowed); with
 * full_sync a syncer thread is started on `store`. NULL on failure. */
brk_outbox_t *brk_outbox_new(brk_store_t *store, zsock_t *rpc, zsock_t *pub,
                             bool full_sync, const brk_outbox_sink_t *sink);

/* Stops the syncer, frees everything still pending (sends nothing). */
void brk_outbox_destroy(brk_outbox_t **self);

/* Queues a reply to `identity`; one whose code is not OK is counted as an
 * RPC error. */
void brk_outbox_reply(brk_outbox_t *self, zframe_t *identity, bool delim,
                      Lisa__Reply *rep);

/* Queues an error reply (with the empty body that matches request_body,
 * 0: none, so the caller sees which request failed). */
void brk_outbox_error(brk_outbox_t *self, zframe_t *identity, bool delim,
                      uint64_t request_id, uint32_t request_body, lisa_rc_t rc,
                      const char *why);

/* Queues an event on `topic`; its seq and time are set here. */
void brk_outbox_event(brk_outbox_t *self, const char *topic, Lisa__Event *ev);

void brk_outbox_finished(brk_outbox_t *self, const char *rollout_id);
void brk_outbox_job(brk_outbox_t *self, const char *rollout_id,
                    uint32_t attempt, const char *data_source);
void brk_outbox_drop_job(brk_outbox_t *self, const char *rollout_id);

/* Marks the pending lists; undo drops what was queued after the mark
 * (replies stay: the error reply of the failed request follows). */
brk_outbox_mark_t brk_outbox_mark(const brk_outbox_t *self);
void brk_outbox_undo(brk_outbox_t *self, const brk_outbox_mark_t *mark);

/* A prune in the open transaction freed span log segments. */
void brk_outbox_gc_after_commit(brk_outbox_t *self);

/* COMMITs the store's transaction and flushes or queues the batch.
 * LISA_ERR: the COMMIT failed (everything pending was dropped) or the
 * syncer is gone. */
lisa_rc_t brk_outbox_commit(brk_outbox_t *self) LISA_NODISCARD;

/* Whether a batch waits for the syncer (the loop then keeps its
 * transaction open, so one COMMIT per sync writes each page once). */
bool brk_outbox_syncing(const brk_outbox_t *self);

/* The syncer's socket to poll (NULL with sync "normal"). */
void *brk_outbox_syncer_handle(brk_outbox_t *self);

/* Reads the syncer's answers and flushes what became durable; LISA_ERR
 * when an fsync failed. */
lisa_rc_t brk_outbox_on_syncer(brk_outbox_t *self) LISA_NODISCARD;

/* At stop: commits what is open, syncs and flushes every batch. */
void brk_outbox_drain(brk_outbox_t *self);

/* The last event seq committed, replies pending, RPC errors counted. */
uint64_t brk_outbox_event_seq(const brk_outbox_t *self);
size_t brk_outbox_pending_replies(const brk_outbox_t *self);
uint64_t brk_outbox_errors(const brk_outbox_t *self);

#endif
