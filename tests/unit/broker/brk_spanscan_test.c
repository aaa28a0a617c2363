/*
 * brk_spanscan tests against frames packed by protobuf-c. The first test
 * is the usage example.
 */
#include "brk_spanscan.h"
#include "lisa.pb-c.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t s_ids[5] = {1, 300, 70000, 5, 151000};
static float s_lp[5] = {-1.0f, -0.5f, -0.25f, 0.0f, -3.0f};

static void
s_fill(Lisa__Span *s, char *rid, uint32_t seq)
{
    lisa__span__init(s);
    s->rollout_id = rid;
    s->attempt = 2;
    s->seq = seq;
    s->prev_seq = seq ? (int32_t) seq - 1 : -1;
    s->n_appended_ids = 3;
    s->appended_ids = s_ids;
    s->n_response_ids = 5;
    s->response_ids = s_ids;
    s->n_response_logprobs = 5;
    s->response_logprobs = s_lp;
    s->finish_reason = "stop";
    s->engine_id = "rank0";
    s->policy_version = 7;
    s->end_ms = 1700000000123ull;
}

/* A packed Request{version, request_id 99, caller, span_put{n spans}}. */
static uint8_t *
s_pack_put(size_t nspans, uint32_t version, size_t *len)
{
    Lisa__Span spans[80];
    Lisa__Span *ptrs[80];
    static char rid[80][32];
    for (size_t i = 0; i < nspans; i++) {
        snprintf(rid[i], sizeof rid[i], "r-%zu", i);
        s_fill(&spans[i], rid[i], (uint32_t) i);
        ptrs[i] = &spans[i];
    }
    Lisa__SpanPutReq put = LISA__SPAN_PUT_REQ__INIT;
    put.n_spans = nspans;
    put.spans = ptrs;
    Lisa__Request req = LISA__REQUEST__INIT;
    req.version = version;
    req.request_id = 99;
    req.caller = "gw";
    req.body_case = LISA__REQUEST__BODY_SPAN_PUT;
    req.span_put = &put;
    *len = lisa__request__get_packed_size(&req);
    uint8_t *buf = malloc(*len);
    lisa__request__pack(&req, buf);
    return buf;
}

static uint8_t *
s_pack_push(Lisa__Span *s, size_t *len)
{
    Lisa__SpanPush p = LISA__SPAN_PUSH__INIT;
    p.version = 1;
    p.body_case = LISA__SPAN_PUSH__BODY_SPAN;
    p.span = s;
    *len = lisa__span_push__get_packed_size(&p);
    uint8_t *buf = malloc(*len);
    lisa__span_push__pack(&p, buf);
    return buf;
}

Test(brk_spanscan, usage)
{
    size_t len = 0;
    uint8_t *buf = s_pack_put(2, 1, &len);
    brk_spanscan_span_t out[4];
    uint64_t request_id = 0;
    size_t n = 0;
    cr_assert(brk_spanscan_request(buf, len, &request_id, out, 4, &n));
    cr_assert_eq(request_id, 99);
    cr_assert_eq(n, 2);
    for (size_t i = 0; i < n; i++) {
        char want[32];
        snprintf(want, sizeof want, "r-%zu", i);
        cr_assert_str_eq(out[i].rollout_id, want);
        cr_assert_eq(out[i].attempt, 2);
        cr_assert_eq(out[i].seq, i);
        cr_assert_eq(out[i].prev_seq, i ? (int32_t) i - 1 : -1);
        cr_assert_eq(out[i].n_response_ids, 5);
        cr_assert_eq(out[i].n_response_logprobs, 5);
        /* the raw range is the span itself */
        Lisa__Span *s = lisa__span__unpack(NULL, out[i].raw_len, out[i].raw);
        cr_assert_not_null(s);
        cr_assert_eq(s->seq, i);
        cr_assert_eq(s->response_ids[2], 70000);
        lisa__span__free_unpacked(s, NULL);
    }
    free(buf);
}

Test(brk_spanscan, push)
{
    Lisa__Span s;
    s_fill(&s, "r-push", 4);
    size_t len = 0;
    uint8_t *buf = s_pack_push(&s, &len);
    brk_spanscan_span_t out;
    cr_assert(brk_spanscan_push(buf, len, &out));
    cr_assert_str_eq(out.rollout_id, "r-push");
    cr_assert_eq(out.seq, 4);
    cr_assert_eq(out.prev_seq, 3);
    cr_assert_eq(out.n_response_ids, 5);
    /* a push is not a request and the other way round */
    uint64_t rid;
    size_t n;
    cr_assert_not(brk_spanscan_request(buf, len, &rid, &out, 1, &n));
    free(buf);
    buf = s_pack_put(1, 1, &len);
    cr_assert_not(brk_spanscan_push(buf, len, &out));
    free(buf);
}

