/*
 * lisa_token tests: issue/verify round trips, every way a token can be
 * wrong (tampered bytes, truncation, wrong key, other rollout, expiry), a
 * known-answer check built with OpenSSL's own base64 and HMAC, and key
 * loading from text and files.
 */
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_token.h"

#include <criterion/criterion.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static lisa_token_key_t
s_key(uint8_t seed)
{
    lisa_token_key_t k;
    memset(&k, 0, sizeof k);
    k.len = 32;
    for (size_t i = 0; i < k.len; i++)
        k.bytes[i] = (uint8_t) (seed + i * 7);
    return k;
}

Test(lisa_token, usage_example)
{
    lisa_token_key_t key;
    cr_assert_eq(lisa_token_key_random(&key, 32), LISA_OK);
    uint64_t now = lisa_token_now_ms();
    char *tok = lisa_token_issue(key.bytes, key.len, "r-17", 2, now + 60000);
    cr_assert_not_null(tok);
    cr_assert_eq(strncmp(tok, "v1.", 3), 0);

    lisa_token_claims_t c;
    const char *why = "unset";
    cr_assert_eq(lisa_token_verify(key.bytes, key.len, tok, now, &c, &why),
                 LISA_OK);
    cr_assert_str_eq(c.rollout_id, "r-17");
    cr_assert_eq(c.attempt, 2);
    cr_assert_eq(c.expiry_ms, now + 60000);
    cr_assert_null(why);
    lisa_free(&tok);
    lisa_token_key_wipe(&key);
}

/* Standard base64 via OpenSSL, turned into unpadded base64url. */
static char *
s_oracle_b64url(const uint8_t *p, size_t n)
{
    char *out = lisa_malloc((n + 2) / 3 * 4 + 1);
    int len = EVP_EncodeBlock((unsigned char *) out, p, (int) n);
    while (len > 0 && out[len - 1] == '=')
        len--;
    out[len] = 0;
    for (int i = 0; i < len; i++)
        out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    return out;
}

Test(lisa_token, known_answer_matches_openssl_construction)
{
    lisa_token_key_t key = s_key(3);
    const char *id = "rollout-0042";
    uint8_t payload[64];
    size_t idlen = strlen(id);
    payload[0] = 1;
    uint32_t attempt = 0x01020304u;
    uint64_t exp = 0x0102030405060708ull;
    for (int i = 0; i < 4; i++)
        payload[1 + i] = (uint8_t) (attempt >> (24 - 8 * i));
    for (int i = 0; i < 8; i++)
        payload[5 + i] = (uint8_t) (exp >> (56 - 8 * i));
    payload[13] = (uint8_t) idlen;
    memcpy(payload + 14, id, idlen);
    char *p64 = s_oracle_b64url(payload, 14 + idlen);
    char signed_part[256];
    snprintf(signed_part, sizeof signed_part, "v1.%s", p64);
    unsigned char mac[32];
    unsigned mlen = 0;
    cr_assert_not_null(HMAC(EVP_sha256(), key.bytes, (int) key.len,
                            (unsigned char *) signed_part, strlen(signed_part),
                            mac, &mlen));
    char *m64 = s_oracle_b64url(mac, mlen);
    char want[512];
    snprintf(want, sizeof want, "%s.%s", signed_part, m64);

    char *tok = lisa_token_issue(key.bytes, key.len, id, attempt, exp);
    cr_assert_str_eq(tok, want);
    lisa_free(&tok);
    lisa_free(&p64);
    lisa_free(&m64);
}

