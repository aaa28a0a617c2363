/*
 * trn_err: how the trainer reports a refused input.
 *
 * One call formats the reason into the caller's trn_err_t (when given),
 * logs it as one line and counts it, and returns the code, so that a
 * failure path reads `return trn_fail(err, LISA_INVALID, "...", ...);`.
 */
#ifndef TRN_ERR_H
#define TRN_ERR_H

#include "trn_model.h"

#include <stdint.h>

/* Records the reason in err (may be NULL), logs it, returns rc. */
lisa_rc_t trn_fail(trn_err_t *err, lisa_rc_t rc, const char *fmt, ...)
    LISA_PRINTF(3, 4);

/* Failures recorded so far in this process. */
uint64_t trn_fail_count(void);

#endif