/* Unpacked repeated fields and a span sent as two concatenated encodings
 * (protobuf merges them) count like protobuf-c counts them. */
Test(brk_spanscan, unpacked_and_merged)
{
    /* Span{rollout_id "r", seq 1, response_ids 5 and 6 unpacked (field 7,
     * wire type 0), one logprob as fixed32 (field 8, wire type 5), then
     * a packed run of two more ids and one more logprob} */
    const uint8_t span[] = {
        0x0a, 1,    'r',  0x18, 1, 0x38, 5,    0x38, 6, 0x45, 0, 0,
        0x80, 0xbf, 0x3a, 2,    7, 8,    0x42, 4,    0, 0,    0, 0x00,
    };
    uint8_t buf[64];
    size_t len = 0;
    buf[len++] = 0x08; /* version 1 */
    buf[len++] = 1;
    buf[len++] = 0xe2; /* field 300, wire type 2 */
    buf[len++] = 0x12;
    buf[len++] = (uint8_t) sizeof span;
    memcpy(buf + len, span, sizeof span);
    len += sizeof span;
    brk_spanscan_span_t out;
    cr_assert(brk_spanscan_push(buf, len, &out));
    Lisa__SpanPush *p = lisa__span_push__unpack(NULL, len, buf);
    cr_assert_not_null(p);
    cr_assert_eq(out.n_response_ids, p->span->n_response_ids);
    cr_assert_eq(out.n_response_ids, 4);
    cr_assert_eq(out.n_response_logprobs, p->span->n_response_logprobs);
    cr_assert_eq(out.n_response_logprobs, 2);
    cr_assert_str_eq(out.rollout_id, p->span->rollout_id);
    cr_assert_eq(out.seq, 1);
    lisa__span_push__free_unpacked(p, NULL);
}

/* Packed runs are counted 8 bytes at a time: varints of every length up
 * to 10 bytes, across word boundaries, count like protobuf-c counts them,
 * and a varint of 11 bytes is refused by both. */
Test(brk_spanscan, packed_varint_lengths)
{
    for (unsigned vlen = 1; vlen <= 11; vlen++)
        for (unsigned lead = 0; lead < 9; lead++) {
            /* field 7 packed: `lead` one-byte ids, one id of vlen bytes,
             * then 3 one-byte ids */
            uint8_t run[64];
            size_t rn = 0;
            for (unsigned i = 0; i < lead; i++)
                run[rn++] = 5;
            for (unsigned i = 0; i + 1 < vlen; i++)
                run[rn++] = 0xff;
            run[rn++] = 0x01;
            for (unsigned i = 0; i < 3; i++)
                run[rn++] = 7;
            uint8_t buf[128];
            size_t len = 0;
            buf[len++] = 0x08;
            buf[len++] = 1;
            buf[len++] = 0xe2;
            buf[len++] = 0x12;
            buf[len++] = (uint8_t) (rn + 2);
            buf[len++] = 0x3a;
            buf[len++] = (uint8_t) rn;
            memcpy(buf + len, run, rn);
            len += rn;
            brk_spanscan_span_t out;
            bool took = brk_spanscan_push(buf, len, &out);
            Lisa__SpanPush *p = lisa__span_push__unpack(NULL, len, buf);
            cr_assert_eq(took, vlen <= 10, "vlen %u lead %u", vlen, lead);
            cr_assert_eq(p != NULL, vlen <= 10, "vlen %u lead %u", vlen, lead);
            if (p) {
                cr_assert_eq(out.n_response_ids, p->span->n_response_ids);
                cr_assert_eq(out.n_response_ids, lead + 4);
                lisa__span_push__free_unpacked(p, NULL);
            }
        }
}

/* Frames outside the taken shape answer false (the full decoder gets
 * them); none of them is read past its end. */
