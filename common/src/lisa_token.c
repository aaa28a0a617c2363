/*
 * lisa_token: HMAC-SHA256 attempt tokens and their keys.
 *
 * The token is signed over its own printable prefix ("v1.<payload64>"), so
 * verification never decodes attacker bytes before the MAC has matched.
 * base64url decoding is strict (no padding, zero trailing bits): one token
 * has exactly one spelling, and any changed character either breaks the
 * shape or the MAC.
 */
#include "lisa/lisa_token.h"

#include "lisa/lisa_clock.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_unicode.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define S_PREFIX      "v1."
#define S_PREFIX_LEN  3u
#define S_VERSION     1u
#define S_MAC_LEN     32u
#define S_MAC64_LEN   43u /* base64url of 32 bytes, unpadded */
#define S_HEAD_LEN    14u /* version + attempt + expiry + id length */
#define S_PAYLOAD_MAX (S_HEAD_LEN + LISA_TOKEN_MAX_ROLLOUT_ID)

/* ---- base64 ------------------------------------------------------------ */

static const char s_b64url[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* Value of a base64 character; `any` accepts both '+/' and '-_'. -1 if
 * not one. */
static int
s_b64_val(char c, bool any)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-' || (any && c == '+'))
        return 62;
    if (c == '_' || (any && c == '/'))
        return 63;
    return -1;
}

char *
lisa_token_b64url_encode(const uint8_t *p, size_t n)
{
    char *out = lisa_malloc((n + 2) / 3 * 4 + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t) p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t) p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = s_b64url[(v >> 18) & 63];
        out[o++] = s_b64url[(v >> 12) & 63];
        if (i + 1 < n)
            out[o++] = s_b64url[(v >> 6) & 63];
        if (i + 2 < n)
            out[o++] = s_b64url[v & 63];
    }
    out[o] = 0;
    return out;
}

/* Decodes unpadded base64 of len chars; canonical trailing bits only. */
static lisa_rc_t
s_b64_decode(const char *s, size_t len, bool any, uint8_t *out, size_t cap,
             size_t *n)
{
    size_t need = len / 4 * 3 + (len % 4 ? len % 4 - 1 : 0);
    if (len % 4 == 1 || need > cap)
        return LISA_INVALID;
    uint32_t acc = 0;
    unsigned bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        int v = s_b64_val(s[i], any);
        if (v < 0)
            return LISA_INVALID;
        acc = (acc << 6) | (uint32_t) v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t) (acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0) /* non-zero leftover bits: not the canonical spelling */
        return LISA_INVALID;
    *n = o;
    return LISA_OK;
}

lisa_rc_t
lisa_token_b64url_decode(const char *s, size_t len, uint8_t *out, size_t cap,
                         size_t *n)
{
    return s_b64_decode(s, len, false, out, cap, n);
}

/* ---- tokens ------------------------------------------------------------ */

bool
lisa_token_rollout_id_ok(const char *id)
{
    if (!id)
        return false;
    size_t len = strnlen(id, LISA_TOKEN_MAX_ROLLOUT_ID + 1);
    if (len == 0 || len > LISA_TOKEN_MAX_ROLLOUT_ID)
        return false;
    for (size_t i = 0; i < len; i++)
        if (id[i] < 0x20 || id[i] > 0x7e)
            return false;
    return true;
}

uint64_t
lisa_token_now_ms(void)
{
    return lisa_clock_wall_ms();
}

static void
s_put_be(uint8_t *p, uint64_t v, unsigned bytes)
{
    for (unsigned i = 0; i < bytes; i++)
        p[i] = (uint8_t) (v >> (8 * (bytes - 1 - i)));
}

static uint64_t
s_get_be(const uint8_t *p, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++)
        v = (v << 8) | p[i];
    return v;
}

/* HMAC-SHA256 of len bytes at data; false on a library failure. */
static bool
s_mac(const uint8_t *key, size_t keylen, const char *data, size_t len,
      uint8_t mac[S_MAC_LEN])
{
    unsigned mlen = 0;
    if (keylen > INT32_MAX)
        return false;
    return HMAC(EVP_sha256(), key, (int) keylen, (const unsigned char *) data,
                len, mac, &mlen) != NULL &&
           mlen == S_MAC_LEN;
}

