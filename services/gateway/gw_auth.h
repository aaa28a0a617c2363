/*
 * gw_auth: who may call the gateway.
 *
 * Agents send "Authorization: Bearer <attempt token>" (lisa_token.h:
 * HMAC-SHA256 over rollout id, attempt and expiry), verified here with the
 * shared key; there is no broker round trip. An agent sends the same token
 * with every call, so a token whose signature was checked is remembered by
 * its text (a fixed table of slots; a hit is still checked for expiry) and
 * its signature is not checked again. Refusals are counted by reason in
 * lisa_gateway_auth_failures_total. Operators' admin routes need the admin
 * key instead. The module owns the key and the table, and wipes both when
 * destroyed.
 */
#ifndef GW_AUTH_H
#define GW_AUTH_H

#include "gw_metrics.h"
#include "gw_openai.h"
#include "lisa/lisa_http_server.h"
#include "lisa/lisa_rc.h"
#include "lisa/lisa_token.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct gw_auth_t gw_auth_t;

/* New checker with the token key `key_spec` (text or "file:PATH") and the
 * admin key (NULL or "": admin routes are off); failures are counted in
 * `m` (borrowed). NULL with `why` filled when the key is unusable. */
gw_auth_t *gw_auth_new(const char *key_spec, const char *admin_key,
                       gw_metrics_t *m, char *why, size_t why_len);

/* Destroys it (keys and remembered tokens wiped); safe on NULL, sets
 * *self to NULL. */
void gw_auth_destroy(gw_auth_t **self);

/* The attempt `req`'s bearer token names, in *who. LISA_UNAUTHORIZED with
 * *err filled (401 invalid_api_key or token_expired) otherwise. */
lisa_rc_t gw_auth_check(gw_auth_t *self, lisa_http_req_t *req,
                        lisa_token_claims_t *who, gw_err_t *err) LISA_NODISCARD;

/* The same for an Authorization header's value (NULL: none). */
lisa_rc_t gw_auth_check_header(gw_auth_t *self, const char *authorization,
                               lisa_token_claims_t *who,
                               gw_err_t *err) LISA_NODISCARD;

/* True when `req` carries the admin key (constant-time comparison). */
bool gw_auth_admin(const gw_auth_t *self, lisa_http_req_t *req);

/* The same for an Authorization header's value (NULL: none). */
bool gw_auth_admin_header(const gw_auth_t *self, const char *authorization);

/* A body naming another rollout or attempt than the token: LISA_UNAUTHORIZED
 * with *err filled (403 wrong_rollout). */
lisa_rc_t gw_auth_same_attempt(const json_t *body,
                               const lisa_token_claims_t *who,
                               gw_err_t *err) LISA_NODISCARD;

#endif
