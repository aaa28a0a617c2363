/*
 * lisa_clock: monotonic and wall milliseconds (see the header).
 */
#include "lisa/lisa_clock.h"

#include <time.h>

int64_t
lisa_clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t
lisa_clock_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}
