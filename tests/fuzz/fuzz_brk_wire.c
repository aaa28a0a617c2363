/*
 * Fuzz target for brk_wire, the broker's walk over the protobuf wire
 * format that finds the spans inside RPC and SpanPush frames. Property:
 * it never reads out of bounds, and whenever protobuf-c accepts the frame
 * as a Request carrying spans, brk_wire finds exactly those spans, each one
 * a valid Span of the same sequence number.
 */
#include "../../services/broker/brk_wire.c"
#include "lisa.pb-c.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    brk_wire_slice_t out[64];
    const uint32_t put[] = {LISA__REQUEST__BODY_SPAN_PUT, 1};
    const uint32_t push[] = {LISA__SPAN_PUSH__BODY_SPAN};
    long n = brk_wire_find(data, size, put, 2, out, 64);
    Lisa__Request *req = lisa__request__unpack(NULL, size, data);
    if (req && req->body_case == LISA__REQUEST__BODY_SPAN_PUT &&
        req->span_put->n_spans <= 64 && n >= 0) {
        if ((size_t) n != req->span_put->n_spans)
            abort();
        for (long i = 0; i < n; i++) {
            Lisa__Span *s = lisa__span__unpack(NULL, out[i].len, out[i].data);
            if (!s || s->seq != req->span_put->spans[i]->seq)
                abort();
            lisa__span__free_unpacked(s, NULL);
        }
    }
    if (req)
        lisa__request__free_unpacked(req, NULL);
    (void) brk_wire_find(data, size, push, 1, out, 1);
    return 0;
}
