/*
 * brk_spanscan: reads what the broker checks of a span straight off the
 * wire, without decoding the span.
 *
 * A span is mostly token ids and logprobs (a few KiB) that the broker
 * stores as received and never looks at; decoding them into arrays only
 * to count them was the largest single cost of span ingest. This scanner
 * walks a SpanPut request or a SpanPush frame once, with every length
 * checked against what is left, and returns the few fields the broker
 * needs (rollout, attempt, seq, prev_seq, the two array lengths) and each
 * span's byte range.
 *
 * It is a fast path, not a second decoder: it takes only frames whose
 * every field is one it knows, with the wire type protobuf-c expects, and
 * answers false for anything else (unknown or repeated envelope fields, a
 * malformed varint, an id with a NUL byte or over the bound, ...). On
 * false the caller decodes the frame in full with lisa_codec, which also
 * reports the errors. When it answers true, protobuf-c decodes the same
 * frame to the same values (the fuzz target fuzz_brk_spanscan checks
 * exactly that).
 */
#ifndef BRK_SPANSCAN_H
#define BRK_SPANSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest rollout id the scanner takes (longer ones go the slow way). */
#define BRK_SPANSCAN_MAX_ID 128

/* What the broker needs of one span. */
typedef struct {
    const uint8_t *raw; /* the span's bytes inside the frame */
    size_t raw_len;
    char rollout_id[BRK_SPANSCAN_MAX_ID + 1]; /* NUL-terminated */
    uint32_t attempt;
    uint32_t seq;
    int32_t prev_seq;
    size_t n_response_ids;
    size_t n_response_logprobs;
} brk_spanscan_span_t;

/* Scans a Request frame of protocol version 1 whose body is span_put:
 * true with *request_id, *n spans and out[0..*n) filled; false when the
 * frame is not in the shape taken here or holds more than max spans. */
bool brk_spanscan_request(const uint8_t *buf, size_t len, uint64_t *request_id,
                          brk_spanscan_span_t *out, size_t max, size_t *n);

/* Scans a SpanPush frame of protocol version 1 carrying a span: true with
 * *out filled; false when it is not in the shape taken here. */
bool brk_spanscan_push(const uint8_t *buf, size_t len,
                       brk_spanscan_span_t *out);

#endif
