/*
 * rwd_math: final-answer extraction and mathematical equivalence. See
 * rwd_math.h for the contract and docs/reward.md for what counts as equal.
 *
 * Pipeline for each side: normalise (one pass with a bounded brace stack),
 * join thousands separators (one pass), split into a structure at top-level
 * commas (one pass), then parse every element once with rwd_expr. Elements
 * are matched in order (tuples, intervals) or as multisets (sets, lists,
 * unions) with at most RWD_MATH_MAX_ITEMS^2 comparisons of parsed values.
 */
#include "rwd_math.h"

#include "lisa/lisa_str.h"
#include "rwd_expr.h"

#include <ctype.h>
#include <string.h>

#define RWD_BRACE_STACK 64u
#define RWD_DECIMALS    6

typedef struct {
    char buf[RWD_MATH_MAX_LEN + 1];
    size_t len;
    bool percent;
    bool ok;
} s_norm_t;

typedef enum { K_SINGLE, K_SET, K_LIST, K_TUPLE, K_UNION } s_kind_t;

typedef struct {
    const char *s;
    size_t len;
    rwd_expr_t *e;
    char letter;
} s_item_t;

typedef struct {
    s_kind_t kind;
    char open, close;
    size_t n;
    s_item_t items[RWD_MATH_MAX_ITEMS];
} s_struct_t;

/* ---------------------------------------------------------------------------
 * Small string helpers */

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

/* ---------------------------------------------------------------------------
 * \boxed extraction */

bool
rwd_math_last_boxed(const char *s, size_t len, size_t *off, size_t *n)
{
    /* Find the last "\boxed" or "\fbox" (one backward pass). */
    size_t at = len, cmd = 0;
    for (size_t i = len; i-- > 0;) {
        if (s[i] != '\\')
            continue;
        if (lisa_str_starts(s + i, len - i, "\\boxed")) {
            at = i;
            cmd = 6;
            break;
        }
        if (lisa_str_starts(s + i, len - i, "\\fbox")) {
            at = i;
            cmd = 5;
            break;
        }
    }
    if (at == len)
        return false;
    size_t i = at + cmd;
    while (i < len && s[i] == ' ')
        i++;
    if (i < len && s[i] != '{') {
        /* "\boxed 5": the rest of the token up to '$' or end of line. */
        if (i == at + cmd)
            return false;
        size_t j = i;
        while (j < len && s[j] != '$' && s[j] != '\n')
            j++;
        *off = i;
        *n = j - i;
        return j > i;
    }
    if (i >= len)
        return false;
    size_t depth = 0;
    for (size_t j = i; j < len; j++) {
        if (s[j] == '{') {
            depth++;
        } else if (s[j] == '}') {
            if (--depth == 0) {
                *off = i + 1;
                *n = j - i - 1;
                return true;
            }
        }
    }
    return false;
}

/* ---------------------------------------------------------------------------
 * Normalisation */

static bool
s_put(s_norm_t *o, char c)
{
    if (o->len >= RWD_MATH_MAX_LEN) {
        o->ok = false;
        return false;
    }
    o->buf[o->len++] = c;
    return true;
}

static bool
s_puts(s_norm_t *o, const char *lit)
{
    while (*lit)
        if (!s_put(o, *lit++))
            return false;
    return true;
}

/* Commands whose brace group is a wrapper: text-like ones become spaced
 * text, box-like ones vanish. */
static const char *const s_text_cmds[] = {
    "text",   "textbf", "textit", "textrm",       "textnormal", "mathrm",
    "mathbf", "mathit", "mathsf", "operatorname", "mbox",       "hbox",
    "textsf", "mathtt", "texttt", "mathnormal"};
static const char *const s_box_cmds[] = {"boxed", "fbox", "displaystyle"};
static const char *const s_drop_cmds[] = {
    "left", "right", "bigl",   "bigr",         "Bigl",   "Bigr",    "big",
    "Big",  "circ",  "degree", "displaystyle", "limits", "mathord", "$"};
