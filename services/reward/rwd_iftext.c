/*
 * rwd_iftext: text primitives for the instruction checkers. See
 * rwd_iftext.h for what each approximates and why.
 */
#include "rwd_iftext.h"

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

static bool
s_is_abbrev(const char *s, size_t start, size_t dot)
{
    size_t b = dot;
    while (b > start && !rwd_iftext_is_space((unsigned char) s[b - 1]) &&
           s[b - 1] != '(' && s[b - 1] != '"')
        b--;
    size_t wl = dot - b;
    if (wl == 1 && isalpha((unsigned char) s[b]))
        return true; /* an initial */
    for (size_t k = 0; k < sizeof s_abbrev / sizeof s_abbrev[0]; k++)
        if (rwd_iftext_eq_nocase(s + b, wl, s_abbrev[k], strlen(s_abbrev[k])))
            return true;
    return false;
}

static bool
s_closer(unsigned char c)
{
    return c == '"' || c == '\'' || c == ')' || c == ']' || c == '}';
}

static void
s_add(const char *s, size_t a, size_t b, rwd_span_t *out, size_t max,
      size_t *count)
{
    rwd_span_t sp;
    sp.off = a;
    sp.len = b - a;
    rwd_iftext_strip(s, &sp);
    if (sp.len == 0)
        return;
    if (out && *count < max) {
        out[*count].off = sp.off;
        out[*count].len = sp.len;
    }
    (*count)++;
}

size_t
rwd_iftext_sentences(const char *s, size_t n, rwd_span_t *out, size_t max)
{
    size_t count = 0, start = 0, i = 0;
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
        if (!at_space || (single_dot && s_is_abbrev(s, start, t)))
            continue;
        s_add(s, start, i, out, max, &count);
        start = i;
    }
    s_add(s, start, n, out, max, &count);
    return count;
}
