/*
 * rwd_ifcheck_custom: IFBench's eleven one-off tasks ("custom:" ids), each
 * checked against its fixed answer shape: a list of numbers, multiple
 * choice questions, countries in reverse order, reversed words or letters,
 * an alphabet story, sorted capitals, three CSV layouts and a list of
 * dates.
 *
 * Where the reference parses CSV it uses Python's csv module (excel
 * dialect, non-strict): the reader below follows it (quotes open a field
 * only at its start, doubled quotes inside, a blank line is a row of no
 * fields). Where it normalises text with NFKD and drops what is not
 * ASCII, lisa folds the Latin letters of U+00C0..U+024F as NFKD does and
 * drops every other non-ASCII character.
 */
#include "lisa/lisa_mem.h"
#include "rwd_ifcheck.h"
#include "rwd_iftext.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Offset of the first occurrence of lit in s[0..n), SIZE_MAX when none. */
static size_t
s_find_lit(const char *s, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    for (size_t i = 0; i + l <= n; i++)
        if (memcmp(s + i, lit, l) == 0)
            return i;
    return SIZE_MAX;
}

/* NFKD of U+00C0..U+024F with what is not ASCII dropped: two bytes per
 * code point, '.' where nothing (more) is left. */
static const char s_fold_tab[] =
    "A.A.A.A.A.A...C.E.E.E.E.I.I.I.I...N.O.O.O.O.O.....U.U.U.U.Y....."
    "a.a.a.a.a.a...c.e.e.e.e.i.i.i.i...n.o.o.o.o.o.....u.u.u.u.y...y."
    "A.a.A.a.A.a.C.c.C.c.C.c.C.c.D.d.....E.e.E.e.E.e.E.e.E.e.G.g.G.g."
    "G.g.G.g.H.h.....I.i.I.i.I.i.I.i.I...IJijJ.j.K.k...L.l.L.l.L.l.L."
    "l.....N.n.N.n.N.n.n.....O.o.O.o.O.o.....R.r.R.r.R.r.S.s.S.s.S.s."
    "S.s.T.t.T.t.....U.u.U.u.U.u.U.u.U.u.U.u.W.w.Y.y.Y.Z.z.Z.z.Z.z.s."
    "................................................................"
    "O.o...........................U.u..............................."
    "........DZDzdzLJLjljNJNjnjA.a.I.i.O.o.U.u.U.u.U.u.U.u.U.u...A.a."
    "A.a.........G.g.K.k.O.o.O.o.....j.DZDzdzG.g.....N.n.A.a........."
    "A.a.A.a.E.e.E.e.I.i.I.i.O.o.O.o.R.r.R.r.U.u.U.u.S.s.T.t.....H.h."
    "............A.a.E.e.O.o.O.o.O.o.O.o.Y.y........................."
    "................................";

/* NFKD, then ASCII only (approximated): a new string, *out_n its length. */
static char *
s_ascii_fold(const char *s, size_t n, size_t *out_n)
{
    char *o = lisa_malloc(n + 1);
    size_t w = 0, len;
    for (size_t i = 0; i < n; i += len) {
        uint32_t cp = rwd_iftext_cp(s, n, i, &len);
        if (cp < 0x80) {
            o[w++] = (char) cp;
        } else if (cp >= 0xC0 && cp <= 0x24F) {
            for (size_t k = 0; k < 2; k++)
                if (s_fold_tab[2 * (cp - 0xC0) + k] != '.')
                    o[w++] = s_fold_tab[2 * (cp - 0xC0) + k];
        }
    }
    o[w] = '\0';
    *out_n = w;
    return o;
}

/* ASCII digit runs of s, compared one by one with want[0..nw). */
static bool
s_multiples(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    static const char *const want[] = {"14", "21", "28", "35", "42", "49"};
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (!isdigit((unsigned char) s[i])) {
            i++;
            continue;
        }
        size_t a = i;
        while (i < n && isdigit((unsigned char) s[i]))
            i++;
        if (k >= 6 || i - a != 2 || memcmp(s + a, want[k], 2) != 0)
            return false;
        k++;
    }
    return k == 6;
}

