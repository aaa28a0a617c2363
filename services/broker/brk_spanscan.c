/*
 * brk_spanscan: one bounded pass over a span frame (see brk_spanscan.h).
 *
 * Each message the scanner takes is described by a table: field number ->
 * what the field is. Varints are read with the limits protobuf-c applies
 * (10 bytes for a value, 5 for a key or a length); a 32-bit field keeps the
 * low 32 bits of its varint, as protobuf-c does; for a scalar the last
 * occurrence wins, and repeated fields add up over packed and unpacked
 * occurrences.
 */
#include "brk_spanscan.h"

#include <string.h>

/* What a field of a scanned message is. */
typedef enum {
    S_NONE = 0, /* unknown: the frame goes the slow way */
    S_VARINT,   /* scalar varint whose value is not needed */
    S_STRING,   /* string or bytes whose value is not needed */
    S_U32,      /* uint32 / int32 kept (low 32 bits) */
    S_ID,       /* the rollout id */
    S_REP_VARINT,
    S_REP_FLOAT,
    S_SAMPLING, /* the Sampling message, checked field by field */
} s_kind_t;

/* Span fields, by number (proto/lisa.proto, message Span). */
static const s_kind_t s_span_fields[] = {
    [1] = S_ID,         [2] = S_U32,       [3] = S_U32,
    [4] = S_U32,        [5] = S_VARINT,    [6] = S_REP_VARINT,
    [7] = S_REP_VARINT, [8] = S_REP_FLOAT, [9] = S_STRING,
    [10] = S_VARINT,    [11] = S_STRING,   [12] = S_VARINT,
    [13] = S_VARINT,    [14] = S_VARINT,   [15] = S_VARINT,
    [16] = S_STRING,    [17] = S_SAMPLING,
};
#define S_SPAN_FIELDS (sizeof s_span_fields / sizeof s_span_fields[0])

typedef struct {
    const uint8_t *p, *end;
} s_cur_t;

