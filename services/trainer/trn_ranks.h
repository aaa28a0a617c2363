/*
 * trn_ranks: which rank this process is, and the ranks it launches.
 *
 * A trainer runs as one process per GPU rank. With
 * trainer.n_gpus_per_node=G the process started by the operator is its
 * node's first rank and launches the other G - 1 itself: the same program
 * and command line plus their rank, world size and bootstrap endpoint,
 * one GPU each (LISA_CUDA_DEVICE), ending with their launcher whatever
 * kills it. Ranks started one by one (indexed pods) say trainer.rank,
 * trainer.world_size and trainer.bootstrap themselves.
 *
 * trn_ranks_plan turns the settings (and, in a launched rank, the
 * environment its launcher set) into this process's place in the world;
 * a trn_ranks_t owns the child processes: launching them, telling the
 * group when one died, and collecting them at the end (asked politely
 * first, then TERM, then KILL), so no rank outlives its launcher.
 */
#ifndef TRN_RANKS_H
#define TRN_RANKS_H

#include "lisa/lisa_rc.h"
#include "trn_run_cfg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct trn_ranks trn_ranks_t;

/* This process's place among the ranks. */
typedef struct {
    int64_t world;  /* ranks in all */
    int64_t rank;   /* this process's rank */
    int64_t launch; /* ranks of this node this process stands for (itself
                       and those it launches); 1: launches none */
    int local_rank; /* rank within the node (port and GPU offset) */
    bool spawned;   /* launched by another rank of this node */
} trn_ranks_plan_t;

/* Fills *plan from the settings (and LISA_TRN_SPAWNED /
 * LISA_TRN_LOCAL_RANK when launched). LISA_INVALID with the reason in err
 * when the numbers do not fit together; `train`: data parallel is only for
 * the train command. */
lisa_rc_t trn_ranks_plan(const trn_run_cfg_t *cfg, bool train,
                         trn_ranks_plan_t *plan, char *err,
                         size_t errlen) LISA_NODISCARD;

/* No launched ranks yet. NULL only when out of memory. */
trn_ranks_t *trn_ranks_new(void);

/* Collects what is left (see trn_ranks_reap, a short grace) and frees.
 * Safe on NULL and twice. */
void trn_ranks_destroy(trn_ranks_t **self_p);

/* Launches ranks first+1 .. first+n-1 of `world`: this program with
 * argv plus their rank, the world size and `endpoint` (the bootstrap they
 * connect to), on GPU LISA_CUDA_DEVICE+i. LISA_ERR when one cannot be
 * started (those started are kept, for reap). */
lisa_rc_t trn_ranks_spawn(trn_ranks_t *self, int argc, char **argv, int first,
                          int n, int world,
                          const char *endpoint) LISA_NODISCARD;

/* Ranks launched so far. */
int trn_ranks_count(const trn_ranks_t *self);

/* trn_group's liveness check (ctx: a trn_ranks_t): 0 once a launched rank
 * has exited (logged once), else 1. */
int trn_ranks_alive(void *ctx);

/* Waits up to grace_ms for the launched ranks to leave (they do after
 * rank 0's STOP), then TERMs and after 5 s KILLs those left. Returns how
 * many failed (a nonzero exit, a signal, or one seen gone earlier). */
int trn_ranks_reap(trn_ranks_t *self, int grace_ms);

#endif
