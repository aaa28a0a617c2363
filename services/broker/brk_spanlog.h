/*
 * brk_spanlog: the append-only, segmented file that holds span bytes.
 *
 * Spans are the bulk of what the broker stores (a few KiB of token ids and
 * logprobs each). Keeping them inside SQLite writes every byte twice (WAL,
 * then checkpoint) and makes the b-tree carry them; here they are written
 * once, as received, into <dir>/spans/<8 hex digits>.log segment files,
 * and SQLite keeps only a small index row (segment, offset, length) per
 * span. A record is a 12-byte header (magic, payload length, CRC32C of
 * length and payload) followed by the payload.
 *
 * Writes go to the end of the current segment, through a buffer that
 * brk_spanlog_flush writes out in one call (the store flushes before each
 * COMMIT) or, with deferred writes, hands over to the thread that calls
 * brk_spanlog_sync; a record becomes part of the log only when the caller keeps
 * it (brk_spanlog_keep), so a record that turns out to be a duplicate is
 * overwritten by the next one. A
 * segment is fdatasynced and sealed when it passes its size bound, and a
 * new one started (its directory entry synced too). brk_spanlog_sync makes
 * everything written so far durable; it may run on another thread than
 * the writer.
 *
 * Recovery: at open the last segment is scanned record by record; the
 * first record whose header or checksum does not match (a torn write of a
 * crash) and everything after it is truncated away. The caller then drops
 * index rows that point past the recovered end (brk_spanlog_end): no such
 * span was ever acknowledged, because an acknowledgement waits for the
 * fdatasync that would have made its record whole.
 */
#ifndef BRK_SPANLOG_H
#define BRK_SPANLOG_H

#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct brk_spanlog_t brk_spanlog_t;

/* Where a record lives: segment number, offset of its header, payload
 * length. */
typedef struct {
    uint32_t segment;
    uint64_t offset;
    uint32_t len;
} brk_spanlog_ref_t;

/* Bytes of a record's header. */
#define BRK_SPANLOG_HEADER 12
/* Largest payload of one record. */
#define BRK_SPANLOG_MAX_RECORD (64u << 20)

/* Opens (creating when needed) the log under <dir>/spans, recovering the
 * last segment's tail. `segment_max` bounds a segment's size (a record
 * larger than it gets a segment of its own). `durable` fsyncs sealed
 * segments and new directory entries. NULL on failure (logged). */
brk_spanlog_t *brk_spanlog_open(const char *dir, uint64_t segment_max,
                                bool durable);
/* Flushes kept records and closes the log; accepts NULL, sets *self to
 * NULL. */
void brk_spanlog_close(brk_spanlog_t **self);

/* The current segment and its end (kept bytes): after open, the recovered
 * end. */
uint32_t brk_spanlog_segment(const brk_spanlog_t *self);
uint64_t brk_spanlog_end(const brk_spanlog_t *self);
/* Bytes cut off the last segment's tail at open (0 after a clean stop). */
uint64_t brk_spanlog_truncated(const brk_spanlog_t *self);

/* Writes a record of `len` bytes at the end of the log without keeping it
 * (the next write would overwrite it); *ref says where it is. The bytes
 * reach the file at the next flush. */
lisa_rc_t brk_spanlog_write(brk_spanlog_t *self, const uint8_t *data,
                            size_t len, brk_spanlog_ref_t *ref) LISA_NODISCARD;
/* Keeps the record just written at *ref: the end moves past it. */
void brk_spanlog_keep(brk_spanlog_t *self, const brk_spanlog_ref_t *ref);

/* Writes the kept records still buffered to the file (not synced). On
 * failure they are dropped (logged): the caller must not commit rows that
 * name them. With deferred writes it only hands them over to the next
 * brk_spanlog_sync, which writes them before its fdatasync. */
lisa_rc_t brk_spanlog_flush(brk_spanlog_t *self) LISA_NODISCARD;
/* Deferred writes on or off (off at open). On, the writer's thread never
 * writes span bytes at flush: the syncing thread does, so a record is in
 * the file only after the next brk_spanlog_sync (reads of records not
 * written yet write them first). Only for callers that sync before they
 * acknowledge anything. */
void brk_spanlog_defer(brk_spanlog_t *self, bool on);
/* Drops the kept records not flushed yet (their rows were rolled back). */
void brk_spanlog_discard(brk_spanlog_t *self);

/* Reads the payload of the record at *ref into buf (ref->len bytes) and
 * checks its header and checksum: LISA_ERR (logged) when they do not
 * match or the segment is missing. */
lisa_rc_t brk_spanlog_read(brk_spanlog_t *self, const brk_spanlog_ref_t *ref,
                           uint8_t *buf) LISA_NODISCARD;

/* Writes the records handed over (deferred writes), then fdatasync of
 * the current segment: every record flushed before the call is durable on
 * LISA_OK. Thread-safe against the writer; one sync runs at a time. After
 * a failed deferred write every later sync fails. */
lisa_rc_t brk_spanlog_sync(brk_spanlog_t *self) LISA_NODISCARD;

/* Deletes every sealed segment that `live(segment, arg)` says holds no
 * kept record any more; returns how many were deleted. */
size_t brk_spanlog_drop(brk_spanlog_t *self,
                        bool (*live)(uint32_t segment, void *arg), void *arg);

/* CRC32C (Castagnoli) of buf, continuing from crc (0 to start). */
uint32_t brk_spanlog_crc32c(uint32_t crc, const void *buf, size_t len);

#endif
