/*
 * trn_err: formats, logs and counts refused inputs (see trn_err.h).
 */
#include "trn_err.h"

#include "lisa/lisa_log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

static atomic_uint_fast64_t s_failures;

lisa_rc_t
trn_fail(trn_err_t *err, lisa_rc_t rc, const char *fmt, ...)
{
    char buf[TRN_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (err)
        snprintf(err->msg, sizeof err->msg, "%s", buf);
    atomic_fetch_add(&s_failures, 1);
    lisa_log_warn("trainer: %s (%s)", buf, lisa_rc_str(rc));
    return rc;
}

uint64_t
trn_fail_count(void)
{
    return (uint64_t) atomic_load(&s_failures);
}