Test(brk_spanscan, declines)
{
    brk_spanscan_span_t out[64];
    uint64_t rid;
    size_t n, len;
    /* protocol version 2 */
    uint8_t *buf = s_pack_put(1, 2, &len);
    cr_assert_not(brk_spanscan_request(buf, len, &rid, out, 64, &n));
    free(buf);
    /* more spans than the caller's room */
    buf = s_pack_put(65, 1, &len);
    cr_assert_not(brk_spanscan_request(buf, len, &rid, out, 64, &n));
    free(buf);
    /* every truncation of a valid frame */
    buf = s_pack_put(2, 1, &len);
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, buf, cut);
        cr_assert_not(brk_spanscan_request(copy, cut, &rid, out, 64, &n),
                      "cut at %zu", cut);
        free(copy);
    }
    free(buf);
    /* a field the scanner does not know (field 17 of the envelope) */
    Lisa__Span s;
    s_fill(&s, "r-x", 0);
    buf = s_pack_push(&s, &len);
    uint8_t *more = malloc(len + 2);
    memcpy(more, buf, len);
    more[len] = 0x88; /* field 17, varint */
    more[len + 1] = 0x01;
    cr_assert_not(brk_spanscan_push(more, len + 2, &out[0]));
    free(more);
    free(buf);
    /* a rollout id with a NUL byte, and one over the bound */
    char nul[] = "r-\0x";
    s_fill(&s, nul, 0);
    buf = s_pack_push(&s, &len);
    cr_assert(brk_spanscan_push(buf, len, &out[0]));
    /* the packed id is "r-" here (protobuf-c packs a C string); write
     * a NUL into it by hand */
    for (size_t i = 0; i + 2 < len; i++)
        if (buf[i] == 'r' && buf[i + 1] == '-') {
            buf[i + 1] = 0;
            break;
        }
    cr_assert_not(brk_spanscan_push(buf, len, &out[0]));
    free(buf);
    char long_id[BRK_SPANSCAN_MAX_ID + 2];
    memset(long_id, 'a', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    s_fill(&s, long_id, 0);
    buf = s_pack_push(&s, &len);
    cr_assert_not(brk_spanscan_push(buf, len, &out[0]));
    free(buf);
    /* packed floats whose length is not a multiple of 4 */
    const uint8_t bad_float[] = {0x08, 1, 0xe2, 0x12, 5, 0x42, 3, 0, 0, 0};
    cr_assert_not(brk_spanscan_push(bad_float, sizeof bad_float, &out[0]));
    cr_assert_null(lisa__span_push__unpack(NULL, sizeof bad_float, bad_float));
    /* a packed varint run that ends inside a varint */
    const uint8_t bad_run[] = {0x08, 1, 0xe2, 0x12, 4, 0x3a, 2, 5, 0x80};
    cr_assert_not(brk_spanscan_push(bad_run, sizeof bad_run, &out[0]));
    cr_assert_null(lisa__span_push__unpack(NULL, sizeof bad_run, bad_run));
    /* no body */
    const uint8_t empty[] = {0x08, 1};
    cr_assert_not(brk_spanscan_push(empty, sizeof empty, &out[0]));
    cr_assert_not(brk_spanscan_push(NULL, 0, &out[0]));
}

Test(brk_spanscan, sampling_record)
{
    /* a span recording its sampling settings (Span.sampling) takes the
     * fast path, its bytes whole */
    Lisa__Span s;
    s_fill(&s, "r-s", 3);
    Lisa__Sampling smp = LISA__SAMPLING__INIT;
    smp.temperature = 0.7f;
    smp.top_p = 0.9f;
    smp.top_k = 20;
    s.sampling = &smp;
    size_t len = 0;
    uint8_t *buf = s_pack_push(&s, &len);
    brk_spanscan_span_t out;
    cr_assert(brk_spanscan_push(buf, len, &out));
    cr_assert_eq(out.seq, 3);
    Lisa__Span *back = lisa__span__unpack(NULL, out.raw_len, out.raw);
    cr_assert_not_null(back);
    cr_assert_not_null(back->sampling);
    cr_assert_eq(back->sampling->top_k, 20);
    cr_assert_float_eq(back->sampling->temperature, 0.7f, 1e-7);
    lisa__span__free_unpacked(back, NULL);
    free(buf);
    /* a field of Sampling the scanner does not know goes the slow way,
     * as does a truncated float */
    static const uint8_t extra[] = {0x8a, 0x01, 2, 0x20, 1};  /* {4: 1} */
    static const uint8_t cut[] = {0x8a, 0x01, 3, 0x0d, 0, 0}; /* 1: 2 B */
    const uint8_t *bad[] = {extra, cut};
    size_t nbad[] = {sizeof extra, sizeof cut};
    s.sampling = NULL;
    for (size_t i = 0; i < 2; i++) {
        buf = s_pack_push(&s, &len);
        /* append field 17 to the span: grow the span's length prefix */
        uint8_t *more = malloc(len + nbad[i]);
        memcpy(more, buf, len);
        memcpy(more + len, bad[i], nbad[i]);
        /* SpanPush: version (2 bytes), then the span's key (300: e2 12)
         * and its one-byte length */
        cr_assert_eq(more[2], 0xe2);
        cr_assert_eq(more[3], 0x12);
        cr_assert_lt(more[4] + nbad[i], 128);
        more[4] = (uint8_t) (more[4] + nbad[i]);
        cr_assert_not(brk_spanscan_push(more, len + nbad[i], &out), "%zu", i);
        free(more);
        free(buf);
    }
}
