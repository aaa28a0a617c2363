/*
 * lisa_str: prefix and suffix tests on counted strings (s[0..n), not
 * necessarily NUL-terminated), which the parsers of chat text, math
 * answers and word stems all ask.
 *
 *     if (lisa_str_starts(text, n, "<think>"))
 *         ...
 *     if (lisa_str_ends(word, n, "ing"))
 *         ...
 */
#ifndef LISA_STR_H
#define LISA_STR_H

#include <stdbool.h>
#include <stddef.h>

/* True when s[0..n) begins with the NUL-terminated prefix. */
bool lisa_str_starts(const char *s, size_t n, const char *prefix);
/* True when s[0..n) ends with the NUL-terminated suffix. */
bool lisa_str_ends(const char *s, size_t n, const char *suffix);

#endif