Test(lisa_token, round_trips_edge_claims)
{
    lisa_token_key_t key = s_key(9);
    char longid[LISA_TOKEN_MAX_ROLLOUT_ID + 1];
    memset(longid, 'z', LISA_TOKEN_MAX_ROLLOUT_ID);
    longid[LISA_TOKEN_MAX_ROLLOUT_ID] = 0;
    const char *ids[] = {"a", "~ !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", longid};
    uint32_t attempts[] = {0, 1, UINT32_MAX};
    for (size_t i = 0; i < 3; i++) {
        for (size_t j = 0; j < 3; j++) {
            char *tok = lisa_token_issue(key.bytes, key.len, ids[i],
                                         attempts[j], UINT64_MAX);
            cr_assert_not_null(tok);
            cr_assert_leq(strlen(tok), LISA_TOKEN_MAX_LEN);
            lisa_token_claims_t c;
            cr_assert_eq(
                lisa_token_verify(key.bytes, key.len, tok, 0, &c, NULL),
                LISA_OK);
            cr_assert_str_eq(c.rollout_id, ids[i]);
            cr_assert_eq(c.attempt, attempts[j]);
            cr_assert_eq(c.expiry_ms, UINT64_MAX);
            lisa_free(&tok);
        }
    }
}

Test(lisa_token, issue_refuses_bad_arguments)
{
    lisa_token_key_t key = s_key(1);
    char longid[LISA_TOKEN_MAX_ROLLOUT_ID + 2];
    memset(longid, 'a', sizeof longid - 1);
    longid[sizeof longid - 1] = 0;
    cr_assert_null(lisa_token_issue(key.bytes, 31, "r", 1, 10));
    cr_assert_null(lisa_token_issue(NULL, 32, "r", 1, 10));
    cr_assert_null(lisa_token_issue(key.bytes, key.len, NULL, 1, 10));
    cr_assert_null(lisa_token_issue(key.bytes, key.len, "", 1, 10));
    cr_assert_null(lisa_token_issue(key.bytes, key.len, longid, 1, 10));
    cr_assert_null(lisa_token_issue(key.bytes, key.len, "a\tb", 1, 10));
    cr_assert_null(lisa_token_issue(key.bytes, key.len, "caf\xc3\xa9", 1, 10));
    cr_assert_null(lisa_token_issue(key.bytes, key.len, "a\x7f", 1, 10));
}

Test(lisa_token, expiry_is_exclusive)
{
    lisa_token_key_t key = s_key(2);
    char *tok = lisa_token_issue(key.bytes, key.len, "r-1", 1, 1000);
    const char *why = NULL;
    cr_assert_eq(lisa_token_verify(key.bytes, key.len, tok, 999, NULL, &why),
                 LISA_OK);
    cr_assert_eq(lisa_token_verify(key.bytes, key.len, tok, 1000, NULL, &why),
                 LISA_UNAUTHORIZED);
    cr_assert_str_eq(why, "expired");
    cr_assert_eq(
        lisa_token_verify(key.bytes, key.len, tok, UINT64_MAX, NULL, &why),
        LISA_UNAUTHORIZED);
    lisa_free(&tok);
}

Test(lisa_token, every_changed_byte_is_refused)
{
    lisa_token_key_t key = s_key(4);
    char *tok = lisa_token_issue(key.bytes, key.len, "rollout-7", 3, 5000);
    size_t len = strlen(tok);
    static const char repl[] = {'A', 'a', '0', '-', '_', '.', '=', '+', 'z'};
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            char *t = lisa_strdup(tok);
            t[i] = (char) (t[i] ^ (1 << bit));
            const char *why = NULL;
            lisa_rc_t rc =
                lisa_token_verify(key.bytes, key.len, t, 0, NULL, &why);
            cr_assert_eq(rc, LISA_UNAUTHORIZED, "byte %zu bit %d", i, bit);
            cr_assert_not_null(why);
            lisa_free(&t);
        }
        for (size_t r = 0; r < sizeof repl; r++) {
            if (tok[i] == repl[r])
                continue;
            char *t = lisa_strdup(tok);
            t[i] = repl[r];
            cr_assert_eq(
                lisa_token_verify(key.bytes, key.len, t, 0, NULL, NULL),
                LISA_UNAUTHORIZED, "byte %zu -> %c", i, repl[r]);
            lisa_free(&t);
        }
    }
    lisa_free(&tok);
}