/* `Question \d+[.|):;]?\s*` at i; *end gets its end. */
static bool
s_question_label(const char *s, size_t n, size_t i, size_t *end)
{
    if (n - i < 10 || memcmp(s + i, "Question ", 9) != 0 ||
        !isdigit((unsigned char) s[i + 9]))
        return false;
    size_t j = i + 9, len;
    while (j < n && isdigit((unsigned char) s[j]))
        j++;
    if (j < n && strchr(".|):;", s[j]) && s[j])
        j++;
    while (j < n && rwd_iftext_is_space(rwd_iftext_cp(s, n, j, &len)))
        j += len;
    *end = j;
    return true;
}

/* One question: 5 option lines (`[A-Ea-e][.|)]\s*\w`), *qlen the length
 * in code points of its text before the first option, as the reference
 * joins it (' ' + each stripped line, then stripped). */
static bool
s_mcq_one(const char *s, rwd_span_t q, size_t *qlen)
{
    size_t options = 0, w = 0, len;
    bool done = false;
    char *text = lisa_malloc(2 * q.len + 2);
    for (size_t i = q.off, start = q.off; i <= q.off + q.len; i++) {
        if (i < q.off + q.len && s[i] != '\n')
            continue;
        rwd_span_t l = {start, i - start};
        start = i + 1;
        rwd_iftext_strip(s, &l);
        const char *p = s + l.off;
        bool opt = l.len >= 3 && p[0] && strchr("ABCDEabcde", p[0]) && p[1] &&
                   strchr(".|)", p[1]);
        size_t j = 2;
        while (opt && j < l.len &&
               rwd_iftext_is_space(rwd_iftext_cp(p, l.len, j, &len)))
            j += len;
        opt = opt && j < l.len &&
              rwd_iftext_is_word(rwd_iftext_cp(p, l.len, j, &len));
        if (opt) {
            options++;
            done = true;
        } else if (!done) {
            text[w++] = ' ';
            memcpy(text + w, p, l.len);
            w += l.len;
        }
    }
    rwd_span_t t = {0, w};
    rwd_iftext_strip(text, &t);
    size_t cps = 0;
    for (size_t i = t.off; i < t.off + t.len; i++)
        cps += ((unsigned char) text[i] & 0xC0) != 0x80;
    lisa_free(&text);
    *qlen = cps;
    return options == 5;
}

/* The next `\n*Question \d+...` at or after i: *ms, *me its bounds. */
static bool
s_next_label(const char *s, size_t n, size_t i, size_t *ms, size_t *me)
{
    while (i < n) {
        size_t e = i;
        while (e < n && s[e] == '\n')
            e++;
        if (s_question_label(s, n, e, me)) {
            *ms = i;
            return true;
        }
        i = e > i ? e : i + 1;
    }
    return false;
}

static bool
s_mcq(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    if (n < 8 || memcmp(s, "Question", 8) != 0)
        return false;
    rwd_span_t pieces[4];
    size_t k = 0, start = 0, ms = n, me = n;
    for (size_t idx = 0;; idx++) {
        bool hit = s_next_label(s, n, start, &ms, &me);
        rwd_span_t p = {start, (hit ? ms : n) - start};
        if (idx > 0 || p.len > 0) {
            rwd_iftext_strip(s, &p);
            if (p.len > 0) {
                if (k == 4)
                    return false;
                pieces[k++] = p;
            }
        }
        if (!hit)
            break;
        start = me;
    }
    if (k != 4)
        return false;
    size_t prev = 0;
    for (size_t q = 0; q < 4; q++) {
        size_t len;
        if (!s_mcq_one(s, pieces[q], &len) || (q > 0 && len <= prev))
            return false;
        prev = len;
    }
    return true;
}

typedef struct {
    char *text;
    size_t len;
} s_line_t;

