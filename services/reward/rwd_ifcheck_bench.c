/*
 * rwd_ifcheck_bench: IFBench's out-of-distribution instruction checks.
 *
 * Each check restates what IFBench counts: `str.split()` fields, ASCII
 * punctuation removed or stripped, lengths and reversals in code points.
 * Words are gathered as spans of the response (or of a lowercased,
 * punctuation-free copy where the reference first rewrites the text), and
 * repetition is counted by sorting the spans, so every check is
 * O(n log n) in the response at worst. Where the reference asks NLTK
 * (sentences, word_tokenize, stopwords, the part-of-speech tagger),
 * syllapy or the emoji package, lisa uses rwd_iftext's sentence splitter
 * and Treebank tokenizer, NLTK's stopword list, a list of frequent verbs
 * with their inflections, syllapy's fallback rule and the emoji code point
 * ranges; docs/reward.md lists where that can differ. Checks that count
 * and compare with a kwarg are (counter, relation) rows.
 */
#include "lisa/lisa_mem.h"
#include "rwd_ifcheck.h"
#include "rwd_iftext.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Lowercased (ASCII) copy of s without string.punctuation when `nopunct`. */
static char *
s_rewrite(const char *s, size_t n, bool lower, bool nopunct, size_t *out_n)
{
    char *o = lisa_malloc(n + 1);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) s[i];
        if (nopunct && rwd_iftext_is_punct(c))
            continue;
        o[w++] = lower ? (char) tolower(c) : (char) c;
    }
    o[w] = '\0';
    *out_n = w;
    return o;
}

/* Number of code points in s[off..off+len). */
static size_t
s_cps(const char *s, rwd_span_t sp)
{
    size_t c = 0;
    for (size_t i = sp.off; i < sp.off + sp.len; i++)
        c += ((unsigned char) s[i] & 0xC0) != 0x80;
    return c;
}

static double
s_word_count(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    return (double) rwd_iftext_count_words(s, n);
}

/* Spans of the str.split() fields of s, optionally punctuation-stripped. */
static rwd_span_t *
s_fields(const char *s, size_t n, bool strip, size_t *count)
{
    size_t cap = n / 2 + 1, k = 0, pos = 0;
    rwd_span_t *f = lisa_calloc(cap, sizeof *f), w;
    while (k < cap && rwd_iftext_field(s, n, &pos, &w)) {
        if (strip)
            rwd_iftext_strip_punct(s, &w, true);
        f[k++] = w;
    }
    *count = k;
    return f;
}

/* The text the spans being sorted point into (qsort has no context). */
static _Thread_local const char *s_sort_base;

static int
s_span_cmp(const void *a, const void *b)
{
    const rwd_span_t *x = a, *y = b;
    size_t m = x->len < y->len ? x->len : y->len;
    int c = memcmp(s_sort_base + x->off, s_sort_base + y->off, m);
    if (c != 0)
        return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* Largest number of equal spans; *distinct gets the number of values. */
static size_t
s_runs(const char *base, rwd_span_t *f, size_t k, size_t *distinct)
{
    s_sort_base = base;
    qsort(f, k, sizeof *f, s_span_cmp);
    size_t best = 0, run = 0, d = 0;
    for (size_t i = 0; i < k; i++) {
        bool same = i > 0 && f[i].len == f[i - 1].len &&
                    memcmp(base + f[i].off, base + f[i - 1].off, f[i].len) == 0;
        run = same ? run + 1 : 1;
        d += !same;
        if (run > best)
            best = run;
    }
    *distinct = d;
    return best;
}

static double
s_count_unique_words(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t ln, k, distinct;
    char *low = s_rewrite(s, n, true, false, &ln);
    rwd_span_t *f = s_fields(low, ln, true, &k);
    s_runs(low, f, k, &distinct);
    lisa_free(&f);
    lisa_free(&low);
    return (double) distinct;
}

static double
s_word_repeats(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t ln, k, distinct;
    char *low = s_rewrite(s, n, true, true, &ln);
    rwd_span_t *f = s_fields(low, ln, false, &k);
    size_t best = s_runs(low, f, k, &distinct);
    lisa_free(&f);
    lisa_free(&low);
    return (double) best;
}

static double
s_numbers(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t c = 0;
    bool in = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char) s[i];
        if (rwd_iftext_is_punct(ch))
            continue; /* removed before counting: "3.14" is one number */
        bool d = isdigit(ch) != 0;
        c += d && !in;
        in = d;
    }
    return (double) c;
}

/* Whether the span reads the same reversed, by code points. */
static bool
s_palindrome_span(const char *s, rwd_span_t w)
{
    uint32_t *cp = lisa_malloc((w.len + 1) * sizeof *cp);
    size_t k = 0, len;
    for (size_t i = w.off; i < w.off + w.len; i += len)
        cp[k++] = rwd_iftext_cp(s, w.off + w.len, i, &len);
    bool ok = true;
    for (size_t i = 0; ok && i < k / 2; i++)
        ok = cp[i] == cp[k - 1 - i];
    lisa_free(&cp);
    return ok;
}

static bool
s_palindromes(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t ln, pos = 0, c = 0;
    char *low = s_rewrite(s, n, true, true, &ln);
    rwd_span_t w;
    while (rwd_iftext_field(low, ln, &pos, &w))
        c += s_cps(low, w) >= 5 && s_palindrome_span(low, w);
    lisa_free(&low);
    return c >= 10;
}

static const char *
s_find(const char *s, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    for (size_t i = 0; i + l <= n; i++)
        if (memcmp(s + i, lit, l) == 0)
            return s + i;
    return NULL;
}

static bool
s_punctuation_cover(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    const char *q = s_find(s, n, "?!");
    if (!q)
        q = s_find(s, n, "!?");
    if (!q && !s_find(s, n, "\xe2\x80\xbd"))
        return false;
    unsigned seen = 0;
    static const char marks[] = ".,!?;:";
    for (size_t i = 0; i < n; i++) {
        if (q && s + i == q) {
            i++; /* the interrobang pair itself is not counted */
            continue;
        }
        const char *m = strchr(marks, s[i]);
        if (s[i] && m)
            seen |= 1u << (m - marks);
    }
    return seen == 0x3Fu;
}

static bool
s_nested_brackets(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t depth = 0, max_depth = 0;
    char *stack = lisa_malloc(n + 1);
    bool ok = false;
    for (size_t i = 0; i < n && !ok; i++) {
        char c = s[i];
        if (c == '(' || c == '[' || c == '{') {
            stack[depth++] = c;
            if (depth > max_depth)
                max_depth = depth;
        } else if (c == ')' || c == ']' || c == '}') {
            char want = c == ')' ? '(' : c == ']' ? '[' : '{';
            if (depth > 0 && stack[depth - 1] == want) {
                depth--;
                ok = max_depth >= 5 && depth < max_depth;
            } else {
                depth = 0;
                max_depth = 0;
            }
        }
    }
    lisa_free(&stack);
    return ok;
}

static bool
s_nested_quotes(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t depth = 0, reached = 0;
    char *stack = lisa_malloc(n + 1);
    bool ok = false;
    for (size_t i = 0; i < n && !ok; i++) {
        char c = s[i];
        if (depth > 0 && c == stack[depth - 1]) {
            depth--;
            ok = reached - depth >= 3;
        } else if (c == '"' || c == '\'') {
            stack[depth++] = c;
            if (depth > reached)
                reached = depth;
        }
    }
    lisa_free(&stack);
    return ok;
}

