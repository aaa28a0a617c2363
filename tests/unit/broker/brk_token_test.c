/*
 * brk_token tests, checked with lisa_token's verifier. The first test is
 * the usage example.
 */
#include "brk_token.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_token.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

Test(brk_token, usage)
{
    brk_token_t *tk = brk_token_new(NULL); /* random key */
    cr_assert_not_null(tk);
    char *t = brk_token_issue(tk, "r-1", 2, 5000);
    cr_assert(strncmp(t, "v1.", 3) == 0);
    cr_assert(brk_token_check(tk, t, "r-1", 2, 4000));
    cr_assert_not(brk_token_check(tk, t, "r-1", 3, 4000)); /* other attempt */
    cr_assert_not(brk_token_check(tk, t, "r-2", 2, 4000)); /* other rollout */
    cr_assert_not(brk_token_check(tk, t, "r-1", 2, 6000)); /* expired */
    lisa_free(&t);
    brk_token_destroy(&tk);
    brk_token_destroy(&tk);
}

Test(brk_token, key_file_tokens_verify_with_lisa_token)
{
    char path[] = "/tmp/brk_token_test_XXXXXX";
    int fd = mkstemp(path);
    const char *key = "000102030405060708090a0b0c0d0e0f"
                      "101112131415161718191a1b1c1d1e1f\n";
    cr_assert_eq(write(fd, key, strlen(key)), (ssize_t) strlen(key));
    close(fd);
    chmod(path, 0600);
    brk_token_t *a = brk_token_new(path), *b = brk_token_new(path);
    cr_assert_not_null(a);
    char *ta = brk_token_issue(a, "r-9", 1, 99999);
    char *tb = brk_token_issue(b, "r-9", 1, 99999);
    cr_assert_str_eq(ta, tb);
    /* the gateway's view: lisa_token_verify with the same key */
    lisa_token_key_t k;
    char err[128];
    cr_assert_eq(lisa_token_key_load_file(path, &k, err, sizeof err), LISA_OK);
    lisa_token_claims_t c;
    cr_assert_eq(lisa_token_verify(k.bytes, k.len, ta, 1000, &c, NULL),
                 LISA_OK);
    cr_assert_str_eq(c.rollout_id, "r-9");
    cr_assert_eq(c.attempt, 1);
    cr_assert_eq(c.expiry_ms, 99999);
    ta[strlen(ta) - 1] = ta[strlen(ta) - 1] == 'A' ? 'B' : 'A';
    cr_assert_not(brk_token_check(a, ta, "r-9", 1, 1));
    cr_assert_not(brk_token_check(a, "garbage", "r-9", 1, 1));
    lisa_free(&ta);
    lisa_free(&tb);
    brk_token_destroy(&a);
    brk_token_destroy(&b);
    /* short keys and missing files are refused */
    FILE *f = fopen(path, "w");
    fputs("abcd", f);
    fclose(f);
    cr_assert_null(brk_token_new(path));
    unlink(path);
    cr_assert_null(brk_token_new("/nonexistent/key"));
}
