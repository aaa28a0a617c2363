/*
 * rwd_mc: multiple-choice letter extraction and scoring. See rwd_mc.h.
 *
 * Each extraction rule is a small scanner that returns the position of its
 * last match; rules are tried in the recipe's order (a table), the first
 * rule with a match decides. Keywords are matched ASCII case-insensitively.
 */
#include "rwd_mc.h"

#include "rwd_math.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>

static bool
s_upper(unsigned char c)
{
    return c >= 'A' && c <= 'Z';
}

static bool
s_word_char(unsigned char c)
{
    return isalnum(c) || c == '_' || c >= 0x80;
}

static bool
s_keyword_at(const char *s, size_t len, size_t i, const char *kw)
{
    size_t n = strlen(kw);
    if (i + n > len)
        return false;
    for (size_t k = 0; k < n; k++)
        if (tolower((unsigned char) s[i + k]) != kw[k])
            return false;
    return true;
}

static size_t
s_skip(const char *s, size_t len, size_t i, const char *chars)
{
    while (i < len && strchr(chars, s[i]) && s[i])
        i++;
    return i;
}

/* A capital letter at i that ends a token: not followed by a word char. */
static bool
s_letter_token(const char *s, size_t len, size_t i)
{
    return i < len && s_upper((unsigned char) s[i]) &&
           (i + 1 == len || !s_word_char((unsigned char) s[i + 1]));
}

/* "answer": "X" (the key may be quoted with ' or "). */
static char
s_rule_json(const char *s, size_t len)
{
    char found = 0;
    for (size_t i = 0; i + 6 < len; i++) {
        if ((s[i] != '"' && s[i] != '\'') ||
            !s_keyword_at(s, len, i + 1, "answer"))
            continue;
        size_t j = i + 7;
        if (j >= len || s[j] != s[i])
            continue;
        j = s_skip(s, len, j + 1, " \t");
        if (j >= len || s[j] != ':')
            continue;
        j = s_skip(s, len, j + 1, " \t");
        if (j + 2 < len + 0 && (s[j] == '"' || s[j] == '\'') &&
            s_upper((unsigned char) s[j + 1]) && s[j + 2] == s[j])
            found = s[j + 1];
    }
    return found;
}

/* Answer: X, **Answer:** (X), answer : X */
static char
s_rule_colon(const char *s, size_t len)
{
    char found = 0;
    for (size_t i = 0; i + 6 <= len; i++) {
        if (!s_keyword_at(s, len, i, "answer"))
            continue;
        if (i > 0 && isalpha((unsigned char) s[i - 1]))
            continue;
        size_t j = s_skip(s, len, i + 6, " \t*");
        if (j >= len || s[j] != ':')
            continue;
        j = s_skip(s, len, j + 1, " \t*($[{");
        if (s_letter_token(s, len, j))
            found = s[j];
    }
    return found;
}

/* "answer is X", "choice is (X)", "answer is: X" */
static char
s_rule_is(const char *s, size_t len)
{
    char found = 0;
    for (size_t i = 0; i + 6 <= len; i++) {
        size_t kw;
        if (s_keyword_at(s, len, i, "answer"))
            kw = 6;
        else if (s_keyword_at(s, len, i, "choice"))
            kw = 6;
        else
            continue;
        if (i > 0 && isalpha((unsigned char) s[i - 1]))
            continue;
        size_t j = s_skip(s, len, i + kw, " \t*");
        if (!s_keyword_at(s, len, j, "is") || j == i + kw)
            continue;
        j = s_skip(s, len, j + 2, " \t*:($[{");
        if (s_letter_token(s, len, j))
            found = s[j];
    }
    return found;
}

