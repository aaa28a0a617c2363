/*
 * ctl_rate: token bucket arithmetic.
 */
#include "ctl_rate.h"

void
ctl_rate_init(ctl_rate_t *r, uint64_t per_s, uint64_t burst, uint64_t now_ms)
{
    r->per_ms = (double) per_s / 1000.0;
    r->burst = (double) (burst ? burst : 1);
    r->tokens = r->burst;
    r->last_ms = now_ms;
}

uint64_t
ctl_rate_available(ctl_rate_t *r, uint64_t now_ms)
{
    if (now_ms > r->last_ms) {
        r->tokens += (double) (now_ms - r->last_ms) * r->per_ms;
        if (r->tokens > r->burst)
            r->tokens = r->burst;
        r->last_ms = now_ms;
    }
    return r->tokens >= 1.0 ? (uint64_t) r->tokens : 0;
}

void
ctl_rate_take(ctl_rate_t *r, uint64_t n)
{
    r->tokens -= (double) n;
    if (r->tokens < 0)
        r->tokens = 0;
}
