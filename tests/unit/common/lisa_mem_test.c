/*
 * lisa_mem tests: the allocation wrappers copy, zero, resize and free as
 * documented, and abort (rather than return NULL) when a size overflows.
 */
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

Test(lisa_mem, usage_example)
{
    char *s = lisa_strdup("rollout");
    cr_assert_str_eq(s, "rollout");
    lisa_free(&s);
    cr_assert_null(s);
    lisa_free(&s); /* safe twice */
}

Test(lisa_mem, zero_sized_allocations_are_unique)
{
    void *a = lisa_malloc(0), *b = lisa_malloc(0);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_neq(a, b);
    lisa_free(&a);
    lisa_free(&b);
    void *c = lisa_calloc(0, 8);
    cr_assert_not_null(c);
    lisa_free(&c);
}

Test(lisa_mem, calloc_zeroes_and_realloc_keeps)
{
    uint32_t *v = lisa_calloc(100, sizeof *v);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(v[i], 0);
    for (int i = 0; i < 100; i++)
        v[i] = (uint32_t) i * 3u;
    v = lisa_realloc(v, 1000 * sizeof *v);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(v[i], (uint32_t) i * 3u);
    lisa_free(&v);
    void *p = lisa_realloc(NULL, 16); /* like malloc */
    cr_assert_not_null(p);
    lisa_free(&p);
}

Test(lisa_mem, copies_are_terminated)
{
    char *a = lisa_strndup("abcdef", 3);
    cr_assert_str_eq(a, "abc");
    char *b = lisa_strndup("ab", 10); /* stops at the NUL */
    cr_assert_str_eq(b, "ab");
    const char raw[4] = {'x', 0, 'y', 'z'};
    char *c = lisa_memdup(raw, 4);
    cr_assert_eq(memcmp(c, raw, 4), 0);
    cr_assert_eq(c[4], 0);
    cr_assert_null(lisa_strdup(NULL));
    cr_assert_null(lisa_strndup(NULL, 3));
    lisa_free(&a);
    lisa_free(&b);
    lisa_free(&c);
}

Test(lisa_mem, calloc_overflow_aborts, .signal = SIGABRT)
{
    void *p = lisa_calloc(SIZE_MAX / 2, 4);
    (void) p;
}
