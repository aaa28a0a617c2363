/*
 * brk_token tests. The first test is the usage example.
 */
#include "brk_token.h"
#include "lisa/lisa_mem.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

Test(brk_token, usage)
{
    brk_token_t *tk = brk_token_new(NULL); /* random key */
    cr_assert_not_null(tk);
    char *t = brk_token_issue(tk, "r-1", 2, 5000);
    cr_assert(strncmp(t, "v1.r-1.2.5000.", 14) == 0);
    cr_assert(brk_token_check(tk, t, "r-1", 2, 4000));
    cr_assert_not(brk_token_check(tk, t, "r-1", 3, 4000)); /* other attempt */
    cr_assert_not(brk_token_check(tk, t, "r-2", 2, 4000)); /* other rollout */
    cr_assert_not(brk_token_check(tk, t, "r-1", 2, 6000)); /* expired */
    lisa_free(&t);
    brk_token_destroy(&tk);
    brk_token_destroy(&tk);
}

Test(brk_token, key_file_gives_stable_tokens_and_tampering_fails)
{
    char path[] = "/tmp/brk_token_test_XXXXXX";
    int fd = mkstemp(path);
    const char *key = "0123456789abcdef0123456789abcdef\n";
    cr_assert_eq(write(fd, key, strlen(key)), (ssize_t) strlen(key));
    close(fd);
    brk_token_t *a = brk_token_new(path), *b = brk_token_new(path);
    cr_assert_not_null(a);
    char *ta = brk_token_issue(a, "r-9", 1, 99999);
    char *tb = brk_token_issue(b, "r-9", 1, 99999);
    cr_assert_str_eq(ta, tb);
    ta[strlen(ta) - 1] = ta[strlen(ta) - 1] == '0' ? '1' : '0';
    cr_assert_not(brk_token_check(a, ta, "r-9", 1, 1));
    cr_assert_not(brk_token_check(a, "garbage", "r-9", 1, 1));
    lisa_free(&ta);
    lisa_free(&tb);
    brk_token_destroy(&a);
    brk_token_destroy(&b);
    /* short keys and missing files are refused */
    FILE *f = fopen(path, "w");
    fputs("short", f);
    fclose(f);
    cr_assert_null(brk_token_new(path));
    unlink(path);
    cr_assert_null(brk_token_new("/nonexistent/key"));
}
