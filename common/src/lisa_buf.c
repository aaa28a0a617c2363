/*
 * lisa_buf: doubling growth up to the buffer's maximum.
 */
#include "lisa/lisa_buf.h"

#include "lisa/lisa_mem.h"

#include <string.h>

void
lisa_buf_put(lisa_buf_t *b, const void *s, size_t n)
{
    if (b->full)
        return;
    if (n > b->max - b->len) {
        b->full = true;
        return;
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
lisa_buf_free(lisa_buf_t *b)
{
    lisa_free(&b->p);
    b->len = b->cap = 0;
    b->full = false;
}