static int
s_line_cmp_desc(const void *a, const void *b)
{
    const s_line_t *x = a, *y = b;
    size_t m = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->text, y->text, m);
    if (c == 0)
        c = x->len < y->len ? -1 : x->len > y->len;
    return -c;
}

static bool
s_reverse_newline(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t nl, k = 0;
    rwd_span_t *lines = rwd_iftext_lines_new(s, n, &nl);
    s_line_t *l = lisa_calloc(nl, sizeof *l);
    bool started = false, ok = false;
    for (size_t i = 0; i < nl; i++) {
        rwd_span_t sp = lines[i];
        rwd_iftext_strip_punct(s, &sp, true);
        if (sp.len == 0)
            continue;
        if (!started && s_find_lit(s + sp.off, sp.len, "Zimbabwe") == SIZE_MAX)
            continue;
        started = true;
        l[k].text = s_ascii_fold(s + sp.off, sp.len, &l[k].len);
        k++;
    }
    if (k >= 52) {
        s_line_t *sorted = lisa_calloc(k, sizeof *sorted);
        memcpy(sorted, l, k * sizeof *l);
        qsort(sorted, k, sizeof *sorted, s_line_cmp_desc);
        ok = true;
        for (size_t i = 0; ok && i < k; i++)
            ok = sorted[i].len == l[i].len &&
                 memcmp(sorted[i].text, l[i].text, l[i].len) == 0;
        lisa_free(&sorted);
    }
    for (size_t i = 0; i < k; i++)
        lisa_free(&l[i].text);
    lisa_free(&l);
    lisa_free(&lines);
    return ok;
}

static bool
s_word_reverse(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t cap = n + 1, w = 0, pos = 0, k = 0;
    char *low = lisa_malloc(cap), *out = lisa_malloc(cap + 1);
    for (size_t i = 0; i < n; i++)
        if (!rwd_iftext_is_punct((unsigned char) s[i]))
            low[w++] = (char) tolower((unsigned char) s[i]);
    rwd_span_t *f = lisa_calloc(w / 2 + 2, sizeof *f), sp;
    while (rwd_iftext_field(low, w, &pos, &sp))
        f[k++] = sp;
    size_t o = 0;
    for (size_t i = k; i-- > 0;) {
        memcpy(out + o, low + f[i].off, f[i].len);
        o += f[i].len;
        if (i > 0)
            out[o++] = ' ';
    }
    /* Without punctuation the joined words are one sentence, so the
     * reference's "is it one of its sentences" holds for any text. */
    bool ok = s_find_lit(out, o, "bald eagle") != SIZE_MAX;
    lisa_free(&f);
    lisa_free(&out);
    lisa_free(&low);
    return ok;
}

static bool
s_character_reverse(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    return rwd_iftext_find_nocase(s, n, 0, "elgae dlab", 10) != SIZE_MAX;
}

static bool
s_sentence_alphabet(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    size_t k = rwd_iftext_sentences(s, n, NULL, 0), len;
    if (k != 26)
        return false;
    rwd_span_t sp[26];
    rwd_iftext_sentences(s, n, sp, 26);
    for (size_t i = 0; i < 26; i++) {
        size_t pos = sp[i].off;
        rwd_span_t w;
        if (!rwd_iftext_field(s, sp[i].off + sp[i].len, &pos, &w))
            return false;
        uint32_t c = rwd_iftext_lower(rwd_iftext_cp(s, n, w.off, &len));
        if (c != 'a' + i)
            return false;
    }
    return true;
}

