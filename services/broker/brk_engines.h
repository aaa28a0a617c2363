/*
 * brk_engines: the registry of inference engines.
 *
 * Gateways and engines register themselves with a TTL (EngineRegisterReq)
 * and renew it; clients list them (EngineListReq). The registry lives in
 * memory only: after a broker restart engines reappear with their next
 * renewal. A change (new engine, new URL, paused, new policy version) and
 * an expiry are published as engine events.
 */
#ifndef BRK_ENGINES_H
#define BRK_ENGINES_H

#include "brk_call.h"

typedef struct brk_engines_t brk_engines_t;

brk_engines_t *brk_engines_new(const brk_env_t *env);
void brk_engines_destroy(brk_engines_t **self);

/* Whether this module answers requests with this body (engine register,
 * engine list). */
bool brk_engines_serves(Lisa__Request__BodyCase body);
lisa_rc_t brk_engines_handle(brk_engines_t *self,
                             brk_call_t *call) LISA_NODISCARD;

/* Drops the engines that stopped renewing by `mono` (monotonic ms). */
void brk_engines_tick(brk_engines_t *self, int64_t mono);

/* Engines registered now. */
size_t brk_engines_count(const brk_engines_t *self);

#endif