static const char *const s_space_cmds[] = {"quad", "qquad", ",", ";",
                                           ":",    "!",     " ", "enspace"};

static bool
s_cmd_in(const char *const *list, size_t count, const char *w, size_t n)
{
    for (size_t i = 0; i < count; i++)
        if (strlen(list[i]) == n && memcmp(list[i], w, n) == 0)
            return true;
    return false;
}

#define S_IN(list, w, n) s_cmd_in(list, sizeof list / sizeof list[0], w, n)

/* "^\circ", "^{\circ}", "^{ \circ }": length of the degree mark at s. */
static size_t
s_degree_mark(const char *s, size_t len)
{
    size_t j = 1;
    bool brace = false;
    while (j < len && s[j] == ' ')
        j++;
    if (j < len && s[j] == '{') {
        brace = true;
        j++;
        while (j < len && s[j] == ' ')
            j++;
    }
    if (!lisa_str_starts(s + j, len - j, "\\circ"))
        return 0;
    j += 5;
    while (j < len && s[j] == ' ')
        j++;
    if (brace) {
        if (j >= len || s[j] != '}')
            return 0;
        j++;
    }
    return j;
}

/* Strips one layer of $..$, $$..$$, \(..\), \[..\]; true if it did. */
static bool
s_strip_delims(const char **s, size_t *len)
{
    static const char *const pairs[][2] = {
        {"$$", "$$"}, {"$", "$"}, {"\\(", "\\)"}, {"\\[", "\\]"}};
    for (size_t k = 0; k < 4; k++) {
        size_t a = strlen(pairs[k][0]), b = strlen(pairs[k][1]);
        if (*len >= a + b && lisa_str_starts(*s, *len, pairs[k][0]) &&
            lisa_str_ends(*s, *len, pairs[k][1])) {
            *s += a;
            *len -= a + b;
            s_trim(s, len);
            return true;
        }
    }
    return false;
}

/* Length of the thousands chain "d{1,3}(SEP ddd)+" starting at i (0 when
 * there is none); *groups gets the number of separators. */
static size_t
s_chain(const char *b, size_t n, size_t i, char sep, size_t *groups)
{
    size_t j = i;
    while (j < n && isdigit((unsigned char) b[j]))
        j++;
    *groups = 0;
    if (j - i == 0 || j - i > 3)
        return 0;
    size_t k = j;
    while (k + 3 < n && b[k] == sep && isdigit((unsigned char) b[k + 1]) &&
           isdigit((unsigned char) b[k + 2]) &&
           isdigit((unsigned char) b[k + 3]) &&
           (k + 4 == n || !isdigit((unsigned char) b[k + 4]))) {
        (*groups)++;
        k += 4;
    }
    return *groups ? k - i : 0;
}

static bool
s_group_start(const char *b, size_t i)
{
    return isdigit((unsigned char) b[i]) &&
           (i == 0 || (!isdigit((unsigned char) b[i - 1]) && b[i - 1] != '.'));
}

/* Joins digit groups "1,234,567" / "1 234 567" / "1\,234" (already a
 * space) into "1234567" when every group after the first has three
 * digits. Commas are joined only when every comma of the text belongs to
 * such a chain and none is inside brackets: "417,409,8" stays a list of
 * three numbers and "\\{8,417,409\\}" a set of three. */
