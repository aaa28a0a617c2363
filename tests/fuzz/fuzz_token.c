/*
 * Fuzz target: attempt-token verification. The first byte picks a mode:
 *   0: the rest is a token string, verified as is;
 *   1: the rest is a payload, signed with the right key, so the payload
 *      parser behind the MAC check is reached with arbitrary bytes;
 *   2: the rest is a rollout id, attempt and expiry; a token issued for
 *      them must verify to exactly those claims.
 * Verification must never crash, read out of bounds or accept a token it
 * did not issue.
 */
#include "lisa/lisa_mem.h"
#include "lisa/lisa_token.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t s_key[32] = "0123456789abcdef0123456789abcdef";

/* Verifies a NUL-terminated copy of data. */
static void
s_verify_raw(const uint8_t *data, size_t size)
{
    char *tok = lisa_memdup(data, size);
    lisa_token_claims_t c;
    const char *why = NULL;
    lisa_rc_t rc = lisa_token_verify(s_key, sizeof s_key, tok, 0, &c, &why);
    if (rc == LISA_OK) {
        /* Only a token we issued verifies: re-issuing must reproduce it. */
        char *again = lisa_token_issue(s_key, sizeof s_key, c.rollout_id,
                                       c.attempt, c.expiry_ms);
        if (!again || strcmp(again, tok) != 0)
            abort();
        lisa_free(&again);
    } else if (!why) {
        abort();
    }
    lisa_free(&tok);
}

/* Signs "v1.<b64url(data)>" and verifies it. */
static void
s_verify_signed(const uint8_t *data, size_t size)
{
    if (size > 400)
        return;
    char *p64 = lisa_token_b64url_encode(data, size);
    char tok[1024];
    int n = snprintf(tok, sizeof tok, "v1.%s", p64);
    lisa_free(&p64);
    unsigned char mac[32];
    unsigned mlen = 0;
    HMAC(EVP_sha256(), s_key, sizeof s_key, (unsigned char *) tok, (size_t) n,
         mac, &mlen);
    char *m64 = lisa_token_b64url_encode(mac, mlen);
    snprintf(tok + n, sizeof tok - (size_t) n, ".%s", m64);
    lisa_free(&m64);
    lisa_token_claims_t c;
    const char *why = NULL;
    if (lisa_token_verify(s_key, sizeof s_key, tok, 0, &c, &why) == LISA_OK &&
        !lisa_token_rollout_id_ok(c.rollout_id))
        abort();
}

/* Issues a token for claims taken from data and checks the round trip. */
static void
s_round_trip(const uint8_t *data, size_t size)
{
    if (size < 12)
        return;
    uint32_t attempt;
    uint64_t expiry;
    memcpy(&attempt, data, 4);
    memcpy(&expiry, data + 4, 8);
    char *id = lisa_memdup(data + 12, size - 12);
    char *tok = lisa_token_issue(s_key, sizeof s_key, id, attempt, expiry);
    if (!tok) {
        if (lisa_token_rollout_id_ok(id))
            abort();
        lisa_free(&id);
        return;
    }
    lisa_token_claims_t c;
    lisa_rc_t rc = lisa_token_verify(s_key, sizeof s_key, tok,
                                     expiry ? expiry - 1 : 0, &c, NULL);
    if (expiry && (rc != LISA_OK || strcmp(c.rollout_id, id) != 0 ||
                   c.attempt != attempt || c.expiry_ms != expiry))
        abort();
    lisa_free(&tok);
    lisa_free(&id);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    switch (data[0] % 3) {
    case 0:
        s_verify_raw(data + 1, size - 1);
        break;
    case 1:
        s_verify_signed(data + 1, size - 1);
        break;
    default:
        s_round_trip(data + 1, size - 1);
        break;
    }
    return 0;
}
