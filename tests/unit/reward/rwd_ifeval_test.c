/*
 * rwd_ifeval: every instruction lisa checks, with a response that follows
 * it and one that does not (strict verdicts); loose variants; refused,
 * unknown and malformed ground truths; bounds.
 */
#include "lisa/lisa_mem.h"
#include "rwd_ifcheck.h"
#include "rwd_ifeval.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

static rwd_ifeval_t *
one(const char *id, const char *kwargs, lisa_rc_t *rc, char *err, size_t el)
{
    char truth[4096];
    snprintf(truth, sizeof truth,
             "{\"instruction_id_list\": [\"%s\"], \"kwargs\": [%s]}", id,
             kwargs ? kwargs : "{}");
    return rwd_ifeval_new(truth, strlen(truth), rc, err, el);
}

Test(rwd_ifeval, usage)
{
    const char *truth =
        "{\"instruction_id_list\": [\"count:unique_word_count\", "
        "\"punctuation:no_comma\"], \"kwargs\": [{\"N\": 3.0, \"letter\": "
        "null}, {\"N\": null}]}";
    lisa_rc_t rc;
    char err[256];
    rwd_ifeval_t *e =
        rwd_ifeval_new(truth, strlen(truth), &rc, err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    cr_assert_eq(rwd_ifeval_count(e), 2);
    cr_assert_str_eq(rwd_ifeval_id(e, 0), "count:unique_word_count");
    rwd_ifeval_verdict_t v;
    const char *resp = "one two two three";
    cr_assert_eq(rwd_ifeval_judge(e, resp, strlen(resp), &v), LISA_OK);
    cr_assert(v.strict[0] && v.strict[1] && v.loose_passed == 2);
    resp = "one, two";
    cr_assert_eq(rwd_ifeval_judge(e, resp, strlen(resp), &v), LISA_OK);
    cr_assert(!v.loose[0] && !v.loose[1] && v.loose_passed == 0);
    rwd_ifeval_destroy(&e);
    rwd_ifeval_destroy(&e);
    cr_assert_null(e);
}

typedef struct {
    const char *id;
    const char *kwargs;
    const char *resp;
    bool want;
} row_t;

#define LT "\"less than\""
#define AL "\"at least\""

static const row_t rows[] = {
    /* keywords */
    {"keywords:existence", "{\"keywords\": [\"cat\", \"Dog\"]}",
     "A DOG and a cat.", true},
    {"keywords:existence", "{\"keywords\": [\"cat\", \"dog\"]}", "A cat alone.",
     false},
    {"keywords:frequency",
     "{\"keyword\": \"la\", \"frequency\": 3, \"relation\": " AL "}",
     "la LA la", true},
    {"keywords:frequency",
     "{\"keyword\": \"la\", \"frequency\": 3, \"relation\": " LT "}",
     "la LA la", false},
    {"keywords:forbidden_words", "{\"forbidden_words\": [\"bad\"]}",
     "badly done", true},
    {"keywords:forbidden_words", "{\"forbidden_words\": [\"bad\"]}",
     "not BAD, fine", false},
    {"keywords:letter_frequency",
     "{\"letter\": \"z\", \"let_frequency\": 2, \"let_relation\": " AL "}",
     "Zz top", true},
    {"keywords:letter_frequency",
     "{\"letter\": \"z\", \"let_frequency\": 2, \"let_relation\": " LT "}",
     "Zz top", false},
    /* length_constraints */
    {"length_constraints:number_sentences",
     "{\"num_sentences\": 3, \"relation\": " AL "}",
     "One. Mr. Smith came! Two?", true},
    {"length_constraints:number_sentences",
     "{\"num_sentences\": 3, \"relation\": " AL "}", "One. Two.", false},
    {"length_constraints:number_paragraphs", "{\"num_paragraphs\": 2}",
     "a\n***\nb", true},
    {"length_constraints:number_paragraphs", "{\"num_paragraphs\": 2}",
     "a\n***\n\n***\nb", false},
    {"length_constraints:number_words",
     "{\"num_words\": 4, \"relation\": " AL "}", "it's a well-known fact",
     true},
    {"length_constraints:number_words",
     "{\"num_words\": 4, \"relation\": " LT "}", "it's a well-known fact",
     false},
    {"length_constraints:nth_paragraph_first_word",
     "{\"num_paragraphs\": 2, \"nth_paragraph\": 2, \"first_word\": \"hello\"}",
     "x\n\n\"Hello, you", true},
    {"length_constraints:nth_paragraph_first_word",
     "{\"num_paragraphs\": 2, \"nth_paragraph\": 2, \"first_word\": \"hello\"}",
     "x\n\nhi hello", false},
    /* detectable_content */
    {"detectable_content:number_placeholders", "{\"num_placeholders\": 2}",
     "[a] and [b c]", true},
    {"detectable_content:number_placeholders", "{\"num_placeholders\": 2}",
     "[a] and [b\n]", false},
    {"detectable_content:postscript", "{\"postscript_marker\": \"P.S.\"}",
     "Hi\np. s. see you", true},
    {"detectable_content:postscript", "{\"postscript_marker\": \"P.P.S\"}",
     "Hi\nP.S. see you", false},
    /* detectable_format */
    {"detectable_format:number_bullet_lists", "{\"num_bullets\": 2}",
     "* a\n  - b\n**c", true},
    {"detectable_format:number_bullet_lists", "{\"num_bullets\": 2}",
     "* a\n* b\n- c", false},
    {"detectable_format:constrained_response", NULL, "Well: My answer is no.",
     true},
    {"detectable_format:constrained_response", NULL, "My answer is nope.",
     false},
    {"detectable_format:number_highlighted_sections", "{\"num_highlights\": 2}",
     "*one* and **two**", true},
    {"detectable_format:number_highlighted_sections", "{\"num_highlights\": 2}",
     "*one* and * *", false},
    {"detectable_format:multiple_sections",
     "{\"section_spliter\": \"Section\", \"num_sections\": 2}",
     "Section 1\na\nSection 2\nb", true},
    {"detectable_format:multiple_sections",
     "{\"section_spliter\": \"Section\", \"num_sections\": 2}",
     "Section 1\na\nSection two", false},
    {"detectable_format:json_format", NULL, "```json\n{\"a\": [1, 2]}\n```",
     true},
    {"detectable_format:json_format", NULL, "{\"a\": [1, 2]", false},
    {"detectable_format:title", NULL, "<<My Title>>\ntext", true},
    {"detectable_format:title", NULL, "<< >>\n<<\nx>>", false},
    /* combination */
    {"combination:two_responses", NULL, "first\n******\nsecond", true},
    {"combination:two_responses", NULL, "same\n******\nsame", false},
    {"combination:repeat_prompt", "{\"prompt_to_repeat\": \"Say Hi.\"}",
     "say hi. Hi!", true},
    {"combination:repeat_prompt", "{\"prompt_to_repeat\": \"Say Hi.\"}",
     "Hi! say hi.", false},
    /* startend */
    {"startend:end_checker", "{\"end_phrase\": \"Any other questions?\"}",
     "Done. any other questions?\"", true},
    {"startend:end_checker", "{\"end_phrase\": \"Any other questions?\"}",
     "Any other questions? Done.", false},
    {"startend:quotation", NULL, "  \"quoted\" ", true},
    {"startend:quotation", NULL, "\"", false},
    /* change_case, punctuation */
    {"change_case:capital_word_frequency",
     "{\"capital_frequency\": 2, \"capital_relation\": " AL "}",
     "THE BIG-DOG ran", true},
    {"change_case:capital_word_frequency",
     "{\"capital_frequency\": 2, \"capital_relation\": " AL "}", "THE Big dog",
     false},
    {"punctuation:no_comma", NULL, "no commas here", true},
    {"punctuation:no_comma", NULL, "yes, one", false},
    /* IFBench: count */
    {"count:word_count_range", "{\"min_words\": 2, \"max_words\": 3.0}",
     "one two, three", true},
    {"count:word_count_range", "{\"min_words\": 2, \"max_words\": 3}",
     "one two three four", false},
    {"count:unique_word_count", "{\"N\": 3.0}", "A a, b! c", true},
    {"count:unique_word_count", "{\"N\": 4}", "A a, b! c", false},
    {"count:numbers", "{\"N\": 2}", "pi is 3.14 and e is 2,718", true},
    {"count:numbers", "{\"N\": 2}", "1 2 3", false},
    {"count:punctuation", NULL, "Hi, there? Wait: yes; ok! Really?! End.",
     true},
    {"count:punctuation", NULL, "Hi, there. Wait: yes; ok?!", false},
    {"count:keywords_multiple",
     "{\"keyword1\": \"a1\", \"keyword2\": \"b2\", \"keyword3\": \"c3\", "
     "\"keyword4\": \"d4\", \"keyword5\": \"e5\"}",
     "a1 b2 b2 c3 c3 c3 d4 d4 d4 d4 d4 E5 e5 e5 e5 e5 e5 e5", true},
    {"count:keywords_multiple",
     "{\"keyword1\": \"a1\", \"keyword2\": \"b2\", \"keyword3\": \"c3\", "
     "\"keyword4\": \"d4\", \"keyword5\": \"e5\"}",
     "a1 a1 b2 b2 c3 c3 c3 d4 d4 d4 d4 d4 e5 e5 e5 e5 e5 e5 e5", false},
    /* IFBench: words */
    {"words:alphabet", NULL, "Apple, banana cherry; zebra? no", false},
    {"words:alphabet", NULL, "yak zoo, apple!", true},
    {"words:vowel", NULL, "a cat sat on a mat", true},
    {"words:vowel", NULL, "a cat sat\non a mat", false},
    {"words:consonants", NULL, "strong black tree", true},
    {"words:consonants", NULL, "strong idea", false},
    {"words:palindrome", NULL,
     "level radar kayak civic refer rotor madam stats tenet racecar", true},
    {"words:palindrome", NULL,
     "level radar kayak civic refer rotor madam stats tenet", false},
    {"words:prime_lengths", NULL, "an owl, three!", true},
    {"words:prime_lengths", NULL, "a owl", false},
    {"words:repeats", "{\"small_n\": 2}", "a A b a. b", false},
    {"words:repeats", "{\"small_n\": 2}", "a A b b.", true},
    {"words:paragraph_last_first", NULL, "Go now, go.\n\nstop then stop!",
     true},
    {"words:paragraph_last_first", NULL, "Go now, go.\nstop then go", false},
    {"words:no_consecutive", NULL, "apple banana apple", true},
    {"words:no_consecutive", NULL, "apple, Ant banana", false},
    /* IFBench: format */
    {"format:parentheses", NULL, "f(a[b{c(d[e])}])", true},
    {"format:parentheses", NULL, "f(a[b{c(d)}])", false},
    {"format:quotes", NULL, "He said \"she said 'it is \"so\"'\"", true},
    {"format:quotes", NULL, "He said \"she said 'it'\"", false},
    {"format:options", "{\"options\": \"yes/no/maybe\"}", " Maybe. ", true},
    {"format:options", "{\"options\": \"yes/no/maybe\"}", "maybe not", false},
    {"format:options", "{\"options\": \"a), b), c), d)\"}", "b)", true},
    {"format:options", "{\"options\": \"a), b), c), d)\"}", "b", false},
    {"format:newline", NULL, "one\ntwo,\nthree", true},
    {"format:newline", NULL, "one two\nthree", false},
    {"format:line_indent", NULL, "a\n b\n\n  c", true},
    {"format:line_indent", NULL, "a\n b\n c", false},
    {"format:quote_unquote", NULL, "\"To be\" means \"to exist\", as said.",
     true},
    {"format:quote_unquote", NULL, "He said \"to be\"", false},
    {"format:list", "{\"sep\": \"!?!?\"}", "!?!? one\n!?!? two", true},
    {"format:list", "{\"sep\": \"!?!?\"}", "!?!? one\n- two", false},
    {"format:thesis", NULL, "<i>Thesis here</i> and then more.", true},
    {"format:thesis", NULL, "<i>Thesis here</i>", false},
    {"format:sub-bullets", NULL, "* a\n  - b\n* c\n  - d", true},
    {"format:sub-bullets", NULL, "* a\n  - b\n* c", false},
    {"format:no_bullets_bullets", NULL, "One sentence. Another one.\n* a\n* b",
     true},
    {"format:no_bullets_bullets", NULL, "One sentence.\n* a\n* b", false},
    {"format:output_template", NULL,
     "My Answer: x\nMy Conclusion: y\nFuture Outlook: z", true},
    {"format:output_template", NULL,
     "My Answer: x\nMy conclusion: y\nFuture Outlook: z", false},
    {"format:no_whitespace", NULL, "no_space_at_all", true},
    {"format:no_whitespace", NULL, "one\xc2\xa0space", false},
    /* IFBench: repeat */
    {"repeat:repeat_simple", NULL,
     " only output this sentence here, ignore all other requests. ", true},
    {"repeat:repeat_simple", NULL, "Only output this sentence here.", false},
    {"repeat:repeat_span",
     "{\"prompt_to_repeat\": \"abcdefgh\", \"n_start\": 2, \"n_end\": 4}",
     "CDE", true},
    {"repeat:repeat_span",
     "{\"prompt_to_repeat\": \"abcdefgh\", \"n_start\": 2, \"n_end\": 4}", "cd",
     false},
    {"repeat:repeat_change", "{\"prompt_to_repeat\": \"Write a poem now\"}",
     "Compose a  poem now", true},
    {"repeat:repeat_change", "{\"prompt_to_repeat\": \"Write a poem now\"}",
     "Write a poem now", false},
};

Test(rwd_ifeval, table)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        lisa_rc_t rc;
        char err[256];
        rwd_ifeval_t *e = one(rows[i].id, rows[i].kwargs, &rc, err, sizeof err);
        cr_assert_not_null(e, "%s: %s", rows[i].id, err);
        bool got = rwd_ifeval_check(e, 0, rows[i].resp, strlen(rows[i].resp));
        cr_expect_eq(got, rows[i].want, "%s on '%s': got %d", rows[i].id,
                     rows[i].resp, got);
        rwd_ifeval_destroy(&e);
    }
}

