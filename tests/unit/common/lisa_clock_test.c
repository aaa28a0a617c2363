/*
 * lisa_clock: both clocks against clock_gettime read around them, and the
 * monotonic one never stepping back. The first test is the usage example.
 */
#include "lisa/lisa_clock.h"

#include <criterion/criterion.h>
#include <time.h>

static int64_t
s_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

Test(lisa_clock, usage)
{
    int64_t t0 = lisa_clock_mono_ms();
    nanosleep(&(struct timespec){0, 30 * 1000000L}, NULL);
    int64_t waited = lisa_clock_mono_ms() - t0;
    cr_assert_geq(waited, 30);
    cr_assert_lt(waited, 10000);
}

Test(lisa_clock, the_monotonic_clock_is_clock_monotonic)
{
    int64_t before = s_ms(CLOCK_MONOTONIC);
    int64_t now = lisa_clock_mono_ms();
    int64_t after = s_ms(CLOCK_MONOTONIC);
    cr_assert_geq(now, before);
    cr_assert_leq(now, after);
}

Test(lisa_clock, the_wall_clock_is_clock_realtime)
{
    int64_t before = s_ms(CLOCK_REALTIME);
    uint64_t now = lisa_clock_wall_ms();
    int64_t after = s_ms(CLOCK_REALTIME);
    cr_assert_geq((int64_t) now, before);
    cr_assert_leq((int64_t) now, after);
    /* milliseconds since the epoch: after 2020-01-01 */
    cr_assert_gt(now, 1577836800000ull);
}

Test(lisa_clock, the_monotonic_clock_never_steps_back)
{
    int64_t last = lisa_clock_mono_ms();
    for (int i = 0; i < 10000; i++) {
        int64_t now = lisa_clock_mono_ms();
        cr_assert_geq(now, last);
        last = now;
    }
}
