/*
 * lisa_token: scoped attempt tokens.
 *
 * The controller hands each sandbox a token that lets it act for exactly
 * one attempt of one rollout until an expiry; the gateway checks it on
 * every call without a database lookup. A token is
 *
 *   v1.<base64url(payload)>.<base64url(HMAC-SHA256(key, "v1." payload64))>
 *
 * where the payload is binary: version byte, attempt (u32 BE), expiry in
 * ms since the epoch (u64 BE), rollout id length (u8), rollout id bytes.
 * Verification checks the length bound, the shape, the MAC (in constant
 * time, before looking at the payload), then the payload, then expiry.
 *
 *   lisa_token_key_t key;
 *   rc = lisa_token_key_parse(getenv("LISA_TOKEN_KEY"), &key, err, sizeof err);
 *   char *tok = lisa_token_issue(key.bytes, key.len, "r-17", 2, now + 60000);
 *   lisa_token_claims_t c;
 *   rc = lisa_token_verify(key.bytes, key.len, tok, now, &c, &why);
 */
#ifndef LISA_TOKEN_H
#define LISA_TOKEN_H

#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LISA_TOKEN_MAX_LEN        512u /* bytes of a token (no NUL) */
#define LISA_TOKEN_MAX_ROLLOUT_ID 128u /* bytes of a rollout id */
#define LISA_TOKEN_MIN_KEY        32u  /* shortest accepted key */
#define LISA_TOKEN_MAX_KEY        128u /* longest accepted key */

/* What a valid token grants. */
typedef struct {
    char rollout_id[LISA_TOKEN_MAX_ROLLOUT_ID + 1];
    uint32_t attempt;
    uint64_t expiry_ms; /* ms since the Unix epoch */
} lisa_token_claims_t;

/* An HMAC key. */
typedef struct {
    uint8_t bytes[LISA_TOKEN_MAX_KEY];
    size_t len;
} lisa_token_key_t;

/* New token (caller frees with lisa_free), or NULL when the key is shorter
 * than LISA_TOKEN_MIN_KEY or the rollout id is empty, longer than
 * LISA_TOKEN_MAX_ROLLOUT_ID or not printable ASCII. */
char *lisa_token_issue(const uint8_t *key, size_t keylen,
                       const char *rollout_id, uint32_t attempt,
                       uint64_t expiry_ms);

/* Checks token at now_ms. LISA_OK fills *out (may be NULL);
 * LISA_UNAUTHORIZED with *why (may be NULL) = "malformed", "too long",
 * "bad signature" or "expired"; LISA_INVALID for a key that is too short. */
lisa_rc_t lisa_token_verify(const uint8_t *key, size_t keylen,
                            const char *token, uint64_t now_ms,
                            lisa_token_claims_t *out,
                            const char **why) LISA_NODISCARD;

/* True when id is a valid rollout id (1..128 bytes of printable ASCII). */
bool lisa_token_rollout_id_ok(const char *id);

/* Wall-clock time in ms since the Unix epoch (the clock of expiry_ms). */
uint64_t lisa_token_now_ms(void);

/* Parses a key from text: "hex:..." or "base64:..." explicitly, otherwise
 * hex when the text is all hex digits, else base64 (standard or url, with
 * or without padding). Surrounding blanks are ignored. LISA_INVALID for
 * bad text or a key outside 32..128 bytes (err says why). */
lisa_rc_t lisa_token_key_parse(const char *text, lisa_token_key_t *key,
                               char *err, size_t errlen) LISA_NODISCARD;

/* Reads a key file (text as for lisa_token_key_parse, at most 1 KiB) and
 * warns in the log when the file is readable by group or others. */
lisa_rc_t lisa_token_key_load_file(const char *path, lisa_token_key_t *key,
                                   char *err, size_t errlen) LISA_NODISCARD;

/* "file:PATH" loads a key file, anything else is parsed as key text. */
lisa_rc_t lisa_token_key_from_spec(const char *spec, lisa_token_key_t *key,
                                   char *err, size_t errlen) LISA_NODISCARD;

/* Fills key with len random bytes (32..128) from the OpenSSL CSPRNG. */
lisa_rc_t lisa_token_key_random(lisa_token_key_t *key,
                                size_t len) LISA_NODISCARD;

/* Key as lowercase hex (caller frees with lisa_free). */
char *lisa_token_key_hex(const lisa_token_key_t *key);

/* Overwrites the key bytes with zeros (not optimised away). */
void lisa_token_key_wipe(lisa_token_key_t *key);

/* base64url without padding of n bytes (caller frees). */
char *lisa_token_b64url_encode(const uint8_t *p, size_t n);

/* Strict base64url decode (no padding, canonical trailing bits) of len
 * chars into out (cap bytes). LISA_INVALID on any deviation. */
lisa_rc_t lisa_token_b64url_decode(const char *s, size_t len, uint8_t *out,
                                   size_t cap, size_t *n) LISA_NODISCARD;

#endif
