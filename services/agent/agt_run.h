/*
 * agt_run: one attempt from start to end: fetch the task, place its files,
 * heartbeat, run the episode, post the result, and say how it ended as an
 * exit code (agt_exit.h).
 */
#ifndef AGT_RUN_H
#define AGT_RUN_H

#include "agt_config.h"

/* Runs the attempt described by cfg; returns an agt_exit_t code. */
int agt_run(const agt_config_t *cfg);

#endif
