/*
 * trn_dp: data-parallel training across the trainer's ranks.
 *
 * Rank 0 runs the RL loop (trn_loop) on a backend wrapped by
 * trn_dp_wrap: every operation that trains or gathers (train_step,
 * logprobs, save, save_optim) first sends the matching RankCommand to the
 * other ranks (the whole batch for a step), then runs on rank 0's share
 * with the group as the step's trn_comm_t, then waits for every rank's
 * answer. Generation passes through: each rank serves its own engine.
 *
 * The other ranks run trn_dp_follow: take a command, pause their engine,
 * run the same operation on their share of the batch (the collectives
 * meet rank 0's), answer, resume their engine (after a step, at the new
 * policy version). Saving is rank 0's: the others only take part in
 * gathering the sharded state.
 */
#ifndef TRN_DP_H
#define TRN_DP_H

#include "trn_backend.h"
#include "trn_engine.h"
#include "trn_group.h"

/* Rank 0's backend over `inner` (owned from now on: destroying the
 * wrapper destroys it). `engine` is rank 0's (its policy version names
 * the version after a step); `g` is not owned and must outlive the
 * wrapper. */
trn_backend_t *trn_dp_wrap(trn_backend_t *inner, trn_group_t *g,
                           trn_engine_t *engine);

/* Another rank's loop until rank 0's STOP: LISA_OK when the run ended
 * well, LISA_ERR when rank 0 stopped it after a failure, else the
 * group's error (rank 0 gone, bad message). `cfg` is this rank's step
 * configuration (the same settings as rank 0's). */
lisa_rc_t trn_dp_follow(trn_backend_t *b, trn_group_t *g, trn_engine_t *engine,
                        const trn_step_cfg_t *cfg, int pause_timeout_ms,
                        trn_err_t *err) LISA_NODISCARD;

#endif
