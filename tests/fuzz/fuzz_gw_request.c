/*
 * Fuzz target: the gateway's decoders of untrusted bytes -- chat request
 * bodies (the lazy scanner, the per-message parse, the whole-body parse,
 * digests; the parse that resumes after a known beginning agrees with
 * the one that does not) and engine responses. The modules are compiled into
 * the target (they depend only on liblisa's libraries).
 */
#include "../../services/gateway/gw_json.c"
#include "../../services/gateway/gw_openai.c"
#include "../../services/gateway/gw_upstream.c"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Two parses agree: same outcome, error, messages and fields. */
static void
s_same(lisa_rc_t ra, const gw_chat_req_t *a, const gw_err_t *ea, lisa_rc_t rb,
       const gw_chat_req_t *b, const gw_err_t *eb)
{
    if (ra != rb)
        abort();
    if (ra != LISA_OK) {
        if (ea->status != eb->status || strcmp(ea->message, eb->message) != 0)
            abort();
        return;
    }
    if (a->n_msgs != b->n_msgs || a->has_tools != b->has_tools ||
        memcmp(a->tools_digest, b->tools_digest, GW_DIGEST_LEN) != 0 ||
        !json_equal(a->root, b->root))
        abort();
    for (size_t i = 0; i < a->n_msgs; i++)
        if (a->raw_len[i] != b->raw_len[i] || a->raw_off[i] != b->raw_off[i] ||
            memcmp(a->raw_hash[i], b->raw_hash[i], GW_DIGEST_LEN) != 0)
            abort();
}

/* gw_chat_req_parse_after with the beginning known from a first parse
 * (all messages but the last) must give what gw_chat_req_parse_lazy
 * gives, on the same body and on one whose rest differs. */
static void
s_check_after(const char *body, size_t size)
{
    gw_chat_req_t a, b, c, d;
    gw_err_t ea, eb;
    if (gw_chat_req_parse_lazy(body, size, &a, &ea) != LISA_OK)
        return;
    size_t k = a.n_msgs - 1;
    if (k == 0 || !a.raw_len[0]) {
        gw_chat_req_clear(&a);
        return;
    }
    size_t(*span)[2] = malloc(k * sizeof *span);
    for (size_t i = 0; i < k; i++) {
        span[i][0] = a.raw_off[i];
        span[i][1] = a.raw_len[i];
    }
    bool tb = a.tools_len && a.tools_off < a.msgs_off;
    gw_chat_prefix_t known = {.bytes = body,
                              .len = a.raw_off[k - 1] + a.raw_len[k - 1],
                              .n = k,
                              .span = (const size_t(*)[2]) span,
                              .hash =
                                  (const uint8_t(*)[GW_DIGEST_LEN]) a.raw_hash,
                              .msgs_off = a.msgs_off,
                              .tools_off = tb ? a.tools_off : 0,
                              .tools_len = tb ? a.tools_len : 0};
    lisa_rc_t rb = gw_chat_req_parse_after(body, size, &known, &b, &eb);
    s_same(LISA_OK, &a, &ea, rb, &b, &eb);
    if (b.known_len != known.len)
        abort();
    /* the same beginning, one byte of the rest left out */
    char *other = malloc(size);
    memcpy(other, body, known.len);
    memcpy(other + known.len, body + known.len + 1, size - known.len - 1);
    lisa_rc_t rc = gw_chat_req_parse_lazy(other, size - 1, &c, &ea);
    lisa_rc_t rd = gw_chat_req_parse_after(other, size - 1, &known, &d, &eb);
    s_same(rc, &c, &ea, rd, &d, &eb);
    if (rc == LISA_OK) {
        gw_chat_req_clear(&c);
        gw_chat_req_clear(&d);
    }
    free(other);
    free(span);
    gw_chat_req_clear(&b);
    gw_chat_req_clear(&a);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    s_check_after((const char *) data, size);
    const char *body = (const char *) data;
    gw_chat_req_t req;
    gw_err_t err;
    if (gw_chat_req_parse_lazy(body, size, &req, &err) == LISA_OK) {
        for (size_t i = 0; i < req.n_msgs; i++) {
            json_t *m = gw_chat_req_msg(&req, i, &err);
            if (m) {
                uint8_t d[GW_DIGEST_LEN];
                gw_msg_digest(m, d);
                char *t = gw_msg_text(m);
                free(t);
            }
        }
        (void) gw_chat_req_tools(&req, &err);
        gw_chat_req_clear(&req);
    }
    if (gw_chat_req_parse(body, size, &req, &err) == LISA_OK)
        gw_chat_req_clear(&req);
    else {
        char *e = gw_err_body(&err);
        free(e);
    }
    gw_completion_t c;
    char why[128];
    if (gw_upstream_parse(body, size, 4096, &c, why, sizeof why) == LISA_OK)
        gw_completion_clear(&c);
    return 0;
}
