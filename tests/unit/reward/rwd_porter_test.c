/*
 * rwd_porter: reference vectors of NLTK's PorterStemmer (NLTK_EXTENSIONS
 * mode, as rouge-score uses it): the examples of Porter's paper per step,
 * NLTK's irregular forms and its extra rules. The pytest oracle compares
 * thousands more words against NLTK itself.
 */
#include "rwd_porter.h"

#include <criterion/criterion.h>
#include <string.h>

static void
check(const char *word, const char *want)
{
    char buf[128];
    size_t n = strlen(word);
    memcpy(buf, word, n);
    n = rwd_porter_stem(buf, n);
    buf[n] = '\0';
    cr_expect_str_eq(buf, want, "stem(%s)", word);
}

Test(rwd_porter, usage)
{
    char w[16] = "running";
    size_t n = rwd_porter_stem(w, strlen(w));
    cr_assert_eq(n, 3);
    cr_assert_eq(strncmp(w, "run", n), 0);
}

static const char *const vec[][2] = {
    {"caresses", "caress"},
    {"ponies", "poni"},
    {"ties", "tie"},
    {"caress", "caress"},
    {"cats", "cat"},
    {"feed", "feed"},
    {"agreed", "agre"},
    {"plastered", "plaster"},
    {"bled", "bled"},
    {"motoring", "motor"},
    {"sing", "sing"},
    {"conflated", "conflat"},
    {"troubled", "troubl"},
    {"sized", "size"},
    {"hopping", "hop"},
    {"tanned", "tan"},
    {"falling", "fall"},
    {"hissing", "hiss"},
    {"fizzed", "fizz"},
    {"failing", "fail"},
    {"filing", "file"},
    {"happy", "happi"},
    {"sky", "sky"},
    {"relational", "relat"},
    {"conditional", "condit"},
    {"rational", "ration"},
    {"valenci", "valenc"},
    {"hesitanci", "hesit"},
    {"digitizer", "digit"},
    {"conformabli", "conform"},
    {"radicalli", "radic"},
    {"differentli", "differ"},
    {"vileli", "vile"},
    {"analogousli", "analog"},
    {"vietnamization", "vietnam"},
    {"predication", "predic"},
    {"operator", "oper"},
    {"feudalism", "feudal"},
    {"decisiveness", "decis"},
    {"hopefulness", "hope"},
    {"callousness", "callous"},
    {"formaliti", "formal"},
    {"sensitiviti", "sensit"},
    {"sensibiliti", "sensibl"},
    {"triplicate", "triplic"},
    {"formative", "form"},
    {"formalize", "formal"},
    {"electriciti", "electr"},
    {"electrical", "electr"},
    {"hopeful", "hope"},
    {"goodness", "good"},
    {"revival", "reviv"},
    {"allowance", "allow"},
    {"inference", "infer"},
    {"airliner", "airlin"},
    {"gyroscopic", "gyroscop"},
    {"adjustable", "adjust"},
    {"defensible", "defens"},
    {"irritant", "irrit"},
    {"replacement", "replac"},
    {"adjustment", "adjust"},
    {"dependent", "depend"},
    {"adoption", "adopt"},
    {"homologou", "homolog"},
    {"communism", "commun"},
    {"activate", "activ"},
    {"angulariti", "angular"},
    {"homologous", "homolog"},
    {"effective", "effect"},
    {"bowdlerize", "bowdler"},
    {"probate", "probat"},
    {"rate", "rate"},
    {"cease", "ceas"},
    {"controll", "control"},
    {"roll", "roll"},
    {"generalizations", "gener"},
    {"dying", "die"},
    {"lying", "lie"},
    {"tying", "tie"},
    {"news", "news"},
    {"innings", "inning"},
    {"outings", "outing"},
    {"skies", "sky"},
    {"spied", "spi"},
    {"tied", "tie"},
    {"dies", "die"},
    {"enjoy", "enjoy"},
    {"enjoyment", "enjoy"},
    {"fly", "fli"},
    {"flies", "fli"},
    {"1990s", "1990"},
    {"agreement", "agreement"},
    {"university", "univers"},
    {"running", "run"},
    {"a", "a"},
    {"is", "is"},
    {"yy", "yy"},
    {"syzygy", "syzygi"},
};

Test(rwd_porter, nltk_vectors)
{
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++)
        check(vec[i][0], vec[i][1]);
}

Test(rwd_porter, long_word_linear, .timeout = 10)
{
    static char w[1 << 16];
    for (size_t i = 0; i < sizeof w - 2; i++)
        w[i] = "ational"[i % 7];
    size_t n = rwd_porter_stem(w, sizeof w - 2);
    cr_assert_leq(n, sizeof w);
}