char *
lisa_token_issue(const uint8_t *key, size_t keylen, const char *rollout_id,
                 uint32_t attempt, uint64_t expiry_ms)
{
    uint8_t payload[S_PAYLOAD_MAX], mac[S_MAC_LEN];
    if (!key || keylen < LISA_TOKEN_MIN_KEY ||
        !lisa_token_rollout_id_ok(rollout_id))
        return NULL;
    size_t idlen = strlen(rollout_id);
    payload[0] = S_VERSION;
    s_put_be(payload + 1, attempt, 4);
    s_put_be(payload + 5, expiry_ms, 8);
    payload[13] = (uint8_t) idlen;
    memcpy(payload + S_HEAD_LEN, rollout_id, idlen);
    char *p64 = lisa_token_b64url_encode(payload, S_HEAD_LEN + idlen);
    size_t p64len = strlen(p64);
    char *tok = lisa_malloc(S_PREFIX_LEN + p64len + 1 + S_MAC64_LEN + 1);
    memcpy(tok, S_PREFIX, S_PREFIX_LEN);
    memcpy(tok + S_PREFIX_LEN, p64, p64len + 1);
    lisa_free(&p64);
    if (!s_mac(key, keylen, tok, S_PREFIX_LEN + p64len, mac)) {
        lisa_free(&tok);
        return NULL;
    }
    char *m64 = lisa_token_b64url_encode(mac, S_MAC_LEN);
    tok[S_PREFIX_LEN + p64len] = '.';
    memcpy(tok + S_PREFIX_LEN + p64len + 1, m64, S_MAC64_LEN + 1);
    lisa_free(&m64);
    return tok;
}

/* Decodes and checks the payload bytes into *c; false if malformed. */
static bool
s_parse_payload(const char *p64, size_t len, lisa_token_claims_t *c)
{
    uint8_t p[S_PAYLOAD_MAX];
    size_t n;
    if (s_b64_decode(p64, len, false, p, sizeof p, &n) != LISA_OK ||
        n < S_HEAD_LEN + 1 || p[0] != S_VERSION || p[13] != n - S_HEAD_LEN)
        return false;
    memcpy(c->rollout_id, p + S_HEAD_LEN, p[13]);
    c->rollout_id[p[13]] = 0;
    if (!lisa_token_rollout_id_ok(c->rollout_id) ||
        strlen(c->rollout_id) != p[13])
        return false;
    c->attempt = (uint32_t) s_get_be(p + 1, 4);
    c->expiry_ms = s_get_be(p + 5, 8);
    return true;
}

/* Sets *why and returns LISA_UNAUTHORIZED. */
static lisa_rc_t
s_refuse(const char **why, const char *reason)
{
    if (why)
        *why = reason;
    return LISA_UNAUTHORIZED;
}

lisa_rc_t
lisa_token_verify(const uint8_t *key, size_t keylen, const char *token,
                  uint64_t now_ms, lisa_token_claims_t *out, const char **why)
{
    uint8_t mac[S_MAC_LEN], want[S_MAC_LEN];
    lisa_token_claims_t c;
    size_t n;
    if (!key || keylen < LISA_TOKEN_MIN_KEY) {
        if (why)
            *why = "key too short";
        return LISA_INVALID;
    }
    if (!token)
        return s_refuse(why, "malformed");
    size_t len = strnlen(token, LISA_TOKEN_MAX_LEN + 1);
    if (len > LISA_TOKEN_MAX_LEN)
        return s_refuse(why, "too long");
    if (len < S_PREFIX_LEN + 1 + S_MAC64_LEN ||
        memcmp(token, S_PREFIX, S_PREFIX_LEN) != 0)
        return s_refuse(why, "malformed");
    const char *dot = token + len - S_MAC64_LEN - 1;
    if (*dot != '.' ||
        memchr(token + S_PREFIX_LEN, '.',
               (size_t) (dot - token) - S_PREFIX_LEN) ||
        s_b64_decode(dot + 1, S_MAC64_LEN, false, mac, sizeof mac, &n) !=
            LISA_OK ||
        n != S_MAC_LEN)
        return s_refuse(why, "malformed");
    if (!s_mac(key, keylen, token, (size_t) (dot - token), want))
        return s_refuse(why, "bad signature");
    if (CRYPTO_memcmp(mac, want, S_MAC_LEN) != 0)
        return s_refuse(why, "bad signature");
    if (!s_parse_payload(token + S_PREFIX_LEN,
                         (size_t) (dot - token) - S_PREFIX_LEN, &c))
        return s_refuse(why, "malformed");
    if (now_ms >= c.expiry_ms)
        return s_refuse(why, "expired");
    if (out)
        *out = c;
    if (why)
        *why = NULL;
    return LISA_OK;
}

/* ---- keys ---------------------------------------------------------------- */

/* Decodes len hex chars into out (cap bytes). */
static lisa_rc_t
s_hex_decode(const char *s, size_t len, uint8_t *out, size_t cap, size_t *n)
{
    if (len % 2 || len / 2 > cap)
        return LISA_INVALID;
    for (size_t i = 0; i < len; i += 2) {
        int hi = lisa_hex_digit(s[i]), lo = lisa_hex_digit(s[i + 1]);
        if (hi < 0 || lo < 0)
            return LISA_INVALID;
        out[i / 2] = (uint8_t) (hi << 4 | lo);
    }
    *n = len / 2;
    return LISA_OK;
}

