/*
 * brk_token: issues the scoped attempt token a sandbox carries.
 *
 * The token binds a rollout id, an attempt number and an expiry under an
 * HMAC-SHA256 key that only the broker and the gateway hold. This module
 * is the one place the broker makes tokens, so the format can follow the
 * shared token module without touching the rest of the broker.
 */
#ifndef BRK_TOKEN_H
#define BRK_TOKEN_H

#include <stdint.h>

typedef struct brk_token_t brk_token_t;

/* New issuer keyed from `key_file` (its bytes, trailing newline dropped);
 * an empty or NULL path uses a random key (tokens die with the process).
 * NULL when the file cannot be read or is shorter than 16 bytes. */
brk_token_t *brk_token_new(const char *key_file);

/* Destroys the issuer; accepts NULL, sets *self to NULL. */
void brk_token_destroy(brk_token_t **self);

/* Token for (rollout_id, attempt) valid until expiry_ms; the caller frees
 * it with lisa_free. Format: "v1.<rollout>.<attempt>.<expiry>.<hex mac>". */
char *brk_token_issue(brk_token_t *self, const char *rollout_id,
                      uint32_t attempt, uint64_t expiry_ms);

/* True when `token` was issued by this key for (rollout_id, attempt) and
 * is unexpired at now_ms. */
int brk_token_check(brk_token_t *self, const char *token,
                    const char *rollout_id, uint32_t attempt, uint64_t now_ms);

#endif