static void
s_join_thousands(s_norm_t *o)
{
    char *b = o->buf;
    size_t n = o->len, w = 0, i = 0, commas = 0, chained = 0, g;
    for (size_t k = 0; k < n; k++)
        commas += b[k] == ',';
    for (size_t k = 0; k < n && commas; k++) {
        if (!s_group_start(b, k))
            continue;
        size_t l = s_chain(b, n, k, ',', &g);
        chained += g;
        if (l)
            k += l - 1;
    }
    /* Inside sets, tuples and intervals a comma separates elements. */
    bool bracketed = memchr(b, '(', n) || memchr(b, '[', n) ||
                     (memchr(b, '{', n) && memchr(b, '\\', n));
    bool join_commas = commas > 0 && chained == commas && !bracketed;
    while (i < n) {
        if (!s_group_start(b, i)) {
            b[w++] = b[i++];
            continue;
        }
        size_t l = join_commas ? s_chain(b, n, i, ',', &g) : 0;
        if (!l)
            l = s_chain(b, n, i, ' ', &g);
        if (!l) {
            while (i < n && isdigit((unsigned char) b[i]))
                b[w++] = b[i++];
            continue;
        }
        for (size_t k = i; k < i + l; k++)
            if (isdigit((unsigned char) b[k]))
                b[w++] = b[k];
        i += l;
    }
    o->len = w;
}

static void
s_normalize(const char *s, size_t len, s_norm_t *o)
{
    o->len = 0;
    o->percent = false;
    o->ok = true;
    s_trim(&s, &len);
    if (len > 4 * RWD_MATH_MAX_LEN) {
        o->ok = false;
        return;
    }
    for (int k = 0; k < 4 && s_strip_delims(&s, &len); k++)
        ;
    unsigned char stack[RWD_BRACE_STACK]; /* 0 keep, 1 text, 2 box */
    size_t depth = 0;
    size_t i = 0;
    while (i < len && o->ok) {
        unsigned char c = (unsigned char) s[i];
        if (c == '\\') {
            size_t j = i + 1;
            while (j < len && isalpha((unsigned char) s[j]))
                j++;
            if (j == i + 1 && j < len)
                j++; /* one-character command: \, \{ \% */
            const char *w = s + i + 1;
            size_t wl = j - i - 1;
            size_t k = j;
            while (k < len && s[k] == ' ')
                k++;
            bool group = k < len && s[k] == '{';
            if ((S_IN(s_text_cmds, w, wl) || S_IN(s_box_cmds, w, wl)) &&
                group) {
                if (depth == RWD_BRACE_STACK) {
                    o->ok = false;
                    return;
                }
                bool text = S_IN(s_text_cmds, w, wl);
                stack[depth++] = text ? 1 : 2;
                if (text)
                    s_put(o, ' ');
                i = k + 1;
                continue;
            }
            if (S_IN(s_drop_cmds, w, wl)) {
                i = j;
                if ((wl == 4 || wl == 5) && i < len && s[i] == '.' &&
                    (lisa_str_starts(w, wl, "left") ||
                     lisa_str_starts(w, wl, "right")))
                    i++;
                continue;
            }
            if (S_IN(s_space_cmds, w, wl)) {
                s_put(o, ' ');
                i = j;
                continue;
            }
            if (wl == 1 && w[0] == '%') {
                o->percent = true;
                i = j;
                continue;
            }
            if (wl == 5 && (lisa_str_starts(w, wl, "dfrac") ||
                            lisa_str_starts(w, wl, "tfrac") ||
                            lisa_str_starts(w, wl, "cfrac"))) {
                s_puts(o, "\\frac");
                i = j;
                continue;
            }
            for (size_t q = i; q < j; q++)
                s_put(o, s[q]);
            i = j;
            continue;
        }
        if (c == '{') {
            if (i + 2 < len && s[i + 1] == ',' && s[i + 2] == '}') {
                s_put(o, ',');
                i += 3;
                continue;
            }
            if (depth == RWD_BRACE_STACK) {
                o->ok = false;
                return;
            }
            stack[depth++] = 0;
            s_put(o, '{');
            i++;
            continue;
        }
        if (c == '}') {
            if (depth == 0) {
                s_put(o, '}');
            } else {
                unsigned char kind = stack[--depth];
                if (kind == 0)
                    s_put(o, '}');
                else if (kind == 1)
                    s_put(o, ' ');
            }
            i++;
            continue;
        }
        if (c == '^') {
            size_t m = s_degree_mark(s + i, len - i);
            if (m) {
                i += m;
                continue;
            }
        }
        if (c == '%') {
            o->percent = true;
            i++;
            continue;
        }
        if (c == '$') {
            i++;
            continue;
        }
        if (c == 0xC2 && i + 1 < len && (unsigned char) s[i + 1] == 0xB0) {
            i += 2; /* degree sign */
            continue;
        }
        if (c == '~' || c == '\n' || c == '\t' || c == '\r') {
            s_put(o, ' ');
            i++;
            continue;
        }
        s_put(o, (char) c);
        i++;
    }
    if (!o->ok)
        return;
    /* Trailing sentence punctuation. */
    while (o->len && (isspace((unsigned char) o->buf[o->len - 1]) ||
                      o->buf[o->len - 1] == '.'))
        o->len--;
    s_join_thousands(o);
    o->buf[o->len] = '\0';
}

