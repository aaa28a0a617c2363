/*
 * lisa_json: bounded, well-reported JSON input on top of jansson.
 *
 * Datasets (verl-format prompts), reward configs and API bodies all arrive
 * as JSON from outside. These helpers put a size bound in front of every
 * parse, turn jansson's errors into one message with file, line and column,
 * and read typed fields by dotted path with a default, so a service never
 * crashes on a missing or mistyped field and always says which one:
 *
 *   json_t *root;
 *   rc = lisa_json_load_file("train.json", 64u << 20, &root, err, sizeof err);
 *   const char *gt;
 *   rc = lisa_json_get_string(row, "reward_model.ground_truth", "", &gt,
 *                             err, sizeof err);
 *
 * A path is a dot-separated list of object keys; a segment of digits
 * indexes an array ("messages.0.content"). A JSON null counts as absent.
 * Getters return borrowed pointers that live as long as the root.
 */
#ifndef LISA_JSON_H
#define LISA_JSON_H

#include "lisa/lisa_rc.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define LISA_JSON_MAX_PATH 256u /* bytes of one dotted path */

/* Parses `len` bytes at buf (no NUL needed) into *out (caller's ref).
 * LISA_TOOLARGE over max_bytes; LISA_INVALID with "name:line:col: text"
 * in err (name may be NULL: "<buffer>"). */
lisa_rc_t lisa_json_load_buf(const char *buf, size_t len, size_t max_bytes,
                             const char *name, json_t **out, char *err,
                             size_t errlen) LISA_NODISCARD;

/* Reads and parses the file at path. LISA_NOTFOUND when it does not exist,
 * LISA_ERR on other I/O errors, else as lisa_json_load_buf. */
lisa_rc_t lisa_json_load_file(const char *path, size_t max_bytes, json_t **out,
                              char *err, size_t errlen) LISA_NODISCARD;

/* Value at dotted `path` under root (borrowed), or NULL when absent. */
json_t *lisa_json_path(const json_t *root, const char *path);

/* jansson's type name of v ("object", "integer", ...; NULL: "absent"). */
const char *lisa_json_type_str(const json_t *v);

/* Typed getters: absent/null -> *out = def and LISA_OK; present with the
 * wrong type or out of range -> LISA_INVALID, err "path: expected X, got
 * Y". Integers must be JSON integers; double accepts both number kinds. */
lisa_rc_t lisa_json_get_string(const json_t *root, const char *path,
                               const char *def, const char **out, char *err,
                               size_t errlen) LISA_NODISCARD;
lisa_rc_t lisa_json_get_int(const json_t *root, const char *path, int64_t def,
                            int64_t *out, char *err,
                            size_t errlen) LISA_NODISCARD;
lisa_rc_t lisa_json_get_uint(const json_t *root, const char *path, uint64_t def,
                             uint64_t *out, char *err,
                             size_t errlen) LISA_NODISCARD;
lisa_rc_t lisa_json_get_double(const json_t *root, const char *path, double def,
                               double *out, char *err,
                               size_t errlen) LISA_NODISCARD;
lisa_rc_t lisa_json_get_bool(const json_t *root, const char *path, bool def,
                             bool *out, char *err,
                             size_t errlen) LISA_NODISCARD;
/* Object / array getters: absent -> *out = NULL and LISA_OK. */
lisa_rc_t lisa_json_get_object(const json_t *root, const char *path,
                               json_t **out, char *err,
                               size_t errlen) LISA_NODISCARD;
lisa_rc_t lisa_json_get_array(const json_t *root, const char *path,
                              json_t **out, char *err,
                              size_t errlen) LISA_NODISCARD;

/* LISA_OK when path is present and not null; else LISA_NOTFOUND with
 * "path: required" in err. */
lisa_rc_t lisa_json_require(const json_t *root, const char *path, char *err,
                            size_t errlen) LISA_NODISCARD;

/* Serialises v with jansson `flags` into a new NUL-terminated string in
 * *out (caller frees with lisa_free). Stops and returns LISA_TOOLARGE as
 * soon as the text would exceed max_bytes; LISA_INVALID for a NULL v. */
lisa_rc_t lisa_json_dump(const json_t *v, size_t flags, size_t max_bytes,
                         char **out) LISA_NODISCARD;

/* ---- JSON Lines ------------------------------------------------------ */

/* A reader of one JSON value per line; blank lines are skipped. */
typedef struct lisa_jsonl lisa_jsonl_t;

/* Opens path for reading with lines of at most max_line bytes. LISA_OK,
 * LISA_NOTFOUND or LISA_ERR (err says why). */
lisa_rc_t lisa_jsonl_open(const char *path, size_t max_line, lisa_jsonl_t **out,
                          char *err, size_t errlen) LISA_NODISCARD;

/* Reader over an open stream (not closed by destroy); name labels errors. */
lisa_jsonl_t *lisa_jsonl_from_stream(FILE *f, const char *name,
                                     size_t max_line);

/* Next value into *out (caller's ref). LISA_OK; LISA_NOTFOUND at end of
 * input; LISA_INVALID for a bad line and LISA_TOOLARGE for an over-long
 * one (err "name:line:col: why"; call again to go on); LISA_ERR on I/O. */
lisa_rc_t lisa_jsonl_next(lisa_jsonl_t *r, json_t **out, char *err,
                          size_t errlen) LISA_NODISCARD;

/* Number of the line last read (1-based; 0 before the first). */
uint64_t lisa_jsonl_line(const lisa_jsonl_t *r);

/* Count of values returned and of lines refused so far. */
uint64_t lisa_jsonl_good(const lisa_jsonl_t *r);
uint64_t lisa_jsonl_bad(const lisa_jsonl_t *r);

/* Closes (if opened by path) and frees *r; sets it to NULL. NULL-safe. */
void lisa_jsonl_destroy(lisa_jsonl_t **r);

#endif
