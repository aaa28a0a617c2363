/*
 * brk_call: what the broker's modules share while they handle a message.
 *
 * The broker is one loop; its modules (lifecycle, ingest, query, engines,
 * waits, scores) each own their state and see the rest of the broker only
 * through brk_env_t: the configuration, the store (inside the loop
 * iteration's transaction), the per-message arena and the outbox where
 * replies, events and other effects wait for the group commit. An RPC
 * handler gets one brk_call_t: the decoded request, the reply to fill,
 * and room for the reason of a failure.
 */
#ifndef BRK_CALL_H
#define BRK_CALL_H

#include "brk_arena.h"
#include "brk_config.h"
#include "brk_outbox.h"
#include "brk_store.h"
#include "lisa.pb-c.h"
#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BRK_ERR_LEN  512   /* bytes of brk_call_t.err */
#define BRK_MAX_ID   128u  /* longest rollout, run or engine id */
#define BRK_MAX_PAGE 1000u /* rollouts of one query or export page */

/* The shared parts of the broker a module works with (all borrowed). */
typedef struct {
    const brk_config_t *cfg;
    brk_store_t *store;
    brk_arena_t *arena; /* reset after each message */
    brk_outbox_t *outbox;
} brk_env_t;

/* One RPC request being handled. */
typedef struct {
    const Lisa__Request *req;
    Lisa__Reply *rep;     /* the handler sets its body */
    char *err;            /* BRK_ERR_LEN bytes: why, when it fails */
    bool held;            /* set by a handler that answers later */
    zframe_t *identity;   /* the caller (borrowed) */
    bool delim;           /* the caller speaks with an empty delimiter */
    const uint8_t *frame; /* the request's bytes as received */
    size_t frame_len;
} brk_call_t;

/* Writes the formatted reason into err (BRK_ERR_LEN bytes); returns rc. */
lisa_rc_t brk_call_fail(char *err, lisa_rc_t rc, const char *fmt, ...)
    LISA_PRINTF(3, 4);

/* Printable ASCII, 1..BRK_MAX_ID bytes. */
bool brk_call_id_ok(const char *s);

/* Wall-clock milliseconds (what the store's times are in). */
uint64_t brk_call_now_ms(void);

#endif
