/*
 * Fuzz target: the gateway's reader of engine replies, differentially.
 * Whenever the small reader (gw_upstream_parse_fast) answers, the jansson
 * reader must accept the same bytes with the same ids, logprobs, finish
 * reason, policy version and cached prompt tokens; any difference
 * aborts. The same bytes read as an engine's error answer give bounded,
 * printable text. The module is compiled
 * into the target (it depends only on liblisa's libraries).
 */
#include "../../services/gateway/gw_upstream.c"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *) data;
    size_t max_ids = size > 0 ? (size_t) data[0] % 8 + 1 : 1;
    for (int pass = 0; pass < 2; pass++, max_ids = 4096) {
        gw_completion_t f, j;
        char why[128];
        lisa_rc_t rf = gw_upstream_parse_fast(body, size, max_ids, &f);
        lisa_rc_t rj =
            gw_upstream_parse_json(body, size, max_ids, &j, why, sizeof why);
        if (rf != LISA_OK && rf != LISA_UNSUPPORTED)
            abort();
        if (rf == LISA_OK) {
            if (rj != LISA_OK || f.n != j.n ||
                memcmp(f.ids, j.ids, f.n * sizeof *f.ids) != 0 ||
                memcmp(f.logprobs, j.logprobs, f.n * sizeof *f.logprobs) != 0 ||
                strcmp(f.finish_reason, j.finish_reason) != 0 ||
                f.policy_version != j.policy_version ||
                f.cached_tokens != j.cached_tokens)
                abort();
        } else if (f.ids || f.logprobs || f.n)
            abort();
        gw_completion_t c;
        lisa_rc_t rc =
            gw_upstream_parse(body, size, max_ids, &c, why, sizeof why);
        if (rc != rj)
            abort();
        gw_completion_clear(&c);
        gw_completion_clear(&f);
        gw_completion_clear(&j);
    }
    /* the same bytes as an error answer: bounded, printable text */
    char said[160];
    size_t cap = size > 0 ? (size_t) data[0] % sizeof said + 1 : sizeof said;
    gw_upstream_error_text(body, size, said, cap);
    size_t n = strlen(said);
    if (n >= cap)
        abort();
    for (size_t i = 0; i < n; i++)
        if (said[i] < 0x20 || said[i] > 0x7e)
            abort();
    return 0;
}