/* ---------------------------------------------------------------------------
 * Structure */

/* Whether position i of s opens/closes at top level: returns +1, -1, 0 and
 * the width of the token ("\{" is two bytes). */
static int
s_bracket(const char *s, size_t len, size_t i, size_t *width)
{
    *width = 1;
    if (s[i] == '\\' && i + 1 < len && (s[i + 1] == '{' || s[i + 1] == '}')) {
        *width = 2;
        return s[i + 1] == '{' ? 1 : -1;
    }
    if (s[i] == '(' || s[i] == '[' || s[i] == '{')
        return 1;
    if (s[i] == ')' || s[i] == ']' || s[i] == '}')
        return -1;
    return 0;
}

/* True when the bracket opening at 0 closes exactly at the last byte. */
static bool
s_wraps(const char *s, size_t len)
{
    long depth = 0;
    size_t w;
    for (size_t i = 0; i < len; i += w) {
        depth += s_bracket(s, len, i, &w);
        if (depth <= 0)
            return i + w == len;
    }
    return false;
}

static char
s_letter_of(const char *s, size_t len)
{
    s_trim(&s, &len);
    if (len >= 2 && s[0] == '(' && s[len - 1] == ')') {
        s++;
        len -= 2;
        s_trim(&s, &len);
    } else if (len == 2 && (s[1] == ')' || s[1] == '.' || s[1] == ':')) {
        len = 1;
    }
    if (len == 1 && s[0] >= 'A' && s[0] <= 'Z')
        return s[0];
    return 0;
}

/* Right side of the last top-level '=' (or \approx): "x = 5" -> "5". */
static void
s_rhs(const char **s, size_t *len)
{
    long depth = 0;
    size_t w, cut = 0;
    bool found = false;
    for (size_t i = 0; i < *len; i += w) {
        depth += s_bracket(*s, *len, i, &w);
        if (depth != 0)
            continue;
        if ((*s)[i] == '=') {
            cut = i + 1;
            found = true;
        } else if (lisa_str_starts(*s + i, *len - i, "\\approx")) {
            cut = i + 7;
            found = true;
        }
    }
    if (found && cut < *len) {
        *s += cut;
        *len -= cut;
        s_trim(s, len);
    }
}

/* Length of s once a trailing unit ("5 cm", "2.2 keV", "3 m/s^2") is cut;
 * len when there is no such unit. */
static size_t
s_unit_cut(const char *s, size_t len)
{
    for (size_t k = 1; k < len; k++) {
        unsigned char c = (unsigned char) s[k];
        bool letter = isalpha(c) || (c == '\\' && k + 1 < len &&
                                     isalpha((unsigned char) s[k + 1]));
        if (!letter)
            continue;
        unsigned char prev = (unsigned char) s[k - 1];
        if (!(prev == ' ' || isdigit(prev) || prev == '}'))
            return len;
        for (size_t q = k; q < len; q++) {
            unsigned char u = (unsigned char) s[q];
            if (!(isalnum(u) || strchr(" /^*.-{}()_\\", u) || u >= 0x80))
                return len;
        }
        return k;
    }
    return len;
}