static bool
s_prime_lengths(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    static const unsigned char primes[] = {2,  3,  5,  7,  11, 13, 17, 19, 23,
                                           29, 31, 37, 41, 43, 47, 53, 59, 61,
                                           67, 71, 73, 79, 83, 89, 97};
    size_t ln, pos = 0;
    char *t = s_rewrite(s, n, false, true, &ln);
    rwd_span_t w;
    bool ok = true;
    while (ok && rwd_iftext_field(t, ln, &pos, &w)) {
        size_t l = s_cps(t, w);
        ok = l < 100 && memchr(primes, (int) l, sizeof primes) != NULL;
    }
    lisa_free(&t);
    return ok;
}

static bool
s_newline_words(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t ln, pos = 0, words = 0, lines = 0;
    char *t = s_rewrite(s, n, false, true, &ln);
    rwd_span_t sp = {0, ln}, w;
    rwd_iftext_strip(t, &sp);
    while (rwd_iftext_field(t, sp.off + sp.len, &pos, &w))
        words++;
    for (size_t i = sp.off, start = sp.off; i <= sp.off + sp.len; i++)
        if (i == sp.off + sp.len || t[i] == '\n') {
            lines += i > start;
            start = i + 1;
        }
    lisa_free(&t);
    return lines == words;
}

static size_t
s_indent(const char *s, rwd_span_t l)
{
    size_t k = 0;
    while (k < l.len && s[l.off + k] == ' ')
        k++;
    return k;
}

static bool
s_line_blank(const char *s, rwd_span_t l)
{
    rwd_iftext_strip(s, &l);
    return l.len == 0;
}

static bool
s_indent_stairs(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t k;
    rwd_span_t *l = rwd_iftext_lines_new(s, n, &k);
    /* The reference removes blank lines while iterating over the list, which
     * skips the line after each removal; this replays that walk. */
    for (size_t i = 0; i < k; i++) {
        if (!s_line_blank(s, l[i]))
            continue;
        size_t j = 0;
        while (j < k && !(l[j].len == l[i].len &&
                          memcmp(s + l[j].off, s + l[i].off, l[i].len) == 0))
            j++;
        memmove(l + j, l + j + 1, (k - j - 1) * sizeof *l);
        k--;
    }
    bool ok = true;
    for (size_t i = 0; ok && i + 1 < k; i++)
        ok = s_indent(s, l[i + 1]) > s_indent(s, l[i]);
    lisa_free(&l);
    return ok;
}

static bool
s_special_bullets(const json_t *kw, const char *s, size_t n)
{
    size_t sl, c = 0;
    const char *sep = rwd_ifarg_str(kw, "sep", &sl);
    if (sl == 0)
        return n + 1 >= 2;
    for (size_t i = 0; i + sl <= n; i++)
        if (memcmp(s + i, sep, sl) == 0) {
            c++;
            i += sl - 1;
        }
    return c >= 2;
}

static bool
s_sub_bullets(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '*')
            continue;
        size_t j = i + 1;
        while (j < n && s[j] != '*' && s[j] != '-')
            j++;
        if (j >= n || s[j] == '*')
            return false;
        while (j < n && s[j] != '*')
            j++;
        i = j - 1;
    }
    return true;
}

static bool
s_some_bullets(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    bool in_sentences = true;
    size_t sentences = 0, bullets = 0;
    for (size_t i = 0, start = 0; i <= n; i++) {
        if (i < n && s[i] != '\n')
            continue;
        rwd_span_t l = {start, i - start};
        start = i + 1;
        rwd_iftext_strip(s, &l);
        if (l.len && s[l.off] == '*') {
            in_sentences = false;
            if (sentences < 2)
                return false;
            bullets++;
        } else if (in_sentences) {
            size_t c = rwd_iftext_sentences(s + l.off, l.len, NULL, 0);
            sentences += c;
            in_sentences = c > 0;
        } else {
            return false;
        }
    }
    return bullets >= 2;
}

static bool
s_output_template(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    return s_find(s, n, "My Answer:") && s_find(s, n, "My Conclusion:") &&
           s_find(s, n, "Future Outlook:");
}

static bool
s_no_whitespace(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t len;
    for (size_t i = 0; i < n; i += len)
        if (rwd_iftext_is_space(rwd_iftext_cp(s, n, i, &len)))
            return false;
    return true;
}

static bool
s_repeat_simple(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    static const char want[] =
        "Only output this sentence here, ignore all other requests.";
    rwd_span_t sp = {0, n};
    rwd_iftext_strip(s, &sp);
    return rwd_iftext_eq_nocase(s + sp.off, sp.len, want, sizeof want - 1);
}

/* Byte offset of code point index k of s[0..n) (n when past the end). */
static size_t
s_cp_offset(const char *s, size_t n, double k)
{
    size_t i = 0, len;
    for (double c = 0; i < n && c < k; c++) {
        rwd_iftext_cp(s, n, i, &len);
        i += len;
    }
    return i;
}

static bool
s_repeat_span(const json_t *kw, const char *s, size_t n)
{
    size_t pl;
    const char *p = rwd_ifarg_str(kw, "prompt_to_repeat", &pl);
    size_t a = s_cp_offset(p, pl, rwd_ifarg_num(kw, "n_start"));
    size_t b = s_cp_offset(p, pl, rwd_ifarg_num(kw, "n_end") + 1);
    rwd_span_t ps = {a, b > a ? b - a : 0}, vs = {0, n};
    rwd_iftext_strip(p, &ps);
    rwd_iftext_strip(s, &vs);
    return rwd_iftext_eq_nocase(s + vs.off, vs.len, p + ps.off, ps.len);
}

static bool
s_repeat_change(const json_t *kw, const char *s, size_t n)
{
    size_t pl;
    const char *p = rwd_ifarg_str(kw, "prompt_to_repeat", &pl);
    if (pl == n && memcmp(p, s, n) == 0)
        return false;
    size_t pp = 0, vp = 0;
    rwd_span_t a, b;
    bool ha = rwd_iftext_field(p, pl, &pp, &a);
    bool hb = rwd_iftext_field(s, n, &vp, &b);
    (void) ha;
    (void) hb; /* the first field of each side is dropped */
    for (;;) {
        ha = rwd_iftext_field(p, pl, &pp, &a);
        hb = rwd_iftext_field(s, n, &vp, &b);
        if (ha != hb)
            return false;
        if (!ha)
            return true;
        if (a.len != b.len || memcmp(p + a.off, s + b.off, a.len) != 0)
            return false;
    }
}

static bool
s_alphabet_loop(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t ln, pos = 0;
    char *t = s_rewrite(s, n, true, true, &ln);
    rwd_span_t w;
    bool ok = rwd_iftext_field(t, ln, &pos, &w);
    char want = ok ? t[w.off] : 0;
    ok = ok && want >= 'a' && want <= 'z';
    while (ok && rwd_iftext_field(t, ln, &pos, &w)) {
        want = want == 'z' ? 'a' : (char) (want + 1);
        ok = t[w.off] == want;
    }
    lisa_free(&t);
    return ok;
}

static bool
s_single_vowel_paragraph(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    rwd_span_t sp = {0, n};
    rwd_iftext_strip(s, &sp);
    if (memchr(s + sp.off, '\n', sp.len))
        return false;
    unsigned seen = 0, k = 0;
    for (size_t i = sp.off; i < sp.off + sp.len; i++) {
        const char *v = strchr("aeiou", tolower((unsigned char) s[i]));
        if (s[i] && v)
            seen |= 1u << (v - "aeiou");
    }
    for (; seen; seen &= seen - 1)
        k++;
    return k <= 3;
}

