/*
 * lisa_rc: names of return codes and their mapping onto wire codes.
 */
#include "lisa/lisa_rc.h"

#include "lisa.pb-c.h"

#include <stdio.h>

static const struct {
    lisa_rc_t rc;
    const char *name;
    int code;
} s_table[] = {
    {LISA_OK, "LISA_OK", LISA__CODE__CODE_OK},
    {LISA_ERR, "LISA_ERR", LISA__CODE__CODE_ERROR},
    {LISA_INVALID, "LISA_INVALID", LISA__CODE__CODE_INVALID},
    {LISA_NOTFOUND, "LISA_NOTFOUND", LISA__CODE__CODE_NOT_FOUND},
    {LISA_CONFLICT, "LISA_CONFLICT", LISA__CODE__CODE_CONFLICT},
    {LISA_TIMEOUT, "LISA_TIMEOUT", LISA__CODE__CODE_TIMEOUT},
    {LISA_AGAIN, "LISA_AGAIN", LISA__CODE__CODE_BUSY},
    {LISA_UNAVAILABLE, "LISA_UNAVAILABLE", LISA__CODE__CODE_UNAVAILABLE},
    {LISA_UNAUTHORIZED, "LISA_UNAUTHORIZED", LISA__CODE__CODE_UNAUTHORIZED},
    {LISA_TOOLARGE, "LISA_TOOLARGE", LISA__CODE__CODE_TOO_LARGE},
    {LISA_UNSUPPORTED, "LISA_UNSUPPORTED", LISA__CODE__CODE_UNSUPPORTED},
};

#define S_COUNT (sizeof s_table / sizeof s_table[0])

const char *
lisa_rc_str(lisa_rc_t rc)
{
    for (unsigned i = 0; i < S_COUNT; i++)
        if (s_table[i].rc == rc)
            return s_table[i].name;
    return "LISA_UNKNOWN";
}

int
lisa_rc_to_code(lisa_rc_t rc)
{
    for (unsigned i = 0; i < S_COUNT; i++)
        if (s_table[i].rc == rc)
            return s_table[i].code;
    return LISA__CODE__CODE_ERROR;
}

lisa_rc_t
lisa_rc_from_code(int code)
{
    for (unsigned i = 0; i < S_COUNT; i++)
        if (s_table[i].code == code)
            return s_table[i].rc;
    return LISA_ERR;
}

void
lisa_verrf(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (!err || errlen == 0)
        return;
    int n = vsnprintf(err, errlen, fmt, ap);
    if (n < 0)
        snprintf(err, errlen, "(unformattable reason)");
}

void
lisa_errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lisa_verrf(err, errlen, fmt, ap);
    va_end(ap);
}
