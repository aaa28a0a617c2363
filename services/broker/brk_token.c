/*
 * brk_token: HMAC-SHA256 over "rollout|attempt|expiry" with OpenSSL.
 */
#include "brk_token.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_KEY 4096

struct brk_token_t {
    unsigned char key[S_MAX_KEY];
    size_t key_len;
};

brk_token_t *
brk_token_new(const char *key_file)
{
    brk_token_t *self = lisa_calloc(1, sizeof *self);
    if (!key_file || !*key_file) {
        self->key_len = 32;
        if (RAND_bytes(self->key, 32) != 1) {
            lisa_free(&self);
            return NULL;
        }
        return self;
    }
    FILE *f = fopen(key_file, "rb");
    if (!f) {
        lisa_log_error("token: cannot read key file '%s'", key_file);
        lisa_free(&self);
        return NULL;
    }
    self->key_len = fread(self->key, 1, sizeof self->key, f);
    fclose(f);
    while (self->key_len && (self->key[self->key_len - 1] == '\n' ||
                             self->key[self->key_len - 1] == '\r'))
        self->key_len--;
    if (self->key_len < 16) {
        lisa_log_error("token: key file '%s' holds fewer than 16 bytes",
                       key_file);
        brk_token_destroy(&self);
        return NULL;
    }
    return self;
}

void
brk_token_destroy(brk_token_t **pself)
{
    if (!pself || !*pself)
        return;
    OPENSSL_cleanse((*pself)->key, sizeof(*pself)->key);
    lisa_free(pself);
}

static void
s_mac(brk_token_t *self, const char *rollout_id, uint32_t attempt,
      uint64_t expiry_ms, char hex[65])
{
    char msg[512];
    int n = snprintf(msg, sizeof msg, "%s|%u|%llu", rollout_id, attempt,
                     (unsigned long long) expiry_ms);
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    HMAC(EVP_sha256(), self->key, (int) self->key_len,
         (const unsigned char *) msg, (size_t) (n < 0 ? 0 : n), mac, &mac_len);
    for (unsigned i = 0; i < 32 && i < mac_len; i++)
        snprintf(hex + 2 * i, 3, "%02x", mac[i]);
    hex[64] = '\0';
}

char *
brk_token_issue(brk_token_t *self, const char *rollout_id, uint32_t attempt,
                uint64_t expiry_ms)
{
    char hex[65];
    s_mac(self, rollout_id, attempt, expiry_ms, hex);
    size_t n = strlen(rollout_id) + 100;
    char *t = lisa_malloc(n);
    snprintf(t, n, "v1.%s.%u.%llu.%s", rollout_id, attempt,
             (unsigned long long) expiry_ms, hex);
    return t;
}

int
brk_token_check(brk_token_t *self, const char *token, const char *rollout_id,
                uint32_t attempt, uint64_t now_ms)
{
    const char *last = strrchr(token, '.');
    if (!last || strncmp(token, "v1.", 3) != 0)
        return 0;
    /* expiry is the field before the mac */
    const char *p = last - 1;
    while (p > token && *p != '.')
        p--;
    unsigned long long expiry = strtoull(p + 1, NULL, 10);
    if (expiry < now_ms)
        return 0;
    char *want = brk_token_issue(self, rollout_id, attempt, expiry);
    int ok = strlen(want) == strlen(token) &&
             CRYPTO_memcmp(want, token, strlen(want)) == 0;
    lisa_free(&want);
    return ok;
}
