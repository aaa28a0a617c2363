/*
 * gw_auth: attempt tokens and the admin key (see the header).
 */
#include "gw_auth.h"

#include "lisa/lisa_mem.h"

#include <openssl/crypto.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Tokens verified lately, by a hash of their text: an agent sends the same
 * token with every call, and its signature need not be checked again. Only
 * valid tokens are kept; a hit is still checked for expiry. */
#define S_AUTH_SLOTS 256u

typedef struct {
    size_t len; /* 0: empty */
    char tok[LISA_TOKEN_MAX_LEN];
    lisa_token_claims_t who;
} s_auth_slot_t;

struct gw_auth_t {
    lisa_token_key_t key;
    char *admin_key;
    gw_metrics_t *m;
    s_auth_slot_t *slots; /* S_AUTH_SLOTS tokens verified lately */
};

gw_auth_t *
gw_auth_new(const char *key_spec, const char *admin_key, gw_metrics_t *m,
            char *why, size_t why_len)
{
    gw_auth_t *self = lisa_calloc(1, sizeof *self);
    if (!key_spec) {
        snprintf(why, why_len, "not set");
        lisa_free(&self);
        return NULL;
    }
    if (lisa_token_key_from_spec(key_spec, &self->key, why, why_len) !=
        LISA_OK) {
        lisa_free(&self);
        return NULL;
    }
    self->admin_key = lisa_strdup(admin_key ? admin_key : "");
    self->m = m;
    self->slots = lisa_calloc(S_AUTH_SLOTS, sizeof *self->slots);
    return self;
}

void
gw_auth_destroy(gw_auth_t **self)
{
    if (!self || !*self)
        return;
    gw_auth_t *a = *self;
    lisa_token_key_wipe(&a->key);
    OPENSSL_cleanse(a->slots, S_AUTH_SLOTS * sizeof *a->slots);
    lisa_free(&a->slots);
    OPENSSL_cleanse(a->admin_key, strlen(a->admin_key));
    lisa_free(&a->admin_key);
    lisa_free(self);
}

/* The token of an Authorization header value, or NULL. */
static const char *
s_bearer(const char *h)
{
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return NULL;
    h += 7;
    while (*h == ' ')
        h++;
    return h;
}

static s_auth_slot_t *
s_auth_slot(gw_auth_t *self, const char *tok, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t) tok[i]) * 0x100000001b3ull;
    return &self->slots[(h ^ (h >> 32)) % S_AUTH_SLOTS];
}

lisa_rc_t
gw_auth_check(gw_auth_t *self, lisa_http_req_t *req, lisa_token_claims_t *who,
              gw_err_t *err)
{
    return gw_auth_check_header(
        self, lisa_http_req_header(req, "Authorization"), who, err);
}

lisa_rc_t
gw_auth_check_header(gw_auth_t *self, const char *authorization,
                     lisa_token_claims_t *who, gw_err_t *err)
{
    const char *tok = s_bearer(authorization);
    const char *why = "missing";
    lisa_rc_t rc = LISA_UNAUTHORIZED;
    uint64_t now = lisa_token_now_ms();
    size_t len = tok ? strnlen(tok, LISA_TOKEN_MAX_LEN + 1) : 0;
    s_auth_slot_t *slot = NULL;
    if (tok && len <= LISA_TOKEN_MAX_LEN) {
        slot = s_auth_slot(self, tok, len);
        /* constant time over the text: the slot holds another agent's
         * valid token */
        if (slot->len == len && CRYPTO_memcmp(slot->tok, tok, len) == 0 &&
            now < slot->who.expiry_ms) {
            *who = slot->who;
            return LISA_OK;
        }
    }
    if (tok)
        rc = lisa_token_verify(self->key.bytes, self->key.len, tok, now, who,
                               &why);
    if (rc == LISA_OK) {
        if (slot) {
            memcpy(slot->tok, tok, len);
            slot->len = len;
            slot->who = *who;
        }
        return LISA_OK;
    }
    char labels[48];
    snprintf(labels, sizeof labels, "reason=\"%s\"", why);
    gw_metrics_add(self->m, "lisa_gateway_auth_failures_total", labels, 1);
    return gw_err_set(
        err, LISA_UNAUTHORIZED, 401, "authentication_error",
        strcmp(why, "expired") == 0 ? "token_expired" : "invalid_api_key", NULL,
        "attempt token %s: send Authorization: Bearer "
        "<the attempt token>",
        tok ? why : "missing");
}

/* A body naming another rollout or attempt than the token is refused. */
lisa_rc_t
gw_auth_same_attempt(const json_t *body, const lisa_token_claims_t *who,
                     gw_err_t *err)
{
    const char *rid = json_string_value(json_object_get(body, "rollout_id"));
    json_t *att = json_object_get(body, "attempt");
    if ((rid && strcmp(rid, who->rollout_id) != 0) ||
        (json_is_integer(att) &&
         json_integer_value(att) != (json_int_t) who->attempt))
        return gw_err_set(err, LISA_UNAUTHORIZED, 403, "permission_error",
                          "wrong_rollout", "rollout_id",
                          "this token is not valid for that rollout or "
                          "attempt");
    return LISA_OK;
}

bool
gw_auth_admin(const gw_auth_t *self, lisa_http_req_t *req)
{
    return gw_auth_admin_header(self,
                                lisa_http_req_header(req, "Authorization"));
}

bool
gw_auth_admin_header(const gw_auth_t *self, const char *authorization)
{
    const char *key = self->admin_key;
    const char *tok = s_bearer(authorization);
    if (!key || !key[0] || !tok || strlen(tok) != strlen(key))
        return false;
    return CRYPTO_memcmp(tok, key, strlen(key)) == 0;
}
