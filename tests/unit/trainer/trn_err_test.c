/*
 * trn_err tests: a refusal fills the caller's reason, returns its code and
 * is counted; a NULL reason holder is fine and long reasons are cut. The
 * first test is the usage example.
 */
#include "trn_err.h"

#include <criterion/criterion.h>
#include <string.h>

Test(trn_err, usage)
{
    trn_err_t err;
    uint64_t before = trn_fail_count();
    lisa_rc_t rc =
        trn_fail(&err, LISA_INVALID, "tensor '%s' is %d wide", "w", 3);
    cr_assert_eq(rc, LISA_INVALID);
    cr_assert_str_eq(err.msg, "tensor 'w' is 3 wide");
    cr_assert_eq(trn_fail_count(), before + 1);
}

Test(trn_err, null_holder_and_long_reasons)
{
    cr_assert_eq(trn_fail(NULL, LISA_TOOLARGE, "no holder"), LISA_TOOLARGE);
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    trn_err_t err;
    cr_assert_eq(trn_fail(&err, LISA_ERR, "%s", big), LISA_ERR);
    cr_assert_eq(strlen(err.msg), TRN_ERR_MAX - 1);
}