/* \boxed{X}, \boxed{\text{X}}, \boxed{(X)} */
static char
s_rule_boxed(const char *s, size_t len)
{
    size_t off, n;
    if (!rwd_math_last_boxed(s, len, &off, &n))
        return 0;
    const char *b = s + off;
    size_t i = s_skip(b, n, 0, " ");
    if (i + 5 < n && memcmp(b + i, "\\text", 5) == 0) {
        i += 5;
        while (i < n && isalpha((unsigned char) b[i]))
            i++;
        i = s_skip(b, n, i, " {");
    }
    i = s_skip(b, n, i, " (");
    if (i < n && s_upper((unsigned char) b[i]) &&
        (i + 1 == n || !s_word_char((unsigned char) b[i + 1])))
        return b[i];
    return 0;
}

/* Whether the capital at i stands alone: bounded by non-word characters
 * and not part of "N/A", "T-cell", "Q&A", "A's", "U.S.A." or a LaTeX
 * command, and not the pronoun "I" before a lowercase word. */
static bool
s_standalone(const char *s, size_t len, size_t i)
{
    unsigned char c = (unsigned char) s[i];
    if (!s_upper(c))
        return false;
    unsigned char p = i > 0 ? (unsigned char) s[i - 1] : ' ';
    unsigned char q = i + 1 < len ? (unsigned char) s[i + 1] : ' ';
    if (s_word_char(p) || s_word_char(q))
        return false;
    if (strchr("/-&'\\", p) || strchr("/-&'", q))
        return false;
    if (p == '.' && i >= 2 && isalpha((unsigned char) s[i - 2]))
        return false;
    if (q == '.' && i + 2 < len && isalpha((unsigned char) s[i + 2]))
        return false;
    if (c == 'I' && q == ' ' && i + 2 < len &&
        islower((unsigned char) s[i + 2]))
        return false;
    return true;
}

static char
s_rule_last_capital(const char *s, size_t len)
{
    for (size_t i = len; i-- > 0;)
        if (s_standalone(s, len, i))
            return s[i];
    return 0;
}

static char
s_rule_first_char(const char *s, size_t len)
{
    size_t i = s_skip(s, len, 0, " \t\r\n");
    if (i < len && isalpha((unsigned char) s[i]))
        return (char) toupper((unsigned char) s[i]);
    return 0;
}

typedef struct {
    const char *name;
    char (*fn)(const char *, size_t);
} s_rule_t;

/* The recipe's extraction order. */
static const s_rule_t s_rules[] = {
    {"json", s_rule_json},
    {"answer_colon", s_rule_colon},
    {"answer_is", s_rule_is},
    {"boxed", s_rule_boxed},
    {"last_capital", s_rule_last_capital},
    {"first_char", s_rule_first_char},
};

char
rwd_mc_extract(const char *s, size_t len, const char **rule)
{
    for (size_t k = 0; k < sizeof s_rules / sizeof s_rules[0]; k++) {
        char c = s_rules[k].fn(s, len);
        if (c) {
            if (rule)
                *rule = s_rules[k].name;
            return c;
        }
    }
    if (rule)
        *rule = "none";
    return 0;
}

static void
s_trim(const char **s, size_t *len)
{
    while (*len && isspace((unsigned char) **s)) {
        (*s)++;
        (*len)--;
    }
    while (*len && isspace((unsigned char) (*s)[*len - 1]))
        (*len)--;
}

/* The reference's letter: "B", "(B)", "B." -> 'B'; 0 if not a letter. */
static char
s_gt_letter(const char *g, size_t n)
{
    s_trim(&g, &n);
    if (n >= 3 && g[0] == '(' && g[n - 1] == ')') {
        g++;
        n -= 2;
    }
    if (n == 2 && (g[1] == '.' || g[1] == ')'))
        n = 1;
    if (n == 1 && isalpha((unsigned char) g[0]))
        return (char) toupper((unsigned char) g[0]);
    return 0;
}

