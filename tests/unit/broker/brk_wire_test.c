/*
 * brk_wire tests against frames packed by protobuf-c. The first test is
 * the usage example.
 */
#include "brk_wire.h"
#include "lisa.pb-c.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *
s_pack_put(size_t nspans, size_t *len)
{
    static uint32_t ids[4] = {1, 300, 70000, 5};
    static float lp[4] = {-1.0f, -0.5f, -0.25f, 0.0f};
    Lisa__Span spans[8];
    Lisa__Span *ptrs[8];
    char rid[8][32];
    for (size_t i = 0; i < nspans; i++) {
        lisa__span__init(&spans[i]);
        snprintf(rid[i], sizeof rid[i], "r-%zu", i);
        spans[i].rollout_id = rid[i];
        spans[i].attempt = 1;
        spans[i].seq = (uint32_t) i;
        spans[i].n_response_ids = 4;
        spans[i].response_ids = ids;
        spans[i].n_response_logprobs = 4;
        spans[i].response_logprobs = lp;
        ptrs[i] = &spans[i];
    }
    Lisa__SpanPutReq put = LISA__SPAN_PUT_REQ__INIT;
    put.n_spans = nspans;
    put.spans = ptrs;
    Lisa__Request req = LISA__REQUEST__INIT;
    req.version = 1;
    req.request_id = 99;
    req.caller = "gw";
    req.body_case = LISA__REQUEST__BODY_SPAN_PUT;
    req.span_put = &put;
    *len = lisa__request__get_packed_size(&req);
    uint8_t *buf = malloc(*len);
    lisa__request__pack(&req, buf);
    return buf;
}

Test(brk_wire, usage)
{
    size_t len = 0;
    uint8_t *buf = s_pack_put(3, &len);
    /* Request.span_put (122) -> SpanPutReq.spans (1), each one a Span */
    const uint32_t path[] = {LISA__REQUEST__BODY_SPAN_PUT, 1};
    brk_wire_slice_t out[8];
    cr_assert_eq(brk_wire_find(buf, len, path, 2, out, 8), 3);
    for (size_t i = 0; i < 3; i++) {
        Lisa__Span *s = lisa__span__unpack(NULL, out[i].len, out[i].data);
        cr_assert_not_null(s);
        cr_assert_eq(s->seq, i);
        cr_assert_eq(s->response_ids[2], 70000);
        lisa__span__free_unpacked(s, NULL);
    }
    free(buf);
}

Test(brk_wire, bounds_and_malformed_input)
{
    size_t len = 0;
    uint8_t *buf = s_pack_put(3, &len);
    const uint32_t path[] = {LISA__REQUEST__BODY_SPAN_PUT, 1};
    brk_wire_slice_t out[8];
    cr_assert_eq(brk_wire_find(buf, len, path, 2, out, 2), -1); /* max */
    for (size_t cut = 0; cut < len; cut++) {
        long n = brk_wire_find(buf, cut, path, 2, out, 8);
        cr_assert(n == -1 || (n >= 0 && n < 3), "cut %zu gave %ld", cut, n);
    }
    const uint32_t missing[] = {LISA__REQUEST__BODY_ENQUEUE, 1};
    cr_assert_eq(brk_wire_find(buf, len, missing, 2, out, 8), -1);
    uint8_t group[] = {0x0b, 0x0c}; /* wire type 3: refused */
    cr_assert_eq(brk_wire_find(group, sizeof group, path, 2, out, 8), -1);
    uint8_t huge[] = {0xd2, 0x07, 0xff, 0xff, 0xff, 0xff, 0x0f};
    cr_assert_eq(brk_wire_find(huge, sizeof huge, path, 2, out, 8), -1);
    cr_assert_eq(brk_wire_find(buf, len, path, 0, out, 8), -1);
    free(buf);
}