/* Replaces a failed or variable-bearing parse by the parse of the text
 * before a trailing unit, when that is a closed number ("2.2 keV"). */
static void
s_unit_fix(s_item_t *it, bool other_has_vars)
{
    if (it->letter || (it->e && (rwd_expr_nvars(it->e) == 0 || other_has_vars)))
        return;
    size_t cut = s_unit_cut(it->s, it->len);
    if (cut >= it->len)
        return;
    const char *h = it->s;
    size_t hl = cut;
    s_trim(&h, &hl);
    rwd_expr_t *u = rwd_expr_parse(h, hl);
    if (u && rwd_expr_nvars(u) == 0) {
        rwd_expr_destroy(&it->e);
        it->e = u;
        return;
    }
    rwd_expr_destroy(&u);
}

static void
s_item(s_item_t *it, const char *s, size_t len)
{
    s_trim(&s, &len);
    s_rhs(&s, &len);
    it->s = s;
    it->len = len;
    it->letter = s_letter_of(s, len);
    it->e = NULL;
}

/* Splits the normalised text into a structure (items not parsed yet). */
static bool
s_split(const char *s, size_t len, s_struct_t *st)
{
    s_trim(&s, &len);
    st->kind = K_SINGLE;
    st->n = 0;
    st->open = st->close = 0;
    /* Union of intervals. */
    {
        long depth = 0;
        size_t w, last = 0;
        bool uni = false;
        for (size_t i = 0; i < len; i += w) {
            depth += s_bracket(s, len, i, &w);
            if (depth == 0 && lisa_str_starts(s + i, len - i, "\\cup")) {
                if (st->n == RWD_MATH_MAX_ITEMS)
                    return false;
                s_item(&st->items[st->n++], s + last, i - last);
                last = i + 4;
                w = 4;
                uni = true;
            }
        }
        if (uni) {
            if (st->n == RWD_MATH_MAX_ITEMS)
                return false;
            s_item(&st->items[st->n++], s + last, len - last);
            st->kind = K_UNION;
            return true;
        }
    }
    const char *in = s;
    size_t inl = len;
    if (len >= 4 && lisa_str_starts(s, len, "\\{") &&
        lisa_str_ends(s, len, "\\}") && s_wraps(s, len)) {
        st->kind = K_SET;
        in = s + 2;
        inl = len - 4;
    } else if (len >= 2 && (s[0] == '(' || s[0] == '[') &&
               (s[len - 1] == ')' || s[len - 1] == ']') && s_wraps(s, len)) {
        st->kind = K_TUPLE;
        st->open = s[0];
        st->close = s[len - 1];
        in = s + 1;
        inl = len - 2;
    }
    long depth = 0;
    size_t w, last = 0;
    for (size_t i = 0; i < inl; i += w) {
        depth += s_bracket(in, inl, i, &w);
        if (depth == 0 && (in[i] == ',' || in[i] == ';')) {
            if (st->n == RWD_MATH_MAX_ITEMS)
                return false;
            s_item(&st->items[st->n++], in + last, i - last);
            last = i + 1;
        }
    }
    if (st->n == RWD_MATH_MAX_ITEMS)
        return false;
    s_item(&st->items[st->n++], in + last, inl - last);
    if (st->kind == K_TUPLE && st->n == 1) {
        /* "(5)" is a parenthesised value, not a tuple. */
        st->kind = K_SINGLE;
        s_item(&st->items[0], s, len);
    } else if (st->kind == K_SINGLE && st->n > 1) {
        st->kind = K_LIST;
    }
    return true;
}

