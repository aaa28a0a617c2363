/*
 * agt_heartbeat: a thread that renews the attempt's lease while the agent
 * works, also during long commands and long model calls.
 *
 * Every `interval_ms` it posts /lisa/v1/heartbeat with the latest progress
 * note. When the gateway answers cancel=true, or says the attempt is no
 * longer open (409/410) or the token is no longer valid (401/403), it sets
 * the shared cancel flag: the loop stops between steps and a running
 * command's process group is killed. Transient failures are logged and
 * counted; the next beat tries again.
 */
#ifndef AGT_HEARTBEAT_H
#define AGT_HEARTBEAT_H

#include "agt_gateway.h"

#include <stdatomic.h>
#include <stdint.h>

typedef struct agt_heartbeat agt_heartbeat_t;

/* Starts the thread with its own gateway client. NULL on failure. */
agt_heartbeat_t *agt_heartbeat_start(const agt_gateway_cfg_t *gw,
                                     unsigned interval_ms, atomic_bool *cancel);
/* Replaces the progress note (copied, at most 127 bytes). */
void agt_heartbeat_note(agt_heartbeat_t *hb, const char *note);
/* Heartbeats the gateway acknowledged so far. */
uint64_t agt_heartbeat_acked(agt_heartbeat_t *hb);
/* Heartbeats that failed so far. */
uint64_t agt_heartbeat_failed(agt_heartbeat_t *hb);
/* Stops and joins the thread, frees *hb, sets it to NULL; safe on NULL. */
void agt_heartbeat_stop(agt_heartbeat_t **hb);

#endif
