/*
 * rwd_expr: tokenizer, recursive-descent parser and evaluator for answer
 * expressions. See rwd_expr.h for the contract.
 *
 * Shape: the input is first cut into at most RWD_EXPR_MAX_NODES tokens
 * (one pass), then parsed into a node array (one pass, depth-capped), then
 * evaluated by a recursion that is bounded by the node count. Names of free
 * variables are kept in the object so two expressions can be bound to the
 * same sample points by name.
 */
#include "rwd_expr.h"

#include "lisa/lisa_mem.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RWD_VAR_NAME_MAX 24u
#define RWD_PI           3.14159265358979323846
#define RWD_E            2.71828182845904523536
#define RWD_NAN          ((double) NAN)
#define RWD_INF          ((double) INFINITY)
#define RWD_INT_DIGITS   512u

typedef enum {
    T_END = 0,
    T_NUM,   /* number literal */
    T_VAR,   /* free variable (index into vars) */
    T_CONST, /* pi, e, infinity */
    T_FUNC,  /* named function */
    T_FRAC,  /* \frac and friends */
    T_SQRT,  /* \sqrt, sqrt, √ */
    T_OP,    /* one of + - * / ^ ! _ */
    T_OPEN,  /* ( [ { */
    T_CLOSE  /* ) ] } */
} s_tok_kind_t;

typedef enum {
    F_SIN,
    F_COS,
    F_TAN,
    F_SEC,
    F_CSC,
    F_COT,
    F_ASIN,
    F_ACOS,
    F_ATAN,
    F_SINH,
    F_COSH,
    F_TANH,
    F_LN,
    F_LOG,
    F_LG,
    F_EXP,
    F_SQRT,
    F_ABS
} s_func_t;

typedef struct {
    s_tok_kind_t kind;
    char op;      /* T_OP, T_OPEN, T_CLOSE */
    bool space;   /* whitespace before this token */
    bool integer; /* T_NUM: digits only */
    bool inexact; /* T_NUM: has a decimal point or exponent */
    int fn;       /* T_FUNC */
    int var;      /* T_VAR */
    double val;   /* T_NUM, T_CONST */
    size_t off;   /* T_NUM: offset of the literal */
    size_t len;   /* T_NUM: length of the literal */
} s_tok_t;

typedef enum {
    N_NUM,
    N_VAR,
    N_ADD,
    N_SUB,
    N_MUL,
    N_DIV,
    N_POW,
    N_NEG,
    N_FUNC,
    N_FACT,
    N_ROOT
} s_node_op_t;

typedef struct {
    uint8_t op;
    uint8_t fn;
    int16_t a;
    int16_t b;
    double val;
} s_node_t;

struct rwd_expr {
    s_node_t nodes[RWD_EXPR_MAX_NODES];
    size_t nnodes;
    int root;
    bool inexact;
    size_t nvars;
    char vars[RWD_EXPR_MAX_VARS][RWD_VAR_NAME_MAX];
    bool is_int;
    bool int_neg;
    char *int_digits;
};

typedef struct {
    const char *s;
    size_t len;
    s_tok_t toks[RWD_EXPR_MAX_NODES];
    size_t ntoks;
    size_t pos;
    rwd_expr_t *e;
    bool fail;
} s_parser_t;

/* ---------------------------------------------------------------------------
 * Names */

typedef struct {
    const char *name;
    s_tok_kind_t kind;
    int fn;
    double val;
    char op;
} s_word_t;

/* Words and LaTeX commands the tokenizer knows; anything else that is not a
 * one- or two-letter run makes the input "not an expression". */
static const s_word_t s_words[] = {
    {"sin", T_FUNC, F_SIN, 0, 0},     {"cos", T_FUNC, F_COS, 0, 0},
    {"tan", T_FUNC, F_TAN, 0, 0},     {"sec", T_FUNC, F_SEC, 0, 0},
    {"csc", T_FUNC, F_CSC, 0, 0},     {"cot", T_FUNC, F_COT, 0, 0},
    {"arcsin", T_FUNC, F_ASIN, 0, 0}, {"arccos", T_FUNC, F_ACOS, 0, 0},
    {"arctan", T_FUNC, F_ATAN, 0, 0}, {"sinh", T_FUNC, F_SINH, 0, 0},
    {"cosh", T_FUNC, F_COSH, 0, 0},   {"tanh", T_FUNC, F_TANH, 0, 0},
    {"ln", T_FUNC, F_LN, 0, 0},       {"log", T_FUNC, F_LOG, 0, 0},
    {"lg", T_FUNC, F_LG, 0, 0},       {"exp", T_FUNC, F_EXP, 0, 0},
    {"abs", T_FUNC, F_ABS, 0, 0},     {"sqrt", T_SQRT, 0, 0, 0},
    {"pi", T_CONST, 0, RWD_PI, 0},    {"infty", T_CONST, 0, RWD_INF, 0},
    {"inf", T_CONST, 0, RWD_INF, 0},  {"infinity", T_CONST, 0, RWD_INF, 0},
    {"frac", T_FRAC, 0, 0, 0},        {"dfrac", T_FRAC, 0, 0, 0},
    {"tfrac", T_FRAC, 0, 0, 0},       {"cfrac", T_FRAC, 0, 0, 0},
    {"cdot", T_OP, 0, 0, '*'},        {"times", T_OP, 0, 0, '*'},
    {"ast", T_OP, 0, 0, '*'},         {"div", T_OP, 0, 0, '/'},
};

