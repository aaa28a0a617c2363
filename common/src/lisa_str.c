/*
 * lisa_str: prefix and suffix tests (see the header).
 */
#include "lisa/lisa_str.h"

#include <string.h>

bool
lisa_str_starts(const char *s, size_t n, const char *prefix)
{
    size_t k = strlen(prefix);
    return n >= k && memcmp(s, prefix, k) == 0;
}

bool
lisa_str_ends(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}
