/*
 * gw_server: the gateway service, one zloop.
 *
 * Routes (all answers JSON; errors OpenAI-shaped):
 *   POST /v1/chat/completions   token-exact chat (plain or SSE), one span
 *   POST /v1/completions        passthrough to the attempt's engine
 *   GET  /v1/models             the served model
 *   GET  /lisa/v1/task          the attempt's task (GetTaskReq)
 *   POST /lisa/v1/heartbeat     lease renewal (HeartbeatReq)
 *   POST /lisa/v1/result        the agent's result (AttemptCompleteReq),
 *                               forwarded once every span is acknowledged
 *   GET  /metrics, /healthz     operators (no token)
 *   POST /admin/pause|resume, GET /admin/drain   weight updates (admin key)
 * Every /v1 and /lisa route needs "Authorization: Bearer <attempt token>",
 * verified locally with the shared HMAC key; the token alone names the
 * rollout and attempt, so a sandbox can reach only its own data.
 *
 * Nothing blocks: inbound HTTP is delivered to the loop and kept until
 * answered, engine calls go through the engine facade (gw_engine: the
 * gateway's own HTTP/1.1 client, libcurl multi for host names) on the
 * loop, broker calls are async DEALER RPCs. The routes are owned by
 * modules (gw_chat, gw_agent, gw_auth; engines by gw_pool); this one
 * wires them together. See docs/gateway.md.
 */
#ifndef GW_SERVER_H
#define GW_SERVER_H

#include "gw_config.h"
#include "lisa/lisa_rc.h"

#include <czmq.h>
#include <stdint.h>

typedef struct gw_server_t gw_server_t;

/* Starts the gateway on `loop` with `cfg` (copied). NULL (logged) when the
 * key, tokenizer, engines or listeners are unusable. */
gw_server_t *gw_server_new(const gw_config_t *cfg, zloop_t *loop);

/* Stops it: kept requests are answered 503. Safe on NULL; sets NULL. */
void gw_server_destroy(gw_server_t **self);

/* Bound TCP port. */
uint16_t gw_server_port(const gw_server_t *self);

#endif
