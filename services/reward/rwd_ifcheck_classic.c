/*
 * rwd_ifcheck_classic: IFEval's instruction checks (the families IFBench
 * ships as its "classic" verifiers and lm-eval as its ifeval task).
 *
 * Each check restates in C what the reference counts: where the reference
 * uses a regular expression, the scan below walks the text the way that
 * expression matches it (leftmost, non-overlapping, greedy where it is
 * greedy), so counts agree on the same text. Keywords are matched as
 * literal text, case-insensitively (the reference passes them to `re`,
 * which only differs for keywords holding regex metacharacters). The three
 * checks that ask langdetect use rwd_iflang instead.
 */
#include "lisa/lisa_mem.h"
#include "rwd_ifcheck.h"
#include "rwd_iflang.h"
#include "rwd_iftext.h"

#include <ctype.h>
#include <string.h>

/* Code point at i is whitespace (Python re `\s`); *len its length. */
static bool
s_ws(const char *s, size_t n, size_t i, size_t *len)
{
    return i < n && rwd_iftext_is_space(rwd_iftext_cp(s, n, i, len));
}

static bool
s_blank(const char *s, size_t off, size_t len)
{
    rwd_span_t sp = {off, len};
    rwd_iftext_strip(s, &sp);
    return sp.len == 0;
}

static size_t
s_count_nocase(const char *s, size_t n, const char *k, size_t kl)
{
    size_t count = 0, at = 0;
    if (kl == 0)
        return n + 1; /* an empty pattern matches at every position */
    while ((at = rwd_iftext_find_nocase(s, n, at, k, kl)) != SIZE_MAX) {
        count++;
        at += kl;
    }
    return count;
}

static bool
s_keywords_existence(const json_t *kw, const char *s, size_t n)
{
    const json_t *list = rwd_ifarg_list(kw, "keywords");
    size_t i;
    const json_t *v;
    json_array_foreach(list, i, v)
    {
        const char *k = json_string_value(v);
        size_t kl = json_string_length(v);
        if (rwd_iftext_find_nocase(s, n, 0, k, kl) == SIZE_MAX)
            return false;
    }
    return true;
}

static double
s_keywords_frequency(const json_t *kw, const char *s, size_t n)
{
    size_t kl;
    const char *k = rwd_ifarg_str(kw, "keyword", &kl);
    rwd_span_t sp = {0, kl};
    rwd_iftext_strip(k, &sp);
    return (double) s_count_nocase(s, n, k + sp.off, sp.len);
}

static bool
s_forbidden_words(const json_t *kw, const char *s, size_t n)
{
    const json_t *list = rwd_ifarg_list(kw, "forbidden_words");
    size_t i;
    const json_t *v;
    json_array_foreach(list, i, v)
    {
        const char *k = json_string_value(v);
        size_t kl = json_string_length(v), at = 0;
        while ((at = rwd_iftext_find_nocase(s, n, at, k, kl)) != SIZE_MAX) {
            if (rwd_iftext_boundary(s, n, at) &&
                rwd_iftext_boundary(s, n, at + kl))
                return false;
            at++;
        }
    }
    return true;
}

static double
s_letter_frequency(const json_t *kw, const char *s, size_t n)
{
    const char *l = rwd_ifarg_str(kw, "letter", NULL);
    int want = tolower((unsigned char) l[0]);
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += tolower((unsigned char) s[i]) == want;
    return (double) c;
}

static double
s_number_sentences(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    return (double) rwd_iftext_sentences(s, n, NULL, 0);
}

static double
s_number_words(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    return (double) rwd_iftext_count_words(s, n);
}

/* Pieces of s split at every (non-overlapping) `sep`: calls fn per piece
 * with its index and whether it is the last; stops when fn returns false. */
typedef bool (*s_piece_fn)(void *ctx, const char *s, rwd_span_t piece,
                           size_t index, bool last);

