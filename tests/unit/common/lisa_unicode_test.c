/*
 * lisa_unicode tests. The first test is the usage example.
 */
#include "lisa/lisa_mem.h"
#include "lisa/lisa_unicode.h"

#include <criterion/criterion.h>
#include <string.h>

Test(lisa_unicode, usage)
{
    const char *s = "Cafe\xcc\x81"; /* e + combining acute */
    cr_assert(lisa_utf8_valid(s, strlen(s)));
    char *nfc = NULL;
    size_t n = 0;
    cr_assert_eq(lisa_utf8_nfc(s, strlen(s), &nfc, &n), LISA_OK);
    cr_assert_str_eq(nfc, "Caf\xc3\xa9");
    cr_assert_eq(n, 5);
    lisa_free(&nfc);
    /* already NFC: no copy */
    cr_assert_eq(lisa_utf8_nfc("abc", 3, &nfc, &n), LISA_OK);
    cr_assert_null(nfc);
    /* byte-level alphabet: space is U+0120, 'a' is itself */
    cr_assert_eq(lisa_bytelevel_char(' '), 0x120);
    cr_assert_eq(lisa_bytelevel_char('a'), 'a');
    cr_assert_eq(lisa_bytelevel_byte(0x120), ' ');
}

Test(lisa_unicode, bytelevel_is_a_bijection)
{
    bool seen[400] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t c = lisa_bytelevel_char((uint8_t) b);
        cr_assert_lt(c, 400);
        cr_assert_not(seen[c]);
        seen[c] = true;
        cr_assert_eq(lisa_bytelevel_byte(c), b);
    }
    cr_assert_eq(lisa_bytelevel_byte(' '), -1);
    cr_assert_eq(lisa_bytelevel_byte(0x4E00), -1);
    cr_assert(lisa_unicode_is_space(0x3000));
    cr_assert_not(lisa_unicode_is_space(0x180E));
    cr_assert(lisa_unicode_is_word(0x4E00));
    cr_assert_not(lisa_unicode_is_word('-'));
}

Test(lisa_unicode, hex_digit_both_cases_and_nothing_else)
{
    const char *digits = "0123456789abcdef", *upper = "ABCDEF";
    for (int i = 0; i < 16; i++)
        cr_assert_eq(lisa_hex_digit(digits[i]), i);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(lisa_hex_digit(upper[i]), 10 + i);
    const char *bad = "gG/:@`xX -\x7f";
    for (const char *p = bad; *p; p++)
        cr_assert_eq(lisa_hex_digit(*p), -1, "'%c'", *p);
    cr_assert_eq(lisa_hex_digit((char) 0xc3), -1);
    cr_assert_eq(lisa_hex_digit('\0'), -1);
}

Test(lisa_unicode, clean_replaces_and_bounds_at_a_character)
{
    /* invalid bytes become U+FFFD, as from_utf8_lossy does */
    size_t n = 0;
    char *c = lisa_utf8_clean("ok\xff\xfe!", 5, 100, &n);
    cr_assert_str_eq(c, "ok\xef\xbf\xbd\xef\xbf\xbd!");
    cr_assert_eq(n, strlen(c));
    lisa_free(&c);
    /* the bound never cuts a character: "é" is 2 bytes, "€" 3 */
    c = lisa_utf8_clean("a\xc3\xa9\xe2\x82\xac", 6, 4, &n);
    cr_assert_str_eq(c, "a\xc3\xa9");
    cr_assert_eq(n, 3);
    lisa_free(&c);
    c = lisa_utf8_clean("a\xc3\xa9\xe2\x82\xac", 6, 6, &n);
    cr_assert_str_eq(c, "a\xc3\xa9\xe2\x82\xac");
    lisa_free(&c);
    /* a replacement that does not fit is dropped whole */
    c = lisa_utf8_clean("abc\x80", 4, 5, &n);
    cr_assert_str_eq(c, "abc");
    cr_assert(lisa_utf8_valid(c, n));
    lisa_free(&c);
    c = lisa_utf8_clean(NULL, 0, 10, &n);
    cr_assert_str_eq(c, "");
    lisa_free(&c);
}

Test(lisa_unicode, fix_in_place)
{
    char buf[8];
    memcpy(buf, "ab\xc3\xa9", 5);
    cr_assert_eq(lisa_utf8_fix(buf, sizeof buf), 4); /* valid: untouched */
    cr_assert_str_eq(buf, "ab\xc3\xa9");
    memcpy(buf, "ab\xff\xfe\xfd", 6);
    size_t n = lisa_utf8_fix(buf, sizeof buf);
    /* two replacements fit in 7 bytes, the third does not */
    cr_assert_str_eq(buf, "ab\xef\xbf\xbd");
    cr_assert_eq(n, 5);
    cr_assert(lisa_utf8_valid(buf, n));
    /* a buffer whose bound cut a character in half */
    memcpy(buf, "abcde\xe2\x82", 8);
    buf[7] = '\0';
    n = lisa_utf8_fix(buf, sizeof buf);
    cr_assert(lisa_utf8_valid(buf, n));
    cr_assert_eq(strncmp(buf, "abcde", 5), 0);
    cr_assert_leq(n, 7);
}
