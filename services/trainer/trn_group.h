/*
 * trn_group: the trainer's ranks talking over ZeroMQ.
 *
 * Rank 0 binds a ROUTER on the bootstrap endpoint; every other rank
 * connects a DEALER and sends a BootstrapJoin (its rank, the world size,
 * the run id, a digest of its settings and model, its engine URL). Once
 * every rank has joined, rank 0 answers each with a BootstrapAssign (the
 * NCCL unique id when the backend uses one, every rank's engine URL). A
 * rank that does not fit (wrong world size, a rank taken twice, other
 * settings or run id) is answered with an error and fails rank 0 too.
 *
 * The same socket then carries rank 0's RankCommands (proto/lisa.proto).
 * Every other rank answers each with one final RankResult of the same
 * seq. Inside a command, sums across ranks (trn_group_sum, the step's
 * trn_comm_t) go as: each other rank sends a partial RankResult with its
 * values, rank 0 adds them to its own in rank order and sends the total
 * back as a RANK_OP_SUM command, so every rank gets the same bits.
 *
 * A rank leaves only after rank 0's STOP. Nothing waits forever: the
 * bootstrap and every answer have a deadline; a peer that disconnects
 * after the bootstrap (socket monitor; ZeroMQ heartbeats notice a silent
 * one) ends any wait at once with an error;
 * rank 0 can add a liveness check of the ranks it launched itself.
 */
#ifndef TRN_GROUP_H
#define TRN_GROUP_H

#include "lisa.pb-c.h"
#include "lisa/lisa_rc.h"
#include "trn_model.h"
#include "trn_step.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#define TRN_GROUP_ID_BYTES  128
#define TRN_GROUP_MAX_WORLD 1024
/* Default bound of one frame (a batch of trajectories or a CPU model's
 * gradient as doubles). */
#define TRN_GROUP_MAX_FRAME (512u * 1024u * 1024u)

typedef struct trn_group trn_group_t;

typedef struct {
    int rank, world;      /* 0 <= rank < world <= TRN_GROUP_MAX_WORLD */
    const char *endpoint; /* rank 0: bind ("tcp://127.0.0.1:*" picks a
                             port); others: connect */
    const char *run_id;   /* may be "" */
    const char *digest;   /* settings + model; must match rank 0's */
    const char *engine_url;
    int timeout_ms;          /* the bootstrap, and each answer of a command */
    size_t max_frame;        /* 0: TRN_GROUP_MAX_FRAME */
    int (*alive)(void *ctx); /* rank 0, optional: 0 when a rank it
                                launched is gone */
    void *alive_ctx;
    volatile sig_atomic_t *stop; /* optional: set to end waits */
} trn_group_cfg_t;

/* Binds (rank 0) or connects (others). NULL on error (err says why). */
trn_group_t *trn_group_new(const trn_group_cfg_t *cfg, trn_err_t *err);

/* Rank 0: tells the others the run is over (RANK_OP_STOP, reason 0 when
 * `ok`, else 1) and waits briefly for their answers. Safe to call twice. */
void trn_group_stop(trn_group_t *g, bool ok);

/* Rank 0 sends STOP (failed) if it has not stopped the group yet; closes
 * the socket and frees. Safe on NULL and twice. */
void trn_group_destroy(trn_group_t **g);

int trn_group_rank(const trn_group_t *g);
int trn_group_world(const trn_group_t *g);
/* The endpoint as bound or connected (rank 0: the port resolved). */
const char *trn_group_endpoint(const trn_group_t *g);

/* Sets what this rank tells the others at the join (before it): its
 * engine URL and its settings digest (they replace the cfg's). */
lisa_rc_t trn_group_set_identity(trn_group_t *g, const char *engine_url,
                                 const char *digest) LISA_NODISCARD;

/* Rank 0: waits for every other rank to join and assigns `id`
 * (TRN_GROUP_ID_BYTES bytes, or NULL when the backend needs none). Other
 * ranks: join and wait for the assignment; `id` (may be NULL) receives
 * rank 0's id and *have_id whether there was one. */
lisa_rc_t trn_group_join(trn_group_t *g, uint8_t *id, bool *have_id,
                         trn_err_t *err) LISA_NODISCARD;
/* Engine URL of rank r after the join ("" when unknown). */
const char *trn_group_engine_url(const trn_group_t *g, int r);

/* Rank 0: sends `cmd` (its seq is set here) to every other rank. */
lisa_rc_t trn_group_command(trn_group_t *g, Lisa__RankCommand *cmd,
                            trn_err_t *err) LISA_NODISCARD;
/* Rank 0: waits for every rank's final answer to the last command;
 * LISA_ERR with the first failing rank's error in err. */
lisa_rc_t trn_group_finish(trn_group_t *g, trn_err_t *err) LISA_NODISCARD;

/* Other ranks: waits for the next command (no deadline: rank 0 may be
 * waiting for rollouts; ends on rank 0's disconnect or *cfg.stop).
 * *cmd is freed with trn_group_free_command. */
lisa_rc_t trn_group_next(trn_group_t *g, Lisa__RankCommand **cmd,
                         trn_err_t *err) LISA_NODISCARD;
void trn_group_free_command(Lisa__RankCommand **cmd);
/* Other ranks: the final answer to the current command. */
lisa_rc_t trn_group_reply(trn_group_t *g, lisa_rc_t rc,
                          const char *error) LISA_NODISCARD;

/* Every rank, inside a command, in the same order: in-place sum of n
 * values over the ranks (all get rank 0's total). */
lisa_rc_t trn_group_sum(trn_group_t *g, double *v, size_t n,
                        trn_err_t *err) LISA_NODISCARD;

/* 1 while no peer has gone (drains the disconnect monitor; rank 0 also
 * asks its liveness check); for waits outside the group, such as a
 * device collective. */
int trn_group_peers_ok(void *g);

/* The group as a step's trn_comm_t (valid while g lives). */
trn_comm_t trn_group_comm(trn_group_t *g);

#endif
