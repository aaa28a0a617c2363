/*
 * brk_call: helpers every broker module's handlers share (see brk_call.h).
 */
#include "brk_call.h"

#include <stdarg.h>
#include <stdio.h>

lisa_rc_t
brk_call_fail(char *err, lisa_rc_t rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lisa_verrf(err, BRK_ERR_LEN, fmt, ap);
    va_end(ap);
    return rc;
}

bool
brk_call_id_ok(const char *s)
{
    if (!s || !*s)
        return false;
    for (size_t n = 0; s[n]; n++)
        if (s[n] < 0x21 || s[n] > 0x7e || n >= BRK_MAX_ID)
            return false;
    return true;
}

uint64_t
brk_call_now_ms(void)
{
    return (uint64_t) zclock_time();
}