Test(lisa_token, truncated_or_extended_is_refused)
{
    lisa_token_key_t key = s_key(5);
    char *tok = lisa_token_issue(key.bytes, key.len, "r-5", 1, 5000);
    size_t len = strlen(tok);
    for (size_t n = 0; n < len; n++) {
        char *t = lisa_strndup(tok, n);
        cr_assert_eq(lisa_token_verify(key.bytes, key.len, t, 0, NULL, NULL),
                     LISA_UNAUTHORIZED, "prefix of %zu", n);
        lisa_free(&t);
    }
    const char *suffixes[] = {"A", "=", ".", ".x", " ", "\n"};
    for (size_t s = 0; s < 6; s++) {
        char buf[600];
        snprintf(buf, sizeof buf, "%s%s", tok, suffixes[s]);
        cr_assert_eq(lisa_token_verify(key.bytes, key.len, buf, 0, NULL, NULL),
                     LISA_UNAUTHORIZED, "suffix '%s'", suffixes[s]);
    }
    lisa_free(&tok);
}

Test(lisa_token, wrong_key_and_cross_rollout)
{
    lisa_token_key_t k1 = s_key(6), k2 = s_key(7);
    char *a = lisa_token_issue(k1.bytes, k1.len, "r-1", 1, 5000);
    char *b = lisa_token_issue(k1.bytes, k1.len, "r-2", 1, 5000);
    const char *why = NULL;
    cr_assert_eq(lisa_token_verify(k2.bytes, k2.len, a, 0, NULL, &why),
                 LISA_UNAUTHORIZED);
    cr_assert_str_eq(why, "bad signature");
    /* Same key bytes plus one more (non-zero: HMAC pads keys with zeros,
     * so a trailing zero byte would name the same key). */
    lisa_token_key_t k3 = k1;
    k3.bytes[32] = 1;
    k3.len = 33;
    cr_assert_eq(lisa_token_verify(k3.bytes, k3.len, a, 0, NULL, &why),
                 LISA_UNAUTHORIZED);

    /* Payload of r-2 with the MAC of r-1: refused. */
    const char *dot_a = strrchr(a, '.'), *dot_b = strrchr(b, '.');
    char spliced[600];
    snprintf(spliced, sizeof spliced, "%.*s%s", (int) (dot_b - b), b, dot_a);
    cr_assert_eq(lisa_token_verify(k1.bytes, k1.len, spliced, 0, NULL, &why),
                 LISA_UNAUTHORIZED);
    cr_assert_str_eq(why, "bad signature");

    /* A valid token only ever claims its own rollout and attempt. */
    lisa_token_claims_t c;
    cr_assert_eq(lisa_token_verify(k1.bytes, k1.len, a, 0, &c, NULL), LISA_OK);
    cr_assert_str_eq(c.rollout_id, "r-1");
    char *a2 = lisa_token_issue(k1.bytes, k1.len, "r-1", 2, 5000);
    cr_assert_str_neq(a, a2);
    lisa_free(&a);
    lisa_free(&b);
    lisa_free(&a2);
}

Test(lisa_token, malformed_and_oversized)
{
    lisa_token_key_t key = s_key(8);
    const char *bad[] = {"",        "v1.",
                         "v1..",    "v2.AAAA.AAAA",
                         "garbage", "v1.AQAAAAEAAAAAAAAAAQFh"};
    const char *why = NULL;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(
            lisa_token_verify(key.bytes, key.len, bad[i], 0, NULL, &why),
            LISA_UNAUTHORIZED, "%s", bad[i]);
        cr_assert_str_eq(why, "malformed");
    }
    cr_assert_eq(lisa_token_verify(key.bytes, key.len, NULL, 0, NULL, &why),
                 LISA_UNAUTHORIZED);
    char big[LISA_TOKEN_MAX_LEN + 2];
    memset(big, 'A', sizeof big - 1);
    big[sizeof big - 1] = 0;
    memcpy(big, "v1.", 3);
    cr_assert_eq(lisa_token_verify(key.bytes, key.len, big, 0, NULL, &why),
                 LISA_UNAUTHORIZED);
    cr_assert_str_eq(why, "too long");
    /* A short key is a configuration error, not a bad token. */
    cr_assert_eq(lisa_token_verify(key.bytes, 16, "v1.x.y", 0, NULL, &why),
                 LISA_INVALID);
}

