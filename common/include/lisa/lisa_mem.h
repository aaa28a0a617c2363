/*
 * lisa_mem: allocation wrappers.
 *
 * A service cannot do anything useful after the allocator fails, so these
 * abort with file and line instead of returning NULL (the redis / czmq
 * choice). That keeps every caller free of allocation-failure branches;
 * input-driven sizes are bounded before they reach here.
 */
#ifndef LISA_MEM_H
#define LISA_MEM_H

#include <stddef.h>

#define lisa_malloc(n)     lisa_malloc_at((n), __FILE__, __LINE__)
#define lisa_calloc(c, n)  lisa_calloc_at((c), (n), __FILE__, __LINE__)
#define lisa_realloc(p, n) lisa_realloc_at((p), (n), __FILE__, __LINE__)
#define lisa_strdup(s)     lisa_strdup_at((s), __FILE__, __LINE__)
#define lisa_strndup(s, n) lisa_strndup_at((s), (n), __FILE__, __LINE__)
#define lisa_memdup(p, n)  lisa_memdup_at((p), (n), __FILE__, __LINE__)

/* Returns n bytes (n may be 0: a unique non-NULL pointer); aborts on failure.
 */
void *lisa_malloc_at(size_t n, const char *file, int line);
/* Zeroed c*n bytes; aborts on failure or overflow of c*n. */
void *lisa_calloc_at(size_t c, size_t n, const char *file, int line);
/* Resizes p to n bytes; aborts on failure. */
void *lisa_realloc_at(void *p, size_t n, const char *file, int line);
/* Copy of s (NULL gives NULL). */
char *lisa_strdup_at(const char *s, const char *file, int line);
/* Copy of at most n bytes of s, always NUL-terminated. */
char *lisa_strndup_at(const char *s, size_t n, const char *file, int line);
/* Copy of n bytes at p, followed by a NUL byte for convenience. */
void *lisa_memdup_at(const void *p, size_t n, const char *file, int line);
/* Frees *pp and sets it to NULL; safe on NULL and twice. */
void lisa_free(void *pp);

#endif
