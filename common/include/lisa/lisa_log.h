/*
 * lisa_log: one line per event on stderr, for humans and log collectors.
 *
 *   2026-11-30T10:00:00.123Z broker INFO [req=42 rollout=r-1] claimed 3
 *
 * The service name is set once at start-up; the level can change at run
 * time (lisa_log_set_level, or LISA_LOG_LEVEL in the environment).
 * Context ids are passed per call so that a line is greppable by request
 * or rollout without thread-local magic.
 */
#ifndef LISA_LOG_H
#define LISA_LOG_H

#include "lisa/lisa_rc.h"

#include <stdbool.h>

typedef enum {
    LISA_LOG_ERROR = 0,
    LISA_LOG_WARN = 1,
    LISA_LOG_INFO = 2,
    LISA_LOG_DEBUG = 3
} lisa_log_level_t;

/* Sets the service name printed on every line (copied; at most 31 bytes). */
void lisa_log_set_service(const char *name);
/* Sets the least severe level that is printed. */
void lisa_log_set_level(lisa_log_level_t level);
/* Current level. */
lisa_log_level_t lisa_log_level(void);
/* Parses "error|warn|info|debug" (case-insensitive); LISA_INVALID otherwise. */
lisa_rc_t lisa_log_level_parse(const char *s, lisa_log_level_t *out);
/* True when a line at `level` would be printed (skip costly formatting). */
bool lisa_log_enabled(lisa_log_level_t level);
/* Redirects output to a file descriptor (tests); -1 restores stderr. */
void lisa_log_set_fd(int fd);

/* Writes one line; `ctx` (may be NULL) is printed in brackets, e.g.
 * "req=42 rollout=r-1". Newlines in the message are escaped. */
void lisa_log_write(lisa_log_level_t level, const char *ctx, const char *fmt,
                    ...) LISA_PRINTF(3, 4);

#define lisa_log_error(...) lisa_log_write(LISA_LOG_ERROR, NULL, __VA_ARGS__)
#define lisa_log_warn(...)  lisa_log_write(LISA_LOG_WARN, NULL, __VA_ARGS__)
#define lisa_log_info(...)  lisa_log_write(LISA_LOG_INFO, NULL, __VA_ARGS__)
#define lisa_log_debug(...) lisa_log_write(LISA_LOG_DEBUG, NULL, __VA_ARGS__)

#endif
