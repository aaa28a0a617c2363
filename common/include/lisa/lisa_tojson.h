/*
 * lisa_tojson: JSON text exactly as Python's json.dumps writes it with
 * ensure_ascii=False and the default separators.
 *
 * Chat templates serialize tool schemas and tool-call arguments with
 * `tojson`, which transformers defines as that json.dumps call; the model
 * was trained on those bytes, so a C renderer must produce them byte for
 * byte: ", " and ": " separators, keys in insertion order, non-ASCII
 * characters as themselves, control characters as \n \t ... or \u00XX
 * (lowercase hex), no escaping of '/' or HTML characters, integers as
 * integers, and floats in Python's repr (shortest round-trip digits,
 * "1.0", "1e-05", "1e+16").
 */
#ifndef LISA_TOJSON_H
#define LISA_TOJSON_H

#include "lisa/lisa_rc.h"

#include <jansson.h>
#include <stddef.h>

/* Deepest nesting accepted. */
#define LISA_TOJSON_MAX_DEPTH 64

/* Serializes v into a new NUL-terminated string *out (*len its length,
 * may be NULL), owned by the caller. LISA_TOOLARGE when the text would
 * exceed max bytes, LISA_INVALID when nesting exceeds
 * LISA_TOJSON_MAX_DEPTH or a number is not finite. */
lisa_rc_t lisa_tojson(const json_t *v, size_t max, char **out,
                      size_t *len) LISA_NODISCARD;

/* Room lisa_tojson_float needs: sign, 17 digits, point, "e-308", NUL. */
#define LISA_TOJSON_FLOAT_MAX 32u

/* Writes Python's repr of a finite double into buf (LISA_TOJSON_FLOAT_MAX
 * bytes of room); returns the length. */
size_t lisa_tojson_float(double x, char buf[LISA_TOJSON_FLOAT_MAX]);

#endif