static bool
s_european_capitals(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    static const char *const order[] = {
        "Reykjavik",  "Helsinki", "Oslo",       "Tallinn",  "Stockholm",
        "Riga",       "Moscow",   "Copenhagen", "Vilnius",  "Minsk",
        "Dublin",     "Berlin",   "Amsterdam",  "Warsaw",   "London",
        "Brussels",   "Prague",   "Luxembourg", "Paris",    "Vienna",
        "Bratislava", "Budapest", "Vaduz",      "Chisinau", "Bern",
        "Ljubljana",  "Zagreb"};
    size_t fl, k = 0;
    char *f = s_ascii_fold(s, n, &fl);
    bool ok = true;
    for (size_t i = 0, start = 0; ok && i <= fl; i++) {
        if (i < fl && f[i] != ',')
            continue;
        rwd_span_t c = {start, i - start};
        start = i + 1;
        rwd_iftext_strip(f, &c);
        if (c.len == 0)
            continue;
        ok = k < 27 && c.len == strlen(order[k]) &&
             memcmp(f + c.off, order[k], c.len) == 0;
        k++;
    }
    lisa_free(&f);
    return ok && k == 27;
}

/* --- CSV (Python's csv.reader, excel dialect, non-strict) -------------- */

typedef struct {
    char *buf;         /* field contents, back to back */
    rwd_span_t *field; /* into buf */
    size_t *row_first; /* first field of each row */
    size_t *row_count; /* fields in each row */
    size_t nfields;
    size_t nrows;
} s_csv_t;

static void
s_csv_free(s_csv_t *c)
{
    lisa_free(&c->buf);
    lisa_free(&c->field);
    lisa_free(&c->row_first);
    lisa_free(&c->row_count);
}

/* Parses s[0..n) with delimiter d; false where Python raises (a carriage
 * return inside an unquoted line). */
static bool
s_csv_parse(const char *s, size_t n, char d, s_csv_t *c)
{
    enum { REC, FSTART, FIELD, QUOTED, QUOTE2, CRNL } st = REC;
    c->buf = lisa_malloc(n + 1);
    c->field = lisa_calloc(n + 2, sizeof *c->field);
    c->row_first = lisa_calloc(n + 2, sizeof *c->row_first);
    c->row_count = lisa_calloc(n + 2, sizeof *c->row_count);
    c->nfields = c->nrows = 0;
    size_t w = 0, fstart = 0;
#define S_SAVE()                                                               \
    do {                                                                       \
        c->field[c->nfields++] = (rwd_span_t){fstart, w - fstart};             \
        c->row_count[c->nrows]++;                                              \
        fstart = w;                                                            \
    } while (0)
#define S_END_ROW() (c->nrows++)
    for (size_t i = 0; i <= n; i++) {
        /* a line ends after each '\n' (the text is read by lines) */
        bool eol = i == n || (i > 0 && s[i - 1] == '\n' && st != QUOTED);
        if (eol && i == n && (st == REC || st == CRNL))
            break;
        char ch = i < n ? s[i] : '\0';
        if (eol && i < n && st == CRNL)
            st = REC;
        if (i == n) {
            if (st == FIELD || st == QUOTE2 || st == FSTART || (st == QUOTED)) {
                S_SAVE();
                S_END_ROW();
            }
            break;
        }
        switch (st) {
        case REC:
            c->row_first[c->nrows] = c->nfields;
            if (ch == '\n' || ch == '\r') {
                S_END_ROW(); /* a blank line: a row of no fields */
                st = CRNL;
                break;
            }
            st = FSTART;
            /* fall through */
        case FSTART:
            if (ch == '\n' || ch == '\r') {
                S_SAVE();
                S_END_ROW();
                st = CRNL;
            } else if (ch == '"') {
                st = QUOTED;
            } else if (ch == d) {
                S_SAVE();
            } else {
                c->buf[w++] = ch;
                st = FIELD;
            }
            break;
        case FIELD:
            if (ch == '\n' || ch == '\r') {
                S_SAVE();
                S_END_ROW();
                st = CRNL;
            } else if (ch == d) {
                S_SAVE();
                st = FSTART;
            } else {
                c->buf[w++] = ch;
            }
            break;
        case QUOTED:
            if (ch == '"')
                st = QUOTE2;
            else
                c->buf[w++] = ch;
            break;
        case QUOTE2:
            if (ch == '"') {
                c->buf[w++] = '"';
                st = QUOTED;
            } else if (ch == d) {
                S_SAVE();
                st = FSTART;
            } else if (ch == '\n' || ch == '\r') {
                S_SAVE();
                S_END_ROW();
                st = CRNL;
            } else {
                c->buf[w++] = ch;
                st = FIELD;
            }
            break;
        case CRNL:
            if (ch != '\n' && ch != '\r')
                return false; /* "new-line character seen in unquoted field" */
            break;
        }
    }
#undef S_SAVE
#undef S_END_ROW
    return true;
}

