/*
 * ctl_logcap: what a local sandbox writes to its stdout and stderr, kept
 * on the host up to a byte cap per attempt.
 *
 * The sandbox's output is a pipe; a thread of this module reads every
 * pipe (one epoll set) and appends to the attempt's log file until the
 * file holds `cap` bytes less a tail's worth; past that it keeps only the
 * last `tail` bytes in memory and counts the rest. When the pipe ends
 * (every writer gone) or the sandbox is removed, the tail follows a note
 * saying how many bytes were dropped, so the log's last line (the one a
 * failure report quotes) is still the sandbox's own last line. Nothing a
 * sandbox prints can fill the host's disk or stall the controller's
 * loop: the thread never blocks on a pipe, and a writer that outruns it
 * waits on its own full pipe.
 */
#ifndef CTL_LOGCAP_H
#define CTL_LOGCAP_H

#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct ctl_logcap ctl_logcap_t;

/* A pump keeping at most cap_bytes (>= 4 KiB) per log; starts its
 * thread. NULL when the thread or the epoll set cannot be made. */
ctl_logcap_t *ctl_logcap_new(uint64_t cap_bytes);

/* Stops the thread, finishes every open log, frees *c; NULL-safe. */
void ctl_logcap_destroy(ctl_logcap_t **c);

/* Starts pumping pipe `rfd` into `logfd` under `name` (both consumed,
 * also on failure). LISA_CONFLICT when name is open already. */
lisa_rc_t ctl_logcap_add(ctl_logcap_t *c, const char *name, int rfd,
                         int logfd) LISA_NODISCARD;

/* Reads what the pipe of `name` holds now; when its writers are gone, or
 * `force`, writes the tail and the note and closes the log. No-op for an
 * unknown name. */
void ctl_logcap_finish(ctl_logcap_t *c, const char *name, bool force);

/* Bytes of `name`'s output dropped so far (0 when unknown). */
uint64_t ctl_logcap_dropped(ctl_logcap_t *c, const char *name);

#endif
