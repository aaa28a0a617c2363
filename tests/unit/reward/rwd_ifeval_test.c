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

/* Answers to IFBench's one-off tasks. */
#define CSV_ROW "9,a,b,2,3\n"
#define CSV14(field)                                                           \
    "ProductID,Category,Brand,Price,Stock\n1,a,b,2" field                      \
    "\n" CSV_ROW CSV_ROW CSV_ROW CSV_ROW CSV_ROW CSV_ROW CSV_ROW CSV_ROW       \
        CSV_ROW CSV_ROW CSV_ROW CSV_ROW CSV_ROW
#define ALPHABET_STORY(last)                                                   \
    "Apples fall. Bears roam. Cats nap. Dogs bark. Eels swim. Foxes run. "     \
    "Geese fly. Hens peck. Ibis wade. Jays sing. Koalas climb. Lions roar. "   \
    "Mice hide. Newts crawl. Owls hoot. Pigs eat. Quails sit. Rats dig. "      \
    "Seals dive. Toads hop. Urchins wait. Voles run. Wolves howl. X-rays "     \
    "glow. Yaks graze. " last
#define MCQ_OPTS "A) a\nB) b\nC) c\nD) d\n"
#define MCQ(last)                                                              \
    "Question 1: Why?\n" MCQ_OPTS "E) e\n\nQuestion 2: Why so?\n" MCQ_OPTS     \
    "E) e\nQuestion 3. Why so now?\n" MCQ_OPTS                                 \
    "E) e\nQuestion 4) Why so now then?\n" MCQ_OPTS last
