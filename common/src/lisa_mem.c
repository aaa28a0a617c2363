/*
 * lisa_mem: the only place in lisa that calls the C allocator directly.
 */
#include "lisa/lisa_mem.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
s_die(size_t n, const char *file, int line)
{
    fprintf(stderr, "lisa: out of memory allocating %zu bytes at %s:%d\n", n,
            file, line);
    abort();
}

void *
lisa_malloc_at(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        s_die(n, file, line);
    return p;
}

void *
lisa_calloc_at(size_t c, size_t n, const char *file, int line)
{
    if (n && c > SIZE_MAX / n)
        s_die(SIZE_MAX, file, line);
    void *p = calloc(c ? c : 1, n ? n : 1);
    if (!p)
        s_die(c * n, file, line);
    return p;
}

void *
lisa_realloc_at(void *p, size_t n, const char *file, int line)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        s_die(n, file, line);
    return q;
}

char *
lisa_strdup_at(const char *s, const char *file, int line)
{
    if (!s)
        return NULL;
    return lisa_memdup_at(s, strlen(s), file, line);
}

char *
lisa_strndup_at(const char *s, size_t n, const char *file, int line)
{
    if (!s)
        return NULL;
    const char *end = memchr(s, 0, n);
    return lisa_memdup_at(s, end ? (size_t) (end - s) : n, file, line);
}

void *
lisa_memdup_at(const void *p, size_t n, const char *file, int line)
{
    char *q = lisa_malloc_at(n + 1, file, line);
    if (n)
        memcpy(q, p, n);
    q[n] = 0;
    return q;
}

void
lisa_free(void *pp)
{
    void **p = pp;
    if (p && *p) {
        free(*p);
        *p = NULL;
    }
}