/* LaTeX commands that only format: skipped, their group is a group. */
static const char *const s_noops[] = {
    "left",   "right",   "bigl",   "bigr",      "Bigl",         "Bigr",
    "big",    "Big",     "mathrm", "mathit",    "mathbf",       "mathsf",
    "text",   "textrm",  "textbf", "textit",    "displaystyle", "mbox",
    "limits", "mathord", "boxed",  "mathnormal"};

/* Greek letters read as free variables. */
static const char *const s_greek[] = {
    "alpha", "beta",  "gamma",    "delta", "epsilon", "varepsilon", "zeta",
    "eta",   "theta", "vartheta", "iota",  "kappa",   "lambda",     "mu",
    "nu",    "xi",    "rho",      "sigma", "tau",     "phi",        "varphi",
    "chi",   "psi",   "omega",    "Gamma", "Delta",   "Theta",      "Lambda",
    "Sigma", "Phi",   "Psi",      "Omega"};

static const s_word_t *
s_word(const char *w, size_t n)
{
    for (size_t i = 0; i < sizeof s_words / sizeof s_words[0]; i++)
        if (strlen(s_words[i].name) == n && memcmp(s_words[i].name, w, n) == 0)
            return &s_words[i];
    return NULL;
}

static bool
s_in(const char *const *list, size_t count, const char *w, size_t n)
{
    for (size_t i = 0; i < count; i++)
        if (strlen(list[i]) == n && memcmp(list[i], w, n) == 0)
            return true;
    return false;
}

static int
s_var_index(rwd_expr_t *e, const char *name, size_t n)
{
    if (n >= RWD_VAR_NAME_MAX)
        return -1;
    for (size_t i = 0; i < e->nvars; i++)
        if (strlen(e->vars[i]) == n && memcmp(e->vars[i], name, n) == 0)
            return (int) i;
    if (e->nvars == RWD_EXPR_MAX_VARS)
        return -1;
    memcpy(e->vars[e->nvars], name, n);
    e->vars[e->nvars][n] = '\0';
    return (int) e->nvars++;
}

/* ---------------------------------------------------------------------------
 * Tokenizer */

