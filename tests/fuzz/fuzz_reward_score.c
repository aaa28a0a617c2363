/*
 * Fuzz target: the reward rules on untrusted answers. The first byte picks
 * the data source, the rest is split at the first 0x00 into answer and
 * ground truth. Scoring must never crash, leak, read out of bounds or
 * produce invalid JSON, whatever the bytes.
 */
#include "rwd_math.h"
#include "rwd_mc.h"
#include "rwd_rouge.h"
#include "rwd_score.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const sources[] = {
        "math",        "physics_mini",      "chem",
        "biomed_mini", "instruct_pretrain", "long_context",
        "unknown"};
    static const char *const extras[] = {
        NULL, "{\"qa_type\":\"multiple choice\"}",
        "{\"qa_type\":\"free-form\"}", "not json"};
    static rwd_scorer_t *s;
    if (!s)
        s = rwd_scorer_new(NULL);
    if (size < 1)
        return 0;
    const char *ds = sources[data[0] % 7];
    const char *extra = extras[(data[0] >> 3) % 4];
    const char *body = (const char *) data + 1;
    size_t n = size - 1;
    const char *sep = memchr(body, 0, n);
    size_t alen = sep ? (size_t) (sep - body) : n;
    char *answer = malloc(alen + 1);
    memcpy(answer, body, alen);
    answer[alen] = '\0';
    size_t glen = sep ? n - alen - 1 : 0;
    char *gt = malloc(glen + 1);
    if (glen)
        memcpy(gt, sep + 1, glen);
    gt[glen] = '\0';

    rwd_input_t in = {.data_source = ds,
                      .answer = answer,
                      .answer_len = alen,
                      .ground_truth = gt,
                      .truth_len = glen,
                      .extra_info_json = extra};
    rwd_result_t r;
    if (rwd_score(s, &in, &r) == LISA_OK) {
        json_t *j = json_loads(r.explanation_json, 0, NULL);
        if (!j || r.reward < 0 || r.reward > 1)
            abort();
        json_decref(j);
    }
    rwd_result_clear(&r);
    /* The pieces directly, on the raw bytes (embedded NULs included). */
    (void) rwd_math_equal(body, n / 2, body + n / 2, n - n / 2, NULL);
    (void) rwd_mc_extract(body, n, NULL);
    (void) rwd_rouge_l(body, n / 2, body + n / 2, n - n / 2, 0, NULL);
    free(answer);
    free(gt);
    return 0;
}
