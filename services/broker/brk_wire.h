/*
 * brk_wire: finds embedded messages in a protobuf frame without decoding.
 *
 * The broker stores each span exactly as it arrived instead of packing the
 * decoded struct again. After a frame has been decoded and checked (the
 * codec still validates everything), this module walks the wire format to
 * find the byte ranges of the spans inside it.
 */
#ifndef BRK_WIRE_H
#define BRK_WIRE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const uint8_t *data;
    size_t len;
} brk_wire_slice_t;

/* Follows `depth` length-delimited field numbers from the top level of
 * buf: every field but the last must occur exactly once at its level; each
 * occurrence of the last one is stored in out (in order, at most max).
 * Returns the number of occurrences, or -1 when the frame is malformed, an
 * intermediate field is missing or repeated, or more than max were found. */
long brk_wire_find(const uint8_t *buf, size_t len, const uint32_t *path,
                   size_t depth, brk_wire_slice_t *out, size_t max);

#endif
