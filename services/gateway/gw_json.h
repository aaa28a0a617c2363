/*
 * gw_json: a quick reader of small JSON documents into jansson values.
 *
 * Per call the gateway parses a few small documents: the request's top
 * level without its messages, the two or three messages new since the
 * attempt's last call, the tool-call arguments the agent sent back.
 * jansson's reader takes its bytes one at a time through a stream
 * callback; on these documents it was the gateway's largest user-space
 * cost. This reader scans strings 16 bytes at a time and builds the same
 * jansson values directly.
 *
 * It answers only when it is sure jansson would give the same value: for
 * anything else (any error, a duplicate key, a number that might not round
 * the same way, an escaped NUL, nesting deeper than 64) it returns NULL
 * and the caller asks json_loadb, so every refusal and its message stay
 * jansson's. The libFuzzer target fuzz_gw_json checks that whenever it
 * answers, jansson accepts the same bytes with an equal value (same types,
 * same key order).
 *
 * The writer side does the same for the few dumps per call (tool-call
 * arguments and tools in the canonical form digests compare): jansson's
 * exact bytes, or NULL and jansson writes them. (The arguments the agent
 * gets are never written again: they are the model's bytes.)
 */
#ifndef GW_JSON_H
#define GW_JSON_H

#include "lisa/lisa_buf.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* The value of `len` bytes at `p`, as json_loadb(p, len, flags) would give
 * it (flags: 0, JSON_REJECT_DUPLICATES and/or JSON_DECODE_ANY), or NULL
 * when not sure (then call json_loadb). New reference. */
json_t *gw_json_load(const char *p, size_t len, size_t flags);

/* gw_json_load, else json_loadb with the same arguments (`err` may be
 * NULL). */
json_t *gw_json_loadb(const char *p, size_t len, size_t flags,
                      json_error_t *err);

/* The text json_dumps(v, flags) writes, for flags made of JSON_COMPACT,
 * JSON_SORT_KEYS, JSON_PRESERVE_ORDER and JSON_ENCODE_ANY (caller frees
 * with free()), or NULL when not sure (a real number, a key with a NUL,
 * nesting deeper than 64, other flags): then call json_dumps. */
char *gw_json_dump(const json_t *v, size_t flags);

/* gw_json_dump, else json_dumps with the same arguments. */
char *gw_json_dumps(const json_t *v, size_t flags);

/* Skips the plain bytes of a JSON string's body from p on (not '"', '\\'
 * or a control character), 16 at a time where SSE2 is there; returns the
 * first byte that is not plain (or end). *high (may be NULL) is set when a
 * skipped byte is >= 0x80 (UTF-8 to validate). */
const char *gw_json_scan_plain(const char *p, const char *end, bool *high);

/* Appends s[0, n) to b as a JSON string (quotes included), escaped exactly
 * as jansson escapes it. */
void gw_json_put_str(lisa_buf_t *b, const char *s, size_t n);

#endif