static bool
s_parse_items(s_struct_t *st)
{
    bool vars = false;
    for (size_t i = 0; i < st->n; i++) {
        s_item_t *it = &st->items[i];
        if (!it->letter && it->len)
            it->e = rwd_expr_parse(it->s, it->len);
        vars = vars || (it->e && rwd_expr_nvars(it->e) > 0);
    }
    return vars;
}

static void
s_free_items(s_struct_t *st)
{
    for (size_t i = 0; i < st->n; i++)
        rwd_expr_destroy(&st->items[i].e);
}

/* Text comparison: ASCII case-insensitive, spaces, braces and backslashes
 * ignored. Linear; both bounded by RWD_MATH_MAX_LEN. */
static bool
s_text_equal(const char *a, size_t al, const char *b, size_t bl)
{
    size_t i = 0, j = 0, seen = 0;
    for (;;) {
        while (i < al && strchr(" {}\\", a[i]) && a[i])
            i++;
        while (j < bl && strchr(" {}\\", b[j]) && b[j])
            j++;
        if (i == al || j == bl)
            return i == al && j == bl && seen > 0;
        if (tolower((unsigned char) a[i]) != tolower((unsigned char) b[j]))
            return false;
        i++;
        j++;
        seen++;
    }
}

typedef struct {
    bool gp, pp; /* percent on gold / pred */
    const char *how;
} s_ctx_t;

static bool
s_item_equal(const s_item_t *g, const s_item_t *p, s_ctx_t *cx)
{
    if (g->len > 0 && g->len == p->len && memcmp(g->s, p->s, g->len) == 0) {
        cx->how =
            g->e ? (rwd_expr_nvars(g->e) ? "expression" : "number") : "text";
        return true;
    }
    if (g->letter || p->letter) {
        if (g->letter && p->letter) {
            cx->how = "letter";
            return g->letter == p->letter;
        }
    }
    if (g->e && p->e) {
        if (rwd_expr_equal(g->e, p->e, RWD_DECIMALS)) {
            cx->how = rwd_expr_nvars(g->e) ? "expression" : "number";
            return true;
        }
        if ((cx->gp &&
             rwd_expr_equal_scaled(g->e, p->e, 100.0, RWD_DECIMALS)) ||
            (cx->pp && rwd_expr_equal_scaled(g->e, p->e, 0.01, RWD_DECIMALS))) {
            cx->how = "percent";
            return true;
        }
        cx->how = rwd_expr_nvars(g->e) ? "expression" : "number";
        return false;
    }
    cx->how = "text";
    return s_text_equal(g->s, g->len, p->s, p->len);
}

/* Multiset match: every gold item pairs with a distinct equal pred item. */
static bool
s_unordered(const s_struct_t *g, const s_struct_t *p, s_ctx_t *cx)
{
    if (g->n != p->n)
        return false;
    bool used[RWD_MATH_MAX_ITEMS] = {false};
    for (size_t i = 0; i < g->n; i++) {
        bool hit = false;
        for (size_t j = 0; j < p->n && !hit; j++) {
            if (used[j])
                continue;
            if (s_item_equal(&g->items[i], &p->items[j], cx)) {
                used[j] = true;
                hit = true;
            }
        }
        if (!hit)
            return false;
    }
    return true;
}

static bool s_equal_norm(const char *g, size_t gl, const char *p, size_t pl,
                         s_ctx_t *cx, int depth, rwd_math_why_t *why);