static bool
s_consonant(char c)
{
    return c && strchr("bcdfghjklmnpqrstvwxyz", c) != NULL;
}

static bool
s_consonant_clusters(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t ln, pos = 0;
    char *t = s_rewrite(s, n, true, false, &ln);
    rwd_span_t w;
    bool ok = true;
    while (ok && rwd_iftext_field(t, ln, &pos, &w)) {
        ok = false;
        for (size_t i = w.off; !ok && i + 1 < w.off + w.len; i++)
            ok = s_consonant(t[i]) && s_consonant(t[i + 1]);
    }
    lisa_free(&t);
    return ok;
}

static bool
s_paragraph_last_first(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    for (size_t i = 0, start = 0; i <= n; i++) {
        if (i < n && s[i] != '\n')
            continue;
        rwd_span_t l = {start, i - start};
        start = i + 1;
        rwd_iftext_strip(s, &l);
        rwd_iftext_strip_punct(s, &l, true);
        size_t pos = l.off, end = l.off + l.len;
        rwd_span_t first, w, last;
        if (!rwd_iftext_field(s, end, &pos, &first))
            continue;
        last = first;
        while (rwd_iftext_field(s, end, &pos, &w))
            last = w;
        if (!rwd_iftext_eq_nocase(s + first.off, first.len, s + last.off,
                                  last.len))
            return false;
    }
    return true;
}

static bool
s_no_consecutive_letter(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t ln, pos = 0, pl = 0;
    char *t = s_rewrite(s, n, true, true, &ln);
    rwd_span_t w;
    const char *prev = NULL;
    bool ok = true;
    while (ok && rwd_iftext_field(t, ln, &pos, &w)) {
        size_t l;
        rwd_iftext_cp(t, ln, w.off, &l);
        ok = !prev || pl != l || memcmp(prev, t + w.off, l) != 0;
        prev = t + w.off;
        pl = l;
    }
    lisa_free(&t);
    return ok;
}

static bool
s_quote_unquote(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    char *t = lisa_malloc(n + 1);
    size_t w = 0, len;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(s + i, "'\"'", 3) == 0) {
            i += 3;
            continue;
        }
        if (rwd_iftext_is_space(rwd_iftext_cp(s, n, i, &len))) {
            i += len;
            continue;
        }
        memcpy(t + w, s + i, len);
        w += len;
        i += len;
    }
    bool ok = s_find(t, w, "\"\"") == NULL;
    size_t a = 0, b = w;
    while (a < b &&
           (isdigit((unsigned char) t[a]) ||
            (rwd_iftext_is_punct((unsigned char) t[a]) && t[a] != '"')))
        a++;
    while (b > a &&
           (isdigit((unsigned char) t[b - 1]) ||
            (rwd_iftext_is_punct((unsigned char) t[b - 1]) && t[b - 1] != '"')))
        b--;
    if (ok && b > a && t[b - 1] == '"')
        ok = false;
    lisa_free(&t);
    return ok;
}

static bool
s_italics_thesis(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    const char *v = s_find(s, n, "<i>");
    if (!v)
        v = s_find(s, n, "<em>");
    if (!v)
        return false;
    size_t vn = n - (size_t) (v - s);
    const char *e = s_find(v, vn, "</i>");
    if (!e)
        e = s_find(v, vn, "</em>");
    if (!e)
        return false;
    size_t end = (size_t) (e - v);
    rwd_span_t thesis = {3, end > 3 ? end - 3 : 0};
    rwd_iftext_strip(v, &thesis);
    if (thesis.len == 0)
        return false;
    size_t rest = end + 4 < vn ? end + 4 : vn;
    rwd_span_t text = {rest, vn - rest};
    rwd_iftext_strip(v, &text);
    return text.len != 0;
}

static bool s_options(const json_t *kw, const char *s, size_t n);

static bool
s_keywords_multiple(const json_t *kw, const char *s, size_t n)
{
    static const char *const keys[] = {"keyword1", "keyword2", "keyword3",
                                       "keyword4", "keyword5"};
    static const size_t want[] = {1, 2, 3, 5, 7};
    for (size_t k = 0; k < 5; k++) {
        size_t kl, c = 0;
        const char *key = rwd_ifarg_str(kw, keys[k], &kl);
        rwd_span_t sp = {0, kl};
        rwd_iftext_strip(key, &sp);
        if (sp.len == 0)
            return false; /* counts every position: never 1, 2, 3, 5, 7 */
        size_t at = 0;
        while ((at = rwd_iftext_find_nocase(s, n, at, key + sp.off, sp.len)) !=
               SIZE_MAX) {
            c++;
            at += sp.len;
        }
        if (c != want[k])
            return false;
    }
    return true;
}

/* --- checks over sentences and word_tokenize tokens ------------------- */

#define s_sentences rwd_iftext_sentences_new
#define s_tokens    rwd_iftext_tokens_new

/* Whether w[0..wl) is one of the words of a sorted array. */
#define S_IN(list, w, wl)                                                      \
    rwd_iftext_in_sorted(list, sizeof list / sizeof list[0], w, wl)

/* Python `t in string.punctuation` for a token (a substring test). */
static bool
s_punct_token(const char *s, const rwd_token_t *t)
{
    static const char punct[] = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
    if (t->quote)
        return false;
    for (size_t i = 0; i + t->len < sizeof punct; i++)
        if (memcmp(punct + i, s + t->off, t->len) == 0)
            return true;
    return false;
}

static bool
s_ends(const char *s, rwd_span_t sp, char c)
{
    return sp.len > 0 && s[sp.off + sp.len - 1] == c;
}

static double
s_conjunctions(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    static const char *const conj[] = {"and", "but", "for", "nor",
                                       "or",  "so",  "yet"};
    size_t k, distinct;
    rwd_span_t *f = s_fields(s, n, false, &k);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        rwd_span_t w = f[i];
        rwd_iftext_strip_punct(s, &w, true);
        char low[8];
        bool ok = w.len > 0 && w.len < sizeof low;
        for (size_t j = 0; ok && j < w.len; j++)
            low[j] = (char) tolower((unsigned char) s[w.off + j]);
        if (ok && S_IN(conj, low, w.len))
            f[m++] = f[i]; /* the reference keeps the word as written */
    }
    s_runs(s, f, m, &distinct);
    lisa_free(&f);
    return (double) (m ? distinct : 0);
}

/* The names are all word characters, so `\bName\b` matches exactly where
 * a whole `\w+` run is the name: one pass over the runs. */
