/*
 * lisa_ids: a bounded, growable array of token ids.
 *
 * Token ids travel everywhere in lisa (prompt caches in the gateway, spans
 * in the broker, training rows in the trainer). Every array that input can
 * grow has a maximum, fixed at creation: a push beyond it is refused with
 * LISA_TOOLARGE instead of growing without bound.
 */
#ifndef LISA_IDS_H
#define LISA_IDS_H

#include "lisa/lisa_rc.h"

#include <stddef.h>
#include <stdint.h>

typedef struct lisa_ids_t lisa_ids_t;

/* New empty array that holds at most `max` ids (max > 0). */
lisa_ids_t *lisa_ids_new(size_t max);

/* Frees the array and sets *p to NULL; safe on NULL and twice. */
void lisa_ids_destroy(lisa_ids_t **p);

/* Appends one id; LISA_TOOLARGE (array unchanged) when full. */
lisa_rc_t lisa_ids_push(lisa_ids_t *self, int32_t id) LISA_NODISCARD;

/* Appends n ids; LISA_TOOLARGE (array unchanged) when they do not fit. */
lisa_rc_t lisa_ids_append(lisa_ids_t *self, const int32_t *ids,
                          size_t n) LISA_NODISCARD;

/* The ids (borrowed; valid until the next change); never NULL. */
const int32_t *lisa_ids_data(const lisa_ids_t *self);

/* Number of ids held. */
size_t lisa_ids_len(const lisa_ids_t *self);

/* The bound given at creation. */
size_t lisa_ids_max(const lisa_ids_t *self);

/* Keeps the first `len` ids (no-op when len >= current length). */
void lisa_ids_truncate(lisa_ids_t *self, size_t len);

/* Removes every id (keeps the bound and the memory). */
void lisa_ids_clear(lisa_ids_t *self);

#endif
