/*
 * trn_tboard: TensorBoard event files, for the trainer's `tensorboard`
 * logger (trainer.logger), so a run is followed in TensorBoard as verl's
 * runs are.
 *
 * A writer owns one new file `events.out.tfevents.<unix time>.<host>.
 * <pid>[.<k>]` in its folder. The file is a sequence of TFRecord frames:
 * the payload's length (u64, little endian), the masked CRC-32C of those
 * 8 bytes, the payload, the masked CRC-32C of the payload (TensorFlow's
 * record_writer; the mask rotates the CRC right by 15 bits and adds
 * 0xa282ead8). Each payload is a lisa.tboard.Event (proto/tensorboard.proto,
 * TensorBoard's field numbers): the first carries file_version
 * "brain.Event:2", each later one a Summary of scalars at one step.
 * Every write is flushed, so TensorBoard shows a step as soon as it ends
 * and a killed trainer leaves at most a torn last frame (which readers
 * skip).
 *
 *   trn_tboard_t *tb = trn_tboard_new("runs/x/tensorboard", err, sizeof err);
 *   trn_tboard_add(tb, "reward/mean", 0.5);
 *   trn_tboard_add(tb, "actor/entropy", 0.032);
 *   rc = trn_tboard_write(tb, 7);     // one event at step 7, flushed
 *   trn_tboard_destroy(&tb);
 */
#ifndef TRN_TBOARD_H
#define TRN_TBOARD_H

#include "lisa/lisa_rc.h"

#include <stddef.h>
#include <stdint.h>

#define TRN_TBOARD_MAX_VALUES 4096u /* scalars in one event */
#define TRN_TBOARD_MAX_TAG    256u  /* bytes of one tag */

typedef struct trn_tboard trn_tboard_t;

/* CRC-32C (Castagnoli, reflected, init and final xor ~0) of p[n]. */
uint32_t trn_tboard_crc32c(const void *p, size_t n);
/* TFRecord's masked form of a CRC. */
uint32_t trn_tboard_mask(uint32_t crc);

/* Creates dir (and its parents) and a new events file in it, and writes
 * the file-version event. NULL with err on failure. */
trn_tboard_t *trn_tboard_new(const char *dir, char *err, size_t errlen);
/* Closes the file; safe on NULL and twice. */
void trn_tboard_destroy(trn_tboard_t **tb);

/* The events file's path (borrowed). */
const char *trn_tboard_path(const trn_tboard_t *tb);

/* Queues the scalar tag = v for the next write. LISA_INVALID for an empty
 * or over-long tag or a non-finite value; LISA_TOOLARGE past
 * TRN_TBOARD_MAX_VALUES (nothing is queued). */
lisa_rc_t trn_tboard_add(trn_tboard_t *tb, const char *tag,
                         double v) LISA_NODISCARD;

/* Writes the queued scalars as one event at `step` and flushes; the queue
 * is empty afterwards. Nothing queued writes nothing. LISA_ERR on I/O. */
lisa_rc_t trn_tboard_write(trn_tboard_t *tb, int64_t step) LISA_NODISCARD;

#endif