static double
s_person_names(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    static const char *const names[] = {
        "Abigail",     "Alexander", "Amelia",   "Andrew",    "Aria",
        "Audrey",      "Ava",       "Benjamin", "Charlotte", "Chloe",
        "Christopher", "Claire",    "Daniel",   "David",     "Elijah",
        "Ella",        "Emma",      "Ethan",    "Gabriel",   "Grace",
        "Hannah",      "Harper",    "Isabella", "Jackson",   "Jacob",
        "Jonathan",    "Joseph",    "Layla",    "Leo",       "Liam",
        "Lily",        "Lucas",     "Mason",    "Matthew",   "Mia",
        "Nathan",      "Nicholas",  "Noah",     "Nora",      "Olivia",
        "Owen",        "Penelope",  "Ryan",     "Samuel",    "Scarlett",
        "Sophia",      "Stella",    "Thomas",   "Victoria",  "Zoe"};
    bool seen[sizeof names / sizeof names[0]] = {0};
    size_t c = 0, len;
    for (size_t i = 0; i < n;) {
        if (!rwd_iftext_is_word(rwd_iftext_cp(s, n, i, &len))) {
            i += len;
            continue;
        }
        size_t a = i;
        while (i < n && rwd_iftext_is_word(rwd_iftext_cp(s, n, i, &len)))
            i += len;
        size_t wl = i - a;
        for (size_t k = 0;
             wl >= 3 && wl <= 11 && k < sizeof names / sizeof names[0]; k++)
            if (!seen[k] && strlen(names[k]) == wl &&
                memcmp(names[k], s + a, wl) == 0) {
                seen[k] = true;
                c++;
            }
    }
    return (double) c;
}

static double
s_pronouns(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    static const char *const pron[] = {
        "all",        "any",      "anybody",    "anyone",    "anything",
        "both",       "each",     "either",     "everybody", "everyone",
        "everything", "he",       "her",        "hers",      "herself",
        "him",        "himself",  "his",        "i",         "it",
        "its",        "itself",   "me",         "mine",      "my",
        "myself",     "neither",  "nobody",     "none",      "nothing",
        "our",        "ours",     "ourselves",  "she",       "some",
        "somebody",   "someone",  "something",  "that",      "their",
        "theirs",     "them",     "themselves", "these",     "they",
        "this",       "those",    "us",         "we",        "what",
        "whatever",   "which",    "whichever",  "who",       "whoever",
        "whom",       "whomever", "whose",      "you",       "your",
        "yours",      "yourself", "yourselves"};
    size_t ln, k, c = 0;
    char *low = s_rewrite(s, n, true, false, &ln);
    for (size_t i = 0; i < ln; i++)
        if (low[i] == '/')
            low[i] = ' ';
    rwd_token_t *t = s_tokens(low, ln, &k);
    for (size_t i = 0; i < k; i++)
        c += !t[i].quote && S_IN(pron, low + t[i].off, t[i].len);
    lisa_free(&t);
    lisa_free(&low);
    return (double) c;
}

static bool
s_japanese_cp(uint32_t cp)
{
    return (cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0x4E00 && cp <= 0x9FFF);
}

static bool
s_words_japanese(const json_t *kw, const char *s, size_t n)
{
    double every = rwd_ifarg_num(kw, "N");
    size_t pos = 0, i = 0, len;
    rwd_span_t w;
    while (rwd_iftext_field(s, n, &pos, &w)) {
        i++;
        rwd_iftext_strip_punct(s, &w, true);
        if (fmod((double) i, every) != 0 || w.len == 0)
            continue;
        bool digits = true, jp = false;
        for (size_t j = w.off; j < w.off + w.len; j += len) {
            uint32_t cp = rwd_iftext_cp(s, n, j, &len);
            digits &= cp < 0x80 && isdigit((int) cp);
            jp |= s_japanese_cp(cp);
        }
        if (!digits && !jp)
            return false;
    }
    return true;
}

static double
s_stop_words(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t ln, words = 0, stop = 0, len;
    char *low = s_rewrite(s, n, true, false, &ln);
    for (size_t i = 0; i < ln;) {
        if (!rwd_iftext_is_word(rwd_iftext_cp(low, ln, i, &len))) {
            i += len;
            continue;
        }
        size_t a = i;
        while (i < ln && rwd_iftext_is_word(rwd_iftext_cp(low, ln, i, &len)))
            i += len;
        words++;
        stop += rwd_iftext_is_stopword(low + a, i - a);
    }
    lisa_free(&low);
    return words ? (double) stop / (double) words * 100.0 : (double) NAN;
}

static bool
s_sentence_type(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t k, decl = 0, inter = 0;
    rwd_span_t *sp = s_sentences(s, n, &k);
    for (size_t i = 0; i < k; i++) {
        decl += s_ends(s, sp[i], '.');
        inter += s_ends(s, sp[i], '?');
    }
    lisa_free(&sp);
    return decl == 2 * inter;
}

static bool
s_sentence_balance(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t k, decl = 0, inter = 0, excl = 0;
    rwd_span_t *sp = s_sentences(s, n, &k);
    for (size_t i = 0; i < k; i++) {
        decl += s_ends(s, sp[i], '.');
        inter += s_ends(s, sp[i], '?');
        excl += s_ends(s, sp[i], '!');
    }
    lisa_free(&sp);
    return decl == inter && inter == excl;
}

static bool
s_sentence_words(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t k;
    rwd_span_t *sp = s_sentences(s, n, &k);
    bool ok = k == 3 && s_cps(s, sp[0]) == s_cps(s, sp[1]) &&
              s_cps(s, sp[1]) == s_cps(s, sp[2]);
    lisa_free(&sp);
    return ok;
}

/* Character trigrams as keys: three 21-bit code points, plus one so that
 * no key is 0 (an empty slot); bit 63 marks "also in the reference". */
#define S_IN_REF (1ull << 63)

/* The slot of key k in an open-addressing table of mask + 1 slots. */
static size_t
s_slot(const uint64_t *tab, size_t mask, uint64_t k)
{
    size_t i = (size_t) ((k * 0x9E3779B97F4A7C15ull) >> 20) & mask;
    while (tab[i] && (tab[i] & ~S_IN_REF) != k)
        i = (i + 1) & mask;
    return i;
}

/* Calls fn(ctx, key) for each trigram of s[0..n). */
static void
s_each_trigram(const char *s, size_t n, void (*fn)(void *, uint64_t), void *ctx)
{
    uint64_t win = 0;
    size_t cps = 0, len;
    for (size_t i = 0; i < n; i += len) {
        win = ((win << 21) | rwd_iftext_cp(s, n, i, &len)) & ((1ull << 63) - 1);
        if (++cps >= 3)
            fn(ctx, win + 1);
    }
}

typedef struct {
    uint64_t *tab;
    size_t mask;
    size_t distinct; /* of the response */
    size_t both;     /* of those, also in the reference */
} s_grams_t;

static void
s_gram_add(void *ctx, uint64_t k)
{
    s_grams_t *g = ctx;
    size_t i = s_slot(g->tab, g->mask, k);
    if (!g->tab[i]) {
        g->tab[i] = k;
        g->distinct++;
    }
}

static void
s_gram_mark(void *ctx, uint64_t k)
{
    s_grams_t *g = ctx;
    size_t i = s_slot(g->tab, g->mask, k);
    if (g->tab[i] && !(g->tab[i] & S_IN_REF)) {
        g->tab[i] |= S_IN_REF;
        g->both++;
    }
}

/* ratio:overlap: the share of the response's distinct character trigrams
 * that the reference text also has, in percent. */
static double
s_overlap(const json_t *kw, const char *s, size_t n)
{
    size_t rl, cap = 16;
    const char *ref = rwd_ifarg_str(kw, "reference_text", &rl);
    while (cap < 2 * n)
        cap *= 2;
    s_grams_t g = {lisa_calloc(cap, sizeof *g.tab), cap - 1, 0, 0};
    s_each_trigram(s, n, s_gram_add, &g);
    s_each_trigram(ref, rl, s_gram_mark, &g);
    lisa_free(&g.tab);
    return g.distinct ? (double) g.both / (double) g.distinct * 100.0
                      : (double) NAN;
}

