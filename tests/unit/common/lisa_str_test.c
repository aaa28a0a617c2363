/*
 * lisa_str: prefix and suffix tests on counted strings. The first test is
 * the usage example.
 */
#include "lisa/lisa_str.h"

#include <criterion/criterion.h>
#include <string.h>

Test(lisa_str, usage)
{
    const char *answer = "\\boxed{42}";
    size_t n = strlen(answer);
    cr_assert(lisa_str_starts(answer, n, "\\boxed{"));
    cr_assert(lisa_str_ends(answer, n, "}"));
    cr_assert_not(lisa_str_ends(answer, n, "{"));
}

Test(lisa_str, counted_not_terminated)
{
    /* only the first n bytes count: "abc" of "abcdef" */
    const char *s = "abcdef";
    cr_assert(lisa_str_ends(s, 3, "bc"));
    cr_assert_not(lisa_str_ends(s, 3, "ef"));
    cr_assert_not(lisa_str_starts(s, 3, "abcd"), "longer than n");
    cr_assert_not(lisa_str_ends(s, 2, "abc"), "longer than n");
}

Test(lisa_str, empty_sides)
{
    cr_assert(lisa_str_starts("", 0, ""));
    cr_assert(lisa_str_ends("", 0, ""));
    cr_assert(lisa_str_starts("x", 1, ""));
    cr_assert(lisa_str_ends("x", 1, ""));
    cr_assert_not(lisa_str_starts("", 0, "x"));
    cr_assert_not(lisa_str_ends("", 0, "x"));
}

Test(lisa_str, bytes_not_characters)
{
    /* a NUL inside the counted string is an ordinary byte */
    const char s[] = {'a', '\0', 'b'};
    cr_assert(lisa_str_ends(s, 3, "b"));
    cr_assert(lisa_str_starts(s, 3, "a"));
    cr_assert_not(lisa_str_starts(s, 3, "ab"));
}
