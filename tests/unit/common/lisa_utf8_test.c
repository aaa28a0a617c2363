/*
 * lisa_utf8: strict validation, lossy decoding as Rust's from_utf8_lossy,
 * the strict sequence length and cleaning. The first test is the usage
 * example.
 */
#include "lisa/lisa_mem.h"
#include "lisa/lisa_utf8.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

Test(lisa_utf8, usage)
{
    const char out[] = "caf\xc3\xa9 \xff done";
    char *s = lisa_utf8_scrub(out, sizeof out - 1, 4096);
    cr_assert_str_eq(s, "caf\xc3\xa9 ? done");
    cr_assert(lisa_utf8_valid(s, strlen(s)));
    cr_assert_not(lisa_utf8_valid(out, sizeof out - 1));
    lisa_free(&s);
}

Test(lisa_utf8, strict_utf8)
{
    cr_assert(lisa_utf8_valid("", 0));
    cr_assert(lisa_utf8_valid("\xf4\x8f\xbf\xbf", 4));
    cr_assert_not(lisa_utf8_valid("\xf4\x90\x80\x80", 4)); /* > 10FFFF */
    cr_assert_not(lisa_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    cr_assert_not(lisa_utf8_valid("\xe0\x80\xaf", 3));     /* overlong */
    cr_assert_not(lisa_utf8_valid("\xc3", 1));             /* truncated */
    cr_assert_not(lisa_utf8_valid("\xff", 1));
}

Test(lisa_utf8, lossy_like_rust)
{
    /* one U+FFFD per maximal invalid subpart */
    size_t n = 0;
    char *o = lisa_utf8_lossy((const uint8_t *) "a\xe2\x82"
                                                "b\xf0\x80\xff",
                              7, &n);
    cr_assert_str_eq(o, "a\xef\xbf\xbd"
                        "b\xef\xbf\xbd\xef\xbf\xbd"
                        "\xef\xbf\xbd");
    cr_assert_eq(n, strlen(o));
    lisa_free(&o);
    o = lisa_utf8_lossy((const uint8_t *) "\xf0\x9f\x8e", 3, &n);
    cr_assert_str_eq(o, "\xef\xbf\xbd");
    lisa_free(&o);
}

Test(lisa_utf8, utf8_clean_replaces_bad_bytes)
{
    const char in[] = "ok\xff\xfe mid\0nul \xe2\x82\xac \xed\xa0\x80 \xc0\xaf";
    char *c = lisa_utf8_scrub(in, sizeof in - 1, SIZE_MAX);
    cr_assert_str_eq(c, "ok?? mid?nul \xe2\x82\xac ??? ??");
    cr_assert(lisa_utf8_valid(c, strlen(c)));
    lisa_free(&c);
}

Test(lisa_utf8, utf8_clean_stops_before_max_without_splitting)
{
    /* "a€b": the euro sign (3 bytes) does not fit in 3 bytes after 'a' */
    const char in[] = "a\xe2\x82\xac"
                      "b";
    char *c = lisa_utf8_scrub(in, sizeof in - 1, 3);
    cr_assert_str_eq(c, "a");
    lisa_free(&c);
    c = lisa_utf8_scrub(in, sizeof in - 1, 4);
    cr_assert_str_eq(c, "a\xe2\x82\xac");
    lisa_free(&c);
    c = lisa_utf8_scrub("\xff\xffxyz", 5, 2);
    cr_assert_str_eq(c, "??");
    lisa_free(&c);
    c = lisa_utf8_scrub("", 0, 0);
    cr_assert_str_eq(c, "");
    lisa_free(&c);
}

Test(lisa_utf8, utf8_seq_is_the_strict_length)
{
    cr_assert_eq(lisa_utf8_seq("a", 1), 1);
    cr_assert_eq(lisa_utf8_seq("", 1), 1); /* NUL is ASCII */
    cr_assert_eq(lisa_utf8_seq("\xc3\xa9", 2), 2);
    cr_assert_eq(lisa_utf8_seq("\xe2\x82\xac", 3), 3);
    cr_assert_eq(lisa_utf8_seq("\xf0\x9f\x98\x80", 4), 4);
    cr_assert_eq(lisa_utf8_seq("\xe2\x82", 2), 0, "cut short");
    cr_assert_eq(lisa_utf8_seq("\xc0\xaf", 2), 0, "overlong");
    cr_assert_eq(lisa_utf8_seq("\xed\xa0\x80", 3), 0, "surrogate");
    cr_assert_eq(lisa_utf8_seq("\xf4\x90\x80\x80", 4), 0, "past U+10FFFF");
    cr_assert_eq(lisa_utf8_seq("\x80", 1), 0, "continuation");
}
