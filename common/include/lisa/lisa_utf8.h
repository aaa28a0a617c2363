/*
 * lisa_utf8: UTF-8 as a Rust `str` takes it, without ICU (the agent links
 * this and no ICU):
 *
 * - Strict validation: no overlongs, no surrogates, nothing above
 *   U+10FFFF.
 * - Lossy decoding that replaces each maximal invalid subpart with one
 *   U+FFFD, as Rust's String::from_utf8_lossy does; decoded token bytes
 *   that split a character must read the same in lisa and in HF.
 * - Cleaning for JSON strings and logs: invalid bytes and NUL become '?',
 *   within a byte bound that never splits a character.
 *
 *     char *s = lisa_utf8_scrub(output, len, 4096);
 *     assert(lisa_utf8_valid(s, strlen(s)));
 *     lisa_free(&s);
 */
#ifndef LISA_UTF8_H
#define LISA_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when s[0..len) is valid UTF-8 in the strict sense above. */
bool lisa_utf8_valid(const char *s, size_t len);

/* Length of the valid UTF-8 sequence at s[0..len) (len > 0) in the
 * strict sense above: 1 for ASCII (NUL included), 2..4, or 0 when s does
 * not start one. */
size_t lisa_utf8_seq(const char *s, size_t len);

/* A copy of s[0..len) that is valid UTF-8 with no NUL byte, of at most max
 * bytes: each byte that starts no valid sequence, and each NUL, becomes
 * '?'; a character that would pass max ends the copy. NUL-terminated,
 * owned by the caller. JSON strings and logged text need this. */
char *lisa_utf8_scrub(const char *s, size_t len, size_t max);

/* Decodes one code point of valid UTF-8 at s (len > 0) into *cp; returns
 * its byte length (1..4). Input must have passed lisa_utf8_valid. */
size_t lisa_utf8_next(const char *s, size_t len, uint32_t *cp);

/* Encodes cp (<= 0x10FFFF) into out (4 bytes of room); returns the length. */
size_t lisa_utf8_put(uint32_t cp, char *out);

/* Replaces invalid UTF-8 in b[0..len) as from_utf8_lossy does; returns a
 * new NUL-terminated string (its length in *out_len), owned by the caller. */
char *lisa_utf8_lossy(const uint8_t *b, size_t len, size_t *out_len);

#endif
