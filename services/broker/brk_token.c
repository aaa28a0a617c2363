/*
 * brk_token: the broker's side of lisa_token. The broker only issues
 * tokens; the gateway verifies them with the same key.
 */
#include "brk_token.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_token.h"

#include <string.h>

struct brk_token_t {
    lisa_token_key_t key;
};

brk_token_t *
brk_token_new(const char *key_file)
{
    brk_token_t *self = lisa_calloc(1, sizeof *self);
    char err[256] = "";
    lisa_rc_t rc =
        key_file && *key_file
            ? lisa_token_key_load_file(key_file, &self->key, err, sizeof err)
            : lisa_token_key_random(&self->key, 32);
    if (rc != LISA_OK) {
        lisa_log_error("token: cannot load the key from '%s': %s",
                       key_file ? key_file : "", err);
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
    lisa_token_key_wipe(&(*pself)->key);
    lisa_free(pself);
}

char *
brk_token_issue(brk_token_t *self, const char *rollout_id, uint32_t attempt,
                uint64_t expiry_ms)
{
    return lisa_token_issue(self->key.bytes, self->key.len, rollout_id, attempt,
                            expiry_ms);
}

int
brk_token_check(brk_token_t *self, const char *token, const char *rollout_id,
                uint32_t attempt, uint64_t now_ms)
{
    lisa_token_claims_t c;
    if (lisa_token_verify(self->key.bytes, self->key.len, token, now_ms, &c,
                          NULL) != LISA_OK)
        return 0;
    return strcmp(c.rollout_id, rollout_id) == 0 && c.attempt == attempt;
}
