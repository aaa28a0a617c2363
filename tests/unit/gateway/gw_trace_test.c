/*
 * gw_trace: token chains per attempt, extension detection, segments.
 */
#include "gw_trace.h"

#include <criterion/criterion.h>
#include <string.h>

static void
dig(uint8_t d[GW_DIGEST_LEN], int v)
{
    memset(d, 0, GW_DIGEST_LEN);
    d[0] = (uint8_t) v;
}

/* Usage: two turns of one attempt; the second prompt extends the first
 * call's full sequence, and the span stores only the appended ids. */
Test(gw_trace, usage)
{
    gw_trace_t *t = gw_trace_new(8, 1000);
    gw_attempt_t *a;
    cr_assert_eq(gw_trace_open(t, "r-1", 1, 100, &a), LISA_OK);
    gw_attempt_set_base(a, 0);
    uint8_t tools[GW_DIGEST_LEN], reply[GW_DIGEST_LEN];
    uint8_t msgs[4][GW_DIGEST_LEN];
    dig(tools, 9);
    dig(msgs[0], 1);
    dig(msgs[1], 2);
    size_t first;
    cr_assert_not(gw_attempt_plan(a, msgs, 2, tools, &first));
    uint32_t p1[] = {10, 11, 12};
    cr_assert_eq(gw_attempt_begin(a, false, p1, 3, 100), LISA_OK);
    uint32_t r1[] = {20, 21};
    float l1[] = {-0.5f, -0.25f};
    gw_sample_t s = {r1, l1, 2, "stop", 7, "e0", "g", 1, 2, 3};
    dig(reply, 3);
    Lisa__Span *sp;
    cr_assert_eq(gw_attempt_commit(a, msgs, 2, tools, reply, &s, &sp), LISA_OK);
    cr_assert_eq(sp->seq, 0);
    cr_assert_eq(sp->prev_seq, -1);
    cr_assert_eq(sp->segment, 0);
    cr_assert_eq(sp->n_appended_ids, 3);
    cr_assert_eq(sp->n_response_ids, 2);
    cr_assert_eq(sp->response_logprobs[1], -0.25f);
    cr_assert_eq(sp->policy_version, 7);
    gw_span_free(&sp);

    /* agent echoes the reply and adds a tool result */
    dig(msgs[2], 3);
    dig(msgs[3], 4);
    cr_assert(gw_attempt_plan(a, msgs, 4, tools, &first));
    cr_assert_eq(first, 3);
    uint32_t p2[] = {30, 31};
    cr_assert_eq(gw_attempt_begin(a, true, p2, 2, 101), LISA_OK);
    size_t n;
    const uint32_t *prompt = gw_attempt_prompt(a, &n);
    uint32_t want[] = {10, 11, 12, 20, 21, 30, 31};
    cr_assert_eq(n, 7);
    cr_assert_arr_eq(prompt, want, sizeof want);
    uint32_t r2[] = {40};
    gw_sample_t s2 = {r2, NULL, 1, "length", 8, "e0", "g", 4, 5, 6};
    dig(reply, 5);
    cr_assert_eq(gw_attempt_commit(a, msgs, 4, tools, reply, &s2, &sp),
                 LISA_OK);
    cr_assert_eq(sp->seq, 1);
    cr_assert_eq(sp->prev_seq, 0);
    cr_assert_eq(sp->segment, 0);
    cr_assert_eq(sp->prompt_len, 7);
    cr_assert_eq(sp->n_appended_ids, 2);
    cr_assert_eq(sp->appended_ids[0], 30);
    gw_span_free(&sp);
    cr_assert_eq(gw_attempt_len(a), 8);
    gw_trace_destroy(&t);
    cr_assert_null(t);
}

static Lisa__Span *
turn(gw_attempt_t *a, uint8_t (*msgs)[GW_DIGEST_LEN], size_t n, int reply_v,
     uint32_t base)
{
    uint8_t tools[GW_DIGEST_LEN], reply[GW_DIGEST_LEN];
    dig(tools, 9);
    dig(reply, reply_v);
    size_t first;
    bool ext = gw_attempt_plan(a, msgs, n, tools, &first);
    uint32_t app[2] = {base, base + 1};
    cr_assert_eq(gw_attempt_begin(a, ext, app, 2, 1), LISA_OK);
    uint32_t resp[1] = {base + 2};
    gw_sample_t s = {resp, NULL, 1, "stop", 1, "e", "g", 0, 0, 0};
    Lisa__Span *sp;
    cr_assert_eq(gw_attempt_commit(a, msgs, n, tools, reply, &s, &sp), LISA_OK);
    return sp;
}