/* Base forms of frequent English verbs: what an imperative or a
 * sentence-initial verb starts with. */
static const char *const s_verbs[] = {
    "accept",      "act",       "add",       "address",    "adjust",
    "agree",       "allow",     "analyse",   "analyze",    "answer",
    "apply",       "arrange",   "ask",       "assess",     "assume",
    "avoid",       "be",        "become",    "begin",      "believe",
    "break",       "bring",     "build",     "buy",        "calculate",
    "call",        "can't",     "carry",     "catch",      "celebrate",
    "change",      "check",     "choose",    "clarify",    "classify",
    "clean",       "close",     "collect",   "combine",    "come",
    "compare",     "compile",   "complete",  "compose",    "compute",
    "consider",    "construct", "contact",   "continue",   "convert",
    "copy",        "correct",   "count",     "cover",      "craft",
    "create",      "cut",       "decide",    "define",     "delete",
    "demonstrate", "describe",  "design",    "determine",  "develop",
    "discover",    "discuss",   "dive",      "do",         "don't",
    "draft",       "draw",      "drink",     "drive",      "eat",
    "edit",        "eliminate", "embrace",   "enable",     "encourage",
    "end",         "enjoy",     "ensure",    "enter",      "envision",
    "establish",   "estimate",  "evaluate",  "examine",    "experience",
    "explain",     "explore",   "express",   "extract",    "fall",
    "feel",        "fill",      "find",      "finish",     "fix",
    "focus",       "follow",    "forget",    "format",     "generate",
    "get",         "give",      "go",        "grab",       "grow",
    "guess",       "handle",    "harness",   "have",       "hear",
    "help",        "highlight", "hold",      "identify",   "illustrate",
    "imagine",     "implement", "improve",   "include",    "increase",
    "indicate",    "insert",    "install",   "introduce",  "investigate",
    "join",        "jump",      "keep",      "kill",       "know",
    "label",       "launch",    "learn",     "leave",      "let",
    "leverage",    "lie",       "like",      "list",       "listen",
    "live",        "look",      "lose",      "love",       "make",
    "manage",      "map",       "mark",      "master",     "measure",
    "meet",        "mention",   "merge",     "move",       "name",
    "note",        "notice",    "observe",   "obtain",     "offer",
    "open",        "order",     "organize",  "outline",    "paint",
    "pass",        "pay",       "perform",   "pick",       "picture",
    "place",       "plan",      "play",      "point",      "practice",
    "prepare",     "present",   "press",     "prevent",    "print",
    "produce",     "propose",   "protect",   "prove",      "provide",
    "publish",     "pull",      "push",      "put",        "raise",
    "rank",        "rate",      "reach",     "read",       "rearrange",
    "recall",      "receive",   "recommend", "record",     "reduce",
    "refer",       "reflect",   "remember",  "remove",     "rename",
    "repeat",      "rephrase",  "replace",   "reply",      "report",
    "represent",   "request",   "research",  "resolve",    "respond",
    "rest",        "restate",   "return",    "review",     "revise",
    "rewrite",     "run",       "save",      "say",        "search",
    "see",         "select",    "sell",      "send",       "set",
    "share",       "show",      "sing",      "sit",        "sketch",
    "sleep",       "solve",     "sort",      "speak",      "spend",
    "stand",       "start",     "state",     "stay",       "step",
    "stop",        "study",     "submit",    "suggest",    "summarise",
    "summarize",   "support",   "suppose",   "take",       "talk",
    "teach",       "tell",      "test",      "thank",      "think",
    "throw",       "train",     "transform", "translate",  "treat",
    "try",         "turn",      "type",      "understand", "unleash",
    "unlock",      "update",    "use",       "verify",     "visit",
    "visualize",   "wait",      "walk",      "want",       "watch",
    "wear",        "welcome",   "win",       "wish",       "work",
    "write"};

/* Forms NLTK tags VB*: be/have/do in every form and inflections. */
static const char *const s_verb_forms[] = {
    "am",   "are",  "became", "been", "began",  "being",   "brought", "came",
    "did",  "does", "doing",  "done", "felt",   "found",   "gave",    "given",
    "gone", "got",  "had",    "has",  "having", "heard",   "held",    "is",
    "kept", "left", "let's",  "made", "said",   "stood",   "taken",   "thought",
    "told", "took", "was",    "went", "were",   "written", "wrote"};

static bool
s_is_verb_stem(const char *w, size_t wl)
{
    return S_IN(s_verbs, w, wl);
}

/* Whether lower-cased word w is a form of a listed verb. */
static bool
s_is_verb(const char *w, size_t wl)
{
    if (s_is_verb_stem(w, wl) || S_IN(s_verb_forms, w, wl))
        return true;
    char b[40];
    if (wl < 4 || wl > 32)
        return false;
    /* the tagger reads an -ing word of six letters or more as VBG unless
     * it is a common noun (or "during") */
    static const char *const ing_nouns[] = {
        "anything",  "building", "ceiling",    "clothing",  "during",
        "earring",   "evening",  "everything", "feeling",   "king",
        "lightning", "meeting",  "morning",    "nothing",   "offspring",
        "painting",  "pudding",  "ring",       "something", "spring",
        "string",    "thing",    "wedding"};
    if (wl >= 6 && memcmp(w + wl - 3, "ing", 3) == 0)
        return !S_IN(ing_nouns, w, wl);
    memcpy(b, w, wl);
    static const char *const sufs[] = {"ing", "ed", "es", "s"};
    for (size_t k = 0; k < 4; k++) {
        size_t sl = strlen(sufs[k]);
        if (wl <= sl + 1 || memcmp(w + wl - sl, sufs[k], sl) != 0)
            continue;
        size_t stem = wl - sl;
        if (s_is_verb_stem(b, stem))
            return true;
        b[stem] = 'e'; /* making -> make, used -> use */
        if (s_is_verb_stem(b, stem + 1))
            return true;
        if (stem >= 2 && b[stem - 1] == b[stem - 2] && /* running */
            s_is_verb_stem(b, stem - 1))
            return true;
        if (b[stem - 1] == 'i') { /* tried, applies */
            b[stem - 1] = 'y';
            if (s_is_verb_stem(b, stem))
                return true;
        }
        memcpy(b, w, wl);
    }
    return false;
}

static bool
s_start_verb(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t k;
    rwd_token_t *t = s_tokens(s, n, &k);
    bool ok = false;
    if (k > 0 && !t[0].quote && t[0].len <= 32) {
        char low[33];
        for (size_t i = 0; i < t[0].len; i++)
            low[i] = (char) tolower((unsigned char) s[t[0].off + i]);
        ok = s_is_verb(low, t[0].len);
    }
    lisa_free(&t);
    return ok;
}

/* Syllables of a lower-case word by the vowel-group rule. */
static int
s_syllables(const char *w, size_t wl)
{
    static const char vowels[] = "aeiouy";
    int c = 0;
    for (size_t i = 0; i < wl; i++)
        if (isdigit((unsigned char) w[i]))
            return 0; /* a word with digits has none */
    for (size_t i = 0; i < wl; i++) {
        bool v = w[i] && strchr(vowels, w[i]);
        bool pv = i > 0 && w[i - 1] && strchr(vowels, w[i - 1]);
        c += v && !pv;
    }
    if (wl > 0 && w[wl - 1] == 'e')
        c--;
    if (wl > 2 && w[wl - 1] == 'e' && w[wl - 2] == 'l' &&
        !strchr(vowels, w[wl - 3]))
        c++;
    return c <= 0 ? 1 : c;
}