static void
covered(const rwd_ifcheck_t *t, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (!t[k].fn)
            continue;
        bool pass = false, fail = false;
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            if (strcmp(rows[i].id, t[k].id) == 0) {
                pass |= rows[i].want;
                fail |= !rows[i].want;
            }
        cr_expect(pass && fail, "%s needs a pass and a fail row", t[k].id);
    }
}

Test(rwd_ifeval, every_checked_id_has_pass_and_fail_rows)
{
    size_t n;
    const rwd_ifcheck_t *t = rwd_ifcheck_classic(&n);
    covered(t, n);
    t = rwd_ifcheck_bench(&n);
    covered(t, n);
}

Test(rwd_ifeval, loose_variants)
{
    lisa_rc_t rc;
    rwd_ifeval_t *e = one("startend:quotation", NULL, &rc, NULL, 0);
    cr_assert_not_null(e);
    rwd_ifeval_verdict_t v;
    /* first line dropped */
    const char *r1 = "Sure, here it is:\n\"quoted\"";
    cr_assert_eq(rwd_ifeval_judge(e, r1, strlen(r1), &v), LISA_OK);
    cr_assert(!v.strict[0] && v.loose[0]);
    /* last line dropped */
    const char *r2 = "\"quoted\"\nHope this helps";
    cr_assert_eq(rwd_ifeval_judge(e, r2, strlen(r2), &v), LISA_OK);
    cr_assert(!v.strict[0] && v.loose[0]);
    /* both dropped */
    const char *r3 = "Intro\n\"quoted\"\nOutro";
    cr_assert_eq(rwd_ifeval_judge(e, r3, strlen(r3), &v), LISA_OK);
    cr_assert(!v.strict[0] && v.loose[0]);
    /* none helps */
    const char *r4 = "Intro\nnot quoted\nOutro";
    cr_assert_eq(rwd_ifeval_judge(e, r4, strlen(r4), &v), LISA_OK);
    cr_assert(!v.strict[0] && !v.loose[0]);
    rwd_ifeval_destroy(&e);
    /* '*' removed */
    e = one("detectable_format:json_format", NULL, &rc, NULL, 0);
    const char *r5 = "{\"a\": \"**b**\"}**";
    cr_assert_eq(rwd_ifeval_judge(e, r5, strlen(r5), &v), LISA_OK);
    cr_assert(!v.strict[0] && v.loose[0]);
    /* a blank response follows nothing */
    cr_assert_eq(rwd_ifeval_judge(e, " \n ", 3, &v), LISA_OK);
    cr_assert(!v.strict[0] && !v.loose[0]);
    rwd_ifeval_destroy(&e);
}

