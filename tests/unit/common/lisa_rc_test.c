/*
 * lisa_rc tests. The first test is the usage example.
 */
#include "lisa.pb-c.h"
#include "lisa/lisa_rc.h"

#include <criterion/criterion.h>
#include <string.h>

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

Test(lisa_rc, errf_formats_bounded_and_tolerates_no_buffer)
{
    char err[16];
    lisa_errf(err, sizeof err, "field '%s' = %d", "n", 7);
    cr_assert_str_eq(err, "field 'n' = 7");
    /* cut to fit, always terminated */
    lisa_errf(err, sizeof err, "%s", "a reason much longer than sixteen");
    cr_assert_eq(strlen(err), sizeof err - 1);
    cr_assert_eq(strncmp(err, "a reason much l", 15), 0);
    /* no buffer: nothing written, no crash */
    lisa_errf(NULL, 64, "x");
    char one[1] = {'z'};
    lisa_errf(one, 0, "x");
    cr_assert_eq(one[0], 'z');
}