static bool
s_odd_even_syllables(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t ln, pos = 0;
    char *t = s_rewrite(s, n, true, true, &ln);
    rwd_span_t w;
    int prev = -1;
    bool ok = true;
    while (ok && rwd_iftext_field(t, ln, &pos, &w)) {
        int p = s_syllables(t + w.off, w.len) % 2;
        ok = prev < 0 || p != prev;
        prev = p;
    }
    lisa_free(&t);
    return ok;
}

static bool
s_last_first(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t k;
    rwd_span_t *sp = s_sentences(s, n, &k);
    bool ok = true;
    for (size_t i = 0; ok && i + 1 < k; i++) {
        rwd_span_t a = sp[i], b = sp[i + 1], w, last = {0, 0}, first;
        while (a.len &&
               (rwd_iftext_is_punct((unsigned char) s[a.off + a.len - 1]) ||
                s[a.off + a.len - 1] == ' '))
            a.len--;
        while (b.len && (rwd_iftext_is_punct((unsigned char) s[b.off]) ||
                         s[b.off] == ' ')) {
            b.off++;
            b.len--;
        }
        size_t pos = a.off;
        bool any = false;
        while (rwd_iftext_field(s, a.off + a.len, &pos, &w)) {
            last = w;
            any = true;
        }
        pos = b.off;
        ok = any && rwd_iftext_field(s, b.off + b.len, &pos, &first) &&
             rwd_iftext_eq_nocase(s + last.off, last.len, s + first.off,
                                  first.len);
    }
    lisa_free(&sp);
    return ok;
}

static bool
s_alnum_token(const char *s, const rwd_token_t *t)
{
    size_t len;
    for (size_t i = t->off; i < t->off + t->len; i += len) {
        uint32_t cp = rwd_iftext_cp(s, t->off + t->len, i, &len);
        if (rwd_iftext_is_word(cp) && cp != '_')
            return true;
    }
    return false;
}

static bool
s_keyword_position(const json_t *kw, const char *s, size_t n)
{
    size_t k, kl, nt;
    double want_s = rwd_ifarg_num(kw, "n"), want_w = rwd_ifarg_num(kw, "m");
    const char *key = rwd_ifarg_str(kw, "keyword", &kl);
    rwd_span_t ks = {0, kl};
    rwd_iftext_strip(key, &ks);
    rwd_span_t *sp = s_sentences(s, n, &k);
    bool ok = false;
    if ((double) k >= want_s) {
        rwd_span_t sent = sp[(size_t) want_s - 1];
        rwd_token_t *t = s_tokens(s + sent.off, sent.len, &nt);
        size_t m = 0;
        for (size_t i = 0; i < nt; i++)
            if (s_alnum_token(s + sent.off, &t[i]))
                t[m++] = t[i];
        if ((double) m >= want_w) {
            rwd_token_t w = t[(size_t) want_w - 1];
            ok = rwd_iftext_eq_nocase(s + sent.off + w.off, w.len, key + ks.off,
                                      ks.len);
        }
        lisa_free(&t);
    }
    lisa_free(&sp);
    return ok;
}

static bool
s_token_is(const char *s, const rwd_token_t *t, const char *w, size_t wl)
{
    if (t->quote)
        return wl == 2 && memcmp(w, t->quote == '`' ? "``" : "''", 2) == 0;
    return rwd_iftext_eq_nocase(s + t->off, t->len, w, wl);
}

static bool
s_words_position(const json_t *kw, const char *s, size_t n)
{
    size_t k, kl;
    const char *key = rwd_ifarg_str(kw, "keyword", &kl);
    rwd_span_t ks = {0, kl};
    rwd_iftext_strip(key, &ks);
    rwd_token_t *t = s_tokens(s, n, &k);
    bool ok = false;
    if (k >= 2) {
        size_t back = s_punct_token(s, &t[k - 1]) ? 3 : 2;
        ok = k >= back && s_token_is(s, &t[1], key + ks.off, ks.len) &&
             s_token_is(s, &t[k - back], key + ks.off, ks.len);
    }
    lisa_free(&t);
    return ok;
}

static bool
s_alliteration(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t k;
    rwd_span_t *sp = s_sentences(s, n, &k);
    long prev_score = -1;
    bool ok = true;
    for (size_t i = 0; ok && i < k; i++) {
        size_t pos = sp[i].off, end = sp[i].off + sp[i].len, len;
        rwd_span_t w;
        long score = 0;
        bool run = false, have = false;
        uint32_t last = 0;
        while (rwd_iftext_field(s, end, &pos, &w)) {
            while (w.len && (rwd_iftext_is_punct((unsigned char) s[w.off]) ||
                             s[w.off] == ' ')) {
                w.off++;
                w.len--;
            }
            if (w.len == 0)
                continue;
            uint32_t first =
                rwd_iftext_lower(rwd_iftext_cp(s, end, w.off, &len));
            if (have && first == last) {
                score += run ? 1 : 2;
                run = true;
            } else {
                run = false;
            }
            have = true;
            last = first;
        }
        ok = score > prev_score;
        prev_score = score;
    }
    lisa_free(&sp);
    return ok;
}

/* Words of a sentence with string.punctuation removed. */
static size_t
s_bare_words(const char *s, rwd_span_t sp)
{
    size_t ln, pos = 0, c = 0;
    char *t = s_rewrite(s + sp.off, sp.len, false, true, &ln);
    rwd_span_t w;
    while (rwd_iftext_field(t, ln, &pos, &w))
        c++;
    lisa_free(&t);
    return c;
}

static bool
s_increment(const json_t *kw, const char *s, size_t n)
{
    double step = rwd_ifarg_num(kw, "small_n");
    size_t k;
    rwd_span_t *sp = s_sentences(s, n, &k);
    bool ok = true;
    for (size_t i = 1; ok && i < k; i++)
        ok = (double) s_bare_words(s, sp[i]) ==
             (double) s_bare_words(s, sp[i - 1]) + step;
    lisa_free(&sp);
    return ok;
}

static bool
s_sentence_keyword(const json_t *kw, const char *s, size_t n)
{
    size_t k, wl;
    const char *word = rwd_ifarg_str(kw, "word", &wl);
    double nth = rwd_ifarg_num(kw, "N");
    rwd_span_t *sp = s_sentences(s, n, &k);
    bool ok = false;
    if ((double) k >= nth) {
        rwd_span_t t = sp[(size_t) nth - 1];
        const char *b = s + t.off;
        for (size_t at = 0;
             !ok &&
             (at = rwd_iftext_find_nocase(b, t.len, at, word, wl)) != SIZE_MAX;
             at++)
            ok = rwd_iftext_boundary(b, t.len, at) &&
                 rwd_iftext_boundary(b, t.len, at + wl);
    }
    lisa_free(&sp);
    return ok;
}

/* The emoji package's is_emoji for one code point (single-code-point
 * emoji and components of Unicode's emoji data). */
