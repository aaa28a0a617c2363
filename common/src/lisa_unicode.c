/*
 * lisa_unicode: UTF-8 validation, NFC (through ICU), lossy decoding and
 * the byte-level alphabet. See the header for why each exists.
 */
#include "lisa/lisa_unicode.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <pthread.h>
#include <string.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

lisa_rc_t
lisa_utf8_nfc(const char *s, size_t len, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    /* Fast path: no code point at or above U+0300 means nothing can
     * compose or reorder (the first combining mark is U+0300). */
    const uint8_t *b = (const uint8_t *) s;
    bool simple = true;
    for (size_t i = 0; i < len; i++) {
        if (b[i] >= 0xCC) { /* lead bytes of U+0300 and above */
            simple = false;
            break;
        }
    }
    if (simple)
        return LISA_OK;
    if (len > (size_t) INT32_MAX / 2)
        return LISA_TOOLARGE;

    UErrorCode err = U_ZERO_ERROR;
    const UNormalizer2 *nfc = unorm2_getNFCInstance(&err);
    if (U_FAILURE(err))
        goto icu_fail;
    int32_t ulen = 0;
    UChar *u = lisa_malloc((len + 1) * sizeof(UChar));
    u_strFromUTF8(u, (int32_t) len + 1, &ulen, s, (int32_t) len, &err);
    if (U_FAILURE(err)) {
        lisa_free(&u);
        goto icu_fail;
    }
    int32_t yes = unorm2_spanQuickCheckYes(nfc, u, ulen, &err);
    if (U_FAILURE(err) || yes == ulen) {
        lisa_free(&u);
        if (U_FAILURE(err))
            goto icu_fail;
        return LISA_OK;
    }
    /* NFC can grow a string by at most 3x in UTF-16 units. */
    int32_t cap = ulen * 3 + 16;
    UChar *n = lisa_malloc((size_t) cap * sizeof(UChar));
    int32_t nlen = unorm2_normalize(nfc, u, ulen, n, cap, &err);
    lisa_free(&u);
    if (U_FAILURE(err)) {
        lisa_free(&n);
        goto icu_fail;
    }
    int32_t blen = 0;
    size_t bcap = (size_t) nlen * 3 + 1;
    char *o = lisa_malloc(bcap);
    u_strToUTF8(o, (int32_t) bcap, &blen, n, nlen, &err);
    lisa_free(&n);
    if (U_FAILURE(err)) {
        lisa_free(&o);
        goto icu_fail;
    }
    o[blen] = '\0';
    *out = o;
    *out_len = (size_t) blen;
    return LISA_OK;
icu_fail:
    lisa_log_error("unicode: ICU normalization failed: %s", u_errorName(err));
    return LISA_ERR;
}

/* Length of s[0..n) cut back to a character boundary of valid UTF-8. */
static size_t
s_boundary(const char *s, size_t n)
{
    size_t k = n;
    while (k > 0 && ((uint8_t) s[k - 1] & 0xC0) == 0x80)
        k--; /* continuation bytes: back to their lead byte */
    if (k == 0)
        return 0;
    uint8_t lead = (uint8_t) s[k - 1];
    size_t want = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    return n - (k - 1) >= want ? n : k - 1;
}

char *
lisa_utf8_clean(const char *s, size_t len, size_t max, size_t *out_len)
{
    size_t n = 0;
    char *o = lisa_utf8_lossy((const uint8_t *) (s ? s : ""), s ? len : 0, &n);
    if (n > max) {
        n = s_boundary(o, max);
        o[n] = '\0';
    }
    if (out_len)
        *out_len = n;
    return o;
}

size_t
lisa_utf8_fix(char *buf, size_t cap)
{
    if (!buf || cap == 0)
        return 0;
    size_t len = strnlen(buf, cap - 1);
    buf[len] = '\0';
    if (lisa_utf8_valid(buf, len))
        return len;
    size_t n = 0;
    char *o = lisa_utf8_clean(buf, len, cap - 1, &n);
    memcpy(buf, o, n + 1);
    lisa_free(&o);
    return n;
}

bool
lisa_unicode_is_space(uint32_t cp)
{
    return u_isUWhiteSpace((UChar32) cp) != 0;
}

bool
lisa_unicode_is_word(uint32_t cp)
{
    if (cp == '_')
        return true;
    return u_hasBinaryProperty((UChar32) cp, UCHAR_ALPHABETIC) ||
           u_hasBinaryProperty((UChar32) cp, UCHAR_JOIN_CONTROL) ||
           (U_GET_GC_MASK((UChar32) cp) &
            (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

/* Bytes that spell themselves: '!'..'~', 0xA1..0xAC, 0xAE..0xFF. */
static bool
s_printable(uint8_t b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

/* The 68 non-printable bytes in order; they spell U+0100 + rank. */
static int16_t s_rank_byte[68];
static int16_t s_byte_rank[256];
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

static void
s_init_tables(void)
{
    int k = 0;
    for (int b = 0; b < 256; b++) {
        s_byte_rank[b] = -1;
        if (!s_printable((uint8_t) b)) {
            s_byte_rank[b] = (int16_t) k;
            s_rank_byte[k++] = (int16_t) b;
        }
    }
}

uint32_t
lisa_bytelevel_char(uint8_t b)
{
    if (s_printable(b))
        return b;
    pthread_once(&s_once, s_init_tables);
    return 256u + (uint32_t) s_byte_rank[b];
}

int
lisa_bytelevel_byte(uint32_t cp)
{
    if (cp < 256)
        return s_printable((uint8_t) cp) ? (int) cp : -1;
    if (cp >= 256 + 68)
        return -1;
    pthread_once(&s_once, s_init_tables);
    return s_rank_byte[cp - 256];
}

int
lisa_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}
