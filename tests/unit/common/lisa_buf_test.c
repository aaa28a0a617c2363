/*
 * lisa_buf tests. The first test is the usage example.
 */
#include "lisa/lisa_buf.h"

#include <criterion/criterion.h>
#include <string.h>

Test(lisa_buf, usage)
{
    lisa_buf_t b = LISA_BUF(64);
    lisa_buf_puts(&b, "hello");
    lisa_buf_put(&b, ", world", 7);
    cr_assert(!b.full);
    cr_assert_eq(b.len, 12);
    cr_assert_str_eq(b.p, "hello, world");
    lisa_buf_free(&b);
    cr_assert_null(b.p);
    cr_assert_eq(b.len, 0);
}

Test(lisa_buf, bound_is_exact_and_sticky)
{
    lisa_buf_t b = LISA_BUF(10);
    lisa_buf_put(&b, "0123456789", 10); /* exactly max fits */
    cr_assert(!b.full);
    lisa_buf_put(&b, "x", 1); /* one more does not */
    cr_assert(b.full);
    cr_assert_eq(b.len, 10);
    cr_assert_str_eq(b.p, "0123456789");
    lisa_buf_put(&b, "", 0); /* stays full, unchanged */
    cr_assert(b.full);
    cr_assert_eq(b.len, 10);
    lisa_buf_free(&b);
    cr_assert(!b.full);
}

Test(lisa_buf, grows_past_the_first_block)
{
    lisa_buf_t b = LISA_BUF(1u << 20);
    char chunk[1000];
    memset(chunk, 'a', sizeof chunk);
    for (int i = 0; i < 300; i++)
        lisa_buf_put(&b, chunk, sizeof chunk);
    cr_assert(!b.full);
    cr_assert_eq(b.len, 300000);
    cr_assert_eq(strlen(b.p), 300000);
    cr_assert_geq(b.cap, b.len + 1);
    lisa_buf_free(&b);
}