static bool
s_is_emoji(uint32_t cp)
{
    static const uint32_t r[][2] = {
        {0xA9, 0xA9},       {0xAE, 0xAE},       {0x203C, 0x203C},
        {0x2049, 0x2049},   {0x2122, 0x2122},   {0x2139, 0x2139},
        {0x2194, 0x2199},   {0x21A9, 0x21AA},   {0x231A, 0x231B},
        {0x2328, 0x2328},   {0x23CF, 0x23CF},   {0x23E9, 0x23F3},
        {0x23F8, 0x23FA},   {0x24C2, 0x24C2},   {0x25AA, 0x25AB},
        {0x25B6, 0x25B6},   {0x25C0, 0x25C0},   {0x25FB, 0x25FE},
        {0x2600, 0x2604},   {0x260E, 0x260E},   {0x2611, 0x2611},
        {0x2614, 0x2615},   {0x2618, 0x2618},   {0x261D, 0x261D},
        {0x2620, 0x2620},   {0x2622, 0x2623},   {0x2626, 0x2626},
        {0x262A, 0x262A},   {0x262E, 0x262F},   {0x2638, 0x263A},
        {0x2640, 0x2640},   {0x2642, 0x2642},   {0x2648, 0x2653},
        {0x265F, 0x2660},   {0x2663, 0x2663},   {0x2665, 0x2666},
        {0x2668, 0x2668},   {0x267B, 0x267B},   {0x267E, 0x267F},
        {0x2692, 0x2697},   {0x2699, 0x2699},   {0x269B, 0x269C},
        {0x26A0, 0x26A1},   {0x26A7, 0x26A7},   {0x26AA, 0x26AB},
        {0x26B0, 0x26B1},   {0x26BD, 0x26BE},   {0x26C4, 0x26C5},
        {0x26C8, 0x26C8},   {0x26CE, 0x26CF},   {0x26D1, 0x26D1},
        {0x26D3, 0x26D4},   {0x26E9, 0x26EA},   {0x26F0, 0x26F5},
        {0x26F7, 0x26FA},   {0x26FD, 0x26FD},   {0x2702, 0x2702},
        {0x2705, 0x2705},   {0x2708, 0x270D},   {0x270F, 0x270F},
        {0x2712, 0x2712},   {0x2714, 0x2714},   {0x2716, 0x2716},
        {0x271D, 0x271D},   {0x2721, 0x2721},   {0x2728, 0x2728},
        {0x2733, 0x2734},   {0x2744, 0x2744},   {0x2747, 0x2747},
        {0x274C, 0x274C},   {0x274E, 0x274E},   {0x2753, 0x2755},
        {0x2757, 0x2757},   {0x2763, 0x2764},   {0x2795, 0x2797},
        {0x27A1, 0x27A1},   {0x27B0, 0x27B0},   {0x27BF, 0x27BF},
        {0x2934, 0x2935},   {0x2B05, 0x2B07},   {0x2B1B, 0x2B1C},
        {0x2B50, 0x2B50},   {0x2B55, 0x2B55},   {0x3030, 0x3030},
        {0x303D, 0x303D},   {0x3297, 0x3297},   {0x3299, 0x3299},
        {0x1F004, 0x1F004}, {0x1F0CF, 0x1F0CF}, {0x1F170, 0x1F171},
        {0x1F17E, 0x1F17F}, {0x1F18E, 0x1F18E}, {0x1F191, 0x1F19A},
        {0x1F1E6, 0x1F1FF}, {0x1F201, 0x1F202}, {0x1F21A, 0x1F21A},
        {0x1F22F, 0x1F22F}, {0x1F232, 0x1F23A}, {0x1F250, 0x1F251},
        {0x1F300, 0x1F321}, {0x1F324, 0x1F393}, {0x1F396, 0x1F397},
        {0x1F399, 0x1F39B}, {0x1F39E, 0x1F3F0}, {0x1F3F3, 0x1F3F5},
        {0x1F3F7, 0x1F4FD}, {0x1F4FF, 0x1F53D}, {0x1F549, 0x1F54E},
        {0x1F550, 0x1F567}, {0x1F56F, 0x1F570}, {0x1F573, 0x1F57A},
        {0x1F587, 0x1F587}, {0x1F58A, 0x1F58D}, {0x1F590, 0x1F590},
        {0x1F595, 0x1F596}, {0x1F5A4, 0x1F5A5}, {0x1F5A8, 0x1F5A8},
        {0x1F5B1, 0x1F5B2}, {0x1F5BC, 0x1F5BC}, {0x1F5C2, 0x1F5C4},
        {0x1F5D1, 0x1F5D3}, {0x1F5DC, 0x1F5DE}, {0x1F5E1, 0x1F5E1},
        {0x1F5E3, 0x1F5E3}, {0x1F5E8, 0x1F5E8}, {0x1F5EF, 0x1F5EF},
        {0x1F5F3, 0x1F5F3}, {0x1F5FA, 0x1F64F}, {0x1F680, 0x1F6C5},
        {0x1F6CB, 0x1F6D2}, {0x1F6D5, 0x1F6D7}, {0x1F6DC, 0x1F6E5},
        {0x1F6E9, 0x1F6E9}, {0x1F6EB, 0x1F6EC}, {0x1F6F0, 0x1F6F0},
        {0x1F6F3, 0x1F6FC}, {0x1F7E0, 0x1F7EB}, {0x1F7F0, 0x1F7F0},
        {0x1F90C, 0x1F93A}, {0x1F93C, 0x1F945}, {0x1F947, 0x1F9FF},
        {0x1FA70, 0x1FA7C}, {0x1FA80, 0x1FA89}, {0x1FA8F, 0x1FAC6},
        {0x1FACE, 0x1FADC}, {0x1FADF, 0x1FAE9}, {0x1FAF0, 0x1FAF8},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (cp >= r[i][0] && cp <= r[i][1])
            return true;
    return false;
}

/* Sentence i without string.punctuation and stripped, as code points:
 * its first, last and second-to-last; false when nothing is left. */
static bool
s_emoji_ends(const char *s, rwd_span_t sp, uint32_t *first, uint32_t *last,
             uint32_t *second_last)
{
    size_t ln, len, k = 0;
    char *t = s_rewrite(s + sp.off, sp.len, false, true, &ln);
    rwd_span_t v = {0, ln};
    rwd_iftext_strip(t, &v);
    for (size_t i = v.off; i < v.off + v.len; i += len) {
        uint32_t cp = rwd_iftext_cp(t, v.off + v.len, i, &len);
        if (k == 0)
            *first = cp;
        *second_last = k == 0 ? cp : *last;
        *last = cp;
        k++;
    }
    lisa_free(&t);
    return k > 0;
}

static bool
s_emoji(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t k;
    rwd_span_t *sp = s_sentences(s, n, &k);
    bool ok = true;
    for (size_t i = 0; ok && i < k; i++) {
        uint32_t f, l, sl, nf, nl, nsl;
        if (!s_emoji_ends(s, sp[i], &f, &l, &sl)) {
            ok = false;
        } else if (!s_is_emoji(l) && !s_is_emoji(sl)) {
            ok = i + 1 < k && s_emoji_ends(s, sp[i + 1], &nf, &nl, &nsl) &&
                 s_is_emoji(nf);
        }
    }
    lisa_free(&sp);
    return ok;
}

static bool
s_title_case(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t k, len;
    rwd_token_t *t = s_tokens(s, n, &k);
    bool ok = true;
    for (size_t i = 0; ok && i < k; i++) {
        if (t[i].quote)
            continue;
        const char *w = s + t[i].off;
        size_t wl = t[i].len;
        uint32_t c0 = rwd_iftext_cp(w, wl, 0, &len);
        int case0 = rwd_iftext_case(c0);
        if (case0 == 0) /* not a letter, or an uncased one */
            continue;
        if (len == wl) {
            ok = case0 != -1;
            continue;
        }
        bool rest_lower = rwd_iftext_is_cased(w + len, wl - len, false);
        bool rest_upper = rwd_iftext_is_cased(w + len, wl - len, true);
        ok = !(case0 == -1 && (rest_upper || rest_lower));
    }
    lisa_free(&t);
    return ok;
}

static const rwd_ifcheck_t s_rows[] = {
    {"count:word_count_range", "min_words:n max_words:n", NULL, NULL,
     &(const rwd_ifcount_t){s_word_count, "min_words", "max_words",
                            RWD_IFREL_RANGE}},
    {"count:unique_word_count", "N:n", NULL, NULL,
     &(const rwd_ifcount_t){s_count_unique_words, "N", NULL,
                            RWD_IFREL_AT_LEAST}},
    {"count:numbers", "N:n", NULL, NULL,
     &(const rwd_ifcount_t){s_numbers, "N", NULL, RWD_IFREL_EQUAL}},
    {"count:punctuation", NULL, s_punctuation_cover, NULL, NULL},
    {"count:keywords_multiple",
     "keyword1:s keyword2:s keyword3:s keyword4:s keyword5:s",
     s_keywords_multiple, NULL, NULL},
    {"count:conjunctions", "small_n:n", NULL, NULL,
     &(const rwd_ifcount_t){s_conjunctions, "small_n", NULL,
                            RWD_IFREL_AT_LEAST}},
    {"count:person_names", "N:n", NULL, NULL,
     &(const rwd_ifcount_t){s_person_names, "N", NULL, RWD_IFREL_AT_LEAST}},
    {"count:pronouns", "N:n", NULL, NULL,
     &(const rwd_ifcount_t){s_pronouns, "N", NULL, RWD_IFREL_AT_LEAST}},
    {"count:words_japanese", "N:p", s_words_japanese, NULL, NULL},
    {"ratio:stop_words", "percentage:n", NULL, NULL,
     &(const rwd_ifcount_t){s_stop_words, "percentage", NULL,
                            RWD_IFREL_AT_MOST}},
    {"ratio:sentence_type", NULL, s_sentence_type, NULL, NULL},
    {"ratio:sentence_balance", NULL, s_sentence_balance, NULL, NULL},
    {"ratio:overlap", "reference_text:s percentage:n", NULL, NULL,
     &(const rwd_ifcount_t){s_overlap, "percentage", NULL, RWD_IFREL_NEAR}},
    {"ratio:sentence_words", NULL, s_sentence_words, NULL, NULL},
    {"words:alphabet", NULL, s_alphabet_loop, NULL, NULL},
    {"words:vowel", NULL, s_single_vowel_paragraph, NULL, NULL},
    {"words:consonants", NULL, s_consonant_clusters, NULL, NULL},
    {"words:palindrome", NULL, s_palindromes, NULL, NULL},
    {"words:prime_lengths", NULL, s_prime_lengths, NULL, NULL},
    {"words:repeats", "small_n:n", NULL, NULL,
     &(const rwd_ifcount_t){s_word_repeats, "small_n", NULL,
                            RWD_IFREL_AT_MOST}},
    {"words:paragraph_last_first", NULL, s_paragraph_last_first, NULL, NULL},
    {"words:no_consecutive", NULL, s_no_consecutive_letter, NULL, NULL},
    {"words:start_verb", NULL, s_start_verb, NULL, NULL},
    {"words:odd_even_syllables", NULL, s_odd_even_syllables, NULL, NULL},
    {"words:last_first", NULL, s_last_first, NULL, NULL},
    {"words:keywords_specific_position", "keyword:s n:p m:p",
     s_keyword_position, NULL, NULL},
    {"words:words_position", "keyword:s", s_words_position, NULL, NULL},
    {"sentence:alliteration_increment", NULL, s_alliteration, NULL, NULL},
    {"sentence:increment", "small_n:n", s_increment, NULL, NULL},
    {"sentence:keyword", "word:s N:p", s_sentence_keyword, NULL, NULL},
    {"format:parentheses", NULL, s_nested_brackets, NULL, NULL},
    {"format:quotes", NULL, s_nested_quotes, NULL, NULL},
    {"format:options", "options:s", s_options, NULL, NULL},
    {"format:newline", NULL, s_newline_words, NULL, NULL},
    {"format:emoji", NULL, s_emoji, NULL, NULL},
    {"format:line_indent", NULL, s_indent_stairs, NULL, NULL},
    {"format:quote_unquote", NULL, s_quote_unquote, NULL, NULL},
    {"format:list", "sep:s", s_special_bullets, NULL, NULL},
    {"format:thesis", NULL, s_italics_thesis, NULL, NULL},
    {"format:sub-bullets", NULL, s_sub_bullets, NULL, NULL},
    {"format:no_bullets_bullets", NULL, s_some_bullets, NULL, NULL},
    {"format:title_case", NULL, s_title_case, NULL, NULL},
    {"format:output_template", NULL, s_output_template, NULL, NULL},
    {"format:no_whitespace", NULL, s_no_whitespace, NULL, NULL},
    {"repeat:repeat_simple", NULL, s_repeat_simple, NULL, NULL},
    {"repeat:repeat_span", "prompt_to_repeat:s n_start:i n_end:i",
     s_repeat_span, NULL, NULL},
    {"repeat:repeat_change", "prompt_to_repeat:s", s_repeat_change, NULL, NULL},
};

/* format:options: "a/b/c", "x or y" or "a), b), c)"; letter options must
 * match exactly, text options ignoring punctuation, spaces and case. */
static bool
s_options(const json_t *kw, const char *s, size_t n)
{
    size_t ol;
    const char *o = rwd_ifarg_str(kw, "options", &ol);
    size_t i = 0;
    while (i < ol && !isalnum((unsigned char) o[i]) && o[i] != '_')
        i++;
    bool strict = false;
    if (i < ol && tolower((unsigned char) o[i]) == 'a') {
        size_t j = i + 1;
        while (j < ol && !isalnum((unsigned char) o[j]) && o[j] != '_')
            j++;
        if (j < ol && tolower((unsigned char) o[j]) == 'b') {
            j++;
            while (j < ol && !isalnum((unsigned char) o[j]) && o[j] != '_')
                j++;
            strict = j < ol && tolower((unsigned char) o[j]) == 'c';
        }
    }
    const char *sep = memchr(o, '/', ol)    ? "/"
                      : s_find(o, ol, "or") ? "or"
                                            : ",";
    size_t sl = strlen(sep);
    rwd_span_t v = {0, n};
    if (!strict)
        rwd_iftext_strip_punct(s, &v, true);
    for (size_t start = 0;;) {
        const char *hit = s_find(o + start, ol - start, sep);
        size_t end = hit ? (size_t) (hit - o) : ol;
        rwd_span_t opt = {start, end - start};
        rwd_iftext_strip(o, &opt);
        bool eq;
        if (strict) {
            eq = opt.len == n && memcmp(o + opt.off, s, n) == 0;
        } else {
            rwd_iftext_strip_punct(o, &opt, true);
            eq = rwd_iftext_eq_nocase(o + opt.off, opt.len, s + v.off, v.len);
        }
        if (eq)
            return true;
        if (!hit)
            return false;
        start = end + sl;
    }
}

const rwd_ifcheck_t *
rwd_ifcheck_bench(size_t *count)
{
    *count = sizeof s_rows / sizeof s_rows[0];
    return s_rows;
}