static bool
s_split(const char *s, size_t n, const char *sep, s_piece_fn fn, void *ctx)
{
    size_t sl = strlen(sep), start = 0, index = 0;
    for (;;) {
        const char *hit = NULL;
        for (size_t i = start; i + sl <= n; i++)
            if (memcmp(s + i, sep, sl) == 0) {
                hit = s + i;
                break;
            }
        size_t end = hit ? (size_t) (hit - s) : n;
        rwd_span_t piece = {start, end - start};
        if (!fn(ctx, s, piece, index++, hit == NULL))
            return false;
        if (!hit)
            return true;
        start = end + sl;
    }
}

typedef struct {
    size_t pieces;
    size_t nonblank;
    bool bad;
    /* nth paragraph */
    size_t nth;
    rwd_span_t nth_span;
    bool nth_found;
} s_paras_t;

static bool
s_para_piece(void *ctx, const char *s, rwd_span_t p, size_t index, bool last)
{
    s_paras_t *c = ctx;
    c->pieces++;
    bool blank = s_blank(s, p.off, p.len);
    if (!blank)
        c->nonblank++;
    else if (index != 0 && !last)
        c->bad = true;
    if (c->nth && index + 1 == c->nth) {
        c->nth_span = p;
        c->nth_found = true;
    }
    return true;
}

static bool
s_number_paragraphs(const json_t *kw, const char *s, size_t n)
{
    s_paras_t c = {0};
    s_split(s, n, "***", s_para_piece, &c);
    return !c.bad && (double) c.nonblank == rwd_ifarg_num(kw, "num_paragraphs");
}

static bool
s_nth_paragraph_first_word(const json_t *kw, const char *s, size_t n)
{
    s_paras_t c = {0};
    c.nth = (size_t) rwd_ifarg_num(kw, "nth_paragraph");
    s_split(s, n, "\n\n", s_para_piece, &c);
    if ((double) c.nth > (double) c.nonblank || !c.nth_found)
        return false;
    rwd_span_t p = c.nth_span;
    rwd_iftext_strip(s, &p);
    if (p.len == 0)
        return false;
    size_t pos = p.off;
    rwd_span_t w;
    rwd_iftext_field(s, p.off + p.len, &pos, &w);
    size_t i = w.off, end = w.off + w.len;
    while (i < end && s[i] == '\'')
        i++;
    while (i < end && s[i] == '"')
        i++;
    size_t b = i;
    while (i < end && !strchr(".,?!'\"", s[i]))
        i++;
    size_t fl;
    const char *first = rwd_ifarg_str(kw, "first_word", &fl);
    return (double) c.nonblank == rwd_ifarg_num(kw, "num_paragraphs") &&
           rwd_iftext_eq_nocase(s + b, i - b, first, fl);
}

static double
s_number_placeholders(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '[')
            continue;
        size_t j = i + 1;
        while (j < n && s[j] != ']' && s[j] != '\n')
            j++;
        if (j < n && s[j] == ']') {
            count++;
            i = j;
        }
    }
    return (double) count;
}

/* s at i starts with lowercase `lit`, where ' ' in lit is an optional
 * whitespace character (`\s?`); *end gets the match end. */
static bool
s_match_loose(const char *s, size_t n, size_t i, const char *lit, size_t *end)
{
    for (; *lit; lit++) {
        size_t len;
        if (*lit == ' ') {
            if (s_ws(s, n, i, &len))
                i += len;
            continue;
        }
        if (i >= n || tolower((unsigned char) s[i]) != *lit)
            return false;
        i++;
    }
    *end = i;
    return true;
}

static bool
s_postscript(const json_t *kw, const char *s, size_t n)
{
    size_t ml, end;
    const char *m = rwd_ifarg_str(kw, "postscript_marker", &ml);
    rwd_span_t sp = {0, ml};
    rwd_iftext_strip(m, &sp);
    const char *pat = NULL;
    if (sp.len == 5 && memcmp(m + sp.off, "P.P.S", 5) == 0)
        pat = "p. p. s";
    else if (sp.len == 4 && memcmp(m + sp.off, "P.S.", 4) == 0)
        pat = "p. s.";
    if (!pat)
        return rwd_iftext_find_nocase(s, n, 0, m + sp.off, sp.len) != SIZE_MAX;
    for (size_t i = 0; i < n; i++)
        if (s_match_loose(s, n, i, pat, &end))
            return true;
    return false;
}