/* A varint of at most `max` bytes. */
static bool
s_uvarint(s_cur_t *c, unsigned max, uint64_t *v)
{
    uint64_t r = 0;
    for (unsigned i = 0; i < max; i++) {
        if (c->p >= c->end)
            return false;
        uint8_t b = *c->p++;
        r |= (uint64_t) (b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* A field key: number and wire type. */
static bool
s_key(s_cur_t *c, uint32_t *field, unsigned *wt)
{
    uint64_t k;
    if (!s_uvarint(c, 5, &k) || k > UINT32_MAX || (k >> 3) == 0)
        return false;
    *field = (uint32_t) (k >> 3);
    *wt = (unsigned) (k & 7);
    return true;
}

/* The payload of a length-delimited field. */
static bool
s_bytes(s_cur_t *c, s_cur_t *out)
{
    uint64_t n;
    if (!s_uvarint(c, 5, &n) || n > (uint64_t) (c->end - c->p))
        return false;
    out->p = c->p;
    out->end = c->p + n;
    c->p += n;
    return true;
}

/* A Sampling message (proto/lisa.proto): floats 1 and 2, the varint 3;
 * anything else goes the slow way. */
static bool
s_sampling(s_cur_t d)
{
    while (d.p < d.end) {
        uint32_t f;
        unsigned wt;
        uint64_t v;
        if (!s_key(&d, &f, &wt))
            return false;
        if ((f == 1 || f == 2) && wt == 5) {
            if (d.end - d.p < 4)
                return false;
            d.p += 4;
        } else if (!(f == 3 && wt == 0 && s_uvarint(&d, 10, &v))) {
            return false;
        }
    }
    return true;
}

/* Number of varints in packed data; false when one is malformed (runs
 * past the end or over 10 bytes). A varint ends at each byte whose top
 * bit is clear, so the count is the number of such bytes; eight bytes are
 * looked at a time, carrying the length of the current run of
 * continuation bytes across words. */
static bool
s_count_packed(s_cur_t d, size_t *n)
{
    const uint8_t *p = d.p;
    size_t len = (size_t) (d.end - d.p), cont = 0, i = 0;
    unsigned run = 0; /* continuation bytes since the last end byte */
    if (len && (p[len - 1] & 0x80))
        return false;
#if defined(__GNUC__) && defined(__BYTE_ORDER__) &&                            \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t tops = 0x8080808080808080ull;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        uint64_t hi = w & tops;
        if (hi == 0) {
            run = 0;
            continue;
        }
        /* one bit per byte at bit 0; the multiply sums them into the
         * top byte (no popcount instruction needed) */
        cont += (size_t) (((hi >> 7) * 0x0101010101010101ull) >> 56);
        if (hi == tops) {
            run += 8;
            if (run >= 10)
                return false;
            continue;
        }
        /* the run goes on through the word's first bytes, and a new one
         * starts with its last bytes; runs inside it are under 8 */
        uint64_t ends = ~hi & tops;
        if (run + (unsigned) (__builtin_ctzll(ends) / 8) >= 10)
            return false;
        run = (unsigned) (__builtin_clzll(ends) / 8);
    }
#endif
    for (; i < len; i++) {
        if (p[i] & 0x80) {
            cont++;
            if (++run >= 10)
                return false;
        } else {
            run = 0;
        }
    }
    *n += len - cont;
    return true;
}

static bool
s_span(s_cur_t c, brk_spanscan_span_t *s)
{
    memset(s, 0, sizeof *s);
    s->raw = c.p;
    s->raw_len = (size_t) (c.end - c.p);
    while (c.p < c.end) {
        uint32_t f;
        unsigned wt;
        if (!s_key(&c, &f, &wt))
            return false;
        s_kind_t k = f < S_SPAN_FIELDS ? s_span_fields[f] : S_NONE;
        uint64_t v = 0;
        s_cur_t d;
        switch (k) {
        case S_VARINT:
        case S_U32:
            if (wt != 0 || !s_uvarint(&c, 10, &v))
                return false;
            if (k == S_U32 && f == 2)
                s->attempt = (uint32_t) v;
            else if (k == S_U32 && f == 3)
                s->seq = (uint32_t) v;
            else if (k == S_U32 && f == 4)
                s->prev_seq = (int32_t) (uint32_t) v;
            break;
        case S_STRING:
            if (wt != 2 || !s_bytes(&c, &d))
                return false;
            break;
        case S_ID: {
            if (wt != 2 || !s_bytes(&c, &d))
                return false;
            size_t n = (size_t) (d.end - d.p);
            if (n > BRK_SPANSCAN_MAX_ID || memchr(d.p, 0, n))
                return false;
            memcpy(s->rollout_id, d.p, n);
            s->rollout_id[n] = '\0';
            break;
        }
        case S_REP_VARINT: {
            size_t *cnt = f == 7 ? &s->n_response_ids : NULL;
            size_t ignored = 0;
            if (!cnt)
                cnt = &ignored;
            if (wt == 0) {
                if (!s_uvarint(&c, 10, &v))
                    return false;
                (*cnt)++;
            } else if (wt != 2 || !s_bytes(&c, &d) || !s_count_packed(d, cnt)) {
                return false;
            }
            break;
        }
        case S_SAMPLING:
            if (wt != 2 || !s_bytes(&c, &d) || !s_sampling(d))
                return false;
            break;
        case S_REP_FLOAT:
            if (wt == 5) {
                if (c.end - c.p < 4)
                    return false;
                c.p += 4;
                s->n_response_logprobs++;
            } else if (wt != 2 || !s_bytes(&c, &d) ||
                       (size_t) (d.end - d.p) % 4 != 0) {
                return false;
            } else {
                s->n_response_logprobs += (size_t) (d.end - d.p) / 4;
            }
            break;
        default:
            return false;
        }
    }
    return true;
}

/* Walks an envelope of protocol version 1 whose only fields are version
 * (1), the varint `u64_field` (0: none), the string `str_field` (0: none)
 * and the body `body` exactly once; *body_out is the body's payload. */
static bool
s_envelope(const uint8_t *buf, size_t len, uint32_t body, uint32_t u64_field,
           uint64_t *u64, uint32_t str_field, s_cur_t *body_out)
{
    s_cur_t c = {buf, buf + len};
    uint32_t version = 0;
    bool have_body = false;
    while (c.p < c.end) {
        uint32_t f;
        unsigned wt;
        uint64_t v;
        s_cur_t d;
        if (!s_key(&c, &f, &wt))
            return false;
        if (f == 1 && wt == 0) {
            if (!s_uvarint(&c, 10, &v))
                return false;
            version = (uint32_t) v;
        } else if (u64_field && f == u64_field && wt == 0) {
            if (!s_uvarint(&c, 10, &v))
                return false;
            *u64 = v;
        } else if (str_field && f == str_field && wt == 2) {
            if (!s_bytes(&c, &d))
                return false;
        } else if (f == body && wt == 2 && !have_body) {
            if (!s_bytes(&c, body_out))
                return false;
            have_body = true;
        } else {
            return false;
        }
    }
    return have_body && version == 1;
}

bool
brk_spanscan_request(const uint8_t *buf, size_t len, uint64_t *request_id,
                     brk_spanscan_span_t *out, size_t max, size_t *n)
{
    /* Request: version 1, request_id 2, caller 3, span_put 122 */
    s_cur_t put;
    *request_id = 0;
    *n = 0;
    if (!buf || !s_envelope(buf, len, 122, 2, request_id, 3, &put))
        return false;
    /* SpanPutReq: spans 1 */
    while (put.p < put.end) {
        uint32_t f;
        unsigned wt;
        s_cur_t d;
        if (!s_key(&put, &f, &wt) || f != 1 || wt != 2 || !s_bytes(&put, &d) ||
            *n >= max || !s_span(d, &out[*n]))
            return false;
        (*n)++;
    }
    return true;
}

bool
brk_spanscan_push(const uint8_t *buf, size_t len, brk_spanscan_span_t *out)
{
    /* SpanPush: version 1, span 300 */
    s_cur_t d;
    uint64_t unused = 0;
    return buf && s_envelope(buf, len, 300, 0, &unused, 0, &d) &&
           s_span(d, out);
}