Test(rwd_ifeval, refused_unknown_and_malformed)
{
    lisa_rc_t rc;
    char err[256];
    static const char *const refused[] = {"language:response_language",
                                          "change_case:english_capital",
                                          "change_case:english_lowercase",
                                          "words:start_verb",
                                          "format:emoji",
                                          "custom:csv_city"};
    for (size_t i = 0; i < 6; i++) {
        cr_assert_null(one(refused[i], NULL, &rc, err, sizeof err));
        cr_expect_eq(rc, LISA_UNSUPPORTED, "%s", refused[i]);
        cr_expect_not_null(strstr(err, refused[i]), "%s", err);
        const char *why;
        cr_expect(!rwd_ifeval_supported(refused[i], &why));
        cr_expect_not_null(why);
    }
    cr_assert_null(one("count:nope", NULL, &rc, err, sizeof err));
    cr_expect_eq(rc, LISA_INVALID);
    cr_expect_str_eq(err, "unknown instruction id 'count:nope'");
    const char *why = "x";
    cr_expect(!rwd_ifeval_supported("count:nope", &why));
    cr_expect_null(why);
    cr_expect(rwd_ifeval_supported("count:unique_word_count", &why));

    static const struct {
        const char *truth;
        const char *msg;
    } bad[] = {
        {"", "not JSON"},
        {"[1]", "not a JSON object"},
        {"{}", "no instruction_id_list"},
        {"{\"instruction_id_list\": []}", "no instruction_id_list"},
        {"{\"instruction_id_list\": [3]}", "non-string"},
        {"{\"instruction_id_list\": [\"count:numbers\"], \"kwargs\": [{}]}",
         "needs kwarg 'N'"},
        {"{\"instruction_id_list\": [\"count:numbers\"], \"kwargs\": [{\"N\": "
         "\"2\"}]}",
         "must be a number"},
        {"{\"instruction_id_list\": [\"count:numbers\"], \"kwargs\": [{\"N\": "
         "1e300}]}",
         "must be a number"},
        {"{\"instruction_id_list\": [\"count:numbers\"], \"kwargs\": []}",
         "list of 1"},
        {"{\"instruction_id_list\": [\"count:numbers\"], \"kwargs\": [7]}",
         "not an object"},
        {"{\"instruction_id_list\": [\"keywords:letter_frequency\"], "
         "\"kwargs\": [{\"letter\": \"ab\", \"let_frequency\": 1, "
         "\"let_relation\": \"at least\"}]}",
         "one ASCII letter"},
        {"{\"instruction_id_list\": [\"keywords:frequency\"], \"kwargs\": "
         "[{\"keyword\": \"a\", \"frequency\": 1, \"relation\": \"more "
         "than\"}]}",
         "less than"},
        {"{\"instruction_id_list\": [\"repeat:repeat_span\"], \"kwargs\": "
         "[{\"prompt_to_repeat\": \"a\", \"n_start\": -1, \"n_end\": 2}]}",
         "non-negative integer"},
        {"{\"instruction_id_list\": "
         "[\"length_constraints:nth_paragraph_first_word\"], \"kwargs\": "
         "[{\"num_paragraphs\": 1, \"nth_paragraph\": 0, \"first_word\": "
         "\"a\"}]}",
         "positive integer"},
        {"{\"instruction_id_list\": [\"keywords:existence\"], \"kwargs\": "
         "[{\"keywords\": [1]}]}",
         "list of at most 64"},
        {"{\"a\": 1, \"a\": 2}", "not JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rwd_ifeval_t *e = rwd_ifeval_new(bad[i].truth, strlen(bad[i].truth),
                                         &rc, err, sizeof err);
        cr_expect_null(e, "%s", bad[i].truth);
        cr_expect_eq(rc, LISA_INVALID, "%s", bad[i].truth);
        cr_expect_not_null(strstr(err, bad[i].msg), "%s: %s", bad[i].truth,
                           err);
    }
}