/* Lines matching ^\s*<c>... : `star` requires a non-'*' after the '*'. */
static size_t
s_count_bullets(const char *s, size_t n, char c, bool star)
{
    size_t count = 0, i = 0;
    while (i < n) {
        if (i > 0 && s[i - 1] != '\n') {
            i++;
            continue;
        }
        size_t j = i, len;
        while (s_ws(s, n, j, &len))
            j += len;
        bool ok = j < n && s[j] == c;
        if (ok && star)
            ok = j + 1 < n && s[j + 1] != '*';
        if (!ok) {
            i++;
            continue;
        }
        j += star ? 2 : 1;
        while (j < n && s[j] != '\n')
            j++;
        count++;
        i = j;
    }
    return count;
}

static double
s_number_bullet_lists(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    return (double) (s_count_bullets(s, n, '*', true) +
                     s_count_bullets(s, n, '-', false));
}

static bool
s_constrained_response(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    static const char *const opts[] = {"My answer is yes.", "My answer is no.",
                                       "My answer is maybe."};
    rwd_span_t sp = {0, n};
    rwd_iftext_strip(s, &sp);
    for (size_t k = 0; k < 3; k++) {
        size_t ol = strlen(opts[k]);
        for (size_t i = sp.off; i + ol <= sp.off + sp.len; i++)
            if (memcmp(s + i, opts[k], ol) == 0)
                return true;
    }
    return false;
}

static bool
s_highlight_nonblank(const char *s, size_t a, size_t b)
{
    return b > a && !s_blank(s, a, b - a);
}

static double
s_number_highlighted(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t count = 0;
    for (size_t i = 0; i < n; i++) { /* \*[^\n\*]*\* */
        if (s[i] != '*')
            continue;
        size_t j = i + 1;
        while (j < n && s[j] != '*' && s[j] != '\n')
            j++;
        if (j < n && s[j] == '*') {
            count += s_highlight_nonblank(s, i + 1, j);
            i = j;
        }
    }
    for (size_t i = 0; i + 1 < n; i++) { /* \*\*[^\n\*]*\*\* */
        if (s[i] != '*' || s[i + 1] != '*')
            continue;
        size_t j = i + 2;
        while (j < n && s[j] != '*' && s[j] != '\n')
            j++;
        if (j + 1 < n && s[j] == '*' && s[j + 1] == '*') {
            count += s_highlight_nonblank(s, i + 2, j);
            i = j + 1;
        }
    }
    return (double) count;
}

static double
s_multiple_sections(const json_t *kw, const char *s, size_t n)
{
    size_t kl, count = 0, len;
    const char *k = rwd_ifarg_str(kw, "section_spliter", &kl);
    rwd_span_t sp = {0, kl};
    rwd_iftext_strip(k, &sp);
    for (size_t i = 0; sp.len > 0 && i + sp.len <= n; i++) {
        if (memcmp(s + i, k + sp.off, sp.len) != 0)
            continue;
        size_t j = i + sp.len;
        if (s_ws(s, n, j, &len))
            j += len;
        if (j >= n || !isdigit((unsigned char) s[j]))
            continue;
        while (j < n && isdigit((unsigned char) s[j]))
            j++;
        count++;
        i = j - 1;
    }
    return (double) count;
}

static void
s_remove_prefix(const char *s, rwd_span_t *sp, const char *p)
{
    size_t pl = strlen(p);
    if (sp->len >= pl && memcmp(s + sp->off, p, pl) == 0) {
        sp->off += pl;
        sp->len -= pl;
    }
}

static bool
s_json_format(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    rwd_span_t sp = {0, n};
    rwd_iftext_strip(s, &sp);
    s_remove_prefix(s, &sp, "```json");
    s_remove_prefix(s, &sp, "```Json");
    s_remove_prefix(s, &sp, "```JSON");
    s_remove_prefix(s, &sp, "```");
    if (sp.len >= 3 && memcmp(s + sp.off + sp.len - 3, "```", 3) == 0)
        sp.len -= 3;
    rwd_iftext_strip(s, &sp);
    json_error_t err;
    json_t *j = json_loadb(s + sp.off, sp.len, JSON_DECODE_ANY, &err);
    bool ok = j != NULL;
    json_decref(j);
    return ok;
}

