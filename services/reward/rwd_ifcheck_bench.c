/*
 * rwd_ifcheck_bench: IFBench's out-of-distribution instruction checks.
 *
 * Each check restates what IFBench counts: `str.split()` fields, ASCII
 * punctuation removed or stripped, lengths and reversals in code points.
 * Words are gathered as spans of the response (or of a lowercased,
 * punctuation-free copy where the reference first rewrites the text), and
 * repetition is counted by sorting the spans, so every check is
 * O(n log n) in the response at worst. Ids whose reference needs a model
 * or a dictionary lisa does not ship (NLTK's tokenizer and tagger, spaCy,
 * a syllable dictionary, an emoji database, a Japanese tokenizer) are
 * refused with that reason; so are IFBench's "custom:" one-off tasks.
 */
#include "lisa/lisa_mem.h"
#include "rwd_ifcheck.h"
#include "rwd_iftext.h"

#include <ctype.h>
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

static bool
s_word_count_range(const json_t *kw, const char *s, size_t n)
{
    double c = (double) rwd_iftext_count_words(s, n);
    return rwd_ifarg_num(kw, "min_words") <= c &&
           c <= rwd_ifarg_num(kw, "max_words");
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

static bool
s_count_unique_words(const json_t *kw, const char *s, size_t n)
{
    size_t ln, k, distinct;
    char *low = s_rewrite(s, n, true, false, &ln);
    rwd_span_t *f = s_fields(low, ln, true, &k);
    s_runs(low, f, k, &distinct);
    lisa_free(&f);
    lisa_free(&low);
    return (double) distinct >= rwd_ifarg_num(kw, "N");
}

static bool
s_word_repeats(const json_t *kw, const char *s, size_t n)
{
    size_t ln, k, distinct;
    char *low = s_rewrite(s, n, true, true, &ln);
    rwd_span_t *f = s_fields(low, ln, false, &k);
    size_t best = s_runs(low, f, k, &distinct);
    lisa_free(&f);
    lisa_free(&low);
    return (double) best <= rwd_ifarg_num(kw, "small_n");
}

static bool
s_numbers(const json_t *kw, const char *s, size_t n)
{
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
    return (double) c == rwd_ifarg_num(kw, "N");
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
    size_t cap = 1, k = 0;
    for (size_t i = 0; i < n; i++)
        cap += s[i] == '\n';
    rwd_span_t *l = lisa_calloc(cap, sizeof *l);
    for (size_t i = 0, start = 0; i <= n; i++)
        if (i == n || s[i] == '\n') {
            l[k++] = (rwd_span_t){start, i - start};
            start = i + 1;
        }
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

#define S_NLTK   "needs NLTK's word tokenizer or tagger, which lisa does not ship"
#define S_MODEL  "needs a language model or dictionary lisa does not ship"
#define S_CUSTOM "an IFBench one-off task checker lisa does not implement"

static const rwd_ifcheck_t s_rows[] = {
    {"count:word_count_range", "min_words:n max_words:n", s_word_count_range,
     NULL},
    {"count:unique_word_count", "N:n", s_count_unique_words, NULL},
    {"count:numbers", "N:n", s_numbers, NULL},
    {"count:punctuation", NULL, s_punctuation_cover, NULL},
    {"count:keywords_multiple",
     "keyword1:s keyword2:s keyword3:s keyword4:s keyword5:s",
     s_keywords_multiple, NULL},
    {"count:conjunctions", NULL, NULL, S_NLTK},
    {"count:person_names", NULL, NULL, S_MODEL},
    {"count:pronouns", NULL, NULL, S_NLTK},
    {"count:words_japanese", NULL, NULL, S_MODEL},
    {"ratio:stop_words", NULL, NULL, S_NLTK},
    {"ratio:sentence_type", NULL, NULL, S_NLTK},
    {"ratio:sentence_balance", NULL, NULL, S_NLTK},
    {"ratio:overlap", NULL, NULL, S_NLTK},
    {"ratio:sentence_words", NULL, NULL, S_NLTK},
    {"words:alphabet", NULL, s_alphabet_loop, NULL},
    {"words:vowel", NULL, s_single_vowel_paragraph, NULL},
    {"words:consonants", NULL, s_consonant_clusters, NULL},
    {"words:palindrome", NULL, s_palindromes, NULL},
    {"words:prime_lengths", NULL, s_prime_lengths, NULL},
    {"words:repeats", "small_n:n", s_word_repeats, NULL},
    {"words:paragraph_last_first", NULL, s_paragraph_last_first, NULL},
    {"words:no_consecutive", NULL, s_no_consecutive_letter, NULL},
    {"words:start_verb", NULL, NULL, S_NLTK},
    {"words:odd_even_syllables", NULL, NULL, S_MODEL},
    {"words:last_first", NULL, NULL, S_NLTK},
    {"words:keywords_specific_position", NULL, NULL, S_NLTK},
    {"words:words_position", NULL, NULL, S_NLTK},
    {"sentence:alliteration_increment", NULL, NULL, S_NLTK},
    {"sentence:increment", NULL, NULL, S_NLTK},
    {"sentence:keyword", NULL, NULL, S_NLTK},
    {"format:parentheses", NULL, s_nested_brackets, NULL},
    {"format:quotes", NULL, s_nested_quotes, NULL},
    {"format:options", "options:s", s_options, NULL},
    {"format:newline", NULL, s_newline_words, NULL},
    {"format:emoji", NULL, NULL, S_MODEL},
    {"format:line_indent", NULL, s_indent_stairs, NULL},
    {"format:quote_unquote", NULL, s_quote_unquote, NULL},
    {"format:list", "sep:s", s_special_bullets, NULL},
    {"format:thesis", NULL, s_italics_thesis, NULL},
    {"format:sub-bullets", NULL, s_sub_bullets, NULL},
    {"format:no_bullets_bullets", NULL, s_some_bullets, NULL},
    {"format:title_case", NULL, NULL, S_NLTK},
    {"format:output_template", NULL, s_output_template, NULL},
    {"format:no_whitespace", NULL, s_no_whitespace, NULL},
    {"repeat:repeat_simple", NULL, s_repeat_simple, NULL},
    {"repeat:repeat_span", "prompt_to_repeat:s n_start:i n_end:i",
     s_repeat_span, NULL},
    {"repeat:repeat_change", "prompt_to_repeat:s", s_repeat_change, NULL},
    {"custom:multiples", NULL, NULL, S_CUSTOM},
    {"custom:mcq_count_length", NULL, NULL, S_CUSTOM},
    {"custom:reverse_newline", NULL, NULL, S_CUSTOM},
    {"custom:word_reverse", NULL, NULL, S_CUSTOM},
    {"custom:character_reverse", NULL, NULL, S_CUSTOM},
    {"custom:sentence_alphabet", NULL, NULL, S_CUSTOM},
    {"custom:european_capitals_sort", NULL, NULL, S_CUSTOM},
    {"custom:csv_city", NULL, NULL, S_CUSTOM},
    {"custom:csv_special_character", NULL, NULL, S_CUSTOM},
    {"custom:csv_quotes", NULL, NULL, S_CUSTOM},
    {"custom:date_format_list", NULL, NULL, S_CUSTOM},
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
