/*
 * lisa_buf tests. The first test is the usage example.
 */
#include "lisa/lisa_buf.h"
#include "lisa/lisa_mem.h"

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

Test(lisa_buf, cut_keeps_what_fits)
{
    lisa_buf_t b = LISA_BUF_CUT(8);
    lisa_buf_puts(&b, "abc");
    cr_assert_not(b.full);
    lisa_buf_puts(&b, "defghij"); /* 3 + 7 > 8: keeps "defgh" */
    cr_assert(b.full);
    cr_assert_eq(b.len, 8);
    cr_assert_str_eq(b.p, "abcdefgh");
    lisa_buf_puts(&b, "x"); /* nothing more */
    cr_assert_str_eq(b.p, "abcdefgh");
    /* the plain kind drops the whole append instead */
    lisa_buf_t d = LISA_BUF(8);
    lisa_buf_puts(&d, "abc");
    lisa_buf_puts(&d, "defghij");
    cr_assert(d.full);
    cr_assert_str_eq(d.p, "abc");
    lisa_buf_free(&b);
    lisa_buf_free(&d);
}

Test(lisa_buf, printf_and_take)
{
    lisa_buf_t b = LISA_BUF_CUT(1000);
    lisa_buf_printf(&b, "%d-%s", 42, "x");
    char big[700];
    memset(big, 'y', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    lisa_buf_printf(&b, "[%s]", big); /* longer than the small stack copy */
    cr_assert_eq(b.len, 4 + 2 + 699);
    cr_assert_eq(b.p[4], '[');
    cr_assert_eq(b.p[b.len - 1], ']');
    lisa_buf_printf(&b, "%s", big); /* clipped at 1000 */
    cr_assert(b.full);
    cr_assert_eq(b.len, 1000);
    char *s = lisa_buf_take(&b);
    cr_assert_eq(strlen(s), 1000);
    cr_assert_null(b.p);
    cr_assert_eq(b.len, 0);
    cr_assert_not(b.full);
    cr_assert(b.cut);
    cr_assert_eq(b.max, 1000);
    lisa_free(&s);
    /* an empty buffer gives "" */
    s = lisa_buf_take(&b);
    cr_assert_str_eq(s, "");
    lisa_free(&s);
}