#define AFRICA(first_two)                                                      \
    first_two                                                                  \
        "\nUganda\nTunisia\nTogo\nTanzania\nSudan\nSouth Sudan\nSouth "        \
        "Africa\nSomalia\nSierra Leone\nSeychelles\nSenegal\nS\xc3\xa3o "      \
        "Tom\xc3\xa9 and Pr\xc3\xadncipe\nRwanda\nNigeria\nNiger\nNamibia\n"   \
        "Mozambique\nMorocco\nMauritius\nMauritania\nMali\nMalawi\n"           \
        "Madagascar\nLibya\nLiberia\nLesotho\nKenya\nGuinea-Bissau\nGuinea\n"  \
        "Ghana\nGambia\nGabon\nEthiopia\nEswatini\nEritrea\nEquatorial "       \
        "Guinea\nEgypt\nDjibouti\nDemocratic Republic of the Congo\nCote "     \
        "d'Ivoire\nComoros\nChad\nCentral African Republic\nCameroon\nCabo "   \
        "Verde\nBurundi\nBurkina Faso\nBotswana\nBenin\nAngola\nAlgeria."

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
    /* Punkt's rules: after an abbreviation or an ellipsis only a common
     * capitalized word starts a sentence; initials and names do not */
    {"length_constraints:number_sentences",
     "{\"num_sentences\": 2, \"relation\": " AL "}",
     "Fruit, nuts, etc. The rest stayed.", true},
    {"length_constraints:number_sentences",
     "{\"num_sentences\": 3, \"relation\": " AL "}",
     "Wait... what now? Nothing.", false},
    {"length_constraints:number_sentences",
     "{\"num_sentences\": 2, \"relation\": " LT "}",
     "J. K. Rowling met Dr. Watson in 1999. at noon.", true},
    {"length_constraints:number_sentences",
     "{\"num_sentences\": 2, \"relation\": " AL "}",
     "It was 1999. Then it ended.", true},
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
    /* IFBench: counts over words and names */
    {"count:conjunctions", "{\"small_n\": 3}",
     "I came and saw, but left; so it goes.", true},
    /* "and" and "And," are two different words to the reference */
    {"count:conjunctions", "{\"small_n\": 2}", "and And, andy", true},
    {"count:conjunctions", "{\"small_n\": 3}",
     "Bread and butter and jam, or not.", false},
    {"count:person_names", "{\"N\": 2}", "Emma met Liam; Emma left.", true},
    {"count:person_names", "{\"N\": 2}", "Emmanuel met liam and Emma.", false},
    {"count:pronouns", "{\"N\": 4}", "It's hers/his, and they know it.", true},
    {"count:pronouns", "{\"N\": 4}", "The cat sat on its mat.", false},
    {"count:words_japanese", "{\"N\": 2}", "I 猫 like 犬, 2 すし", true},
    {"count:words_japanese", "{\"N\": 2}", "I 猫 like dogs", false},
    /* IFBench: ratios */
    {"ratio:stop_words", "{\"percentage\": 50}", "The cat and the dog run fast",
     true},
    {"ratio:stop_words", "{\"percentage\": 40}", "The cat and the dog run fast",
     false},
    {"ratio:sentence_type", NULL, "It rains. It pours. Why?", true},
    {"ratio:sentence_type", NULL, "It rains. Why? How?", false},
    {"ratio:sentence_balance", NULL, "Go home. Why? Wow!", true},
    {"ratio:sentence_balance", NULL, "Go home. Why? Wow! Yes.", false},
    {"ratio:overlap", "{\"reference_text\": \"abcdef\", \"percentage\": 50}",
     "abcdxy", true},
    {"ratio:overlap", "{\"reference_text\": \"abcdef\", \"percentage\": 50}",
     "abcdef", false},
    {"ratio:sentence_words", NULL, "Cats nap. Dogs run. Owls fly.", true},
    {"ratio:sentence_words", NULL, "Cats nap. Dogs run. Owls fly!!", false},
    /* IFBench: words */
    {"words:start_verb", NULL, "Imagine a world without rain.", true},
    {"words:start_verb", NULL, "Running helps.", true},
    {"words:start_verb", NULL, "Whirring fans hum.", true},
    {"words:start_verb", NULL, "Something happened.", false},
    {"words:start_verb", NULL, "The world without rain.", false},
    {"words:odd_even_syllables", NULL, "cat apple dog table", true},
    {"words:odd_even_syllables", NULL, "cat dog apple", false},
    {"words:last_first", NULL, "I like tea. Tea is warm! Warm days.", true},
    {"words:last_first", NULL, "I like tea. Coffee is warm.", false},
    {"words:keywords_specific_position",
     "{\"keyword\": \"blue\", \"n\": 2, \"m\": 3}",
     "Hi there. The sky's blue today.", false},
    {"words:keywords_specific_position",
     "{\"keyword\": \"blue\", \"n\": 2, \"m\": 4}",
     "Hi there. The sky's BLUE today.", true},
    {"words:words_position", "{\"keyword\": \"red\"}",
     "A red fox saw a red hen.", true},
    {"words:words_position", "{\"keyword\": \"red\"}", "A red fox saw red.",
     false},
    {"words:words_position", "{\"keyword\": \"red\"}", "A red fox is red hen",
     true},
    {"words:words_position", "{\"keyword\": \"red\"}", "A blue fox is red hen",
     false},
    /* IFBench: sentences */
    {"sentence:alliteration_increment", NULL,
     "Big dogs. Silly snakes slide. Tiny tan toads trot.", true},
    {"sentence:alliteration_increment", NULL,
     "Silly snakes slide. Big dogs bark.", false},
    {"sentence:increment", "{\"small_n\": 2}", "Go now. I will go now.", true},
    {"sentence:increment", "{\"small_n\": 2}", "Go now. I will go.", false},
    {"sentence:keyword", "{\"word\": \"apple\", \"N\": 2}",
     "I eat. An Apple, please.", true},
    {"sentence:keyword", "{\"word\": \"apple\", \"N\": 2}",
     "I eat apple. Pineapples, please.", false},
    /* IFBench: format */
    {"format:emoji", NULL, "I love it \xf0\x9f\x98\x80. So fun \xe2\x9c\xa8!",
     true},
    {"format:emoji", NULL, "I love it. \xf0\x9f\x98\x80 So fun.", false},
    {"format:title_case", NULL, "The Best Way To Learn C, By Example.", true},
    {"format:title_case", NULL, "The Best Way to Learn C", false},
    /* IFBench: one-off tasks */
    {"custom:multiples", NULL, "14, 21, 28, 35, 42, 49", true},
    {"custom:multiples", NULL, "7, 14, 21, 28, 35, 42, 49", false},
    {"custom:character_reverse", NULL, "ELGAE DLAB EHT", true},
    {"custom:character_reverse", NULL, "the bald eagle", false},
    {"custom:word_reverse", NULL, "Eagle bald the is it.", true},
    {"custom:word_reverse", NULL, "It is the bald eagle.", false},
    {"custom:european_capitals_sort", NULL,
     "Reykjavík, Helsinki, Oslo, Tallinn, Stockholm, Riga, Moscow, "
     "Copenhagen, Vilnius, Minsk, Dublin, Berlin, Amsterdam, Warsaw, London, "
     "Brussels, Prague, Luxembourg, Paris, Vienna, Bratislava, Budapest, "
     "Vaduz, Chișinău, Bern, Ljubljana, Zagreb",
     true},
    {"custom:european_capitals_sort", NULL,
     "Helsinki, Reykjavik, Oslo, Tallinn, Stockholm, Riga, Moscow, "
     "Copenhagen, Vilnius, Minsk, Dublin, Berlin, Amsterdam, Warsaw, London, "
     "Brussels, Prague, Luxembourg, Paris, Vienna, Bratislava, Budapest, "
     "Vaduz, Chisinau, Bern, Ljubljana, Zagreb",
     false},
    {"custom:date_format_list", NULL, "1796-04-12, 1805-12-02,1815-06-18",
     true},
    {"custom:date_format_list", NULL, "1796-04-12, 1805-11-31", false},
    {"custom:csv_city", NULL,
     "ID,Country,City,Year,Count\n1,France,Paris,2020,3\n2,Spain,\"Madrid, "
     "ES\",2021,4\n3,a,b,c,d\n4,a,b,c,d\n5,a,b,c,d\n6,a,b,c,d\n7,a,b,c,d\n",
     true},
    {"custom:csv_city", NULL,
     "ID,Country,City,Year,Count\n1,France,Paris,2020,3\n2,Spain,Madrid, "
     "ES,2021,4\n3,a,b,c,d\n4,a,b,c,d\n5,a,b,c,d\n6,a,b,c,d\n7,a,b,c,d\n",
     false},
    {"custom:csv_special_character", NULL, CSV14(",\"A&B\""), true},
    {"custom:csv_special_character", NULL, CSV14(",\"AB\""), false},
    {"custom:csv_quotes", NULL,
     "\"StudentID\"\t\"Subject\"\t\"Grade\"\t\"Semester\"\t\"Score\"\n"
     "\"1\"\t\"Math\"\t\"A\"\t\"Fall\"\t\"90\"\n"
     "\"2\"\t\"Art\"\t\"B\"\t\"Fall\"\t\"80\"\n"
     "\"3\"\t\"Music\"\t\"C\"\t\"Spring\"\t\"70\"",
     true},
    {"custom:csv_quotes", NULL,
     "\"StudentID\"\t\"Subject\"\t\"Grade\"\t\"Semester\"\t\"Score\"\n"
     "\"1\"\t\"Math\"\t\"A\"\t\"Fall\"\t90\n"
     "\"2\"\t\"Art\"\t\"B\"\t\"Fall\"\t\"80\"\n"
     "\"3\"\t\"Music\"\t\"C\"\t\"Spring\"\t\"70\"",
     false},
    {"custom:sentence_alphabet", NULL, ALPHABET_STORY("Zebras sleep."), true},
    {"custom:sentence_alphabet", NULL, ALPHABET_STORY("Cats sleep."), false},
    {"custom:mcq_count_length", NULL, MCQ("E) five"), true},
    {"custom:mcq_count_length", NULL, MCQ("Extra line"), false},
    {"custom:reverse_newline", NULL,
     "Here:\n" AFRICA("Zimbabwe\nUganda\nZambia"), false},
    {"custom:reverse_newline", NULL, "Here:\n" AFRICA("Zimbabwe\nZambia"),
     true},
    /* IFEval: language */
    {"language:response_language", "{\"language\": \"de\"}",
     "Das Wetter ist heute sehr schön und wir gehen in den Park.", true},
    {"language:response_language", "{\"language\": \"de\"}",
     "The weather is very nice today and we are going to the park.", false},
    {"language:response_language", "{\"language\": \"ko\"}",
     "오늘 날씨가 정말 좋습니다.", true},
    {"change_case:english_capital", NULL, "THIS IS ALL IN ENGLISH, SHOUTED.",
     true},
    {"change_case:english_capital", NULL, "THIS IS Not ALL CAPITALS.", false},
    /* langdetect, seeing only the initials of capital words, may call
     * this English; lisa reads the words (docs/reward.md) */
    {"change_case:english_capital", NULL,
     "ESTO ESTÁ EN ESPAÑOL Y NO EN INGLÉS, PERO ES TODO MAYÚSCULAS.", false},
    {"change_case:english_lowercase", NULL, "this is all in english, quietly.",
     true},
    {"change_case:english_lowercase", NULL,
     "das ist deutsch und nicht englisch.", false},
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
        cr_expect(rwd_ifcheck_checked(&t[k]), "%s is refused", t[k].id);
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
    cr_expect_eq(n, 25, "IFEval's 25 ids");
    t = rwd_ifcheck_bench(&n);
    covered(t, n);
    size_t m;
    t = rwd_ifcheck_custom(&m);
    covered(t, m);
    cr_expect_eq(n + m, 58, "IFBench's 58 ids");
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
    /* ids that were refused before lisa had a tokenizer and a language
     * detector are checked now */
    static const char *const once_refused[] = {
        "language:response_language", "change_case:english_capital",
        "words:start_verb", "format:emoji", "custom:csv_city"};
    for (size_t i = 0; i < 5; i++) {
        const char *why = "x";
        cr_expect(rwd_ifeval_supported(once_refused[i], &why), "%s",
                  once_refused[i]);
        cr_expect_null(why);
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