static bool
s_struct_equal(s_struct_t *g, s_struct_t *p, s_ctx_t *cx, int depth)
{
    if (g->kind == K_UNION || p->kind == K_UNION) {
        if (g->kind != p->kind || g->n != p->n || depth > 0)
            return false;
        bool used[RWD_MATH_MAX_ITEMS] = {false};
        for (size_t i = 0; i < g->n; i++) {
            bool hit = false;
            for (size_t j = 0; j < p->n && !hit; j++) {
                if (!used[j] &&
                    s_equal_norm(g->items[i].s, g->items[i].len, p->items[j].s,
                                 p->items[j].len, cx, depth + 1, NULL)) {
                    used[j] = hit = true;
                }
            }
            if (!hit)
                return false;
        }
        cx->how = "interval";
        return true;
    }
    bool gv = s_parse_items(g);
    bool pv = s_parse_items(p);
    for (size_t i = 0; i < g->n; i++)
        s_unit_fix(&g->items[i], pv);
    for (size_t i = 0; i < p->n; i++)
        s_unit_fix(&p->items[i], gv);
    if (g->kind == K_TUPLE || p->kind == K_TUPLE) {
        if (g->kind != p->kind || g->open != p->open || g->close != p->close ||
            g->n != p->n)
            return false;
        for (size_t i = 0; i < g->n; i++)
            if (!s_item_equal(&g->items[i], &p->items[i], cx))
                return false;
        cx->how =
            g->open == g->close - 1 || g->open == '(' ? "tuple" : "interval";
        if (g->open != '(' || g->close != ')')
            cx->how = "interval";
        return true;
    }
    if (g->kind == K_SINGLE && p->kind == K_SINGLE)
        return s_item_equal(&g->items[0], &p->items[0], cx);
    bool ok = s_unordered(g, p, cx);
    if (g->n > 1 || p->n > 1)
        cx->how = "set";
    return ok;
}

static bool
s_equal_norm(const char *g, size_t gl, const char *p, size_t pl, s_ctx_t *cx,
             int depth, rwd_math_why_t *why)
{
    s_struct_t *gs = NULL, *ps = NULL;
    static _Thread_local s_struct_t tls[2][2];
    gs = &tls[depth & 1][0];
    ps = &tls[depth & 1][1];
    if (!s_split(g, gl, gs) || !s_split(p, pl, ps)) {
        cx->how = "text";
        return false;
    }
    bool eq = s_struct_equal(gs, ps, cx, depth);
    if (why) {
        why->gold_parsed = gs->n > 0 && (gs->items[0].e || gs->items[0].letter);
        why->pred_parsed = ps->n > 0 && (ps->items[0].e || ps->items[0].letter);
    }
    s_free_items(gs);
    s_free_items(ps);
    return eq;
}

bool
rwd_math_equal(const char *gold, size_t glen, const char *pred, size_t plen,
               rwd_math_why_t *why)
{
    static _Thread_local s_norm_t ng, np;
    rwd_math_why_t local = {"none", false, false};
    if (!why)
        why = &local;
    *why = local;
    s_normalize(gold, glen, &ng);
    s_normalize(pred, plen, &np);
    if (!ng.ok || !np.ok) {
        /* Too long (or too deeply nested) to read as math: exact text. */
        const char *a = gold, *b = pred;
        s_trim(&a, &glen);
        s_trim(&b, &plen);
        why->how = "text";
        return glen > 0 && glen == plen && memcmp(a, b, glen) == 0;
    }
    s_ctx_t cx = {ng.percent, np.percent, "none"};
    bool eq = s_equal_norm(ng.buf, ng.len, np.buf, np.len, &cx, 0, why);
    why->how = cx.how;
    return eq;
}

bool
rwd_math_parses(const char *s, size_t len)
{
    static _Thread_local s_norm_t n;
    static _Thread_local s_struct_t st;
    s_normalize(s, len, &n);
    if (!n.ok || n.len == 0 || !s_split(n.buf, n.len, &st))
        return false;
    (void) s_parse_items(&st);
    for (size_t i = 0; i < st.n; i++)
        s_unit_fix(&st.items[i], false);
    bool all = true;
    for (size_t i = 0; i < st.n; i++)
        all = all && (st.items[i].e || st.items[i].letter);
    s_free_items(&st);
    return all;
}
