/*
 * Fuzz target: every envelope decoder of the wire protocol. The first byte
 * picks the envelope type; the rest is the frame. Decoding must never
 * crash, leak or read out of bounds, whatever the bytes.
 */
#include "lisa/lisa_codec.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const ProtobufCMessageDescriptor *const types[] = {
        &lisa__request__descriptor,    &lisa__reply__descriptor,
        &lisa__span_push__descriptor,  &lisa__event__descriptor,
        &lisa__worker_msg__descriptor, &lisa__bootstrap__descriptor,
    };
    if (size < 1)
        return 0;
    const ProtobufCMessageDescriptor *d = types[data[0] % 6];
    lisa_codec_stats_t stats = {0};
    ProtobufCMessage *m = NULL;
    const char *why = NULL;
    lisa_rc_t rc =
        lisa_codec_decode(d, data + 1, size - 1, 1u << 20, &stats, &m, &why);
    if (rc == LISA_OK) {
        /* Re-encode what was decoded: packing must accept it too. */
        zframe_t *f = lisa_codec_encode(m);
        zframe_destroy(&f);
    }
    lisa_codec_free(&m);
    return 0;
}
