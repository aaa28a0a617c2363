/*
 * brk_arena tests. The first test is the usage example.
 */
#include "brk_arena.h"
#include "lisa.pb-c.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

Test(brk_arena, usage)
{
    brk_arena_t *a = brk_arena_new();
    char *s = brk_arena_strdup(a, "hello");
    cr_assert_str_eq(s, "hello");
    int *v = brk_arena_alloc(a, 10 * sizeof *v);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(v[i], 0); /* zeroed */
    brk_arena_reset(a);        /* everything above is gone */
    brk_arena_destroy(&a);
    brk_arena_destroy(&a);
    cr_assert_null(a);
}

Test(brk_arena, large_and_many_allocations_are_aligned)
{
    brk_arena_t *a = brk_arena_new();
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 1000; i++) {
            void *p = brk_arena_alloc(a, (size_t) (i % 97) + 1);
            cr_assert_eq((uintptr_t) p % 16, 0);
        }
        char *big = brk_arena_alloc(a, 1u << 20);
        memset(big, 7, 1u << 20);
        cr_assert_str_eq(brk_arena_strndup(a, "abcdef", 3), "abc");
        cr_assert_str_eq(brk_arena_strdup(a, NULL), "");
        brk_arena_reset(a);
    }
    brk_arena_destroy(&a);
}

Test(brk_arena, owns_unpacked_messages)
{
    Lisa__Reward r = LISA__REWARD__INIT;
    r.value = 0.5;
    uint8_t buf[64];
    size_t n = lisa__reward__pack(&r, buf);
    brk_arena_t *a = brk_arena_new();
    for (int i = 0; i < 200; i++) {
        Lisa__Reward *u = lisa__reward__unpack(NULL, n, buf);
        cr_assert_float_eq(u->value, 0.5, 1e-9);
        brk_arena_own(a, &u->base);
    }
    brk_arena_reset(a); /* frees them: ASan would report a leak otherwise */
    brk_arena_own(a, NULL);
    brk_arena_destroy(&a);
}
