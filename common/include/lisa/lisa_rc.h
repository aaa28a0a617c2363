/*
 * lisa_rc: the one small vocabulary of return codes used across lisa.
 *
 * Every fallible function returns lisa_rc_t; callers write
 *     rc = f(); if (rc != LISA_OK) goto out;
 * The codes map one to one onto the wire's lisa.Code so that an error can
 * travel in a reply without translation tables scattered around services.
 *
 * A code says what went wrong; the reason, for people, goes into the
 * caller's (err, errlen) buffer through lisa_errf, the one formatter every
 * module uses for it (a NULL buffer is fine: nothing is written).
 */
#ifndef LISA_RC_H
#define LISA_RC_H

#include <stdarg.h>
#include <stddef.h>

#if defined(__GNUC__)
#define LISA_NODISCARD    __attribute__((warn_unused_result))
#define LISA_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define LISA_NODISCARD
#define LISA_PRINTF(f, a)
#endif

typedef enum {
    LISA_OK = 0,            /* success */
    LISA_ERR = -1,          /* internal error (I/O, allocation, library) */
    LISA_INVALID = -2,      /* bad input: malformed, out of range */
    LISA_NOTFOUND = -3,     /* a named thing does not exist */
    LISA_CONFLICT = -4,     /* not allowed in the current state */
    LISA_TIMEOUT = -5,      /* a deadline passed */
    LISA_AGAIN = -6,        /* not ready yet / busy: try again later */
    LISA_UNAVAILABLE = -7,  /* a dependency is down */
    LISA_UNAUTHORIZED = -8, /* missing, bad or expired credentials */
    LISA_TOOLARGE = -9,     /* exceeds a size bound */
    LISA_UNSUPPORTED = -10  /* unknown type or version */
} lisa_rc_t;

/* Short constant name of rc ("LISA_INVALID"); never NULL. */
const char *lisa_rc_str(lisa_rc_t rc);

/* Wire code (lisa.Code value) for rc. */
int lisa_rc_to_code(lisa_rc_t rc);

/* rc for a wire code (lisa.Code value); unknown codes map to LISA_ERR. */
lisa_rc_t lisa_rc_from_code(int code);

/* Formats a failure's reason into err[0..errlen), cut to fit and always
 * NUL-terminated; nothing when err is NULL or errlen is 0. */
void lisa_errf(char *err, size_t errlen, const char *fmt, ...)
    LISA_PRINTF(3, 4);
/* The same with a va_list, for wrappers that also log or count. */
void lisa_verrf(char *err, size_t errlen, const char *fmt, va_list ap)
    LISA_PRINTF(3, 0);

#endif