double
rwd_mc_score(const char *answer, size_t alen, const char *gt, size_t glen,
             const char **rule, char *letter)
{
    const char *r = "none";
    char got = 0;
    double v = 0.0;
    const char *a = answer, *g = gt;
    s_trim(&a, &alen);
    s_trim(&g, &glen);
    if (alen == 0 || glen == 0)
        goto out;
    if (alen == glen) {
        size_t k = 0;
        while (k < alen &&
               tolower((unsigned char) a[k]) == tolower((unsigned char) g[k]))
            k++;
        if (k == alen) {
            r = "exact";
            got = s_gt_letter(a, alen);
            v = 1.0;
            goto out;
        }
    }
    got = rwd_mc_extract(a, alen, &r);
    char want = s_gt_letter(g, glen);
    v = got && want && got == want ? 1.0 : 0.0;
out:
    if (rule)
        *rule = r;
    if (letter)
        *letter = got;
    return v;
}

/* Capitals that stand alone in s[0..n), or a bare run like "ACD". */
static uint32_t
s_mask(const char *s, size_t n)
{
    s_trim(&s, &n);
    uint32_t m = 0;
    bool run = n > 0 && n <= 26;
    for (size_t i = 0; i < n && run; i++)
        run = s_upper((unsigned char) s[i]);
    if (run) {
        for (size_t i = 0; i < n; i++)
            m |= 1u << (s[i] - 'A');
        return m;
    }
    for (size_t i = 0; i < n; i++)
        if (s_standalone(s, n, i))
            m |= 1u << (s[i] - 'A');
    return m;
}

/* End of the line (or text) that starts at i. */
static size_t
s_eol(const char *s, size_t len, size_t i)
{
    while (i < len && s[i] != '\n')
        i++;
    return i;
}

uint32_t
rwd_mc_letters(const char *s, size_t len, const char **rule)
{
    const char *r = "whole";
    uint32_t m = 0;
    size_t off, n;
    /* Last "answer:" / "answer is" line, else the last \boxed{}, else the
     * whole text when short, else its last line. */
    size_t at = len;
    for (size_t i = 0; i + 6 <= len; i++) {
        if (!s_keyword_at(s, len, i, "answer") ||
            (i > 0 && isalpha((unsigned char) s[i - 1])))
            continue;
        size_t j = s_skip(s, len, i + 6, " \t*\"'");
        if (j < len && s[j] == ':')
            at = j + 1;
        else if (s_keyword_at(s, len, j, "is"))
            at = j + 2;
        else if (s_keyword_at(s, len, j, "s are"))
            at = j + 5;
    }
    if (at < len) {
        r = "answer_line";
        m = s_mask(s + at, s_eol(s, len, at) - at);
    }
    if (!m && rwd_math_last_boxed(s, len, &off, &n)) {
        r = "boxed";
        m = s_mask(s + off, n);
    }
    if (!m) {
        size_t start = 0;
        if (len > 64) {
            size_t e = len;
            while (e > 0 && isspace((unsigned char) s[e - 1]))
                e--;
            start = e;
            while (start > 0 && s[start - 1] != '\n')
                start--;
            r = "last_line";
            m = s_mask(s + start, e - start);
        } else {
            r = "whole";
            m = s_mask(s, len);
        }
    }
    if (rule)
        *rule = m ? r : "none";
    return m;
}

static unsigned
s_popcount(uint32_t x)
{
    unsigned c = 0;
    while (x) {
        x &= x - 1;
        c++;
    }
    return c;
}

double
rwd_mc_f1(const char *answer, size_t alen, const char *gt, size_t glen,
          const char **rule, uint32_t *pred, uint32_t *ref)
{
    uint32_t g = 0;
    for (size_t i = 0; i < glen; i++) {
        unsigned char c = (unsigned char) toupper((unsigned char) gt[i]);
        if (s_upper(c) && (i == 0 || !isalpha((unsigned char) gt[i - 1])) &&
            (i + 1 == glen || !isalpha((unsigned char) gt[i + 1])))
            g |= 1u << (c - 'A');
    }
    uint32_t p = rwd_mc_letters(answer, alen, rule);
    if (pred)
        *pred = p;
    if (ref)
        *ref = g;
    unsigned both = s_popcount(p & g), np = s_popcount(p), ng = s_popcount(g);
    if (both == 0 || np + ng == 0)
        return 0.0;
    double prec = (double) both / np, rec = (double) both / ng;
    return 2 * prec * rec / (prec + rec);
}