static bool
s_csv_field_is(const s_csv_t *c, size_t row, size_t k, const char *want)
{
    rwd_span_t f = c->field[c->row_first[row] + k];
    return f.len == strlen(want) && memcmp(c->buf + f.off, want, f.len) == 0;
}

/* Python's csv.reader on s with every '"' tripled first (as the reference
 * does for the two quoted layouts), or as it is. */
static bool
s_csv_read(const char *s, size_t n, char d, bool triple, s_csv_t *c)
{
    if (!triple)
        return s_csv_parse(s, n, d, c);
    size_t q = 0;
    for (size_t i = 0; i < n; i++)
        q += s[i] == '"';
    char *t = lisa_malloc(n + 2 * q + 1);
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        t[w++] = s[i];
        if (s[i] == '"') {
            t[w++] = '"';
            t[w++] = '"';
        }
    }
    bool ok = s_csv_parse(t, w, d, c);
    lisa_free(&t);
    return ok;
}

static bool
s_csv_city(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    static const char *const head[] = {"ID", "Country", "City", "Year",
                                       "Count"};
    s_csv_t c = {0};
    bool ok =
        s_csv_read(s, n, ',', false, &c) && c.nrows == 8 && c.row_count[0] == 5;
    for (size_t k = 0; ok && k < 5; k++)
        ok = s_csv_field_is(&c, 0, k, head[k]);
    for (size_t r = 1; ok && r < c.nrows; r++)
        ok = c.row_count[r] == 5;
    s_csv_free(&c);
    return ok;
}

/* The reference's header expression: each name bare or in double quotes,
 * separated by d and then spaces (and tabs when `tabs`), nothing else. */
static bool
s_csv_header(const char *s, size_t n, const char *const *names, char d,
             bool tabs)
{
    const char *nl = memchr(s, '\n', n);
    rwd_span_t h = {0, nl ? (size_t) (nl - s) : n};
    rwd_iftext_strip(s, &h);
    const char *p = s + h.off, *end = s + h.off + h.len;
    for (size_t k = 0; k < 5; k++) {
        if (k > 0) {
            if (p >= end || *p != d)
                return false;
            p++;
            while (p < end && (*p == ' ' || (tabs && *p == '\t')))
                p++;
        }
        size_t l = strlen(names[k]);
        bool q = p < end && *p == '"';
        if ((size_t) (end - p) < l + 2 * q || memcmp(p + q, names[k], l) != 0 ||
            (q && p[l + 1] != '"'))
            return false;
        p += l + 2 * q;
    }
    return p == end;
}

/* `".*[^\d\w\s].*"`: a leading quote, a later quote on the same line
 * and a character neither word nor space between them. */
static bool
s_special_quoted(const char *f, size_t l)
{
    if (l < 2 || f[0] != '"')
        return false;
    const char *nl = memchr(f, '\n', l);
    size_t lim = nl ? (size_t) (nl - f) : l, close = 0, len;
    for (size_t i = 1; i < lim; i++)
        if (f[i] == '"')
            close = i;
    for (size_t i = 1; i < close; i += len) {
        uint32_t cp = rwd_iftext_cp(f, close, i, &len);
        if (!rwd_iftext_is_word(cp) && !rwd_iftext_is_space(cp))
            return true;
    }
    return false;
}