static s_tok_t *
s_push(s_parser_t *p, s_tok_kind_t kind, bool space)
{
    if (p->ntoks + 1 >= RWD_EXPR_MAX_NODES) {
        p->fail = true;
        return NULL;
    }
    s_tok_t *t = &p->toks[p->ntoks++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->space = space;
    return t;
}

/* Reads a number literal at i; `one_digit` for \frac12-style arguments. */
static size_t
s_lex_number(s_parser_t *p, size_t i, bool space, bool one_digit)
{
    const char *s = p->s;
    size_t start = i, n = p->len;
    bool inexact = false;
    if (one_digit) {
        i++;
    } else {
        while (i < n && isdigit((unsigned char) s[i]))
            i++;
        if (i < n && s[i] == '.' && i + 1 < n &&
            isdigit((unsigned char) s[i + 1])) {
            inexact = true;
            i++;
            while (i < n && isdigit((unsigned char) s[i]))
                i++;
        } else if (i < n && s[i] == '.' && i > start &&
                   (i + 1 == n || !isalpha((unsigned char) s[i + 1]))) {
            i++; /* "5." */
        }
        /* Scientific notation: 1.5e3, 2E-4 (not "2e" = 2 times e). */
        if (i < n && (s[i] == 'e' || s[i] == 'E')) {
            size_t j = i + 1;
            if (j < n && (s[j] == '+' || s[j] == '-'))
                j++;
            if (j < n && isdigit((unsigned char) s[j])) {
                while (j < n && isdigit((unsigned char) s[j]))
                    j++;
                inexact = true;
                i = j;
            }
        }
    }
    s_tok_t *t = s_push(p, T_NUM, space);
    if (!t)
        return n;
    char buf[64];
    size_t l = i - start;
    if (l < sizeof buf) {
        memcpy(buf, s + start, l);
        buf[l] = '\0';
        t->val = strtod(buf, NULL);
    } else {
        /* Very long literal: its magnitude is all that matters here. */
        size_t intd = 0;
        while (start + intd < i && isdigit((unsigned char) s[start + intd]))
            intd++;
        memcpy(buf, s + start, 17);
        buf[17] = '\0';
        t->val = intd > 17 ? strtod(buf, NULL) * pow(10.0, (double) (intd - 17))
                           : strtod(buf, NULL);
    }
    t->inexact = inexact;
    t->integer = !inexact;
    for (size_t k = start; k < i; k++)
        if (!isdigit((unsigned char) s[k]))
            t->integer = false;
    t->off = start;
    t->len = l;
    return i;
}

/* Reads a subscript after a variable letter: _1, _{12}, _n. */
static size_t
s_lex_subscript(const char *s, size_t n, size_t i)
{
    if (i >= n || s[i] != '_')
        return i;
    if (i + 1 < n && isalnum((unsigned char) s[i + 1]))
        return i + 2;
    if (i + 1 < n && s[i + 1] == '{') {
        size_t j = i + 2;
        while (j < n && j < i + 12 && isalnum((unsigned char) s[j]))
            j++;
        if (j < n && s[j] == '}' && j > i + 2)
            return j + 1;
    }
    return i;
}

static bool
s_lex_var(s_parser_t *p, const char *name, size_t n, bool space)
{
    int v = s_var_index(p->e, name, n);
    s_tok_t *t = v < 0 ? NULL : s_push(p, T_VAR, space);
    if (!t) {
        p->fail = true;
        return false;
    }
    t->var = v;
    return true;
}

static bool
s_lex_word(s_parser_t *p, const s_word_t *w, bool space)
{
    s_tok_t *t = s_push(p, w->kind, space);
    if (!t)
        return false;
    t->fn = w->fn;
    t->val = w->val;
    t->op = w->op;
    return true;
}

static size_t
s_skip_space(const char *s, size_t n, size_t i)
{
    while (i < n && isspace((unsigned char) s[i]))
        i++;
    return i;
}

/* The lexers of s_tokenize below: each takes the position of its first
 * byte and returns the position after what it read, or S_LEX_STOP when the
 * input is not an expression (p->fail set) or a token could not be kept. */
#define S_LEX_STOP SIZE_MAX

/* A run of letters: a known word, e, or single-letter variables. */
static size_t
s_lex_alpha(s_parser_t *p, size_t i, bool space)
{
    const char *s = p->s;
    size_t n = p->len, j = i;
    while (j < n && isalpha((unsigned char) s[j]))
        j++;
    const s_word_t *w = s_word(s + i, j - i);
    if (w)
        return s_lex_word(p, w, space) ? j : S_LEX_STOP;
    if (j - i > 2) {
        p->fail = true; /* a word: not an expression */
        return S_LEX_STOP;
    }
    size_t stop = j;
    for (size_t k = i; k < j; k++) {
        if (s[k] == 'e') {
            s_word_t ew = {"e", T_CONST, 0, RWD_E, 0};
            if (!s_lex_word(p, &ew, space && k == i))
                return S_LEX_STOP;
            continue;
        }
        /* The last letter of the run may carry a subscript. */
        size_t end = k + 1 == j ? s_lex_subscript(s, n, j) : k + 1;
        if (!s_lex_var(p, s + k, end - k, space && k == i))
            return S_LEX_STOP;
        stop = end > stop ? end : stop;
    }
    return stop;
}

/* A backslash command: spacing, a known word, a no-op or a Greek letter;
 * \frac followed by digits sets *frac_digits. */
static size_t
s_lex_command(s_parser_t *p, size_t i, bool space, int *frac_digits)
{
    const char *s = p->s;
    size_t n = p->len, j = i + 1;
    while (j < n && isalpha((unsigned char) s[j]))
        j++;
    size_t wl = j - i - 1;
    if (wl == 0) {
        /* \, \; \! \: \  are spacing; anything else is not ours. */
        if (j < n && strchr(",;!: ", s[j]))
            return j + 1;
        p->fail = true;
        return S_LEX_STOP;
    }
    const s_word_t *w = s_word(s + i + 1, wl);
    if (w) {
        if (!s_lex_word(p, w, space))
            return S_LEX_STOP;
        if (w->kind == T_FRAC)
            *frac_digits =
                isdigit((unsigned char) s[s_skip_space(s, n, j)]) ? 2 : 0;
        return j;
    }
    if (s_in(s_noops, sizeof s_noops / sizeof s_noops[0], s + i + 1, wl)) {
        /* \left. and \right. are invisible delimiters. */
        return j < n && s[j] == '.' ? j + 1 : j;
    }
    if (s_in(s_greek, sizeof s_greek / sizeof s_greek[0], s + i + 1, wl)) {
        size_t end = s_lex_subscript(s, n, j);
        return s_lex_var(p, s + i, end - i, space) ? end : S_LEX_STOP;
    }
    p->fail = true;
    return S_LEX_STOP;
}

/* UTF-8 spellings of a few symbols (middle dot, times, pi, square root,
 * infinity, minus); 0 when the byte at i starts none of them. */
static size_t
s_lex_symbol(s_parser_t *p, size_t i, bool space)
{
    const unsigned char *s = (const unsigned char *) p->s;
    size_t n = p->len;
    s_word_t w = {"", T_OP, 0, 0, '*'};
    size_t len = 2;
    if (i + 1 < n && ((s[i] == 0xC2 && s[i + 1] == 0xB7) ||
                      (s[i] == 0xC3 && s[i + 1] == 0x97))) {
        /* w is multiplication */
    } else if (i + 1 < n && s[i] == 0xCF && s[i + 1] == 0x80) {
        w = (s_word_t){"", T_CONST, 0, RWD_PI, 0};
    } else if (i + 2 < n && s[i] == 0xE2 && s[i + 1] == 0x88) {
        len = 3;
        w.op = '-';
        if (s[i + 2] == 0x9A) {
            w.kind = T_SQRT;
        } else if (s[i + 2] == 0x9E) {
            w.kind = T_CONST;
            w.val = RWD_INF;
        } else if (s[i + 2] != 0x92) {
            p->fail = true;
            return S_LEX_STOP;
        }
    } else {
        return 0;
    }
    return s_lex_word(p, &w, space) ? i + len : S_LEX_STOP;
}

/* One operator or bracket. */
static size_t
s_lex_punct(s_parser_t *p, size_t i, bool space)
{
    unsigned char c = (unsigned char) p->s[i];
    s_tok_t *t = NULL;
    if (strchr("+-*/^!_", (int) c) && c != '\0') {
        t = s_push(p, T_OP, space);
    } else if (c == '(' || c == '[' || c == '{') {
        t = s_push(p, T_OPEN, space);
    } else if (c == ')' || c == ']' || c == '}') {
        t = s_push(p, T_CLOSE, space);
    } else {
        p->fail = true;
        return S_LEX_STOP;
    }
    if (!t)
        return S_LEX_STOP;
    t->op = (char) c;
    return i + 1;
}

static void
s_tokenize(s_parser_t *p)
{
    const char *s = p->s;
    size_t n = p->len, i = 0;
    int frac_digits = 0; /* \frac12: next digits are one-digit arguments */
    while (i < n && !p->fail) {
        bool space = false;
        if (isspace((unsigned char) s[i])) {
            i = s_skip_space(s, n, i);
            space = true;
            if (i >= n)
                break;
        }
        unsigned char c = (unsigned char) s[i];
        if (isdigit(c) ||
            (c == '.' && i + 1 < n && isdigit((unsigned char) s[i + 1]))) {
            i = s_lex_number(p, i, space, frac_digits > 0 && isdigit(c));
            if (frac_digits > 0)
                frac_digits--;
            continue;
        }
        frac_digits = 0;
        size_t next;
        if (isalpha(c))
            next = s_lex_alpha(p, i, space);
        else if (c == '\\')
            next = s_lex_command(p, i, space, &frac_digits);
        else if ((next = s_lex_symbol(p, i, space)) == 0)
            next = s_lex_punct(p, i, space);
        if (next == S_LEX_STOP)
            return;
        i = next;
    }
    s_push(p, T_END, false);
}

/* ---------------------------------------------------------------------------
 * Parser */

static int
s_node(s_parser_t *p, s_node_op_t op, int a, int b, double val)
{
    rwd_expr_t *e = p->e;
    bool leaf = op == N_NUM || op == N_VAR;
    bool binary = op != N_NEG && op != N_FUNC && op != N_FACT && !leaf;
    if (p->fail || (!leaf && a < 0) || (binary && b < 0) ||
        e->nnodes >= RWD_EXPR_MAX_NODES) {
        p->fail = true;
        return -1;
    }
    s_node_t *nd = &e->nodes[e->nnodes];
    nd->op = (uint8_t) op;
    nd->fn = 0;
    nd->a = (int16_t) a;
    nd->b = (int16_t) b;
    nd->val = val;
    return (int) e->nnodes++;
}

static const s_tok_t *
s_peek(const s_parser_t *p)
{
    return &p->toks[p->pos];
}

static bool
s_is_op(const s_tok_t *t, char op)
{
    return t->kind == T_OP && t->op == op;
}

static int s_expr(s_parser_t *p, unsigned depth);
static int s_power(s_parser_t *p, unsigned depth);
static int s_primary(s_parser_t *p, unsigned depth);

static char
s_closer(char open)
{
    return open == '(' ? ')' : open == '[' ? ']' : '}';
}

/* A group: ( expr ), [ expr ] or { expr }. */
static int
s_group(s_parser_t *p, unsigned depth)
{
    const s_tok_t *t = s_peek(p);
    if (t->kind != T_OPEN) {
        p->fail = true;
        return -1;
    }
    char want = s_closer(t->op);
    p->pos++;
    int x = s_expr(p, depth + 1);
    t = s_peek(p);
    if (t->kind != T_CLOSE || t->op != want) {
        p->fail = true;
        return -1;
    }
    p->pos++;
    return x;
}

/* An integer literal wrapped in braces ({3}) or bare (\frac12); -1 if not. */
static bool
s_int_arg(const s_parser_t *p, size_t at, double *v, size_t *next)
{
    const s_tok_t *t = &p->toks[at];
    if (t->kind == T_NUM && t->integer) {
        *v = t->val;
        *next = at + 1;
        return true;
    }
    if (t->kind == T_OPEN && t->op == '{' && p->toks[at + 1].kind == T_NUM &&
        p->toks[at + 1].integer && p->toks[at + 2].kind == T_CLOSE &&
        p->toks[at + 2].op == '}') {
        *v = p->toks[at + 1].val;
        *next = at + 3;
        return true;
    }
    return false;
}

/* Mixed numbers: 2\frac{1}{2} and "2 1/2" mean 2 + 1/2. */
static bool
s_mixed(s_parser_t *p, double whole, double *out)
{
    size_t at = p->pos;
    const s_tok_t *t = &p->toks[at];
    double num, den;
    size_t next;
    if (t->kind == T_FRAC && s_int_arg(p, at + 1, &num, &next) &&
        s_int_arg(p, next, &den, &next)) {
        const s_tok_t *after = &p->toks[next];
        if (after->kind == T_OP && after->op == '^')
            return false;
        *out = whole + num / den;
        p->pos = next;
        return true;
    }
    if (t->kind == T_NUM && t->integer && t->space &&
        s_is_op(&p->toks[at + 1], '/') && p->toks[at + 2].kind == T_NUM &&
        p->toks[at + 2].integer) {
        const s_tok_t *after = &p->toks[at + 3];
        if (after->kind != T_END && after->kind != T_CLOSE &&
            !s_is_op(after, '+') && !s_is_op(after, '-'))
            return false;
        *out = whole + t->val / p->toks[at + 2].val;
        p->pos = at + 3;
        return true;
    }
    return false;
}

static int
s_primary(s_parser_t *p, unsigned depth)
{
    if (depth > RWD_EXPR_MAX_DEPTH || p->fail) {
        p->fail = true;
        return -1;
    }
    const s_tok_t *t = s_peek(p);
    switch (t->kind) {
    case T_NUM: {
        p->pos++;
        if (t->inexact)
            p->e->inexact = true;
        double mixed;
        if (t->integer && s_mixed(p, t->val, &mixed))
            return s_node(p, N_NUM, -1, -1, mixed);
        return s_node(p, N_NUM, -1, -1, t->val);
    }
    case T_VAR:
        p->pos++;
        return s_node(p, N_VAR, -1, -1, (double) t->var);
    case T_CONST:
        p->pos++;
        return s_node(p, N_NUM, -1, -1, t->val);
    case T_OPEN:
        return s_group(p, depth);
    case T_FRAC: {
        p->pos++;
        int a = s_primary(p, depth + 1);
        int b = s_primary(p, depth + 1);
        return s_node(p, N_DIV, a, b, 0);
    }
    case T_SQRT: {
        p->pos++;
        int idx = -1;
        if (s_peek(p)->kind == T_OPEN && s_peek(p)->op == '[')
            idx = s_group(p, depth + 1);
        int a = s_primary(p, depth + 1);
        if (idx >= 0)
            return s_node(p, N_ROOT, a, idx, 0);
        int x = s_node(p, N_FUNC, a, -1, 0);
        if (x >= 0)
            p->e->nodes[x].fn = F_SQRT;
        return x;
    }
    case T_FUNC: {
        int fn = t->fn;
        p->pos++;
        int expo = -1, base = -1;
        if (fn == F_LOG && s_is_op(s_peek(p), '_')) {
            p->pos++;
            base = s_primary(p, depth + 1);
        }
        if (s_is_op(s_peek(p), '^')) {
            p->pos++;
            expo = s_power(p, depth + 1);
        }
        int a = s_power(p, depth + 1);
        int x = s_node(p, N_FUNC, a, -1, 0);
        if (x < 0)
            return -1;
        p->e->nodes[x].fn = (uint8_t) fn;
        if (base >= 0) {
            int lb = s_node(p, N_FUNC, base, -1, 0);
            if (lb < 0)
                return -1;
            p->e->nodes[lb].fn = F_LN;
            x = s_node(p, N_DIV, x, lb, 0);
            /* log_b x = ln x / ln b: the numerator must be ln, not log. */
            if (x >= 0)
                p->e->nodes[p->e->nodes[x].a].fn = F_LN;
        }
        if (expo >= 0)
            x = s_node(p, N_POW, x, expo, 0);
        return x;
    }
    default:
        p->fail = true;
        return -1;
    }
}

static int
s_postfix(s_parser_t *p, unsigned depth)
{
    int x = s_primary(p, depth);
    while (!p->fail && s_is_op(s_peek(p), '!')) {
        p->pos++;
        x = s_node(p, N_FACT, x, -1, 0);
    }
    return x;
}

/* base ^ exponent, right-associative; the exponent may carry a sign. */
static int
s_power(s_parser_t *p, unsigned depth)
{
    if (depth > RWD_EXPR_MAX_DEPTH) {
        p->fail = true;
        return -1;
    }
    int base = s_postfix(p, depth + 1);
    if (p->fail || !s_is_op(s_peek(p), '^'))
        return base;
    p->pos++;
    int expo;
    if (s_is_op(s_peek(p), '-')) {
        p->pos++;
        expo = s_node(p, N_NEG, s_power(p, depth + 1), -1, 0);
    } else if (s_is_op(s_peek(p), '+')) {
        p->pos++;
        expo = s_power(p, depth + 1);
    } else {
        expo = s_power(p, depth + 1);
    }
    return s_node(p, N_POW, base, expo, 0);
}

static int
s_unary(s_parser_t *p, unsigned depth)
{
    if (depth > RWD_EXPR_MAX_DEPTH) {
        p->fail = true;
        return -1;
    }
    if (s_is_op(s_peek(p), '-')) {
        p->pos++;
        return s_node(p, N_NEG, s_unary(p, depth + 1), -1, 0);
    }
    if (s_is_op(s_peek(p), '+')) {
        p->pos++;
        return s_unary(p, depth + 1);
    }
    return s_power(p, depth + 1);
}

/* Whether t can start an implicitly multiplied factor (2x, 3\sqrt{2}). */
static bool
s_starts_factor(const s_tok_t *t)
{
    switch (t->kind) {
    case T_VAR:
    case T_CONST:
    case T_FUNC:
    case T_FRAC:
    case T_SQRT:
        return true;
    case T_OPEN:
        return true;
    default:
        return false;
    }
}

static int
s_term(s_parser_t *p, unsigned depth)
{
    int x = s_unary(p, depth + 1);
    while (!p->fail) {
        const s_tok_t *t = s_peek(p);
        if (s_is_op(t, '*') || s_is_op(t, '/')) {
            p->pos++;
            int y = s_unary(p, depth + 1);
            x = s_node(p, t->op == '*' ? N_MUL : N_DIV, x, y, 0);
        } else if (s_starts_factor(t)) {
            int y = s_power(p, depth + 1);
            x = s_node(p, N_MUL, x, y, 0);
        } else {
            break;
        }
    }
    return x;
}

static int
s_expr(s_parser_t *p, unsigned depth)
{
    if (depth > RWD_EXPR_MAX_DEPTH) {
        p->fail = true;
        return -1;
    }
    int x = s_term(p, depth + 1);
    while (!p->fail) {
        const s_tok_t *t = s_peek(p);
        if (!s_is_op(t, '+') && !s_is_op(t, '-'))
            break;
        p->pos++;
        int y = s_term(p, depth + 1);
        x = s_node(p, t->op == '+' ? N_ADD : N_SUB, x, y, 0);
    }
    return x;
}

static void
s_keep_integer(rwd_expr_t *e, const s_parser_t *p)
{
    /* Root is a bare integer literal, possibly negated. */
    size_t at = 0;
    bool neg = false;
    if (p->ntoks >= 2 && s_is_op(&p->toks[0], '-')) {
        neg = true;
        at = 1;
    } else if (p->ntoks >= 2 && s_is_op(&p->toks[0], '+')) {
        at = 1;
    }
    const s_tok_t *t = &p->toks[at];
    if (t->kind != T_NUM || !t->integer || p->toks[at + 1].kind != T_END)
        return;
    const char *d = p->s + t->off;
    size_t l = t->len;
    while (l > 1 && *d == '0') {
        d++;
        l--;
    }
    if (l >= RWD_INT_DIGITS)
        return;
    e->int_digits = lisa_strndup(d, l);
    e->is_int = true;
    e->int_neg = neg && !(l == 1 && d[0] == '0');
}

rwd_expr_t *
rwd_expr_parse(const char *s, size_t len)
{
    if (!s || len == 0 || len > RWD_EXPR_MAX_LEN)
        return NULL;
    s_parser_t *p = lisa_malloc(sizeof *p);
    rwd_expr_t *e = lisa_calloc(1, sizeof *e);
    p->s = s;
    p->len = len;
    p->ntoks = 0;
    p->pos = 0;
    p->e = e;
    p->fail = false;
    s_tokenize(p);
    if (!p->fail && p->ntoks > 1) {
        e->root = s_expr(p, 0);
        if (!p->fail && s_peek(p)->kind == T_END && e->root >= 0)
            s_keep_integer(e, p);
        else
            p->fail = true;
    } else {
        p->fail = true;
    }
    bool ok = !p->fail;
    lisa_free(&p);
    if (!ok)
        rwd_expr_destroy(&e);
    return e;
}

void
rwd_expr_destroy(rwd_expr_t **e)
{
    if (!e || !*e)
        return;
    lisa_free(&(*e)->int_digits);
    lisa_free(e);
}

size_t
rwd_expr_nvars(const rwd_expr_t *e)
{
    return e->nvars;
}

const char *
rwd_expr_var(const rwd_expr_t *e, size_t i)
{
    return i < e->nvars ? e->vars[i] : NULL;
}

bool
rwd_expr_inexact(const rwd_expr_t *e)
{
    return e->inexact;
}

bool
rwd_expr_integer(const rwd_expr_t *e, char *digits, size_t cap, bool *neg)
{
    if (!e->is_int || !e->int_digits)
        return false;
    size_t n = strlen(e->int_digits);
    if (n + 1 > cap)
        return false;
    memcpy(digits, e->int_digits, n + 1);
    *neg = e->int_neg;
    return true;
}

/* ---------------------------------------------------------------------------
 * Evaluation */

static double
s_fact(double x)
{
    if (!(x >= 0) || x != floor(x) || x > 170)
        return RWD_NAN;
    double r = 1;
    for (int i = 2; i <= (int) x; i++)
        r *= i;
    return r;
}

static double
s_apply(int fn, double x)
{
    switch (fn) {
    case F_SIN:
        return sin(x);
    case F_COS:
        return cos(x);
    case F_TAN:
        return tan(x);
    case F_SEC:
        return 1.0 / cos(x);
    case F_CSC:
        return 1.0 / sin(x);
    case F_COT:
        return 1.0 / tan(x);
    case F_ASIN:
        return asin(x);
    case F_ACOS:
        return acos(x);
    case F_ATAN:
        return atan(x);
    case F_SINH:
        return sinh(x);
    case F_COSH:
        return cosh(x);
    case F_TANH:
        return tanh(x);
    case F_LN:
    case F_LOG:
        return x > 0 ? log(x) : RWD_NAN;
    case F_LG:
        return x > 0 ? log10(x) : RWD_NAN;
    case F_EXP:
        return exp(x);
    case F_SQRT:
        return x >= 0 ? sqrt(x) : RWD_NAN;
    case F_ABS:
        return fabs(x);
    default:
        return RWD_NAN;
    }
}

static double
s_pow(double a, double b)
{
    if (a < 0 && b != floor(b)) {
        /* Odd roots of negatives are real: (-8)^(1/3) = -2. */
        double inv = 1.0 / b;
        if (fabs(inv - round(inv)) < 1e-9 && fmod(fabs(round(inv)), 2.0) == 1.0)
            return -pow(-a, b);
        return RWD_NAN;
    }
    return pow(a, b);
}

static double
s_eval(const rwd_expr_t *e, int i, const double *vals)
{
    const s_node_t *nd = &e->nodes[i];
    switch ((s_node_op_t) nd->op) {
    case N_NUM:
        return nd->val;
    case N_VAR:
        return vals ? vals[(int) nd->val] : RWD_NAN;
    case N_ADD:
        return s_eval(e, nd->a, vals) + s_eval(e, nd->b, vals);
    case N_SUB:
        return s_eval(e, nd->a, vals) - s_eval(e, nd->b, vals);
    case N_MUL:
        return s_eval(e, nd->a, vals) * s_eval(e, nd->b, vals);
    case N_DIV: {
        double d = s_eval(e, nd->b, vals);
        return d == 0 ? RWD_NAN : s_eval(e, nd->a, vals) / d;
    }
    case N_POW:
        return s_pow(s_eval(e, nd->a, vals), s_eval(e, nd->b, vals));
    case N_NEG:
        return -s_eval(e, nd->a, vals);
    case N_FUNC:
        return s_apply(nd->fn, s_eval(e, nd->a, vals));
    case N_FACT:
        return s_fact(s_eval(e, nd->a, vals));
    case N_ROOT: {
        double idx = s_eval(e, nd->b, vals);
        return idx == 0 ? RWD_NAN : s_pow(s_eval(e, nd->a, vals), 1.0 / idx);
    }
    }
    return RWD_NAN;
}

double
rwd_expr_eval(const rwd_expr_t *e, const double *vals)
{
    return s_eval(e, e->root, vals);
}

/* Compares two values under the rounding rule of rwd_expr_equal. */
static bool
s_close(double a, double b, bool inexact, int decimals)
{
    if (isnan(a) || isnan(b))
        return false;
    if (isinf(a) || isinf(b))
        return a == b;
    double scale = fmax(1.0, fmax(fabs(a), fabs(b)));
    if (inexact && decimals >= 0) {
        double m = pow(10.0, decimals);
        double ra = a * m, rb = b * m;
        if (fabs(ra) < 9e15 && fabs(rb) < 9e15)
            return fabs(round(ra) - round(rb)) < 0.5 ||
                   fabs(a - b) <= 1e-12 * scale;
        return fabs(a - b) <= 1e-12 * scale;
    }
    return fabs(a - b) <= 1e-9 * scale;
}

/* Sample values for free variables: irrational-looking, distinct. */
static const double s_samples[] = {0.5772156649, 1.4142135624, 2.7182818285,
                                   0.3183098862, 1.6180339887, 3.1415926536,
                                   0.6931471806, 1.7320508076, 2.2360679775,
                                   0.8346268417, 1.2020569032, 2.6854520011};

#define RWD_POINTS 4

bool
rwd_expr_equal(const rwd_expr_t *a, const rwd_expr_t *b, int decimals)
{
    bool inexact = a->inexact || b->inexact;
    if (a->is_int && b->is_int)
        return a->int_neg == b->int_neg &&
               strcmp(a->int_digits, b->int_digits) == 0;
    if (a->nvars == 0 && b->nvars == 0)
        return s_close(rwd_expr_eval(a, NULL), rwd_expr_eval(b, NULL), inexact,
                       decimals);
    /* Bind by name: b's variable j takes the value of a's variable of the
     * same name, or a fresh sample of its own. */
    size_t map[RWD_EXPR_MAX_VARS];
    size_t total = a->nvars;
    for (size_t j = 0; j < b->nvars; j++) {
        size_t k = 0;
        while (k < a->nvars && strcmp(a->vars[k], b->vars[j]) != 0)
            k++;
        map[j] = k < a->nvars ? k : total++;
    }
    size_t defined = 0;
    for (size_t pt = 0; pt < RWD_POINTS; pt++) {
        double va[RWD_EXPR_MAX_VARS], vb[RWD_EXPR_MAX_VARS];
        double all[2 * RWD_EXPR_MAX_VARS];
        for (size_t k = 0; k < total; k++)
            all[k] = s_samples[(k * 5 + pt * 7) %
                               (sizeof s_samples / sizeof s_samples[0])] *
                     (pt % 2 ? -1.0 : 1.0) * (1.0 + 0.1 * (double) k);
        for (size_t k = 0; k < a->nvars; k++)
            va[k] = all[k];
        for (size_t j = 0; j < b->nvars; j++)
            vb[j] = all[map[j]];
        double x = rwd_expr_eval(a, va), y = rwd_expr_eval(b, vb);
        if (isnan(x) && isnan(y))
            continue;
        if (!s_close(x, y, inexact, decimals))
            return false;
        defined++;
    }
    return defined > 0;
}

bool
rwd_expr_equal_scaled(const rwd_expr_t *a, const rwd_expr_t *b, double scale,
                      int decimals)
{
    if (a->nvars || b->nvars)
        return false;
    return s_close(rwd_expr_eval(a, NULL), rwd_expr_eval(b, NULL) * scale, true,
                   decimals);
}
