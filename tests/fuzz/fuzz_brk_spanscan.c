/*
 * Fuzz target for brk_spanscan, the broker's fast path over span frames.
 * Property: it never reads out of bounds, and whenever it takes a frame
 * (as a SpanPut Request or as a SpanPush), protobuf-c decodes the same
 * frame as a message of version 1 with that body and the same values:
 * request id, span count, and per span rollout id, attempt, seq, prev_seq
 * and the lengths of response_ids and response_logprobs; each span's byte
 * range is the one brk_wire finds.
 */
#include "../../services/broker/brk_spanscan.c"
#include "../../services/broker/brk_wire.c"
#include "lisa.pb-c.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
s_same(const brk_spanscan_span_t *a, const Lisa__Span *s)
{
    if (!s || strcmp(a->rollout_id, s->rollout_id) != 0 ||
        a->attempt != s->attempt || a->seq != s->seq ||
        a->prev_seq != s->prev_seq || a->n_response_ids != s->n_response_ids ||
        a->n_response_logprobs != s->n_response_logprobs)
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { MAX = 16 };
    static brk_spanscan_span_t out[MAX];
    brk_wire_slice_t raw[MAX];
    uint64_t rid = 0;
    size_t n = 0;
    if (brk_spanscan_request(data, size, &rid, out, MAX, &n)) {
        Lisa__Request *req = lisa__request__unpack(NULL, size, data);
        if (!req || req->version != 1 ||
            req->body_case != LISA__REQUEST__BODY_SPAN_PUT ||
            req->request_id != rid || req->span_put->n_spans != n)
            abort();
        const uint32_t put[] = {LISA__REQUEST__BODY_SPAN_PUT, 1};
        if (brk_wire_find(data, size, put, 2, raw, MAX) != (long) n)
            abort();
        for (size_t i = 0; i < n; i++) {
            s_same(&out[i], req->span_put->spans[i]);
            if (raw[i].data != out[i].raw || raw[i].len != out[i].raw_len)
                abort();
        }
        lisa__request__free_unpacked(req, NULL);
    }
    if (brk_spanscan_push(data, size, &out[0])) {
        Lisa__SpanPush *p = lisa__span_push__unpack(NULL, size, data);
        if (!p || p->version != 1 || p->body_case != LISA__SPAN_PUSH__BODY_SPAN)
            abort();
        s_same(&out[0], p->span);
        lisa__span_push__free_unpacked(p, NULL);
    }
    return 0;
}
