/*
 * lisa_utf8: UTF-8 without ICU (see the header): strict validation,
 * decoding and encoding, and the two repairs, lossy (U+FFFD, as Rust's
 * from_utf8_lossy) and clean ('?', no NUL, bounded).
 */
#include "lisa/lisa_utf8.h"

#include "lisa/lisa_mem.h"

#include <string.h>

/* Valid range of the second byte of a sequence, by lead byte; 0/0 marks an
 * invalid lead. Continuation bytes after the second are always 80..BF. */
static void
s_second_range(uint8_t lead, uint8_t *lo, uint8_t *hi, size_t *need)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
        *need = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        *need = 3;
        if (lead == 0xE0)
            *lo = 0xA0;
        else if (lead == 0xED)
            *hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        *need = 4;
        if (lead == 0xF0)
            *lo = 0x90;
        else if (lead == 0xF4)
            *hi = 0x8F;
    } else {
        *need = 0;
    }
}

/* Length of the valid sequence at b (0 if invalid); *bad is set to the
 * number of bytes of the maximal invalid subpart when invalid. */
static size_t
s_seq(const uint8_t *b, size_t len, size_t *bad)
{
    if (b[0] < 0x80)
        return 1;
    uint8_t lo, hi;
    size_t need;
    s_second_range(b[0], &lo, &hi, &need);
    *bad = 1;
    if (need == 0)
        return 0;
    if (len < 2 || b[1] < lo || b[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++) {
        *bad = i;
        if (i >= len || b[i] < 0x80 || b[i] > 0xBF)
            return 0;
    }
    return need;
}

bool
lisa_utf8_valid(const char *s, size_t len)
{
    const uint8_t *b = (const uint8_t *) s;
    size_t i = 0;
    while (i < len) {
        if (b[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad;
        size_t n = s_seq(b + i, len - i, &bad);
        if (n == 0)
            return false;
        i += n;
    }
    return true;
}

size_t
lisa_utf8_seq(const char *s, size_t len)
{
    size_t bad;
    return s_seq((const uint8_t *) s, len, &bad);
}

char *
lisa_utf8_scrub(const char *s, size_t len, size_t max)
{
    char *out = lisa_malloc((len < max ? len : max) + 1);
    size_t i = 0, o = 0;
    while (i < len) {
        size_t n = s[i] ? lisa_utf8_seq(s + i, len - i) : 0;
        if (o + (n ? n : 1) > max)
            break;
        if (n == 0) {
            out[o++] = '?';
            i++;
            continue;
        }
        memcpy(out + o, s + i, n);
        o += n;
        i += n;
    }
    out[o] = '\0';
    return out;
}

size_t
lisa_utf8_next(const char *s, size_t len, uint32_t *cp)
{
    const uint8_t *b = (const uint8_t *) s;
    if (b[0] < 0x80 || len < 2) {
        *cp = b[0];
        return 1;
    }
    if (b[0] < 0xE0) {
        *cp = ((uint32_t) (b[0] & 0x1F) << 6) | (b[1] & 0x3F);
        return 2;
    }
    if (b[0] < 0xF0 || len < 4) {
        *cp = ((uint32_t) (b[0] & 0x0F) << 12) |
              ((uint32_t) (b[1] & 0x3F) << 6) | (b[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t) (b[0] & 0x07) << 18) | ((uint32_t) (b[1] & 0x3F) << 12) |
          ((uint32_t) (b[2] & 0x3F) << 6) | (b[3] & 0x3F);
    return 4;
}

size_t
lisa_utf8_put(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char) cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char) (0xC0 | (cp >> 6));
        out[1] = (char) (0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char) (0xE0 | (cp >> 12));
        out[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char) (0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char) (0xF0 | (cp >> 18));
    out[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char) (0x80 | (cp & 0x3F));
    return 4;
}

char *
lisa_utf8_lossy(const uint8_t *b, size_t len, size_t *out_len)
{
    /* Each invalid byte becomes at most 3 bytes (U+FFFD). */
    char *o = lisa_malloc(len * 3 + 1);
    size_t n = 0, i = 0;
    while (i < len) {
        if (b[i] < 0x80) {
            o[n++] = (char) b[i++];
            continue;
        }
        size_t bad = 1;
        size_t k = s_seq(b + i, len - i, &bad);
        if (k > 0) {
            memcpy(o + n, b + i, k);
            n += k;
            i += k;
        } else {
            o[n++] = (char) 0xEF;
            o[n++] = (char) 0xBF;
            o[n++] = (char) 0xBD;
            i += bad;
        }
    }
    o[n] = '\0';
    if (out_len)
        *out_len = n;
    return o;
}
