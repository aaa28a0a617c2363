/*
 * agt_exec: runs one shell command the way the recipe's execute_bash does,
 * with the bounds it lacks.
 *
 * Each call is a fresh `bash -c <command>` in the working directory (shell
 * state does not carry over; files do), with stdin from /dev/null and its
 * own process group. Output is captured per stream up to a bound: the first
 * and the last capture_bytes/2 bytes are kept and what lies between is
 * replaced by a marker, so memory stays bounded whatever the command
 * prints. On timeout or cancellation the whole process group is killed
 * (SIGKILL), so `sleep 1000 &` children do not outlive the call. When bash
 * exits but a background child keeps the pipes open, reading stops after a
 * short grace period.
 */
#ifndef AGT_EXEC_H
#define AGT_EXEC_H

#include "agt_jail.h"
#include "lisa/lisa_rc.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *cwd;           /* working directory (must exist) */
    unsigned timeout_ms;       /* wall-clock limit; 0: none */
    size_t capture_bytes;      /* per-stream capture bound (>= 64) */
    unsigned grace_ms;         /* read after bash exits (pipes held open) */
    const atomic_bool *cancel; /* may be NULL; when set, kill and return */
    const char *shell;         /* NULL: "bash" from PATH */
    const agt_jail_t *jail;    /* NULL: run beside the agent, unconfined */
} agt_exec_opts_t;

typedef struct {
    int exit_code;  /* exit status; 128+N if killed by signal N;
                       124 on timeout */
    bool timed_out; /* the timeout killed the group */
    bool cancelled; /* the cancel flag killed the group */
    char *out;      /* captured stdout (NUL-terminated, caller's) */
    size_t out_len;
    size_t out_total; /* bytes the command wrote to stdout */
    char *err;        /* captured stderr */
    size_t err_len;
    size_t err_total;
    long elapsed_ms;
} agt_exec_result_t;

/* Runs `cmd` under `opts`; fills *res (release with agt_exec_result_clear).
 * Returns LISA_OK when the command ran (whatever its exit code),
 * LISA_INVALID on bad options, LISA_ERR when it could not be started. */
lisa_rc_t agt_exec_run(const char *cmd, const agt_exec_opts_t *opts,
                       agt_exec_result_t *res) LISA_NODISCARD;

/* Frees the buffers of *res; safe twice. */
void agt_exec_result_clear(agt_exec_result_t *res);

#endif