static bool
s_title(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t i = 0;
    while (i + 1 < n) {
        if (s[i] != '<' || s[i + 1] != '<') {
            i++;
            continue;
        }
        size_t eol = i + 2;
        while (eol < n && s[eol] != '\n')
            eol++;
        size_t close = SIZE_MAX; /* greedy: the last ">>" on the line */
        for (size_t k = i + 3; k + 2 <= eol; k++)
            if (s[k] == '>' && s[k + 1] == '>')
                close = k;
        if (close == SIZE_MAX) {
            i++;
            continue;
        }
        size_t a = i, b = close + 2;
        while (a < b && s[a] == '<')
            a++;
        while (b > a && s[b - 1] == '>')
            b--;
        if (!s_blank(s, a, b - a))
            return true;
        i = close + 2;
    }
    return false;
}

typedef struct {
    rwd_span_t valid[3];
    size_t count;
    bool bad;
} s_two_t;

static bool
s_two_piece(void *ctx, const char *s, rwd_span_t p, size_t index, bool last)
{
    s_two_t *c = ctx;
    if (s_blank(s, p.off, p.len)) {
        if (index != 0 && !last)
            c->bad = true;
    } else {
        if (c->count < 3)
            c->valid[c->count] = p;
        c->count++;
    }
    return !c->bad;
}

static bool
s_two_responses(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    s_two_t c = {0};
    s_split(s, n, "******", s_two_piece, &c);
    if (c.bad || c.count != 2)
        return false;
    rwd_span_t a = c.valid[0], b = c.valid[1];
    rwd_iftext_strip(s, &a);
    rwd_iftext_strip(s, &b);
    return a.len != b.len || memcmp(s + a.off, s + b.off, a.len) != 0;
}

static bool
s_repeat_prompt(const json_t *kw, const char *s, size_t n)
{
    size_t pl;
    const char *p = rwd_ifarg_str(kw, "prompt_to_repeat", &pl);
    rwd_span_t ps = {0, pl}, vs = {0, n};
    rwd_iftext_strip(p, &ps);
    rwd_iftext_strip(s, &vs);
    return vs.len >= ps.len &&
           rwd_iftext_eq_nocase(s + vs.off, ps.len, p + ps.off, ps.len);
}

static bool
s_end_checker(const json_t *kw, const char *s, size_t n)
{
    size_t el;
    const char *e = rwd_ifarg_str(kw, "end_phrase", &el);
    rwd_span_t es = {0, el}, vs = {0, n};
    rwd_iftext_strip(e, &es);
    rwd_iftext_strip(s, &vs);
    while (vs.len && s[vs.off] == '"') {
        vs.off++;
        vs.len--;
    }
    while (vs.len && s[vs.off + vs.len - 1] == '"')
        vs.len--;
    return vs.len >= es.len &&
           rwd_iftext_eq_nocase(s + vs.off + vs.len - es.len, es.len,
                                e + es.off, es.len);
}

/* word_tokenize tokens that are upper case (Python str.isupper). */
static double
s_capital_words(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t k, count = 0;
    rwd_token_t *t = rwd_iftext_tokens_new(s, n, &k);
    for (size_t i = 0; i < k; i++)
        count +=
            !t[i].quote && rwd_iftext_is_cased(s + t[i].off, t[i].len, true);
    lisa_free(&t);
    return (double) count;
}

static bool
s_no_comma(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    return memchr(s, ',', n) == NULL;
}

static bool
s_quotation(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    rwd_span_t sp = {0, n};
    rwd_iftext_strip(s, &sp);
    return sp.len > 1 && s[sp.off] == '"' && s[sp.off + sp.len - 1] == '"';
}

/* langdetect's answer; text without letters is "no features", which the
 * reference counts as following the instruction. */
static bool
s_language_is(const char *s, size_t n, const char *want)
{
    const char *got = rwd_iflang_detect(s, n);
    return !got || strcmp(got, want) == 0;
}

static bool
s_response_language(const json_t *kw, const char *s, size_t n)
{
    return s_language_is(s, n, rwd_ifarg_str(kw, "language", NULL));
}

