/*
 * rwd_iftext: the text primitives behind the instruction checks: word_tokenize
 * tokens (Treebank rules), sentences (Punkt's rules approximated), case,
 * `\b`, sorted word lists.
 */
#include "lisa/lisa_mem.h"
#include "rwd_iftext.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

/* The tokens of s joined by '|', quotes as NLTK writes them. */
static void
joined(const char *s, char *out, size_t cap)
{
    size_t k, w = 0;
    rwd_token_t *t = rwd_iftext_tokens_new(s, strlen(s), &k);
    out[0] = '\0';
    for (size_t i = 0; i < k; i++) {
        const char *p = s + t[i].off;
        size_t l = t[i].len;
        if (t[i].quote) {
            p = t[i].quote == '`' ? "``" : "''";
            l = 2;
        }
        w += (size_t) snprintf(out + w, cap - w, "%s%.*s", i ? "|" : "",
                               (int) l, p);
    }
    lisa_free(&t);
}

Test(rwd_iftext, usage)
{
    const char *s = "I can't go (now), said \"Mr. Smith\".";
    char out[256];
    joined(s, out, sizeof out);
    cr_assert_str_eq(out, "I|ca|n't|go|(|now|)|,|said|``|Mr.|Smith|''|.");
    rwd_span_t sp[4];
    const char *two = "It rains. Then it stops!";
    cr_assert_eq(rwd_iftext_sentences(two, strlen(two), sp, 4), 2);
    cr_assert_eq(sp[1].off, 10);
}

Test(rwd_iftext, treebank_rules)
{
    static const struct {
        const char *in;
        const char *out;
    } rows[] = {
        {"3,000 people at 10:30, a:b.", "3,000|people|at|10:30|,|a|:|b|."},
        {"It's theirs; they're sure!", "It|'s|theirs|;|they|'re|sure|!"},
        {"You cannot, gonna... wait--now",
         "You|can|not|,|gon|na|...|wait|--|now"},
        {"$5 for 50% & #tag @me *x*", "$|5|for|50|%|&|#|tag|@|me|*|x|*"},
        {"dogs' bones 'quoted'", "dogs|'|bones|'quoted|'"},
        {"\xe2\x80\x9cOK\xe2\x80\x9d it\xe2\x80\x99s",
         "\xe2\x80\x9c|OK|\xe2\x80\x9d|it|\xe2\x80\x99|s"},
        {"``Hi'' he said", "``|Hi|''|he|said"},
        {"The U.S. is big.", "The|U.S.|is|big|."},
    };
    char out[256];
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        joined(rows[i].in, out, sizeof out);
        cr_expect_str_eq(out, rows[i].out, "%s", rows[i].in);
    }
}

Test(rwd_iftext, sentences)
{
    static const struct {
        const char *in;
        size_t count;
    } rows[] = {
        {"One. Two! Three?", 3},
        {"Mr. Smith came.", 1},
        {"Apples, pears, etc. The rest went.", 2},
        {"Apples, pears, etc. and more.", 1},
        {"J. K. Rowling wrote it.", 1},
        {"Wait... what? Yes.", 2},
        {"Wait... Then go.", 2},
        {"In 1999. the end", 1},
        {"He said \"Stop.\" Then left.", 2},
        {"No terminator\non two lines", 1},
        {"  ", 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        size_t k;
        rwd_span_t *sp =
            rwd_iftext_sentences_new(rows[i].in, strlen(rows[i].in), &k);
        cr_expect_eq(k, rows[i].count, "%s: %zu", rows[i].in, k);
        cr_expect_eq(
            rwd_iftext_sentences(rows[i].in, strlen(rows[i].in), NULL, 0), k);
        lisa_free(&sp);
    }
}

/* Lines as Python's s.split("\n"): rows give the lines joined by '|'. */
Test(rwd_iftext, lines)
{
    static const struct {
        const char *in;
        size_t count;
        const char *joined;
    } rows[] = {
        {"", 1, ""},
        {"one", 1, "one"},
        {"one\ntwo", 2, "one|two"},
        {"one\n", 2, "one|"},
        {"\n\n", 3, "||"},
        {" a \n\n b\r", 3, " a || b\r"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        size_t k, w = 0;
        char out[64] = "";
        rwd_span_t *l =
            rwd_iftext_lines_new(rows[i].in, strlen(rows[i].in), &k);
        cr_expect_eq(k, rows[i].count, "%s: %zu", rows[i].in, k);
        for (size_t j = 0; j < k; j++) {
            cr_assert(memchr(rows[i].in + l[j].off, '\n', l[j].len) == NULL);
            w += (size_t) snprintf(out + w, sizeof out - w, "%s%.*s",
                                   j ? "|" : "", (int) l[j].len,
                                   rows[i].in + l[j].off);
        }
        cr_expect_str_eq(out, rows[i].joined, "%s", rows[i].in);
        lisa_free(&l);
    }
}

Test(rwd_iftext, case_and_words)
{
    cr_expect(rwd_iftext_is_cased("ÉCOLE 42", 9, true));
    cr_expect(!rwd_iftext_is_cased("École", 6, true));
    cr_expect(rwd_iftext_is_cased("дом", 6, false));
    cr_expect(!rwd_iftext_is_cased("123", 3, false)); /* nothing cased */
    cr_expect_eq(rwd_iftext_lower(0xC9), 0xE9);
    cr_expect_eq(rwd_iftext_lower(0x0414), 0x0434);
    cr_expect_eq(rwd_iftext_case(0x65E5), 0); /* uncased */
    cr_expect(rwd_iftext_boundary("a cat", 5, 2));
    cr_expect(!rwd_iftext_boundary("a cat", 5, 3));
    cr_expect(!rwd_iftext_is_word(0xFE0F)); /* a variation selector */
    cr_expect_eq(rwd_iftext_count_words("x\xe2\x9d\xa4\xef\xb8\x8f y", 9), 2);
    static const char *const sorted[] = {"and", "but", "or"};
    cr_expect(rwd_iftext_in_sorted(sorted, 3, "but", 3));
    cr_expect(!rwd_iftext_in_sorted(sorted, 3, "bu", 2));
    cr_expect(rwd_iftext_is_stopword("themselves", 10));
    cr_expect(!rwd_iftext_is_stopword("cat", 3));
}
