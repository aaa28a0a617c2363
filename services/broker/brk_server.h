/*
 * brk_server: the rollout broker, one actor with one loop.
 *
 * Four sockets (RPC ROUTER, span PULL, event PUB, reward-worker ROUTER),
 * one SQLite store, one state table. Each loop iteration reads up to
 * group_max messages from the sockets, applies them inside one store
 * transaction, runs the timers (leases, deadlines, worker liveness, wait
 * deadlines), COMMITs, and only then sends the replies and publishes the
 * events it produced: a reply means the write behind it is durable.
 * Nothing in the loop blocks: waits are held as records and answered when
 * their rollouts end or their deadline passes; reward work is dispatched
 * to workers and its replies are just more messages.
 */
#ifndef BRK_SERVER_H
#define BRK_SERVER_H

#include "brk_config.h"
#include "lisa/lisa_rc.h"

#include <signal.h>

typedef struct brk_server_t brk_server_t;

/* Opens the store, binds the sockets and recovers open work (score jobs
 * of rollouts left in SCORING). `cfg` is borrowed for the server's life.
 * NULL on failure (logged). */
brk_server_t *brk_server_new(const brk_config_t *cfg);

/* Closes sockets and store; accepts NULL, sets *self to NULL. */
void brk_server_destroy(brk_server_t **self);

/* The endpoint actually bound for socket `which` ("rpc", "spans",
 * "events", "workers"), with the port resolved (borrowed). */
const char *brk_server_endpoint(const brk_server_t *self, const char *which);

/* Runs the loop until *stop becomes non-zero or czmq sees an interrupt.
 * Returns LISA_OK, or LISA_ERR when the store fails for good. */
lisa_rc_t brk_server_run(brk_server_t *self, volatile sig_atomic_t *stop);

#endif
