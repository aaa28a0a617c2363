/*
 * ctl_rate: a token bucket for sandbox creations: `per_s` tokens a second,
 * at most `burst` saved up. Time is passed in, so tests need no sleeping.
 */
#ifndef CTL_RATE_H
#define CTL_RATE_H

#include <stdint.h>

typedef struct {
    double tokens;
    double per_ms;
    double burst;
    uint64_t last_ms;
} ctl_rate_t;

/* Starts full at `burst` tokens as of now_ms. */
void ctl_rate_init(ctl_rate_t *r, uint64_t per_s, uint64_t burst,
                   uint64_t now_ms);
/* Whole tokens available at now_ms (refills first). */
uint64_t ctl_rate_available(ctl_rate_t *r, uint64_t now_ms);
/* Spends n tokens (n must not exceed the available count). */
void ctl_rate_take(ctl_rate_t *r, uint64_t n);

#endif
