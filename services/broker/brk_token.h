/*
 * brk_token: issues the scoped attempt token a sandbox carries.
 *
 * The token binds a rollout id, an attempt number and an expiry under an
 * HMAC-SHA256 key that only the broker and the gateway hold; the format is
 * lisa_token's. This module is the one place the broker makes tokens.
 */
#ifndef BRK_TOKEN_H
#define BRK_TOKEN_H

#include <stdint.h>

typedef struct brk_token_t brk_token_t;

/* New issuer keyed from `key_file` (hex or base64 text of a 32..128 byte
 * key, as lisa_token_key_load_file reads it); an empty or NULL path uses a
 * random key (tokens die with the process). NULL when the file cannot be
 * read or holds no valid key. */
brk_token_t *brk_token_new(const char *key_file);

/* Destroys the issuer; accepts NULL, sets *self to NULL. */
void brk_token_destroy(brk_token_t **self);

/* Token for (rollout_id, attempt) valid until expiry_ms (lisa_token
 * format); the caller frees it with lisa_free. NULL for an invalid id. */
char *brk_token_issue(brk_token_t *self, const char *rollout_id,
                      uint32_t attempt, uint64_t expiry_ms);

/* True when `token` was issued by this key for (rollout_id, attempt) and
 * is unexpired at now_ms. */
int brk_token_check(brk_token_t *self, const char *token,
                    const char *rollout_id, uint32_t attempt, uint64_t now_ms);

#endif
