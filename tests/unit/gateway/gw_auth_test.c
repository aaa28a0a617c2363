/*
 * gw_auth: attempt tokens (verified, remembered, still checked for
 * expiry), refusals counted by reason, the admin key, the same-attempt
 * rule for bodies.
 */
#include "gw_auth.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <czmq.h>
#include <stdio.h>
#include <string.h>

#define KEYHEX                                                                 \
    "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

static uint8_t s_key[32];

static char *
s_header(const char *rid, uint32_t attempt, uint64_t expiry_ms)
{
    for (size_t i = 0; i < sizeof s_key; i++)
        s_key[i] = (uint8_t) i;
    char *tok = lisa_token_issue(s_key, sizeof s_key, rid, attempt, expiry_ms);
    cr_assert_not_null(tok);
    char *h = lisa_malloc(strlen(tok) + 8);
    snprintf(h, strlen(tok) + 8, "Bearer %s", tok);
    lisa_free(&tok);
    return h;
}

static bool
s_counted(gw_metrics_t *m, const char *reason)
{
    size_t len;
    char *txt = gw_metrics_render(m, &len);
    char want[128];
    snprintf(want, sizeof want,
             "lisa_gateway_auth_failures_total{reason=\"%s\"} 1", reason);
    bool hit = strstr(txt, want) != NULL;
    lisa_free(&txt);
    return hit;
}

/* Usage: a checker over the shared key; a token names its attempt. */
Test(gw_auth, usage)
{
    gw_metrics_t *m = gw_metrics_new();
    char why[128];
    gw_auth_t *a = gw_auth_new(KEYHEX, "admin-secret", m, why, sizeof why);
    cr_assert_not_null(a, "%s", why);
    char *h = s_header("r-1", 3, lisa_token_now_ms() + 60000);
    for (int i = 0; i < 2; i++) { /* checked, then remembered */
        lisa_token_claims_t who;
        gw_err_t err;
        cr_assert_eq(gw_auth_check_header(a, h, &who, &err), LISA_OK);
        cr_assert_str_eq(who.rollout_id, "r-1");
        cr_assert_eq(who.attempt, 3);
    }
    cr_assert(gw_auth_admin_header(a, "Bearer admin-secret"));
    cr_assert_not(gw_auth_admin_header(a, "Bearer admin-secreT"));
    cr_assert_not(gw_auth_admin_header(a, "Bearer admin"));
    cr_assert_not(gw_auth_admin_header(a, NULL));
    lisa_free(&h);
    gw_auth_destroy(&a);
    cr_assert_null(a);
    gw_auth_destroy(&a);
    gw_metrics_destroy(&m);
}

/* Refusals: missing, malformed, bad signature, expired; counted. */
Test(gw_auth, refusals_are_counted_by_reason)
{
    gw_metrics_t *m = gw_metrics_new();
    char why[128];
    gw_auth_t *a = gw_auth_new(KEYHEX, NULL, m, why, sizeof why);
    cr_assert_not_null(a);
    lisa_token_claims_t who;
    gw_err_t err;
    cr_assert_eq(gw_auth_check_header(a, NULL, &who, &err), LISA_UNAUTHORIZED);
    cr_assert_eq(err.status, 401);
    cr_assert_str_eq(err.code, "invalid_api_key");
    cr_assert(s_counted(m, "missing"));
    cr_assert_eq(gw_auth_check_header(a, "Bearer v1.x.y", &who, &err),
                 LISA_UNAUTHORIZED);
    cr_assert(s_counted(m, "malformed"));
    char *h = s_header("r-2", 1, lisa_token_now_ms() + 60000);
    h[strlen(h) - 2] = h[strlen(h) - 2] == 'A' ? 'B' : 'A';
    cr_assert_eq(gw_auth_check_header(a, h, &who, &err), LISA_UNAUTHORIZED);
    cr_assert(s_counted(m, "bad signature"));
    lisa_free(&h);
    h = s_header("r-2", 1, lisa_token_now_ms() - 1);
    cr_assert_eq(gw_auth_check_header(a, h, &who, &err), LISA_UNAUTHORIZED);
    cr_assert_str_eq(err.code, "token_expired");
    cr_assert(s_counted(m, "expired"));
    lisa_free(&h);
    /* no admin key: admin routes are off */
    cr_assert_not(gw_auth_admin_header(a, "Bearer "));
    gw_auth_destroy(&a);
    cr_assert_null(gw_auth_new("short", NULL, m, why, sizeof why));
    cr_assert_null(gw_auth_new(NULL, NULL, m, why, sizeof why));
    gw_metrics_destroy(&m);
}

/* A remembered token is still refused once it expired. */
Test(gw_auth, remembered_tokens_expire)
{
    gw_metrics_t *m = gw_metrics_new();
    char why[128];
    gw_auth_t *a = gw_auth_new(KEYHEX, NULL, m, why, sizeof why);
    char *h = s_header("r-3", 2, lisa_token_now_ms() + 150);
    lisa_token_claims_t who;
    gw_err_t err;
    cr_assert_eq(gw_auth_check_header(a, h, &who, &err), LISA_OK);
    zclock_sleep(300);
    cr_assert_eq(gw_auth_check_header(a, h, &who, &err), LISA_UNAUTHORIZED);
    cr_assert_str_eq(err.code, "token_expired");
    lisa_free(&h);
    gw_auth_destroy(&a);
    gw_metrics_destroy(&m);
}

/* A body may name only the token's own rollout and attempt. */
Test(gw_auth, same_attempt)
{
    lisa_token_claims_t who = {.attempt = 2};
    snprintf(who.rollout_id, sizeof who.rollout_id, "r-4");
    static const struct {
        const char *body;
        lisa_rc_t rc;
    } cases[] = {{"{}", LISA_OK},
                 {"{\"rollout_id\":\"r-4\",\"attempt\":2}", LISA_OK},
                 {"{\"rollout_id\":\"r-5\"}", LISA_UNAUTHORIZED},
                 {"{\"attempt\":3}", LISA_UNAUTHORIZED}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *o = json_loads(cases[i].body, 0, NULL);
        gw_err_t err;
        cr_assert_eq(gw_auth_same_attempt(o, &who, &err), cases[i].rc,
                     "case %zu", i);
        if (cases[i].rc != LISA_OK) {
            cr_assert_eq(err.status, 403);
            cr_assert_str_eq(err.code, "wrong_rollout");
        }
        json_decref(o);
    }
}
