/*
 * lisa_buf: a growable byte buffer with a hard maximum.
 *
 * Every buffer that input can grow has a bound: appending past `max` drops
 * the bytes and sets `full`, which the caller checks once at the end and
 * turns into an error ("output too large") instead of checking every
 * append. A buffer made with `cut` set instead keeps what fits of the
 * append that reaches the bound (and sets `full` too): text shown to a
 * model or a person is clipped, not refused. The contents are always
 * NUL-terminated. A value type: declare one on the stack with
 * LISA_BUF(max) (or LISA_BUF_CUT(max)), append, take it (lisa_buf_take)
 * or lisa_buf_free.
 */
#ifndef LISA_BUF_H
#define LISA_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *p;    /* contents (NULL until the first append), NUL-terminated */
    size_t len; /* bytes held */
    size_t cap; /* bytes allocated */
    size_t max; /* most bytes it may hold */
    bool full;  /* an append did not fit: the contents are incomplete */
    bool cut;   /* keep the part of an append that fits (see above) */
} lisa_buf_t;

/* An empty buffer bounded to `max` bytes. */
#define LISA_BUF(max_) ((lisa_buf_t){.max = (max_)})
/* An empty buffer that clips at `max` bytes. */
#define LISA_BUF_CUT(max_) ((lisa_buf_t){.max = (max_), .cut = true})

/* Appends n bytes (nothing once full; sets full when they would pass max). */
void lisa_buf_put(lisa_buf_t *b, const void *s, size_t n);
/* Appends a NUL-terminated string. */
void lisa_buf_puts(lisa_buf_t *b, const char *s);
/* Appends formatted text (as lisa_buf_put would the whole of it). */
void lisa_buf_printf(lisa_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Returns the contents (never NULL: "" when empty; the caller's, free
 * with lisa_free) and empties the buffer (max and cut are kept). */
char *lisa_buf_take(lisa_buf_t *b);
/* Frees the contents and empties the buffer (max and cut are kept). */
void lisa_buf_free(lisa_buf_t *b);

#endif