static bool
s_english_capital(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    return rwd_iftext_is_cased(s, n, true) && s_language_is(s, n, "en");
}

static bool
s_english_lowercase(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    return rwd_iftext_is_cased(s, n, false) && s_language_is(s, n, "en");
}

static const rwd_ifcheck_t s_rows[] = {
    {"keywords:existence", "keywords:l", s_keywords_existence, NULL, NULL},
    {"keywords:frequency", "keyword:s frequency:n relation:r", NULL, NULL,
     &(const rwd_ifcount_t){s_keywords_frequency, "frequency", "relation",
                            RWD_IFREL_NAMED}},
    {"keywords:forbidden_words", "forbidden_words:l", s_forbidden_words, NULL,
     NULL},
    {"keywords:letter_frequency", "letter:c let_frequency:n let_relation:r",
     NULL, NULL,
     &(const rwd_ifcount_t){s_letter_frequency, "let_frequency", "let_relation",
                            RWD_IFREL_NAMED}},
    {"language:response_language", "language:s", s_response_language, NULL,
     NULL},
    {"length_constraints:number_sentences", "num_sentences:n relation:r", NULL,
     NULL,
     &(const rwd_ifcount_t){s_number_sentences, "num_sentences", "relation",
                            RWD_IFREL_NAMED}},
    {"length_constraints:number_paragraphs", "num_paragraphs:n",
     s_number_paragraphs, NULL, NULL},
    {"length_constraints:number_words", "num_words:n relation:r", NULL, NULL,
     &(const rwd_ifcount_t){s_number_words, "num_words", "relation",
                            RWD_IFREL_NAMED}},
    {"length_constraints:nth_paragraph_first_word",
     "num_paragraphs:n nth_paragraph:p first_word:s",
     s_nth_paragraph_first_word, NULL, NULL},
    {"detectable_content:number_placeholders", "num_placeholders:n", NULL, NULL,
     &(const rwd_ifcount_t){s_number_placeholders, "num_placeholders", NULL,
                            RWD_IFREL_AT_LEAST}},
    {"detectable_content:postscript", "postscript_marker:s", s_postscript, NULL,
     NULL},
    {"detectable_format:number_bullet_lists", "num_bullets:n", NULL, NULL,
     &(const rwd_ifcount_t){s_number_bullet_lists, "num_bullets", NULL,
                            RWD_IFREL_EQUAL}},
    {"detectable_format:constrained_response", NULL, s_constrained_response,
     NULL, NULL},
    {"detectable_format:number_highlighted_sections", "num_highlights:n", NULL,
     NULL,
     &(const rwd_ifcount_t){s_number_highlighted, "num_highlights", NULL,
                            RWD_IFREL_AT_LEAST}},
    {"detectable_format:multiple_sections", "section_spliter:s num_sections:n",
     NULL, NULL,
     &(const rwd_ifcount_t){s_multiple_sections, "num_sections", NULL,
                            RWD_IFREL_AT_LEAST}},
    {"detectable_format:json_format", NULL, s_json_format, NULL, NULL},
    {"detectable_format:title", NULL, s_title, NULL, NULL},
    {"combination:two_responses", NULL, s_two_responses, NULL, NULL},
    {"combination:repeat_prompt", "prompt_to_repeat:s", s_repeat_prompt, NULL,
     NULL},
    {"startend:end_checker", "end_phrase:s", s_end_checker, NULL, NULL},
    {"startend:quotation", NULL, s_quotation, NULL, NULL},
    {"change_case:capital_word_frequency",
     "capital_frequency:n capital_relation:r", NULL, NULL,
     &(const rwd_ifcount_t){s_capital_words, "capital_frequency",
                            "capital_relation", RWD_IFREL_NAMED}},
    {"change_case:english_capital", NULL, s_english_capital, NULL, NULL},
    {"change_case:english_lowercase", NULL, s_english_lowercase, NULL, NULL},
    {"punctuation:no_comma", NULL, s_no_comma, NULL, NULL},
};

const rwd_ifcheck_t *
rwd_ifcheck_classic(size_t *count)
{
    *count = sizeof s_rows / sizeof s_rows[0];
    return s_rows;
}
