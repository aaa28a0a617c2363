/*
 * rwd_porter: Porter stemmer (NLTK_EXTENSIONS variant). See rwd_porter.h.
 *
 * Each step is a list of (suffix, replacement, condition) rules tried in
 * order; the first rule whose suffix matches decides, and when its
 * condition fails the word is left as it is (that "first match stops"
 * behaviour matters: "tional" shadows later rules for "...tional").
 */
#include "rwd_porter.h"

#include "lisa/lisa_str.h"

#include <stdbool.h>
#include <string.h>

typedef enum {
    C_NONE,  /* unconditional */
    C_M_GT0, /* measure(stem) > 0 */
    C_M_GT1, /* measure(stem) > 1 */
    C_ION,   /* measure(stem) > 1 and stem ends in s or t */
    C_LOGI,  /* measure(word minus "ogi") > 0 */
} s_cond_t;

typedef struct {
    const char *suffix;
    const char *repl;
    s_cond_t cond;
} s_rule_t;

static bool
s_vowel(char c)
{
    return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u';
}

/* Consonant test of position i (y after a consonant is a vowel). */
static bool
s_cons(const char *w, size_t i)
{
    /* Walk back over a run of y's: y at 0 is a consonant, y after a
     * consonant is a vowel, y after a vowel is a consonant. */
    if (s_vowel(w[i]))
        return false;
    if (w[i] != 'y')
        return true;
    size_t j = i;
    while (j > 0 && w[j - 1] == 'y')
        j--;
    /* w[j..i] are y's; w[j] is a consonant iff j == 0 or w[j-1] is a vowel. */
    bool c = j == 0 ? true : !s_cons(w, j - 1);
    for (size_t k = j + 1; k <= i; k++)
        c = !c;
    return c;
}

/* Number of VC sequences in w[0..n). */
static size_t
s_measure(const char *w, size_t n)
{
    size_t m = 0;
    bool prev_vowel = false, prev_cons = false;
    for (size_t i = 0; i < n; i++) {
        bool c;
        if (s_vowel(w[i]))
            c = false;
        else if (w[i] != 'y')
            c = true;
        else
            c = i == 0 ? true : !prev_cons;
        if (c && prev_vowel)
            m++;
        prev_vowel = !c;
        prev_cons = c;
    }
    return m;
}

static bool
s_has_vowel(const char *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!s_cons(w, i))
            return true;
    return false;
}

static bool
s_double_cons(const char *w, size_t n)
{
    return n >= 2 && w[n - 1] == w[n - 2] && s_cons(w, n - 1);
}

static bool
s_cvc(const char *w, size_t n)
{
    if (n >= 3 && s_cons(w, n - 3) && !s_cons(w, n - 2) && s_cons(w, n - 1) &&
        w[n - 1] != 'w' && w[n - 1] != 'x' && w[n - 1] != 'y')
        return true;
    return n == 2 && !s_cons(w, 0) && s_cons(w, 1);
}

static size_t
s_replace(char *w, size_t n, const char *suf, const char *repl)
{
    size_t l = strlen(suf), r = strlen(repl);
    memcpy(w + n - l, repl, r);
    return n - l + r;
}

static bool
s_cond(s_cond_t c, const char *w, size_t n, size_t stem_len)
{
    switch (c) {
    case C_NONE:
        return true;
    case C_M_GT0:
        return s_measure(w, stem_len) > 0;
    case C_M_GT1:
        return s_measure(w, stem_len) > 1;
    case C_ION:
        return s_measure(w, stem_len) > 1 && stem_len > 0 &&
               (w[stem_len - 1] == 's' || w[stem_len - 1] == 't');
    case C_LOGI:
        return n >= 3 && s_measure(w, n - 3) > 0;
    }
    return false;
}

static size_t
s_rules(char *w, size_t n, const s_rule_t *rules, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (!lisa_str_ends(w, n, rules[i].suffix))
            continue;
        size_t stem = n - strlen(rules[i].suffix);
        if (s_cond(rules[i].cond, w, n, stem))
            return s_replace(w, n, rules[i].suffix, rules[i].repl);
        return n;
    }
    return n;
}

#define S_RULES(w, n, r) s_rules((w), (n), (r), sizeof(r) / sizeof((r)[0]))

static size_t
s_step1a(char *w, size_t n)
{
    static const s_rule_t r[] = {{"sses", "ss", C_NONE},
                                 {"ies", "i", C_NONE},
                                 {"ss", "ss", C_NONE},
                                 {"s", "", C_NONE}};
    if (n == 4 && lisa_str_ends(w, n, "ies"))
        return s_replace(w, n, "ies", "ie");
    return S_RULES(w, n, r);
}

