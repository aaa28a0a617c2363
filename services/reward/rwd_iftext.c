/*
 * rwd_iftext: text primitives for the instruction checkers. See
 * rwd_iftext.h for what each approximates and why.
 */
#include "rwd_iftext.h"

#include "lisa/lisa_mem.h"

#include <ctype.h>
#include <string.h>

uint32_t
rwd_iftext_cp(const char *s, size_t n, size_t i, size_t *len)
{
    const unsigned char *u = (const unsigned char *) s + i;
    size_t left = n - i;
    unsigned char c = u[0];
    *len = 1;
    if (c < 0x80)
        return c;
    size_t need = c >= 0xF0 && c <= 0xF4   ? 4
                  : c >= 0xE0 && c <= 0xEF ? 3
                  : c >= 0xC2 && c <= 0xDF ? 2
                                           : 0;
    if (need == 0 || need > left)
        return 0xFFFD;
    uint32_t cp = need == 2   ? (c & 0x1Fu)
                  : need == 3 ? (c & 0x0Fu)
                              : (c & 0x07u);
    for (size_t k = 1; k < need; k++) {
        if ((u[k] & 0xC0) != 0x80)
            return 0xFFFD;
        cp = (cp << 6) | (u[k] & 0x3Fu);
    }
    if ((need == 3 && cp < 0x800) || (need == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0xFFFD;
    *len = need;
    return cp;
}

bool
rwd_iftext_is_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) ||
           cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool
rwd_iftext_is_word(uint32_t cp)
{
    if (cp < 0x80)
        return isalnum((int) cp) || cp == '_';
    if (cp <= 0xBF)
        return cp == 0xAA || cp == 0xB2 || cp == 0xB3 || cp == 0xB5 ||
               cp == 0xB9 || cp == 0xBA || cp == 0xBC || cp == 0xBD ||
               cp == 0xBE;
    if (cp == 0xD7 || cp == 0xF7 || cp == 0xFFFD)
        return false;
    if (rwd_iftext_is_space(cp))
        return false;
    /* Combining marks that are no letters: diacritics, variation
     * selectors, tags. */
    if ((cp >= 0x300 && cp <= 0x36F) || (cp >= 0x1AB0 && cp <= 0x1AFF) ||
        (cp >= 0x1DC0 && cp <= 0x1DFF) || (cp >= 0xFE00 && cp <= 0xFE0F) ||
        (cp >= 0xE0000 && cp <= 0xE01EF))
        return false;
    /* Punctuation, symbols, arrows, box drawing, dingbats, CJK punctuation,
     * full-width punctuation, emoji: not word characters. */
    if ((cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) ||
        (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF0F) ||
        (cp >= 0xFF1A && cp <= 0xFF20) || (cp >= 0x1F000 && cp <= 0x1FAFF) ||
        (cp >= 0xE000 && cp <= 0xF8FF))
        return false;
    return true;
}

bool
rwd_iftext_is_punct(int c)
{
    return c > 0 && c < 0x80 && ispunct(c);
}

bool
rwd_iftext_boundary(const char *s, size_t n, size_t i)
{
    bool before = false, after = false;
    size_t len;
    if (i > 0) {
        size_t b = i - 1;
        while (b > 0 && i - b < 4 && ((unsigned char) s[b] & 0xC0) == 0x80)
            b--;
        before = rwd_iftext_is_word(rwd_iftext_cp(s, n, b, &len));
    }
    if (i < n)
        after = rwd_iftext_is_word(rwd_iftext_cp(s, n, i, &len));
    return before != after;
}

size_t
rwd_iftext_count_words(const char *s, size_t n)
{
    size_t count = 0, i = 0, len;
    bool in = false;
    while (i < n) {
        bool w = rwd_iftext_is_word(rwd_iftext_cp(s, n, i, &len));
        if (w && !in)
            count++;
        in = w;
        i += len;
    }
    return count;
}

bool
rwd_iftext_field(const char *s, size_t n, size_t *pos, rwd_span_t *f)
{
    size_t i = *pos, len;
    while (i < n && rwd_iftext_is_space(rwd_iftext_cp(s, n, i, &len)))
        i += len;
    if (i >= n) {
        *pos = n;
        return false;
    }
    f->off = i;
    while (i < n && !rwd_iftext_is_space(rwd_iftext_cp(s, n, i, &len)))
        i += len;
    f->len = i - f->off;
    *pos = i;
    return true;
}

/* Byte length of the code point that ends at s[end) (end > start). */
static size_t
s_last_cp(const char *s, size_t start, size_t end, uint32_t *cp)
{
    size_t b = end - 1;
    while (b > start && end - b < 4 && ((unsigned char) s[b] & 0xC0) == 0x80)
        b--;
    size_t len;
    *cp = rwd_iftext_cp(s, end, b, &len);
    if (b + len != end) { /* not a whole character: one byte */
        *cp = 0xFFFD;
        return 1;
    }
    return len;
}

void
rwd_iftext_strip(const char *s, rwd_span_t *sp)
{
    size_t i = sp->off, end = sp->off + sp->len, len;
    while (i < end && rwd_iftext_is_space(rwd_iftext_cp(s, end, i, &len)))
        i += len;
    while (end > i) {
        uint32_t cp;
        size_t l = s_last_cp(s, i, end, &cp);
        if (!rwd_iftext_is_space(cp))
            break;
        end -= l;
    }
    sp->off = i;
    sp->len = end - i;
}

void
rwd_iftext_strip_punct(const char *s, rwd_span_t *sp, bool space)
{
    size_t i = sp->off, end = sp->off + sp->len;
    while (i < end && (rwd_iftext_is_punct((unsigned char) s[i]) ||
                       (space && s[i] == ' ')))
        i++;
    while (end > i && (rwd_iftext_is_punct((unsigned char) s[end - 1]) ||
                       (space && s[end - 1] == ' ')))
        end--;
    sp->off = i;
    sp->len = end - i;
}

bool
rwd_iftext_in_sorted(const char *const *sorted, size_t n, const char *w,
                     size_t wl)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *e = sorted[mid];
        size_t el = strlen(e), m = el < wl ? el : wl;
        int c = memcmp(e, w, m);
        if (c == 0)
            c = el < wl ? -1 : el > wl;
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

bool
rwd_iftext_eq_nocase(const char *a, size_t an, const char *b, size_t bn)
{
    if (an != bn)
        return false;
    for (size_t i = 0; i < an; i++)
        if (tolower((unsigned char) a[i]) != tolower((unsigned char) b[i]))
            return false;
    return true;
}

size_t
rwd_iftext_find_nocase(const char *hay, size_t n, size_t from,
                       const char *needle, size_t nl)
{
    if (nl == 0)
        return from <= n ? from : SIZE_MAX;
    for (size_t i = from; i + nl <= n; i++)
        if (tolower((unsigned char) hay[i]) ==
                tolower((unsigned char) needle[0]) &&
            rwd_iftext_eq_nocase(hay + i, nl, needle, nl))
            return i;
    return SIZE_MAX;
}

/* Words after which a full stop does not end a sentence. */
static const char *const s_abbrev[] = {
    "mr",     "mrs",  "ms",   "dr",  "prof", "sr",  "jr",   "st",  "vs",
    "etc",    "e.g",  "i.e",  "inc", "ltd",  "co",  "corp", "no",  "fig",
    "approx", "dept", "est",  "jan", "feb",  "mar", "apr",  "jun", "jul",
    "aug",    "sep",  "sept", "oct", "nov",  "dec", "u.s",  "u.k", "a.m",
    "p.m",    "mt",   "gen",  "col", "lt"};

/* NLTK's English stopwords (the entries a `\w+` token can equal). */
static const char *const s_stopwords[] = {
    "a",       "about",      "above",     "after",  "again",     "against",
    "ain",     "all",        "am",        "an",     "and",       "any",
    "are",     "aren",       "as",        "at",     "be",        "because",
    "been",    "before",     "being",     "below",  "between",   "both",
    "but",     "by",         "can",       "couldn", "d",         "did",
    "didn",    "do",         "does",      "doesn",  "doing",     "don",
    "down",    "during",     "each",      "few",    "for",       "from",
    "further", "had",        "hadn",      "has",    "hasn",      "have",
    "haven",   "having",     "he",        "her",    "here",      "hers",
    "herself", "him",        "himself",   "his",    "how",       "i",
    "if",      "in",         "into",      "is",     "isn",       "it",
    "its",     "itself",     "just",      "ll",     "m",         "ma",
    "me",      "mightn",     "more",      "most",   "mustn",     "my",
    "myself",  "needn",      "no",        "nor",    "not",       "now",
    "o",       "of",         "off",       "on",     "once",      "only",
    "or",      "other",      "our",       "ours",   "ourselves", "out",
    "over",    "own",        "re",        "s",      "same",      "shan",
    "she",     "should",     "shouldn",   "so",     "some",      "such",
    "t",       "than",       "that",      "the",    "their",     "theirs",
    "them",    "themselves", "then",      "there",  "these",     "they",
    "this",    "those",      "through",   "to",     "too",       "under",
    "until",   "up",         "ve",        "very",   "was",       "wasn",
    "we",      "were",       "weren",     "what",   "when",      "where",
    "which",   "while",      "who",       "whom",   "why",       "will",
    "with",    "won",        "wouldn",    "y",      "you",       "your",
    "yours",   "yourself",   "yourselves"};

bool
rwd_iftext_is_stopword(const char *w, size_t wl)
{
    return rwd_iftext_in_sorted(
        s_stopwords, sizeof s_stopwords / sizeof s_stopwords[0], w, wl);
}

/* Punkt's orthographic evidence about the word after byte i, approximated:
 * S_NEXT_STARTER a capitalized word that is, lower-cased, a common word
 * (one Punkt saw in lower case: it starts sentences), S_NEXT_NAME another
 * capitalized word, S_NEXT_LOWER a lower-case word, S_NEXT_OTHER anything
 * else (a quote, a digit, the end). */
enum { S_NEXT_OTHER, S_NEXT_STARTER, S_NEXT_NAME, S_NEXT_LOWER };

static int
s_next_word(const char *s, size_t n, size_t i)
{
    size_t len;
    while (i < n && rwd_iftext_is_space(rwd_iftext_cp(s, n, i, &len)))
        i += len;
    if (i >= n)
        return S_NEXT_OTHER;
    int c = rwd_iftext_case(rwd_iftext_cp(s, n, i, &len));
    if (c == -1)
        return S_NEXT_LOWER;
    if (c == 0)
        return S_NEXT_OTHER;
    char w[16];
    size_t wl = 0;
    while (i < n && wl < sizeof w && isalpha((unsigned char) s[i]))
        w[wl++] = (char) tolower((unsigned char) s[i++]);
    bool whole = i >= n || !isalpha((unsigned char) s[i]);
    bool common =
        whole && !(wl == 1 && w[0] == 'i') && rwd_iftext_is_stopword(w, wl);
    return common ? S_NEXT_STARTER : S_NEXT_NAME;
}

/* Whether the single '.' at `dot` (the word before it starts after
 * `start`) ends a sentence, given what follows from byte `after`. As in
 * Punkt: after a known abbreviation only when a sentence starter follows;
 * after an initial (one letter) unless a lower-case word or a name
 * follows; after a number unless a lower-case word follows; else always. */
static bool
s_dot_ends(const char *s, size_t n, size_t start, size_t dot, size_t after)
{
    size_t b = dot;
    while (b > start && !rwd_iftext_is_space((unsigned char) s[b - 1]) &&
           s[b - 1] != '(' && s[b - 1] != '"')
        b--;
    size_t wl = dot - b;
    int next = s_next_word(s, n, after);
    if (wl == 1 && isalpha((unsigned char) s[b]))
        return next != S_NEXT_LOWER && next != S_NEXT_NAME;
    for (size_t k = 0; k < sizeof s_abbrev / sizeof s_abbrev[0]; k++)
        if (rwd_iftext_eq_nocase(s + b, wl, s_abbrev[k], strlen(s_abbrev[k])))
            return next == S_NEXT_STARTER;
    bool number = wl > 0;
    for (size_t k = b; number && k < dot; k++)
        number = isdigit((unsigned char) s[k]) || s[k] == ',' || s[k] == '.';
    if (number)
        return next != S_NEXT_LOWER;
    return true;
}

static bool
s_closer(unsigned char c)
{
    return c == '"' || c == '\'' || c == ')' || c == ']' || c == '}';
}

/* Where a splitter's pieces go: a caller's array of `max` items of `size`
 * bytes (the count stays exact) or, with `grow`, an array that grows from
 * `first` items. */
typedef struct {
    void *out;
    size_t size;
    size_t first;
    size_t max;
    size_t count;
    bool grow;
} s_sink_t;

static void
s_sink_push(s_sink_t *k, const void *item)
{
    if (k->grow && k->count == k->max) {
        k->max = k->max ? 2 * k->max : k->first;
        k->out = lisa_realloc(k->out, k->max * k->size);
    }
    if (k->out && k->count < k->max)
        memcpy((char *) k->out + k->count * k->size, item, k->size);
    k->count++;
}

/* A splitter: its pieces of s[0..n) into k. */
typedef void s_split_fn(const char *s, size_t n, s_sink_t *k);

/* Up to `max` pieces into out (items of `size` bytes); how many there are. */
static size_t
s_split_into(s_split_fn *f, const char *s, size_t n, void *out, size_t size,
             size_t max)
{
    s_sink_t k = {out, size, 0, max, 0, false};
    f(s, n, &k);
    return k.count;
}

/* Every piece: a new array (never NULL) grown from `first` items, and its
 * count. */
static void *
s_split_new(s_split_fn *f, const char *s, size_t n, size_t size, size_t first,
            size_t *count)
{
    s_sink_t k = {NULL, size, first, 0, 0, true};
    f(s, n, &k);
    *count = k.count;
    return k.out ? k.out : lisa_calloc(1, size);
}

static void
s_add(const char *s, size_t a, size_t b, s_sink_t *k)
{
    rwd_span_t sp;
    sp.off = a;
    sp.len = b - a;
    rwd_iftext_strip(s, &sp);
    if (sp.len == 0)
        return;
    s_sink_push(k, &sp);
}

static void
s_split_sentences(const char *s, size_t n, s_sink_t *k)
{
    size_t start = 0, i = 0;
    while (i < n) {
        unsigned char c = (unsigned char) s[i];
        if (c != '.' && c != '!' && c != '?') {
            i++;
            continue;
        }
        size_t t = i;
        while (i < n && (s[i] == '.' || s[i] == '!' || s[i] == '?'))
            i++;
        while (i < n && s_closer((unsigned char) s[i]))
            i++;
        size_t sl;
        bool at_space =
            i == n || rwd_iftext_is_space(rwd_iftext_cp(s, n, i, &sl));
        bool single_dot =
            i > t && s[t] == '.' && (t + 1 == n || s[t + 1] != '.');
        bool ellipsis = t + 1 < n && s[t] == '.' && s[t + 1] == '.';
        if (!at_space || (single_dot && !s_dot_ends(s, n, start, t, i)) ||
            (ellipsis && s_next_word(s, n, i) != S_NEXT_STARTER))
            continue;
        s_add(s, start, i, k);
        start = i;
    }
    s_add(s, start, n, k);
}

size_t
rwd_iftext_sentences(const char *s, size_t n, rwd_span_t *out, size_t max)
{
    return s_split_into(s_split_sentences, s, n, out, sizeof *out, max);
}

rwd_span_t *
rwd_iftext_sentences_new(const char *s, size_t n, size_t *count)
{
    return s_split_new(s_split_sentences, s, n, sizeof(rwd_span_t), 16, count);
}

static void
s_split_lines(const char *s, size_t n, s_sink_t *k)
{
    for (size_t i = 0, start = 0; i <= n; i++)
        if (i == n || s[i] == '\n') {
            s_sink_push(k, &(rwd_span_t){start, i - start});
            start = i + 1;
        }
}

rwd_span_t *
rwd_iftext_lines_new(const char *s, size_t n, size_t *count)
{
    return s_split_new(s_split_lines, s, n, sizeof(rwd_span_t), 16, count);
}

int
rwd_iftext_case(uint32_t cp)
{
    if (cp < 0x80)
        return isupper((int) cp) ? 1 : islower((int) cp) ? -1 : 0;
    if (cp == 0xAA || cp == 0xBA)
        return 0;
    if (cp == 0xB5 || cp == 0xDF || cp == 0xFF)
        return -1;
    if (cp >= 0xC0 && cp <= 0xFE && cp != 0xD7 && cp != 0xF7)
        return cp <= 0xDE ? 1 : -1;
    if (cp >= 0x100 && cp <= 0x17F) {
        if (cp == 0x138 || cp == 0x149 || cp == 0x17F)
            return -1;
        if (cp == 0x178)
            return 1;
        bool odd_upper = (cp >= 0x139 && cp <= 0x148) || cp >= 0x179;
        return ((cp & 1u) != 0) == odd_upper ? 1 : -1;
    }
    if (cp >= 0x391 && cp <= 0x3A9 && cp != 0x3A2)
        return 1;
    if (cp >= 0x3AC && cp <= 0x3CE)
        return -1;
    if (cp >= 0x400 && cp <= 0x42F)
        return 1;
    if (cp >= 0x430 && cp <= 0x45F)
        return -1;
    if (cp >= 0x460 && cp <= 0x4FF) /* Cyrillic pairs: even upper */
        return (cp & 1u) ? -1 : 1;
    if (cp >= 0x1E00 && cp <= 0x1EFF) /* Latin Extended Additional */
        return (cp & 1u) ? -1 : 1;
    return 0;
}

uint32_t
rwd_iftext_lower(uint32_t cp)
{
    if (rwd_iftext_case(cp) != 1)
        return cp;
    if (cp < 0x80 || (cp >= 0xC0 && cp <= 0xDE))
        return cp + 0x20;
    if (cp == 0x178)
        return 0xFF;
    if (cp >= 0x391 && cp <= 0x3A9)
        return cp + 0x20;
    if (cp >= 0x400 && cp <= 0x40F)
        return cp + 0x50;
    if (cp >= 0x410 && cp <= 0x42F)
        return cp + 0x20;
    return cp + 1; /* the paired ranges */
}

bool
rwd_iftext_is_cased(const char *s, size_t n, bool upper)
{
    bool any = false;
    size_t len;
    for (size_t i = 0; i < n; i += len) {
        int c = rwd_iftext_case(rwd_iftext_cp(s, n, i, &len));
        if (c == (upper ? -1 : 1))
            return false;
        any |= c != 0;
    }
    return any;
}

/* --- word_tokenize ------------------------------------------------------ */

static void
s_tok(s_sink_t *t, size_t off, size_t len, char quote)
{
    if (len == 0)
        return;
    s_sink_push(t, &(rwd_token_t){off, len, quote});
}

static bool
s_ends_with(const char *s, size_t off, size_t len, const char *suf)
{
    size_t l = strlen(suf);
    return len > l && memcmp(s + off + len - l, suf, l) == 0;
}

/* Treebank's contraction and quote rules on one word. */
static void
s_tok_word(s_sink_t *t, const char *s, size_t off, size_t len)
{
    static const char *const split3[] = {"cannot", "gimme", "gonna",
                                         "gotta",  "lemme", "wanna"};
    static const char *const sufs[] = {"'s",  "'S",  "'m",  "'M",  "'d",
                                       "'D",  "'ll", "'LL", "'re", "'RE",
                                       "'ve", "'VE", "n't", "N'T", "'"};
    if (len == 2 && s[off] == '\'' &&
        rwd_iftext_is_word((unsigned char) s[off + 1]) &&
        !strchr("mtsdnMTSDN", s[off + 1])) {
        s_tok(t, off, 1, 0);
        s_tok(t, off + 1, 1, 0);
        return;
    }
    if (len == 5 || len == 6) {
        char low[6];
        for (size_t k = 0; k < len; k++)
            low[k] = (char) tolower((unsigned char) s[off + k]);
        if (rwd_iftext_in_sorted(split3, 6, low, len)) {
            s_tok(t, off, 3, 0);
            s_tok(t, off + 3, len - 3, 0);
            return;
        }
    }
    char last = s[off + len - 1];
    if (len >= 2 && (last == '\'' || strchr("sSmMdDlLeEtT", last))) {
        for (size_t k = 0; k < sizeof sufs / sizeof sufs[0]; k++) {
            size_t sl = strlen(sufs[k]);
            if (s_ends_with(s, off, len, sufs[k]) &&
                s[off + len - sl - 1] != '\'') {
                s_tok(t, off, len - sl, 0);
                s_tok(t, off + len - sl, sl, 0);
                return;
            }
        }
    }
    s_tok(t, off, len, 0);
}

/* Unicode quotes NLTK splits off: 1 opening, 2 closing, 0 neither. */
static int
s_uquote(uint32_t cp)
{
    if (cp == 0xAB || cp == 0x201C || cp == 0x2018 || cp == 0x201E)
        return 1;
    if (cp == 0xBB || cp == 0x201D || cp == 0x2019)
        return 2;
    return 0;
}

/* Offset of the sentence-final period of the field [f, g), or SIZE_MAX:
 * a '.' (not after another) followed only by closing brackets and
 * quotes. */
static size_t
s_final_dot(const char *s, size_t f, size_t g)
{
    size_t e = g;
    while (e > f) {
        uint32_t cp;
        size_t l = s_last_cp(s, f, e, &cp);
        if (!(cp < 0x80 && strchr("])}>\"'", (int) cp) && cp) &&
            s_uquote(cp) != 2)
            break;
        e -= l;
    }
    if (e > f && s[e - 1] == '.' && (e - 1 == f || s[e - 2] != '.'))
        return e - 1;
    return SIZE_MAX;
}

/* One whitespace-separated field [f, g) of a sentence that starts at
 * `sent`; `last` when it is the sentence's last field. */
static void
s_tok_field(s_sink_t *t, const char *s, size_t sent, size_t f, size_t g,
            bool last)
{
    size_t dot = last ? s_final_dot(s, f, g) : SIZE_MAX;
    size_t w = f, i = f;
    while (i < g) {
        char c = s[i];
        size_t len = 0, cl;
        char quote = 0;
        uint32_t cp = rwd_iftext_cp(s, g, i, &cl);
        if (i == dot || (c && strchr(";@#$%&?!*()[]{}<>", c))) {
            len = 1;
        } else if (s_uquote(cp)) {
            len = cl;
        } else if (c == '"') {
            len = 1;
            /* opening at the sentence start or after a space or bracket */
            quote = i == sent || strchr(" ([{<", s[i - 1]) ? '`' : '\'';
        } else if (c == '\'' && i + 1 < g && s[i + 1] == '\'') {
            len = 2;
            quote = i > sent && strchr(" ([{<", s[i - 1]) ? '`' : '\'';
        } else if (c == '`') {
            len = 1;
            while (i + len < g && s[i + len] == '`')
                len++;
            quote = len == 2 ? '`' : 0;
        } else if (c == '-' && i + 1 < g && s[i + 1] == '-') {
            len = 2;
        } else if (c == '.' && i + 1 < g && s[i + 1] == '.') {
            len = 1;
            while (i + len < g && s[i + len] == '.')
                len++;
        } else if ((c == ',' || c == ':') &&
                   (i + 1 == g || !isdigit((unsigned char) s[i + 1]))) {
            len = 1;
        }
        if (len == 0) {
            i += cl;
            continue;
        }
        if (i > w)
            s_tok_word(t, s, w, i - w);
        s_tok(t, i, len, quote);
        i += len;
        w = i;
    }
    if (g > w)
        s_tok_word(t, s, w, g - w);
}

static void
s_tokenize(const char *s, size_t n, s_sink_t *t)
{
    size_t ns;
    rwd_span_t *sent = rwd_iftext_sentences_new(s, n, &ns);
    for (size_t k = 0; k < ns; k++) {
        size_t end = sent[k].off + sent[k].len, pos = sent[k].off;
        rwd_span_t f;
        bool more = rwd_iftext_field(s, end, &pos, &f);
        while (more) {
            rwd_span_t next;
            more = rwd_iftext_field(s, end, &pos, &next);
            s_tok_field(t, s, sent[k].off, f.off, f.off + f.len, !more);
            f = next;
        }
    }
    lisa_free(&sent);
}

size_t
rwd_iftext_tokens(const char *s, size_t n, rwd_token_t *out, size_t max)
{
    return s_split_into(s_tokenize, s, n, out, sizeof *out, max);
}

rwd_token_t *
rwd_iftext_tokens_new(const char *s, size_t n, size_t *count)
{
    return s_split_new(s_tokenize, s, n, sizeof(rwd_token_t), 64, count);
}
