/*
 * agt_loop tests: the pure parts of the episode loop (the steps notice and
 * the max_tokens cut after a context overflow); the loop itself runs
 * against a scripted gateway in tests/integration/agent. The first test
 * is the usage example.
 */
#include "agt_loop.h"

#include <criterion/criterion.h>
#include <string.h>

Test(agt_loop, usage)
{
    /* The gateway refused a call of 32,768 tokens with
     * context_length_exceeded while 50,000 tokens of room were estimated:
     * the turn is retried with half. */
    cr_assert_eq(agt_loop_shrink_max_tokens(32768, 50000), 16384);
}

Test(agt_loop, shrink_stops_at_the_floor)
{
    cr_assert_eq(agt_loop_shrink_max_tokens(12000, 50000), AGT_OVERFLOW_FLOOR);
    /* At the floor nothing is left to cut: the episode ends. */
    cr_assert_eq(agt_loop_shrink_max_tokens(8192, 50000), 8192);
    cr_assert_eq(agt_loop_shrink_max_tokens(5000, 50000), 5000);
}

Test(agt_loop, shrink_floor_is_the_room_left_when_smaller)
{
    /* Only 3,000 tokens of context left: the floor is that room. */
    cr_assert_eq(agt_loop_shrink_max_tokens(16000, 3000), 8000);
    cr_assert_eq(agt_loop_shrink_max_tokens(5000, 3000), 3000);
    cr_assert_eq(agt_loop_shrink_max_tokens(3000, 3000), 3000);
    cr_assert_eq(agt_loop_shrink_max_tokens(1, 0), 1);
}

Test(agt_loop, steps_text)
{
    char buf[128];
    cr_assert_str_eq(agt_loop_steps_text(7, buf, sizeof buf),
                     "Steps Remaining: 7");
    cr_assert(strlen(agt_loop_steps_text(1, buf, sizeof buf)) > 20);
}
