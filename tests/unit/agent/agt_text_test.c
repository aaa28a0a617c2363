/*
 * agt_text tests: the observation-shaping rules. The first test is the
 * usage example.
 */
#include "agt_text.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_utf8.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

static char *
s_lines(int n)
{
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(1u << 20);
    for (int i = 1; i <= n; i++)
        lisa_buf_printf(&sb, "line %d\n", i);
    return lisa_buf_take(&sb);
}

Test(agt_text, usage)
{
    /* A command printed 100 lines: the model sees 40 + 40 of them. */
    char *out = s_lines(100);
    char *cut = agt_text_cut_lines(out, strlen(out), 40, 40);
    cr_assert(strstr(cut, "line 40\n"));
    cr_assert_null(strstr(cut, "line 41\n"));
    cr_assert(strstr(cut, "20 lines left out"));
    cr_assert(strstr(cut, "line 61\nline 62"));
    cr_assert_null(strstr(cut, "line 60\n"));
    /* ... and one huge line is cut by bytes. */
    char *capped = agt_text_cap_bytes(cut, strlen(cut), 100);
    cr_assert(strlen(capped) < 200);
    lisa_free(&out);
    lisa_free(&cut);
    lisa_free(&capped);
}

Test(agt_text, cut_lines_keeps_short_output)
{
    char *out = s_lines(80);
    char *cut = agt_text_cut_lines(out, strlen(out), 40, 40);
    cr_assert_str_eq(cut, out);
    lisa_free(&out);
    lisa_free(&cut);
}

Test(agt_text, cut_lines_without_final_newline)
{
    char *out = s_lines(81);
    out[strlen(out) - 1] = '\0'; /* "line 81" has no newline */
    char *cut = agt_text_cut_lines(out, strlen(out), 40, 40);
    cr_assert(strstr(cut, "1 lines left out"));
    cr_assert(strstr(cut, "line 42\n"));
    cr_assert_null(strstr(cut, "line 41\n"));
    size_t n = strlen(cut);
    cr_assert_str_eq(cut + n - 7, "line 81");
    cr_assert_eq(agt_text_count_lines(cut, n), 81);
    lisa_free(&out);
    lisa_free(&cut);
}

Test(agt_text, cap_bytes_huge_single_line)
{
    size_t n = 5u * 1000u * 1000u;
    char *big = lisa_malloc(n + 1);
    memset(big, 'a', n);
    big[0] = 'S';
    big[n - 1] = 'E';
    big[n] = '\0';
    char *c = agt_text_cap_bytes(big, n, 16384);
    cr_assert_lt(strlen(c), 16384 + 128);
    cr_assert_eq(c[0], 'S');
    cr_assert_eq(c[strlen(c) - 1], 'E');
    cr_assert(strstr(c, "bytes left out"));
    lisa_free(&big);
    lisa_free(&c);
}

Test(agt_text, cap_bytes_respects_utf8)
{
    /* "é" is two bytes; cutting in the middle must move to a boundary. */
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(1 << 16);
    for (int i = 0; i < 1000; i++)
        lisa_buf_puts(&sb, "\xc3\xa9");
    char *s = lisa_buf_take(&sb);
    char *c = agt_text_cap_bytes(s, strlen(s), 101);
    char *clean = lisa_utf8_scrub(c, strlen(c), SIZE_MAX);
    cr_assert_str_eq(clean, c, "cut produced invalid UTF-8");
    lisa_free(&s);
    lisa_free(&c);
    lisa_free(&clean);
}

Test(agt_text, number_like_cat_n)
{
    char *n = agt_text_number("a\nb\n", 4, 7, 1000);
    cr_assert_str_eq(n, "     7\ta\n     8\tb\n");
    lisa_free(&n);
    n = agt_text_number("", 0, 1, 1000);
    cr_assert_str_eq(n, "");
    lisa_free(&n);
}

Test(agt_text, clip_adds_note)
{
    char *s = lisa_malloc(20001);
    memset(s, 'x', 20000);
    s[20000] = '\0';
    char *c = agt_text_clip(s, 10000);
    cr_assert_eq(strncmp(c, s, 10000), 0);
    cr_assert(strstr(c, "<response clipped>"));
    cr_assert_lt(strlen(c), 10000 + 400);
    lisa_free(&c);
    c = agt_text_clip("short", 10000);
    cr_assert_str_eq(c, "short");
    lisa_free(&s);
    lisa_free(&c);
}

Test(agt_text, builder_respects_max)
{
    lisa_buf_t sb;
    sb = LISA_BUF_CUT(10);
    lisa_buf_puts(&sb, "0123456789abc");
    cr_assert(sb.full);
    cr_assert_eq(sb.len, 10);
    lisa_buf_printf(&sb, "%d", 42);
    cr_assert_eq(sb.len, 10);
    char *s = lisa_buf_take(&sb);
    cr_assert_str_eq(s, "0123456789");
    lisa_free(&s);
}
