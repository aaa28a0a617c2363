/*
 * lisa_unicode: the few Unicode operations lisa needs, with exactly the
 * semantics of the Rust side of Hugging Face `tokenizers`.
 *
 * - UTF-8 itself (strict validation, lossy decoding): lisa_utf8.h, which
 *   this header includes.
 * - NFC normalization (ICU underneath).
 * - Clean text at the edges: untrusted bytes made valid (U+FFFD for
 *   invalid ones) and bounded before they reach a protobuf string or a
 *   JSON value.
 * - The GPT-2 "byte-level" alphabet: each byte maps to one printable code
 *   point, which is how byte-level BPE vocabularies spell their tokens.
 */
#ifndef LISA_UNICODE_H
#define LISA_UNICODE_H

#include "lisa/lisa_rc.h"
#include "lisa/lisa_utf8.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Value of one hexadecimal digit (either case), -1 for any other char. */
int lisa_hex_digit(char c);

/* NFC of valid UTF-8 s[0..len). When s is already NFC, *out is set to NULL
 * (use s as is); otherwise *out is a new NUL-terminated string of *out_len
 * bytes, owned by the caller. LISA_ERR on an ICU failure. */
lisa_rc_t lisa_utf8_nfc(const char *s, size_t len, char **out,
                        size_t *out_len) LISA_NODISCARD;

/* Text from untrusted bytes for a protobuf string, a JSON value or a log:
 * s[0..len) with invalid UTF-8 replaced as lisa_utf8_lossy does, cut at a
 * character boundary to at most `max` bytes. A new NUL-terminated string
 * (its length in *out_len), owned by the caller. NULL s reads as "". */
char *lisa_utf8_clean(const char *s, size_t len, size_t max, size_t *out_len);

/* The same in place for the NUL-terminated text in buf[0..cap): afterwards
 * it is valid UTF-8 that fits cap with its NUL (replacement characters may
 * push the end off: it is cut at a character boundary). Returns the new
 * length. */
size_t lisa_utf8_fix(char *buf, size_t cap);

/* Unicode White_Space property of cp. */
bool lisa_unicode_is_space(uint32_t cp);

/* True when cp is a "word" character (alphanumeric, mark, connector). */
bool lisa_unicode_is_word(uint32_t cp);

/* The byte-level alphabet: code point that spells byte b. */
uint32_t lisa_bytelevel_char(uint8_t b);

/* Inverse of lisa_bytelevel_char: the byte spelled by cp, or -1. */
int lisa_bytelevel_byte(uint32_t cp);

#endif