Test(lisa_token, b64url_matches_openssl_and_is_strict)
{
    uint8_t data[100], back[100];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t) (i * 37 + 11);
    for (size_t n = 0; n <= sizeof data; n++) {
        char *ours = lisa_token_b64url_encode(data, n);
        char *theirs = s_oracle_b64url(data, n);
        cr_assert_str_eq(ours, theirs, "n=%zu", n);
        size_t got = 0;
        cr_assert_eq(lisa_token_b64url_decode(ours, strlen(ours), back,
                                              sizeof back, &got),
                     LISA_OK);
        cr_assert_eq(got, n);
        cr_assert_eq(memcmp(back, data, n), 0);
        lisa_free(&ours);
        lisa_free(&theirs);
    }
    size_t got;
    /* "AB" has non-zero trailing bits ("AA" is the canonical 0x00). */
    cr_assert_eq(lisa_token_b64url_decode("AB", 2, back, 100, &got),
                 LISA_INVALID);
    cr_assert_eq(lisa_token_b64url_decode("AA", 2, back, 100, &got), LISA_OK);
    cr_assert_eq(lisa_token_b64url_decode("A", 1, back, 100, &got),
                 LISA_INVALID);
    cr_assert_eq(lisa_token_b64url_decode("AA==", 4, back, 100, &got),
                 LISA_INVALID);
    cr_assert_eq(lisa_token_b64url_decode("a+b/", 4, back, 100, &got),
                 LISA_INVALID);
    cr_assert_eq(lisa_token_b64url_decode("AAAA", 4, back, 2, &got),
                 LISA_INVALID);
}

Test(lisa_token, key_parse_hex_and_base64)
{
    lisa_token_key_t k, want = s_key(10);
    char *hex = lisa_token_key_hex(&want);
    char err[256];
    cr_assert_eq(strlen(hex), 64);
    cr_assert_eq(lisa_token_key_parse(hex, &k, err, sizeof err), LISA_OK);
    cr_assert_eq(k.len, 32);
    cr_assert_eq(memcmp(k.bytes, want.bytes, 32), 0);

    char buf[300];
    snprintf(buf, sizeof buf, "  hex:%s\n", hex);
    cr_assert_eq(lisa_token_key_parse(buf, &k, err, sizeof err), LISA_OK);
    cr_assert_eq(memcmp(k.bytes, want.bytes, 32), 0);

    /* Standard base64 with padding, from OpenSSL. */
    char std[100];
    EVP_EncodeBlock((unsigned char *) std, want.bytes, 32);
    cr_assert_eq(lisa_token_key_parse(std, &k, err, sizeof err), LISA_OK, "%s",
                 err);
    cr_assert_eq(memcmp(k.bytes, want.bytes, 32), 0);
    snprintf(buf, sizeof buf, "base64:%s", std);
    cr_assert_eq(lisa_token_key_parse(buf, &k, err, sizeof err), LISA_OK);
    char *url = lisa_token_b64url_encode(want.bytes, 32);
    cr_assert_eq(lisa_token_key_parse(url, &k, err, sizeof err), LISA_OK);
    cr_assert_eq(memcmp(k.bytes, want.bytes, 32), 0);
    lisa_free(&url);

    /* 31 bytes: too short, and the message says so. */
    hex[62] = 0;
    cr_assert_eq(lisa_token_key_parse(hex, &k, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "32") != NULL, "%s", err);
    cr_assert_eq(k.len, 0);
    cr_assert_eq(lisa_token_key_parse("not a key!", &k, err, sizeof err),
                 LISA_INVALID);
    cr_assert_eq(lisa_token_key_parse(NULL, &k, err, sizeof err), LISA_INVALID);
    cr_assert_eq(lisa_token_key_parse("hex:zz", &k, err, sizeof err),
                 LISA_INVALID);
    char big[300];
    memset(big, 'a', 258);
    big[258] = 0; /* 129 bytes of hex */
    cr_assert_eq(lisa_token_key_parse(big, &k, err, sizeof err), LISA_INVALID);
    lisa_free(&hex);
}