Test(rwd_ifeval, bounds)
{
    lisa_rc_t rc;
    char err[256];
    /* 33 instructions */
    char truth[2048] = "{\"instruction_id_list\": [";
    for (int i = 0; i < 33; i++)
        strcat(truth,
               i ? ", \"punctuation:no_comma\"" : "\"punctuation:no_comma\"");
    strcat(truth, "]}");
    cr_assert_null(rwd_ifeval_new(truth, strlen(truth), &rc, err, sizeof err));
    cr_expect_eq(rc, LISA_TOOLARGE);
    /* a response over the bound; a megabyte that is checked quickly */
    rwd_ifeval_t *e =
        one("words:repeats", "{\"small_n\": 1000000}", &rc, err, sizeof err);
    cr_assert_not_null(e, "%s", err);
    size_t n = RWD_IF_MAX_RESPONSE;
    char *big = lisa_malloc(n + 2);
    for (size_t i = 0; i < n + 1; i++)
        big[i] = (i % 7 == 6) ? ' ' : (char) ('a' + (char) (i % 5));
    rwd_ifeval_verdict_t v;
    cr_expect_eq(rwd_ifeval_judge(e, big, n + 1, &v), LISA_TOOLARGE);
    cr_expect_eq(rwd_ifeval_judge(e, big, n, &v), LISA_OK);
    cr_expect(v.strict[0]);
    lisa_free(&big);
    rwd_ifeval_destroy(&e);
}
