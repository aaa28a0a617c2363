/*
 * lisa_rc tests. The first test is the usage example.
 */
#include "lisa.pb-c.h"
#include "lisa/lisa_rc.h"

#include <criterion/criterion.h>

Test(lisa_rc, usage)
{
    lisa_rc_t rc = LISA_NOTFOUND;
    cr_assert_str_eq(lisa_rc_str(rc), "LISA_NOTFOUND");
    int code = lisa_rc_to_code(rc); /* travels in a Reply */
    cr_assert_eq(code, LISA__CODE__CODE_NOT_FOUND);
    cr_assert_eq(lisa_rc_from_code(code), LISA_NOTFOUND);
}

Test(lisa_rc, round_trip_every_code)
{
    for (int rc = 0; rc >= -10; rc--) {
        cr_assert_eq(lisa_rc_from_code(lisa_rc_to_code((lisa_rc_t) rc)), rc);
        cr_assert_str_neq(lisa_rc_str((lisa_rc_t) rc), "LISA_UNKNOWN");
    }
    cr_assert_str_eq(lisa_rc_str((lisa_rc_t) 99), "LISA_UNKNOWN");
    cr_assert_eq(lisa_rc_from_code(999), LISA_ERR);
}