/* Rewritten history or changed tools start a new segment. */
Test(gw_trace, new_segment_on_rewrite)
{
    gw_trace_t *t = gw_trace_new(8, 1000);
    gw_attempt_t *a;
    cr_assert_eq(gw_trace_open(t, "r", 0, 1, &a), LISA_OK);
    gw_attempt_set_base(a, 0);
    uint8_t m[4][GW_DIGEST_LEN];
    dig(m[0], 1);
    Lisa__Span *sp = turn(a, m, 1, 2, 100);
    gw_span_free(&sp);
    dig(m[1], 2);
    dig(m[2], 3);
    sp = turn(a, m, 3, 4, 200);
    cr_assert_eq(sp->prev_seq, 0);
    gw_span_free(&sp);
    /* agent edits message 1 */
    dig(m[1], 77);
    sp = turn(a, m, 3, 5, 300);
    cr_assert_eq(sp->prev_seq, -1);
    cr_assert_eq(sp->segment, 1);
    cr_assert_eq(sp->seq, 2);
    cr_assert_eq(sp->prompt_len, 2);
    gw_span_free(&sp);
    /* the retry of the same request is not an extension either */
    sp = turn(a, m, 3, 5, 400);
    cr_assert_eq(sp->segment, 2);
    gw_span_free(&sp);
    gw_trace_destroy(&t);
}

/* Abort restores the state; busy attempts refuse a second call; the
 * sequence bound holds; a restart base keeps seq and segment increasing. */
Test(gw_trace, abort_busy_bounds_base)
{
    gw_trace_t *t = gw_trace_new(2, 6);
    gw_attempt_t *a;
    cr_assert_eq(gw_trace_open(t, "r", 0, 1, &a), LISA_OK);
    cr_assert_not(gw_attempt_based(a));
    gw_attempt_set_base(a, 5);
    uint8_t m[2][GW_DIGEST_LEN];
    dig(m[0], 1);
    Lisa__Span *sp = turn(a, m, 1, 2, 100);
    cr_assert_eq(sp->seq, 5);
    cr_assert_eq(sp->segment, 5);
    gw_span_free(&sp);
    dig(m[1], 2);
    uint32_t app[] = {1, 2};
    cr_assert_eq(gw_attempt_begin(a, true, app, 2, 2), LISA_OK);
    cr_assert_eq(gw_attempt_begin(a, true, app, 2, 2), LISA_CONFLICT);
    gw_attempt_abort(a);
    cr_assert_eq(gw_attempt_len(a), 3);
    uint32_t big[4] = {0};
    cr_assert_eq(gw_attempt_begin(a, true, big, 4, 2), LISA_TOOLARGE);
    cr_assert_not(gw_attempt_busy(a));

    /* table of 2: a third attempt evicts the least recently used idle one */
    gw_attempt_t *b, *c;
    cr_assert_eq(gw_trace_open(t, "r", 1, 5, &b), LISA_OK);
    cr_assert_eq(gw_attempt_begin(b, false, app, 2, 5), LISA_OK);
    cr_assert_eq(gw_trace_open(t, "r", 2, 6, &c), LISA_OK);
    cr_assert_null(gw_trace_find(t, "r", 0));
    cr_assert_not_null(gw_trace_find(t, "r", 1));
    cr_assert_eq(gw_attempt_begin(c, false, app, 2, 6), LISA_OK);
    gw_attempt_t *d;
    cr_assert_eq(gw_trace_open(t, "r", 3, 7, &d), LISA_AGAIN);
    gw_attempt_abort(b);
    gw_attempt_abort(c);
    cr_assert_eq(gw_trace_expire(t, 100), 2);
    cr_assert_eq(gw_trace_size(t), 0);
    gw_trace_destroy(&t);
}