static bool
s_all_hex(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (lisa_hex_digit(s[i]) < 0)
            return false;
    return len > 0;
}

static bool
s_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Decodes the key body [s, s+len) as hex or base64 (kind 'h', 'b', or 0
 * for automatic). */
static lisa_rc_t
s_key_decode(const char *s, size_t len, char kind, lisa_token_key_t *key)
{
    uint8_t buf[LISA_TOKEN_MAX_KEY + 3];
    size_t n = 0;
    lisa_rc_t rc;
    if (kind == 'h' || (kind == 0 && s_all_hex(s, len))) {
        rc = s_hex_decode(s, len, buf, sizeof buf, &n);
    } else {
        while (len && s[len - 1] == '=') /* padding is optional */
            len--;
        rc = s_b64_decode(s, len, true, buf, sizeof buf, &n);
    }
    if (rc == LISA_OK && (n < LISA_TOKEN_MIN_KEY || n > LISA_TOKEN_MAX_KEY))
        rc = LISA_TOOLARGE;
    if (rc == LISA_OK) {
        memcpy(key->bytes, buf, n);
        key->len = n;
    }
    OPENSSL_cleanse(buf, sizeof buf);
    return rc;
}

lisa_rc_t
lisa_token_key_parse(const char *text, lisa_token_key_t *key, char *err,
                     size_t errlen)
{
    char kind = 0;
    memset(key, 0, sizeof *key);
    if (!text) {
        lisa_errf(err, errlen, "token key: not set");
        return LISA_INVALID;
    }
    const char *b = text, *e = text + strnlen(text, 1024);
    while (b < e && s_space(*b))
        b++;
    while (e > b && s_space(e[-1]))
        e--;
    if (e - b >= 4 && strncmp(b, "hex:", 4) == 0) {
        kind = 'h';
        b += 4;
    } else if (e - b >= 7 && strncmp(b, "base64:", 7) == 0) {
        kind = 'b';
        b += 7;
    }
    lisa_rc_t rc = s_key_decode(b, (size_t) (e - b), kind, key);
    if (rc == LISA_TOOLARGE)
        lisa_errf(err, errlen, "token key: must be %u to %u bytes",
                  LISA_TOKEN_MIN_KEY, LISA_TOKEN_MAX_KEY);
    else if (rc != LISA_OK)
        lisa_errf(err, errlen, "token key: not valid hex or base64");
    return rc == LISA_OK ? LISA_OK : LISA_INVALID;
}

lisa_rc_t
lisa_token_key_load_file(const char *path, lisa_token_key_t *key, char *err,
                         size_t errlen)
{
    char buf[1025];
    struct stat st;
    memset(key, 0, sizeof *key);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        lisa_errf(err, errlen, "token key file %s: %s", path, strerror(errno));
        return errno == ENOENT ? LISA_NOTFOUND : LISA_ERR;
    }
    if (fstat(fd, &st) == 0 && (st.st_mode & 077))
        lisa_log_warn("token key file %s is readable by group or others", path);
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n < 0 || (size_t) n >= sizeof buf) {
        lisa_errf(err, errlen, "token key file %s: %s", path,
                  n < 0 ? "read error" : "larger than 1 KiB");
        return n < 0 ? LISA_ERR : LISA_INVALID;
    }
    buf[n] = 0;
    lisa_rc_t rc = lisa_token_key_parse(buf, key, err, errlen);
    OPENSSL_cleanse(buf, sizeof buf);
    return rc;
}

lisa_rc_t
lisa_token_key_from_spec(const char *spec, lisa_token_key_t *key, char *err,
                         size_t errlen)
{
    if (spec && strncmp(spec, "file:", 5) == 0)
        return lisa_token_key_load_file(spec + 5, key, err, errlen);
    return lisa_token_key_parse(spec, key, err, errlen);
}

lisa_rc_t
lisa_token_key_random(lisa_token_key_t *key, size_t len)
{
    memset(key, 0, sizeof *key);
    if (len < LISA_TOKEN_MIN_KEY || len > LISA_TOKEN_MAX_KEY)
        return LISA_INVALID;
    if (RAND_bytes(key->bytes, (int) len) != 1)
        return LISA_ERR;
    key->len = len;
    return LISA_OK;
}

char *
lisa_token_key_hex(const lisa_token_key_t *key)
{
    static const char digits[] = "0123456789abcdef";
    char *out = lisa_malloc(key->len * 2 + 1);
    for (size_t i = 0; i < key->len; i++) {
        out[2 * i] = digits[key->bytes[i] >> 4];
        out[2 * i + 1] = digits[key->bytes[i] & 15];
    }
    out[key->len * 2] = 0;
    return out;
}

void
lisa_token_key_wipe(lisa_token_key_t *key)
{
    OPENSSL_cleanse(key, sizeof *key);
}
