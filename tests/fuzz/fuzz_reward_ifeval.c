/*
 * Fuzz target: the instruct_follow ground-truth / kwargs parser and every
 * check it selects. The input is split at the first 0x00 into a ground
 * truth and a response; parsing must fail cleanly or judge the response,
 * never crash, leak or read out of bounds, whatever the bytes.
 */
#include "rwd_ifeval.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *) data;
    const char *sep = memchr(body, 0, size);
    size_t tl = sep ? (size_t) (sep - body) : size;
    const char *resp = sep ? sep + 1 : "";
    size_t rl = sep ? size - tl - 1 : 0;
    lisa_rc_t rc;
    char err[256];
    rwd_ifeval_t *e = rwd_ifeval_new(body, tl, &rc, err, sizeof err);
    if (!e)
        return 0;
    rwd_ifeval_verdict_t v;
    if (rwd_ifeval_judge(e, resp, rl, &v) == LISA_OK &&
        (v.loose_passed < v.strict_passed || v.count != rwd_ifeval_count(e)))
        __builtin_trap(); /* loose is never stricter than strict */
    rwd_ifeval_destroy(&e);
    return 0;
}
