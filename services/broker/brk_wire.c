/*
 * brk_wire: a bounded walk over the protobuf wire format (varint keys,
 * wire types 0, 1, 2 and 5). Every length is checked against what is left
 * of the buffer; groups (types 3 and 4) are refused.
 */
#include "brk_wire.h"

#include <stdbool.h>

static bool
s_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (*p >= end)
            return false;
        uint8_t b = *(*p)++;
        r |= (uint64_t) (b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

/* Visits the fields of [p, end) and stores the payload of each occurrence
 * of field `want` (wire type 2). Returns the number of occurrences, or -1
 * when malformed or when more than max occur. */
static long
s_scan(const uint8_t *p, const uint8_t *end, uint32_t want,
       brk_wire_slice_t *out, size_t max)
{
    long n = 0;
    while (p < end) {
        uint64_t key, v;
        if (!s_varint(&p, end, &key))
            return -1;
        uint32_t field = (uint32_t) (key >> 3);
        switch (key & 7) {
        case 0:
            if (!s_varint(&p, end, &v))
                return -1;
            break;
        case 1:
            if (end - p < 8)
                return -1;
            p += 8;
            break;
        case 5:
            if (end - p < 4)
                return -1;
            p += 4;
            break;
        case 2:
            if (!s_varint(&p, end, &v) || v > (uint64_t) (end - p))
                return -1;
            if (field == want) {
                if ((size_t) n >= max)
                    return -1;
                out[n].data = p;
                out[n].len = (size_t) v;
                n++;
            }
            p += v;
            break;
        default:
            return -1;
        }
    }
    return n;
}

long
brk_wire_find(const uint8_t *buf, size_t len, const uint32_t *path,
              size_t depth, brk_wire_slice_t *out, size_t max)
{
    if (depth == 0)
        return -1;
    brk_wire_slice_t cur = {buf, len};
    for (size_t i = 0; i + 1 < depth; i++) {
        brk_wire_slice_t found[1];
        /* more than one occurrence overflows max and gives -1 */
        if (s_scan(cur.data, cur.data + cur.len, path[i], found, 1) != 1)
            return -1;
        cur = found[0];
    }
    return s_scan(cur.data, cur.data + cur.len, path[depth - 1], out, max);
}