static void
s_tmpfile(char *path, size_t len, const char *text, mode_t mode)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, len, "%s/lisa_key_XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t) strlen(text));
    cr_assert_eq(fchmod(fd, mode), 0);
    close(fd);
}

/* Reads what was logged into the pipe so far (non-blocking end). */
static size_t
s_drain(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    lisa_log_set_fd(-1);
    ssize_t r;
    while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t) r;
    buf[n] = 0;
    return n;
}

Test(lisa_token, key_file_and_spec)
{
    lisa_token_key_t want = s_key(11), k;
    char *hex = lisa_token_key_hex(&want);
    char text[200], path[256], spec[300], err[256];
    snprintf(text, sizeof text, "%s\n", hex);

    int p[2];
    cr_assert_eq(pipe(p), 0);
    s_tmpfile(path, sizeof path, text, 0600);
    lisa_log_set_fd(p[1]);
    cr_assert_eq(lisa_token_key_load_file(path, &k, err, sizeof err), LISA_OK);
    close(p[1]);
    char logbuf[1024];
    cr_assert_eq(s_drain(p[0], logbuf, sizeof logbuf), 0, "%s", logbuf);
    close(p[0]);
    cr_assert_eq(memcmp(k.bytes, want.bytes, 32), 0);
    snprintf(spec, sizeof spec, "file:%s", path);
    cr_assert_eq(lisa_token_key_from_spec(spec, &k, err, sizeof err), LISA_OK);
    cr_assert_eq(memcmp(k.bytes, want.bytes, 32), 0);
    unlink(path);

    /* A world-readable key file still loads, with a warning. */
    cr_assert_eq(pipe(p), 0);
    s_tmpfile(path, sizeof path, text, 0644);
    lisa_log_set_fd(p[1]);
    cr_assert_eq(lisa_token_key_load_file(path, &k, err, sizeof err), LISA_OK);
    close(p[1]);
    s_drain(p[0], logbuf, sizeof logbuf);
    close(p[0]);
    cr_assert(strstr(logbuf, "WARN") && strstr(logbuf, "readable"), "%s",
              logbuf);
    unlink(path);

    cr_assert_eq(lisa_token_key_load_file(path, &k, err, sizeof err),
                 LISA_NOTFOUND);
    cr_assert(strstr(err, path) != NULL);
    cr_assert_eq(lisa_token_key_from_spec(hex, &k, err, sizeof err), LISA_OK);
    lisa_free(&hex);
}

Test(lisa_token, random_keys_differ_and_wipe_clears)
{
    lisa_token_key_t a, b;
    cr_assert_eq(lisa_token_key_random(&a, 32), LISA_OK);
    cr_assert_eq(lisa_token_key_random(&b, 64), LISA_OK);
    cr_assert_eq(b.len, 64);
    cr_assert_neq(memcmp(a.bytes, b.bytes, 32), 0);
    cr_assert_eq(lisa_token_key_random(&a, 16), LISA_INVALID);
    cr_assert_eq(lisa_token_key_random(&a, 129), LISA_INVALID);
    lisa_token_key_wipe(&b);
    uint8_t zero[LISA_TOKEN_MAX_KEY] = {0};
    cr_assert_eq(memcmp(b.bytes, zero, sizeof zero), 0);
    cr_assert_eq(b.len, 0);
}
