/*
 * agt_exit: the agent's exit statuses, one table.
 *
 * The agent never exits silently: every path ends with a log line and one
 * of these codes, so the controller can tell an infrastructure failure
 * (retry the attempt) from the agent's own end (the result is already
 * posted, or the task itself is bad). Codes stay below 64 so they are not
 * confused with a shell's 126/127 or a signal's 128+N.
 */
#ifndef AGT_EXIT_H
#define AGT_EXIT_H

typedef enum {
    AGT_EXIT_OK = 0,           /* result posted (any end reason but error) */
    AGT_EXIT_INTERNAL = 1,     /* bug or resource failure inside the agent */
    AGT_EXIT_USAGE = 2,        /* bad configuration */
    AGT_EXIT_GATEWAY = 3,      /* gateway unreachable: no task fetched */
    AGT_EXIT_UNAUTHORIZED = 4, /* the gateway refused the attempt token */
    AGT_EXIT_TASK = 5,         /* the task is malformed or unsafe */
    AGT_EXIT_TESTBED = 6,      /* the input files could not be written */
    AGT_EXIT_MODEL = 7,        /* model calls kept failing (transient
                                  errors); no result posted */
    AGT_EXIT_RESULT = 8,       /* the result could not be posted */
    AGT_EXIT_CANCELLED = 9,    /* the gateway cancelled or closed the
                                  attempt */
    AGT_EXIT_ERROR_POSTED = 10 /* ended on a non-transient error (e.g. the
                                  gateway refused a request); result posted
                                  with end_reason "error" */
} agt_exit_t;

/* Short name of an exit code ("result"); "unknown" when not in the table. */
const char *agt_exit_name(int code);

/* True when the failure is the infrastructure's (worth a new attempt). */
int agt_exit_retryable(int code);

#endif