static size_t
s_step1b(char *w, size_t n)
{
    if (lisa_str_ends(w, n, "ied"))
        return s_replace(w, n, "ied", n == 4 ? "ie" : "i");
    if (lisa_str_ends(w, n, "eed"))
        return s_measure(w, n - 3) > 0 ? n - 1 : n;
    size_t stem;
    if (lisa_str_ends(w, n, "ed") && s_has_vowel(w, n - 2))
        stem = n - 2;
    else if (lisa_str_ends(w, n, "ing") && s_has_vowel(w, n - 3))
        stem = n - 3;
    else
        return n;
    n = stem;
    if (lisa_str_ends(w, n, "at") || lisa_str_ends(w, n, "bl") ||
        lisa_str_ends(w, n, "iz")) {
        w[n] = 'e';
        return n + 1;
    }
    if (s_double_cons(w, n)) {
        char last = w[n - 1];
        return (last != 'l' && last != 's' && last != 'z') ? n - 1 : n;
    }
    if (s_measure(w, n) == 1 && s_cvc(w, n)) {
        w[n] = 'e';
        return n + 1;
    }
    return n;
}

static size_t
s_step1c(char *w, size_t n)
{
    if (n >= 1 && w[n - 1] == 'y' && n - 1 > 1 && s_cons(w, n - 2))
        w[n - 1] = 'i';
    return n;
}

static size_t
s_step2(char *w, size_t n)
{
    static const s_rule_t r[] = {
        {"ational", "ate", C_M_GT0}, {"tional", "tion", C_M_GT0},
        {"enci", "ence", C_M_GT0},   {"anci", "ance", C_M_GT0},
        {"izer", "ize", C_M_GT0},    {"bli", "ble", C_M_GT0},
        {"alli", "al", C_M_GT0},     {"entli", "ent", C_M_GT0},
        {"eli", "e", C_M_GT0},       {"ousli", "ous", C_M_GT0},
        {"ization", "ize", C_M_GT0}, {"ation", "ate", C_M_GT0},
        {"ator", "ate", C_M_GT0},    {"alism", "al", C_M_GT0},
        {"iveness", "ive", C_M_GT0}, {"fulness", "ful", C_M_GT0},
        {"ousness", "ous", C_M_GT0}, {"aliti", "al", C_M_GT0},
        {"iviti", "ive", C_M_GT0},   {"biliti", "ble", C_M_GT0},
        {"fulli", "ful", C_M_GT0},   {"logi", "log", C_LOGI}};
    /* "alli" -> "al" then Step 2 again; terminates: the word shrinks. */
    while (lisa_str_ends(w, n, "alli") && s_measure(w, n - 4) > 0)
        n = s_replace(w, n, "alli", "al");
    return S_RULES(w, n, r);
}

static size_t
s_step3(char *w, size_t n)
{
    static const s_rule_t r[] = {
        {"icate", "ic", C_M_GT0}, {"ative", "", C_M_GT0},
        {"alize", "al", C_M_GT0}, {"iciti", "ic", C_M_GT0},
        {"ical", "ic", C_M_GT0},  {"ful", "", C_M_GT0},
        {"ness", "", C_M_GT0}};
    return S_RULES(w, n, r);
}

static size_t
s_step4(char *w, size_t n)
{
    static const s_rule_t r[] = {
        {"al", "", C_M_GT1},   {"ance", "", C_M_GT1}, {"ence", "", C_M_GT1},
        {"er", "", C_M_GT1},   {"ic", "", C_M_GT1},   {"able", "", C_M_GT1},
        {"ible", "", C_M_GT1}, {"ant", "", C_M_GT1},  {"ement", "", C_M_GT1},
        {"ment", "", C_M_GT1}, {"ent", "", C_M_GT1},  {"ion", "", C_ION},
        {"ou", "", C_M_GT1},   {"ism", "", C_M_GT1},  {"ate", "", C_M_GT1},
        {"iti", "", C_M_GT1},  {"ous", "", C_M_GT1},  {"ive", "", C_M_GT1},
        {"ize", "", C_M_GT1}};
    return S_RULES(w, n, r);
}

static size_t
s_step5(char *w, size_t n)
{
    if (n >= 1 && w[n - 1] == 'e') {
        size_t m = s_measure(w, n - 1);
        if (m > 1 || (m == 1 && !s_cvc(w, n - 1)))
            n--;
    }
    if (lisa_str_ends(w, n, "ll") && s_measure(w, n - 1) > 1)
        n--;
    return n;
}

/* NLTK's irregular forms: word -> stem. */
static const char *const s_pool[][2] = {
    {"skies", "sky"},      {"sky", "sky"},          {"dying", "die"},
    {"lying", "lie"},      {"tying", "tie"},        {"news", "news"},
    {"innings", "inning"}, {"inning", "inning"},    {"outings", "outing"},
    {"outing", "outing"},  {"cannings", "canning"}, {"canning", "canning"},
    {"howe", "howe"},      {"proceed", "proceed"},  {"exceed", "exceed"},
    {"succeed", "succeed"}};

size_t
rwd_porter_stem(char *w, size_t n)
{
    for (size_t i = 0; i < sizeof s_pool / sizeof s_pool[0]; i++) {
        if (strlen(s_pool[i][0]) == n && memcmp(w, s_pool[i][0], n) == 0) {
            size_t l = strlen(s_pool[i][1]);
            memcpy(w, s_pool[i][1], l);
            return l;
        }
    }
    if (n <= 2)
        return n;
    n = s_step1a(w, n);
    n = s_step1b(w, n);
    n = s_step1c(w, n);
    n = s_step2(w, n);
    n = s_step3(w, n);
    n = s_step4(w, n);
    n = s_step5(w, n);
    return n;
}