/* Thirty turns: every prompt is the previous prompt + response + new ids. */
Test(gw_trace, chain_of_thirty_is_prefix_exact)
{
    gw_trace_t *t = gw_trace_new(4, 100000);
    gw_attempt_t *a;
    cr_assert_eq(gw_trace_open(t, "r", 0, 1, &a), LISA_OK);
    gw_attempt_set_base(a, 0);
    uint8_t m[64][GW_DIGEST_LEN];
    uint32_t full[4096];
    size_t nfull = 0;
    size_t nm = 1;
    dig(m[0], 1);
    for (int k = 0; k < 30; k++) {
        Lisa__Span *sp = turn(a, m, nm, 100 + k, (uint32_t) (1000 * k));
        cr_assert_eq(sp->seq, (uint32_t) k);
        cr_assert_eq(sp->prev_seq, k - 1);
        cr_assert_eq(sp->prompt_len, nfull + sp->n_appended_ids);
        memcpy(full + nfull, sp->appended_ids, sp->n_appended_ids * 4);
        nfull += sp->n_appended_ids;
        memcpy(full + nfull, sp->response_ids, sp->n_response_ids * 4);
        nfull += sp->n_response_ids;
        gw_span_free(&sp);
        dig(m[nm], 100 + k); /* echoed reply */
        dig(m[nm + 1], 200 + k);
        nm += 2;
    }
    cr_assert_eq(gw_attempt_len(a), nfull);
    cr_assert_eq(nfull, 90);
    gw_trace_destroy(&t);
}

/* The prompt in parts (cached text of the committed ids + the new ids)
 * is always the prompt: across extensions, an aborted call and a new
 * segment. */
static void
check_parts(gw_attempt_t *a)
{
    size_t n, text_len, n_tail;
    const uint32_t *prompt = gw_attempt_prompt(a, &n);
    const char *text;
    const uint32_t *tail;
    gw_attempt_prompt_parts(a, &text, &text_len, &tail, &n_tail);
    char want[4096], got[4096];
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        w += (size_t) snprintf(want + w, sizeof want - w, "%s%u", i ? "," : "",
                               prompt[i]);
    size_t g = (size_t) snprintf(got, sizeof got, "%.*s", (int) text_len, text);
    for (size_t i = 0; i < n_tail; i++)
        g += (size_t) snprintf(got + g, sizeof got - g, "%s%u", g ? "," : "",
                               tail[i]);
    cr_assert_str_eq(got, want);
}

Test(gw_trace, prompt_parts_follow_the_sequence)
{
    gw_trace_t *t = gw_trace_new(8, 1000);
    gw_attempt_t *a;
    cr_assert_eq(gw_trace_open(t, "r-p", 1, 100, &a), LISA_OK);
    gw_attempt_set_base(a, 0);
    uint8_t tools[GW_DIGEST_LEN], reply[GW_DIGEST_LEN], msgs[8][GW_DIGEST_LEN];
    dig(tools, 9);
    for (int i = 0; i < 8; i++)
        dig(msgs[i], i + 1);
    Lisa__Span *sp;
    uint32_t p1[] = {151644, 0, 4294967295u};
    cr_assert_eq(gw_attempt_begin(a, false, p1, 3, 100), LISA_OK);
    check_parts(a);
    uint32_t r[] = {7, 8};
    gw_sample_t s = {r, NULL, 2, "stop", 1, "e0", "g", 1, 2, 3};
    dig(reply, 2);
    cr_assert_eq(gw_attempt_commit(a, msgs, 1, tools, reply, &s, &sp), LISA_OK);
    gw_span_free(&sp);
    uint32_t p2[] = {30, 31};
    cr_assert_eq(gw_attempt_begin(a, true, p2, 2, 101), LISA_OK);
    check_parts(a);
    gw_attempt_abort(a); /* the text keeps only committed ids */
    uint32_t p3[] = {40};
    cr_assert_eq(gw_attempt_begin(a, true, p3, 1, 102), LISA_OK);
    check_parts(a);
    cr_assert_eq(gw_attempt_commit(a, msgs, 3, tools, reply, &s, &sp), LISA_OK);
    gw_span_free(&sp);
    cr_assert_eq(gw_attempt_begin(a, true, NULL, 0, 103), LISA_OK);
    check_parts(a);
    cr_assert_eq(gw_attempt_commit(a, msgs, 5, tools, reply, &s, &sp), LISA_OK);
    gw_span_free(&sp);
    /* a new segment replaces the sequence, and the text with it */
    uint32_t p4[] = {5, 6};
    cr_assert_eq(gw_attempt_begin(a, false, p4, 2, 104), LISA_OK);
    check_parts(a);
    cr_assert_eq(gw_attempt_commit(a, msgs, 2, tools, reply, &s, &sp), LISA_OK);
    gw_span_free(&sp);
    uint32_t p5[] = {9};
    cr_assert_eq(gw_attempt_begin(a, true, p5, 1, 105), LISA_OK);
    check_parts(a);
    gw_attempt_abort(a);
    gw_trace_destroy(&t);
}