static bool
s_csv_special(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    static const char *const head[] = {"ProductID", "Category", "Brand",
                                       "Price", "Stock"};
    if (!s_csv_header(s, n, head, ',', true))
        return false;
    s_csv_t c = {0};
    bool ok = false;
    if (s_csv_read(s, n, ',', true, &c) && c.nrows == 15) {
        for (size_t r = 1; r < c.nrows; r++) {
            if (c.row_count[r] != 5)
                break;
            bool hit = false;
            for (size_t k = 0; !hit && k < 5; k++) {
                rwd_span_t f = c.field[c.row_first[r] + k];
                hit = s_special_quoted(c.buf + f.off, f.len);
            }
            if (hit) {
                ok = true;
                break;
            }
        }
    }
    s_csv_free(&c);
    return ok;
}

static bool
s_csv_quotes(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    static const char *const head[] = {"StudentID", "Subject", "Grade",
                                       "Semester", "Score"};
    if (!s_csv_header(s, n, head, '\t', false))
        return false;
    s_csv_t c = {0};
    bool ok = s_csv_read(s, n, '\t', true, &c) && c.nrows == 4;
    for (size_t r = 0; ok && r < c.nrows; r++) {
        ok = c.row_count[r] == 5;
        for (size_t k = 0; ok && k < 5; k++) {
            rwd_span_t f = c.field[c.row_first[r] + k];
            rwd_iftext_strip(c.buf, &f);
            /* an empty field: the reference raises IndexError */
            ok = f.len > 0 && c.buf[f.off] == '"' &&
                 c.buf[f.off + f.len - 1] == '"';
        }
    }
    s_csv_free(&c);
    return ok;
}

static int
s_num(const char *p, size_t l)
{
    int v = 0;
    for (size_t i = 0; i < l; i++)
        v = v * 10 + (p[i] - '0');
    return v;
}

static bool
s_date_list(const json_t *kw, const char *s, size_t n)
{
    (void) kw;
    rwd_span_t all = {0, n};
    rwd_iftext_strip(s, &all);
    for (size_t i = all.off, start = all.off; i <= all.off + all.len; i++) {
        if (i < all.off + all.len && s[i] != ',')
            continue;
        rwd_span_t d = {start, i - start};
        start = i + 1;
        rwd_iftext_strip(s, &d);
        const char *p = s + d.off;
        if (d.len != 10 || p[4] != '-' || p[7] != '-')
            return false;
        for (size_t k = 0; k < 10; k++)
            if (k != 4 && k != 7 && !isdigit((unsigned char) p[k]))
                return false;
        int y = s_num(p, 4), m = s_num(p + 5, 2), day = s_num(p + 8, 2);
        bool long_month = m == 1 || m == 3 || m == 5 || m == 7 || m == 8 ||
                          m == 10 || m == 12;
        bool short_month = m == 4 || m == 6 || m == 9 || m == 11;
        if (y < 1769 || y > 1821 || m > 12 || (long_month && day > 31) ||
            (short_month && day > 30) || (m == 2 && day > 29))
            return false;
    }
    return true;
}

static const rwd_ifcheck_t s_rows[] = {
    {"custom:multiples", NULL, s_multiples, NULL, NULL},
    {"custom:mcq_count_length", NULL, s_mcq, NULL, NULL},
    {"custom:reverse_newline", NULL, s_reverse_newline, NULL, NULL},
    {"custom:word_reverse", NULL, s_word_reverse, NULL, NULL},
    {"custom:character_reverse", NULL, s_character_reverse, NULL, NULL},
    {"custom:sentence_alphabet", NULL, s_sentence_alphabet, NULL, NULL},
    {"custom:european_capitals_sort", NULL, s_european_capitals, NULL, NULL},
    {"custom:csv_city", NULL, s_csv_city, NULL, NULL},
    {"custom:csv_special_character", NULL, s_csv_special, NULL, NULL},
    {"custom:csv_quotes", NULL, s_csv_quotes, NULL, NULL},
    {"custom:date_format_list", NULL, s_date_list, NULL, NULL},
};

const rwd_ifcheck_t *
rwd_ifcheck_custom(size_t *count)
{
    *count = sizeof s_rows / sizeof s_rows[0];
    return s_rows;
}
