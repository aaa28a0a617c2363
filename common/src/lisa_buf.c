/*
 * lisa_buf: doubling growth up to the buffer's maximum.
 */
#include "lisa/lisa_buf.h"

#include "lisa/lisa_mem.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void
lisa_buf_put(lisa_buf_t *b, const void *s, size_t n)
{
    if (b->full)
        return;
    if (b->len > b->max || n > b->max - b->len) {
        b->full = true;
        if (!b->cut || b->len >= b->max)
            return;
        n = b->max - b->len; /* clip: keep what fits */
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = lisa_realloc(b->p, cap);
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void
lisa_buf_puts(lisa_buf_t *b, const char *s)
{
    lisa_buf_put(b, s, strlen(s));
}

void
lisa_buf_printf(lisa_buf_t *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t) n < sizeof small) {
        lisa_buf_put(b, small, (size_t) n);
        return;
    }
    char *big = lisa_malloc((size_t) n + 1);
    va_start(ap, fmt);
    (void) vsnprintf(big, (size_t) n + 1, fmt, ap);
    va_end(ap);
    lisa_buf_put(b, big, (size_t) n);
    lisa_free(&big);
}

char *
lisa_buf_take(lisa_buf_t *b)
{
    char *s = b->p ? b->p : lisa_strdup("");
    b->p = NULL;
    b->len = b->cap = 0;
    b->full = false;
    return s;
}

void
lisa_buf_free(lisa_buf_t *b)
{
    lisa_free(&b->p);
    b->len = b->cap = 0;
    b->full = false;
}