/* The committed request's beginning is kept; the next request that starts
 * with it is parsed from where it ends, with the same outcome. */
Test(gw_trace, kept_prefix_resumes_the_next_parse)
{
    static const char b1[] =
        "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
        "\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
        "{\"role\":\"user\",\"content\":\"u\"}],\"model\":\"m\"}";
    static const char b2[] =
        "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
        "\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
        "{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\","
        "\"content\":\"a\"}, {\"role\":\"user\",\"content\":\"v\"}],"
        "\"model\":\"m\",\"temperature\":0.5}";
    gw_trace_t *t = gw_trace_new(8, 1000);
    gw_attempt_t *a;
    cr_assert_eq(gw_trace_open(t, "r-1", 1, 100, &a), LISA_OK);
    gw_chat_prefix_t k;
    cr_assert_not(gw_attempt_prefix(a, &k));
    gw_chat_req_t r1, r2, lazy;
    gw_err_t err;
    cr_assert_eq(gw_chat_req_parse_lazy(b1, strlen(b1), &r1, &err), LISA_OK);
    gw_attempt_keep_prefix(a, &r1);
    cr_assert(gw_attempt_prefix(a, &k));
    cr_assert_eq(k.n, 2);
    cr_assert_eq(k.len, strstr(b1, "],\"model\"") - b1);
    cr_assert_gt(k.tools_len, 0); /* the tools came first */
    cr_assert_eq(gw_chat_req_parse_after(b2, strlen(b2), &k, &r2, &err),
                 LISA_OK);
    cr_assert_eq(r2.known_len, k.len);
    cr_assert_eq(gw_chat_req_parse_lazy(b2, strlen(b2), &lazy, &err), LISA_OK);
    cr_assert_eq(r2.n_msgs, 4);
    cr_assert_eq(lazy.n_msgs, 4);
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(r2.raw_off[i], lazy.raw_off[i]);
        cr_assert_eq(r2.raw_len[i], lazy.raw_len[i]);
        cr_assert_arr_eq(r2.raw_hash[i], lazy.raw_hash[i], GW_DIGEST_LEN);
    }
    cr_assert_arr_eq(r2.tools_digest, lazy.tools_digest, GW_DIGEST_LEN);
    cr_assert(json_equal(r2.root, lazy.root));
    cr_assert_eq(r2.temperature, 0.5);
    /* the next kept prefix grows by the new part only */
    gw_attempt_keep_prefix(a, &r2);
    cr_assert(gw_attempt_prefix(a, &k));
    cr_assert_eq(k.n, 4);
    cr_assert_eq(memcmp(k.bytes, b2, k.len), 0);
    /* a request parsed against a prefix replaced since (another call
     * committed in between) is copied whole, not appended */
    gw_attempt_keep_prefix(a, &r1);
    gw_attempt_keep_prefix(a, &r2);
    cr_assert(gw_attempt_prefix(a, &k));
    cr_assert_eq(k.n, 4);
    cr_assert_eq(memcmp(k.bytes, b2, k.len), 0);
    gw_chat_req_clear(&lazy);
    gw_chat_req_clear(&r2);
    /* a body that differs inside the known part is scanned whole */
    char b3[sizeof b2];
    memcpy(b3, b2, sizeof b2);
    b3[strstr(b3, "\"u\"") - b3 + 1] = 'x';
    cr_assert_eq(gw_chat_req_parse_after(b3, strlen(b3), &k, &r2, &err),
                 LISA_OK);
    cr_assert_eq(r2.known_len, 0);
    gw_chat_req_clear(&r2);
    /* what follows the known part decides, as for any body */
    static const char bad[] =
        "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
        "\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
        "{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\","
        "\"content\":\"a\"}, {\"role\":\"user\",\"content\":\"v\"},]}";
    gw_attempt_keep_prefix(a, &r1);
    cr_assert(gw_attempt_prefix(a, &k));
    gw_err_t e2;
    cr_assert_eq(gw_chat_req_parse_after(bad, strlen(bad), &k, &r2, &err),
                 LISA_INVALID);
    cr_assert_eq(gw_chat_req_parse_lazy(bad, strlen(bad), &r2, &e2),
                 LISA_INVALID);
    cr_assert_str_eq(err.message, e2.message);
    gw_chat_req_clear(&r1);
    gw_trace_destroy(&t);
}
