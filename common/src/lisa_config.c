/*
 * lisa_config: one pass per source over a declarative table.
 *
 * Every source (default, file line, environment variable, flag, positional
 * name=value) goes through the same path: find the entry, parse the text by
 * its type, check the bounds, store into the struct at the entry's offset,
 * remember the origin. An error message always starts with the source
 * ("file a.conf:3", "env LISA_X", "flag --x", "argument a.b=1", "default")
 * and names the entry, so an operator knows what to fix and where.
 */
#include "lisa/lisa_config.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A parsed value of any type. */
typedef union {
    char *s;
    int64_t i;
    uint64_t u;
    double d;
    bool b;
} s_val_t;

/* The state of one load: where errors and origins go. */
typedef struct {
    const lisa_config_entry_t *table;
    size_t n;
    void *cfg;
    lisa_config_source_t *sources; /* n entries */
    char *err;
    size_t errlen;
} s_ctx_t;

const char *
lisa_config_type_str(lisa_config_type_t t)
{
    static const char *const names[] = {
        "string", "int64", "uint64", "double", "bool", "duration", "size"};
    unsigned i = (unsigned) t;
    return i < sizeof names / sizeof names[0] ? names[i] : "?";
}

/* ---- parsers of one text value ---------------------------------------- */

/* Parses leading decimal digits of s into *v; *end points past them. */
static lisa_rc_t
s_digits(const char *s, uint64_t *v, const char **end)
{
    uint64_t x = 0;
    const char *p = s;
    if (*p < '0' || *p > '9')
        return LISA_INVALID;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned) (*p - '0');
        if (x > (UINT64_MAX - d) / 10)
            return LISA_INVALID;
        x = x * 10 + d;
    }
    *v = x;
    *end = p;
    return LISA_OK;
}

typedef struct {
    const char *unit;
    uint64_t mult;
} s_unit_t;

/* Parses "<digits>[blanks]<unit>" with a unit from `units`. */
static lisa_rc_t
s_parse_unit(const char *s, const s_unit_t *units, size_t nunits, uint64_t *out)
{
    uint64_t v;
    const char *p;
    if (!s || s_digits(s, &v, &p) != LISA_OK)
        return LISA_INVALID;
    while (*p == ' ')
        p++;
    for (size_t i = 0; i < nunits; i++) {
        if (strcasecmp(p, units[i].unit) != 0)
            continue;
        if (v && units[i].mult > UINT64_MAX / v)
            return LISA_INVALID;
        *out = v * units[i].mult;
        return LISA_OK;
    }
    return LISA_INVALID;
}

static const s_unit_t s_duration_units[] = {
    {"", 1},        {"ms", 1},      {"s", 1000},     {"m", 60000},
    {"min", 60000}, {"h", 3600000}, {"d", 86400000},
};

static const s_unit_t s_size_units[] = {
    {"", 1},
    {"b", 1},
    {"k", 1ull << 10},
    {"kib", 1ull << 10},
    {"kb", 1000ull},
    {"m", 1ull << 20},
    {"mib", 1ull << 20},
    {"mb", 1000000ull},
    {"g", 1ull << 30},
    {"gib", 1ull << 30},
    {"gb", 1000000000ull},
    {"t", 1ull << 40},
    {"tib", 1ull << 40},
    {"tb", 1000000000000ull},
};

#define S_LEN(a) (sizeof(a) / sizeof((a)[0]))

lisa_rc_t
lisa_config_parse_duration(const char *s, uint64_t *ms)
{
    return s_parse_unit(s, s_duration_units, S_LEN(s_duration_units), ms);
}

lisa_rc_t
lisa_config_parse_size(const char *s, uint64_t *bytes)
{
    return s_parse_unit(s, s_size_units, S_LEN(s_size_units), bytes);
}

lisa_rc_t
lisa_config_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    if (!s)
        return LISA_INVALID;
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return LISA_OK;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return LISA_OK;
        }
    }
    return LISA_INVALID;
}

static lisa_rc_t
s_parse_i64(const char *s, int64_t *out)
{
    if (!*s || !(*s == '-' || *s == '+' || (*s >= '0' && *s <= '9')))
        return LISA_INVALID;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end)
        return LISA_INVALID;
    *out = (int64_t) v;
    return LISA_OK;
}

lisa_rc_t
lisa_config_parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v = 0;
    if (!s || s_parse_i64(s, &v) != LISA_OK || v < lo || v > hi)
        return LISA_INVALID;
    *out = v;
    return LISA_OK;
}

static lisa_rc_t
s_parse_u64(const char *s, uint64_t *out)
{
    const char *end;
    if (*s == '+')
        s++;
    if (s_digits(s, out, &end) != LISA_OK || *end)
        return LISA_INVALID;
    return LISA_OK;
}

static lisa_rc_t
s_parse_double(const char *s, double *out)
{
    if (!*s || *s == ' ' || *s == '\t')
        return LISA_INVALID;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v))
        return LISA_INVALID;
    *out = v;
    return LISA_OK;
}

/* What a value of each type looks like, for error messages. */
static const char *
s_expect(lisa_config_type_t t)
{
    switch (t) {
    case LISA_CFG_INT64:
        return "an integer";
    case LISA_CFG_UINT64:
        return "a non-negative integer";
    case LISA_CFG_DOUBLE:
        return "a finite number";
    case LISA_CFG_BOOL:
        return "a boolean (true/false/yes/no/on/off/1/0)";
    case LISA_CFG_DURATION:
        return "a duration (e.g. 500ms, 2s, 1m, 1h)";
    case LISA_CFG_SIZE:
        return "a size (e.g. 512, 4KiB, 16MiB, 1GB)";
    case LISA_CFG_STRING:
        break;
    }
    return "a string";
}

/* Parses text by type into v (v->s is a new copy). */
static lisa_rc_t
s_parse(lisa_config_type_t t, const char *text, s_val_t *v)
{
    switch (t) {
    case LISA_CFG_STRING:
        if (strlen(text) > LISA_CONFIG_MAX_STRING)
            return LISA_TOOLARGE;
        v->s = lisa_strdup(text);
        return LISA_OK;
    case LISA_CFG_INT64:
        return s_parse_i64(text, &v->i);
    case LISA_CFG_UINT64:
        return s_parse_u64(text, &v->u);
    case LISA_CFG_DOUBLE:
        return s_parse_double(text, &v->d);
    case LISA_CFG_BOOL:
        return lisa_config_parse_bool(text, &v->b);
    case LISA_CFG_DURATION:
        return lisa_config_parse_duration(text, &v->u);
    case LISA_CFG_SIZE:
        return lisa_config_parse_size(text, &v->u);
    }
    return LISA_INVALID;
}

/* Parses a bound (min/max) of entry e: a length for strings. */
static lisa_rc_t
s_parse_bound(const lisa_config_entry_t *e, const char *text, s_val_t *v)
{
    if (e->type == LISA_CFG_STRING)
        return s_parse_u64(text, &v->u);
    if (e->type == LISA_CFG_BOOL)
        return LISA_INVALID;
    return s_parse(e->type, text, v);
}

/* <0, 0, >0 as v compares to bound b (strings: by length). */
static int
s_cmp(const lisa_config_entry_t *e, const s_val_t *v, const s_val_t *b)
{
    switch (e->type) {
    case LISA_CFG_STRING: {
        uint64_t len = v->s ? strlen(v->s) : 0;
        return len < b->u ? -1 : len > b->u;
    }
    case LISA_CFG_INT64:
        return v->i < b->i ? -1 : v->i > b->i;
    case LISA_CFG_DOUBLE:
        return v->d < b->d ? -1 : v->d > b->d;
    case LISA_CFG_UINT64:
    case LISA_CFG_DURATION:
    case LISA_CFG_SIZE:
        return v->u < b->u ? -1 : v->u > b->u;
    case LISA_CFG_BOOL:
        break;
    }
    return 0;
}

/* Checks v against e's min/max; on failure writes the problem to msg. */
static lisa_rc_t
s_check_range(const lisa_config_entry_t *e, const s_val_t *v, char *msg,
              size_t len)
{
    s_val_t b;
    const char *what = e->type == LISA_CFG_STRING ? "length " : "";
    if (e->min && s_parse_bound(e, e->min, &b) == LISA_OK &&
        s_cmp(e, v, &b) < 0) {
        snprintf(msg, len, "%sbelow the minimum %s", what, e->min);
        return LISA_INVALID;
    }
    if (e->max && s_parse_bound(e, e->max, &b) == LISA_OK &&
        s_cmp(e, v, &b) > 0) {
        snprintf(msg, len, "%sabove the maximum %s", what, e->max);
        return LISA_INVALID;
    }
    return LISA_OK;
}

/* Stores v into cfg at e's offset (takes ownership of v->s). */
static void
s_store(const lisa_config_entry_t *e, void *cfg, s_val_t *v)
{
    char *field = (char *) cfg + e->offset;
    switch (e->type) {
    case LISA_CFG_STRING: {
        char *old;
        memcpy(&old, field, sizeof old);
        lisa_free(&old);
        memcpy(field, &v->s, sizeof v->s);
        v->s = NULL;
        break;
    }
    case LISA_CFG_INT64:
        memcpy(field, &v->i, sizeof v->i);
        break;
    case LISA_CFG_DOUBLE:
        memcpy(field, &v->d, sizeof v->d);
        break;
    case LISA_CFG_BOOL:
        memcpy(field, &v->b, sizeof v->b);
        break;
    case LISA_CFG_UINT64:
    case LISA_CFG_DURATION:
    case LISA_CFG_SIZE:
        memcpy(field, &v->u, sizeof v->u);
        break;
    }
}

/* Reads the value of e in cfg (strings: borrowed). */
static s_val_t
s_fetch(const lisa_config_entry_t *e, const void *cfg)
{
    const char *field = (const char *) cfg + e->offset;
    s_val_t v;
    memset(&v, 0, sizeof v);
    switch (e->type) {
    case LISA_CFG_STRING:
        memcpy(&v.s, field, sizeof v.s);
        break;
    case LISA_CFG_INT64:
        memcpy(&v.i, field, sizeof v.i);
        break;
    case LISA_CFG_DOUBLE:
        memcpy(&v.d, field, sizeof v.d);
        break;
    case LISA_CFG_BOOL:
        memcpy(&v.b, field, sizeof v.b);
        break;
    case LISA_CFG_UINT64:
    case LISA_CFG_DURATION:
    case LISA_CFG_SIZE:
        memcpy(&v.u, field, sizeof v.u);
        break;
    }
    return v;
}

/* Parses, checks and stores `text` into entry i; records the origin. An
 * error reads "<where>: <name>: <problem>". */
static lisa_rc_t
s_apply(s_ctx_t *c, size_t i, const char *text, lisa_config_origin_t origin,
        const char *where)
{
    const lisa_config_entry_t *e = &c->table[i];
    s_val_t v;
    memset(&v, 0, sizeof v);
    char msg[160];
    lisa_rc_t rc = s_parse(e->type, text, &v);
    if (rc == LISA_TOOLARGE) {
        lisa_errf(c->err, c->errlen, "%s: %s: value longer than %u bytes",
                  where, e->name, LISA_CONFIG_MAX_STRING);
        return LISA_INVALID;
    }
    if (rc != LISA_OK) {
        lisa_errf(c->err, c->errlen, "%s: %s: '%.64s' is not %s", where,
                  e->name, e->flags & LISA_CFG_SECRET ? "***" : text,
                  s_expect(e->type));
        return LISA_INVALID;
    }
    if (s_check_range(e, &v, msg, sizeof msg) != LISA_OK) {
        lisa_errf(c->err, c->errlen, "%s: %s: '%.64s' is %s", where, e->name,
                  e->flags & LISA_CFG_SECRET ? "***" : text, msg);
        if (e->type == LISA_CFG_STRING)
            lisa_free(&v.s);
        return LISA_INVALID;
    }
    s_store(e, c->cfg, &v);
    if (c->sources) {
        c->sources[i].origin = origin;
        snprintf(c->sources[i].where, sizeof c->sources[i].where, "%s", where);
    }
    return LISA_OK;
}

/* ---- table lookups -------------------------------------------------- */

static bool
s_find_name(const lisa_config_entry_t *t, size_t n, const char *name,
            size_t len, size_t *i)
{
    for (size_t k = 0; k < n; k++) {
        if (strlen(t[k].name) == len && memcmp(t[k].name, name, len) == 0) {
            *i = k;
            return true;
        }
    }
    return false;
}

static bool
s_find_flag(const lisa_config_entry_t *t, size_t n, const char *flag,
            size_t len, size_t *i)
{
    for (size_t k = 0; k < n; k++) {
        if (t[k].flag && strlen(t[k].flag) == len &&
            memcmp(t[k].flag, flag, len) == 0) {
            *i = k;
            return true;
        }
    }
    return false;
}

/* Edit distance of a and b (both at most 63 bytes; else a large value). */
static size_t
s_distance(const char *a, size_t la, const char *b)
{
    size_t lb = strlen(b), row[64];
    if (la >= 64 || lb >= 64)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* The flag (or name) of the table closest to s[0..len), if within 2 edits;
 * NULL otherwise. */
static const char *
s_suggest(const s_ctx_t *c, const char *s, size_t len, bool flags)
{
    const char *best = NULL;
    size_t bestd = 3;
    for (size_t i = 0; i < c->n; i++) {
        const char *cand = flags ? c->table[i].flag : c->table[i].name;
        size_t d = cand ? s_distance(s, len, cand) : SIZE_MAX;
        if (d < bestd) {
            bestd = d;
            best = cand;
        }
    }
    return best;
}

/* Writes the "unknown" error for s[0..len) with a suggestion if any. */
static void
s_unknown(const s_ctx_t *c, const char *where, const char *what, const char *s,
          size_t len, bool flags)
{
    const char *hint = s_suggest(c, s, len, flags);
    lisa_errf(c->err, c->errlen, "%s: unknown %s '%.*s'%s%s%s", where, what,
              (int) (len > 64 ? 64 : len), s, hint ? " (did you mean " : "",
              hint ? hint : " (see --help", ")");
}

static bool
s_same(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* True for a non-empty name without '=', blanks or control characters. */
static bool
s_name_ok(const char *s)
{
    if (!s || !*s || *s == '-' || strlen(s) > 100)
        return false;
    for (; *s; s++)
        if (*s == '=' || (unsigned char) *s <= ' ' || *s == 0x7f)
            return false;
    return true;
}

/* Checks the table itself: names present and unique, flags "--x" and
 * unique, env unique, defaults and bounds parse. */
static lisa_rc_t
s_check_table(s_ctx_t *c)
{
    for (size_t i = 0; i < c->n; i++) {
        const lisa_config_entry_t *e = &c->table[i];
        s_val_t b;
        if (!s_name_ok(e->name) ||
            (e->flag &&
             (strncmp(e->flag, "--", 2) != 0 || !s_name_ok(e->flag + 2))) ||
            (e->type == LISA_CFG_BOOL && e->flag &&
             strncmp(e->flag, "--no-", 5) == 0)) {
            lisa_errf(c->err, c->errlen,
                      "config table: entry %zu: bad name/flag", i);
            return LISA_INVALID;
        }
        if ((e->min && s_parse_bound(e, e->min, &b) != LISA_OK) ||
            (e->max && s_parse_bound(e, e->max, &b) != LISA_OK)) {
            lisa_errf(c->err, c->errlen, "config table: %s: bad min/max",
                      e->name);
            return LISA_INVALID;
        }
        for (size_t k = 0; k < i; k++) {
            const lisa_config_entry_t *o = &c->table[k];
            if (s_same(o->name, e->name) || s_same(o->flag, e->flag) ||
                s_same(o->env, e->env)) {
                lisa_errf(c->err, c->errlen, "config table: %s clashes with %s",
                          e->name, o->name);
                return LISA_INVALID;
            }
        }
        if (s_same(e->flag, "--config") || s_same(e->flag, "--help")) {
            lisa_errf(c->err, c->errlen, "config table: %s: reserved flag %s",
                      e->name, e->flag);
            return LISA_INVALID;
        }
    }
    return LISA_OK;
}

/* Sets every entry to its default (a NULL default is NULL / 0 / false). */
static lisa_rc_t
s_apply_defaults(s_ctx_t *c)
{
    for (size_t i = 0; i < c->n; i++) {
        const lisa_config_entry_t *e = &c->table[i];
        if (e->def) {
            lisa_rc_t rc =
                s_apply(c, i, e->def, LISA_CFG_FROM_DEFAULT, "default");
            if (rc != LISA_OK)
                return rc;
        } else {
            s_val_t zero;
            memset(&zero, 0, sizeof zero);
            s_store(e, c->cfg, &zero);
        }
        if (c->sources) {
            c->sources[i].origin = LISA_CFG_FROM_DEFAULT;
            snprintf(c->sources[i].where, sizeof c->sources[i].where,
                     "default");
        }
    }
    return LISA_OK;
}

/* ---- config file text ----------------------------------------------- */

static bool
s_blank(char ch)
{
    return ch == ' ' || ch == '\t';
}

/* Trims blanks around [*b, *e). */
static void
s_trim(const char **b, const char **e)
{
    while (*b < *e && s_blank(**b))
        (*b)++;
    while (*e > *b && s_blank((*e)[-1]))
        (*e)--;
}

/* Applies one file line [p, end); `where` is "name:line". */
static lisa_rc_t
s_file_line(s_ctx_t *c, const char *p, const char *end, const char *where)
{
    if (end > p && end[-1] == '\r')
        end--;
    s_trim(&p, &end);
    if (p == end || *p == '#')
        return LISA_OK;
    const char *eq = memchr(p, '=', (size_t) (end - p));
    if (!eq) {
        lisa_errf(c->err, c->errlen, "%s: expected 'name = value'", where);
        return LISA_INVALID;
    }
    const char *kb = p, *ke = eq, *vb = eq + 1, *ve = end;
    s_trim(&kb, &ke);
    s_trim(&vb, &ve);
    if (ve - vb >= 2 && *vb == '"' && ve[-1] == '"') {
        vb++;
        ve--;
    }
    size_t i;
    if (!s_find_name(c->table, c->n, kb, (size_t) (ke - kb), &i)) {
        s_unknown(c, where, "setting", kb, (size_t) (ke - kb), false);
        return LISA_INVALID;
    }
    char *val = lisa_strndup(vb, (size_t) (ve - vb));
    lisa_rc_t rc = s_apply(c, i, val, LISA_CFG_FROM_FILE, where);
    lisa_free(&val);
    return rc;
}

/* Applies file text line by line. */
static lisa_rc_t
s_file_text(s_ctx_t *c, const char *text, size_t len, const char *name)
{
    char where[160];
    if (len > LISA_CONFIG_MAX_FILE) {
        lisa_errf(c->err, c->errlen, "file %s: larger than %u bytes", name,
                  LISA_CONFIG_MAX_FILE);
        return LISA_INVALID;
    }
    if (memchr(text, 0, len)) {
        lisa_errf(c->err, c->errlen, "file %s: contains a NUL byte", name);
        return LISA_INVALID;
    }
    const char *p = text, *end = text + len;
    for (unsigned line = 1; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t) (end - p));
        const char *le = nl ? nl : end;
        snprintf(where, sizeof where, "file %s:%u", name, line);
        if ((size_t) (le - p) > LISA_CONFIG_MAX_LINE) {
            lisa_errf(c->err, c->errlen, "%s: line longer than %u bytes", where,
                      LISA_CONFIG_MAX_LINE);
            return LISA_INVALID;
        }
        lisa_rc_t rc = s_file_line(c, p, le, where);
        if (rc != LISA_OK)
            return rc;
        p = nl ? nl + 1 : end;
    }
    return LISA_OK;
}

/* Reads a whole file of at most LISA_CONFIG_MAX_FILE bytes. */
static lisa_rc_t
s_read_file(const char *path, char **out, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        lisa_errf(err, errlen, "file %s: cannot open: %s", path,
                  strerror(errno));
        return LISA_ERR;
    }
    char *buf = lisa_malloc(LISA_CONFIG_MAX_FILE + 1);
    size_t n = fread(buf, 1, LISA_CONFIG_MAX_FILE + 1, f);
    lisa_rc_t rc = LISA_OK;
    if (ferror(f)) {
        lisa_errf(err, errlen, "file %s: read error", path);
        rc = LISA_ERR;
    } else if (n > LISA_CONFIG_MAX_FILE) {
        lisa_errf(err, errlen, "file %s: larger than %u bytes", path,
                  LISA_CONFIG_MAX_FILE);
        rc = LISA_INVALID;
    }
    fclose(f);
    if (rc != LISA_OK) {
        lisa_free(&buf);
        return rc;
    }
    *out = buf;
    *len = n;
    return LISA_OK;
}

lisa_rc_t
lisa_config_load_text(const lisa_config_entry_t *table, size_t n, void *cfg,
                      const char *text, size_t len, const char *name,
                      lisa_config_source_t *sources, char *err, size_t errlen)
{
    s_ctx_t c = {table, n, cfg, sources, err, errlen};
    return s_file_text(&c, text, len, name ? name : "(text)");
}

/* ---- environment and command line ----------------------------------- */

/* Applies every entry's environment variable that is set and non-empty. */
static lisa_rc_t
s_apply_env(s_ctx_t *c)
{
    char where[160];
    for (size_t i = 0; i < c->n; i++) {
        const char *env = c->table[i].env;
        const char *v = env ? getenv(env) : NULL;
        if (!v || !*v)
            continue;
        snprintf(where, sizeof where, "env %s", env);
        lisa_rc_t rc = s_apply(c, i, v, LISA_CFG_FROM_ENV, where);
        if (rc != LISA_OK)
            return rc;
    }
    return LISA_OK;
}

/* Splits "--x=v" into flag length and value (NULL when no '='). */
static size_t
s_split_flag(const char *arg, const char **val)
{
    const char *eq = strchr(arg, '=');
    *val = eq ? eq + 1 : NULL;
    return eq ? (size_t) (eq - arg) : strlen(arg);
}

/* Applies a "--no-x" flag to a BOOL entry; false when arg is not one. */
static bool
s_negated(s_ctx_t *c, const char *arg, size_t *i)
{
    char buf[128];
    if (strncmp(arg, "--no-", 5) != 0 || strchr(arg, '=') ||
        strlen(arg) >= sizeof buf)
        return false;
    snprintf(buf, sizeof buf, "--%s", arg + 5);
    return s_find_flag(c->table, c->n, buf, strlen(buf), i) &&
           c->table[*i].type == LISA_CFG_BOOL;
}

/* Applies the flag at argv[*k] (consuming its value); advances *k. */
static lisa_rc_t
s_apply_flag(s_ctx_t *c, int argc, char **argv, int *k)
{
    const char *arg = argv[*k], *val;
    char where[160];
    size_t flen = s_split_flag(arg, &val), i;
    snprintf(where, sizeof where, "flag %.*s", (int) (flen > 64 ? 64 : flen),
             arg);
    if (s_negated(c, arg, &i))
        return s_apply(c, i, "false", LISA_CFG_FROM_FLAG, where);
    if (!s_find_flag(c->table, c->n, arg, flen, &i)) {
        s_unknown(c, where, "flag", arg, flen, true);
        return LISA_INVALID;
    }
    if (!val && c->table[i].type == LISA_CFG_BOOL)
        val = "true";
    if (!val) {
        if (*k + 1 >= argc) {
            lisa_errf(c->err, c->errlen, "%s: %s: missing value", where,
                      c->table[i].name);
            return LISA_INVALID;
        }
        val = argv[++*k];
    }
    return s_apply(c, i, val, LISA_CFG_FROM_FLAG, where);
}

/* Applies a positional "name=value" argument. */
static lisa_rc_t
s_apply_arg(s_ctx_t *c, const char *arg)
{
    const char *val;
    char where[160];
    size_t nlen = s_split_flag(arg, &val), i;
    /* The value stays out of `where`: it may be a secret. */
    snprintf(where, sizeof where, "argument %.*s",
             (int) (nlen > 96 ? 96 : nlen), arg);
    if (!s_find_name(c->table, c->n, arg, nlen, &i)) {
        s_unknown(c, where, "setting", arg, nlen, false);
        return LISA_INVALID;
    }
    return s_apply(c, i, val, LISA_CFG_FROM_ARG, where);
}

/* True when argv[k] is a known non-BOOL flag without "=value" (so the next
 * argument is its value). */
static bool
s_takes_value(s_ctx_t *c, const char *arg)
{
    size_t i;
    if (strcmp(arg, "--config") == 0)
        return true;
    return !strchr(arg, '=') &&
           s_find_flag(c->table, c->n, arg, strlen(arg), &i) &&
           c->table[i].type != LISA_CFG_BOOL;
}

/* Scans argv for --help / -h and the last --config FILE. */
static void
s_prescan(s_ctx_t *c, int argc, char **argv, bool *help, const char **file)
{
    for (int k = 1; k < argc; k++) {
        const char *a = argv[k];
        if (strcmp(a, "--") == 0)
            break;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            *help = true;
        else if (strncmp(a, "--config=", 9) == 0)
            *file = a + 9;
        else if (strcmp(a, "--config") == 0 && k + 1 < argc)
            *file = argv[k + 1];
        if (s_takes_value(c, a))
            k++;
    }
}

/* Applies flags and positional arguments of argv, left to right. */
static lisa_rc_t
s_apply_argv(s_ctx_t *c, int argc, char **argv, const lisa_config_opts_t *o)
{
    bool only_pos = false;
    for (int k = 1; k < argc; k++) {
        const char *a = argv[k];
        lisa_rc_t rc = LISA_OK;
        if (!only_pos && strcmp(a, "--") == 0) {
            only_pos = true;
        } else if (!only_pos && strcmp(a, "--config") == 0) {
            if (++k >= argc) {
                lisa_errf(c->err, c->errlen, "flag --config: missing value");
                rc = LISA_INVALID;
            }
        } else if (!only_pos && strncmp(a, "--config=", 9) == 0) {
            continue;
        } else if (!only_pos && strncmp(a, "--", 2) == 0) {
            rc = s_apply_flag(c, argc, argv, &k);
        } else if (strchr(a, '=') && a[0] != '=') {
            rc = s_apply_arg(c, a);
        } else if (o && o->rest && o->rest_len && *o->rest_len < o->rest_max) {
            o->rest[(*o->rest_len)++] = argv[k];
        } else {
            lisa_errf(c->err, c->errlen,
                      "argument %.96s: unexpected (see --help)", a);
            rc = LISA_INVALID;
        }
        if (rc != LISA_OK)
            return rc;
    }
    return LISA_OK;
}

/* Checks that every REQUIRED entry got a non-default, non-empty value. */
static lisa_rc_t
s_check_required(s_ctx_t *c)
{
    for (size_t i = 0; i < c->n; i++) {
        const lisa_config_entry_t *e = &c->table[i];
        if (!(e->flags & LISA_CFG_REQUIRED))
            continue;
        s_val_t v = s_fetch(e, c->cfg);
        bool unset = e->type == LISA_CFG_STRING
                         ? (!v.s || !*v.s)
                         : c->sources[i].origin == LISA_CFG_FROM_DEFAULT;
        if (unset) {
            lisa_errf(c->err, c->errlen, "%s: required; set %s%s%s%s", e->name,
                      e->flag ? e->flag : "", e->flag && e->env ? " or " : "",
                      e->env ? e->env : "",
                      e->flag || e->env ? "" : "it in a file");
            return LISA_INVALID;
        }
    }
    return LISA_OK;
}

static const char *
s_basename(const char *p)
{
    const char *s = p ? strrchr(p, '/') : NULL;
    return s ? s + 1 : (p ? p : "lisa");
}

/* The load steps in precedence order, on a ready context. */
static lisa_rc_t
s_load(s_ctx_t *c, int argc, char **argv, const lisa_config_opts_t *o)
{
    bool help = false;
    const char *file = NULL;
    lisa_rc_t rc = s_check_table(c);
    if (rc != LISA_OK)
        return rc;
    s_prescan(c, argc, argv, &help, &file);
    if (help) {
        lisa_config_help(o && o->help_out ? o->help_out : stdout,
                         o && o->prog ? o->prog
                                      : s_basename(argc ? argv[0] : NULL),
                         o ? o->about : NULL, c->table, c->n);
        return LISA_AGAIN;
    }
    rc = s_apply_defaults(c);
    if (rc == LISA_OK && file) {
        char *text = NULL;
        size_t len = 0;
        rc = s_read_file(file, &text, &len, c->err, c->errlen);
        if (rc == LISA_OK)
            rc = s_file_text(c, text, len, file);
        lisa_free(&text);
    }
    if (rc == LISA_OK)
        rc = s_apply_env(c);
    if (rc == LISA_OK)
        rc = s_apply_argv(c, argc, argv, o);
    if (rc == LISA_OK)
        rc = s_check_required(c);
    return rc;
}

lisa_rc_t
lisa_config_load_ex(const lisa_config_entry_t *table, size_t n, void *cfg,
                    int argc, char **argv, const lisa_config_opts_t *opts,
                    char *err, size_t errlen)
{
    lisa_config_source_t *own = NULL;
    s_ctx_t c = {table, n, cfg, opts ? opts->sources : NULL, err, errlen};
    if (!c.sources)
        c.sources = own = lisa_calloc(n ? n : 1, sizeof *own);
    if (opts && opts->rest_len)
        *opts->rest_len = 0;
    if (err && errlen)
        err[0] = 0;
    lisa_rc_t rc = s_load(&c, argc, argv, opts);
    if (rc != LISA_OK && rc != LISA_AGAIN)
        lisa_config_free(table, n, cfg);
    lisa_free(&own);
    return rc;
}

lisa_rc_t
lisa_config_load(const lisa_config_entry_t *table, size_t n, void *cfg,
                 int argc, char **argv, char *err, size_t errlen)
{
    return lisa_config_load_ex(table, n, cfg, argc, argv, NULL, err, errlen);
}

lisa_rc_t
lisa_config_set(const lisa_config_entry_t *table, size_t n, void *cfg,
                const char *name, const char *value, char *err, size_t errlen)
{
    s_ctx_t c = {table, n, cfg, NULL, err, errlen};
    size_t i;
    if (!name || !value || !s_find_name(table, n, name, strlen(name), &i)) {
        lisa_errf(err, errlen, "unknown setting '%.64s'",
                  name ? name : "(null)");
        return LISA_NOTFOUND;
    }
    return s_apply(&c, i, value, LISA_CFG_FROM_ARG, "set");
}

void
lisa_config_free(const lisa_config_entry_t *table, size_t n, void *cfg)
{
    for (size_t i = 0; i < n; i++) {
        if (table[i].type != LISA_CFG_STRING)
            continue;
        s_val_t zero;
        memset(&zero, 0, sizeof zero);
        s_store(&table[i], cfg, &zero);
    }
}

void
lisa_config_copy(const lisa_config_entry_t *table, size_t n, void *dst,
                 const void *src, size_t size)
{
    memcpy(dst, src, size);
    for (size_t i = 0; i < n; i++) {
        if (table[i].type != LISA_CFG_STRING)
            continue;
        char *field = (char *) dst + table[i].offset, *s;
        memcpy(&s, field, sizeof s);
        s = s ? lisa_strdup(s) : NULL;
        memcpy(field, &s, sizeof s);
    }
}

/* ---- output: format, dump, help, markdown ---------------------------- */

/* Writes v with the largest unit that divides it exactly. */
static void
s_format_unit(uint64_t v, const s_unit_t *units, const size_t *order,
              size_t norder, char *buf, size_t len)
{
    for (size_t k = 0; k < norder; k++) {
        const s_unit_t *u = &units[order[k]];
        if (v && v % u->mult == 0) {
            snprintf(buf, len, "%llu%s", (unsigned long long) (v / u->mult),
                     u->unit);
            return;
        }
    }
    snprintf(buf, len, "%llu", (unsigned long long) v);
}

const char *
lisa_config_format(const lisa_config_entry_t *e, const void *cfg, char *buf,
                   size_t len)
{
    static const s_unit_t dur[] = {
        {"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};
    static const s_unit_t size[] = {{"TiB", 1ull << 40},
                                    {"GiB", 1ull << 30},
                                    {"MiB", 1ull << 20},
                                    {"KiB", 1ull << 10}};
    static const size_t order[] = {0, 1, 2, 3, 4};
    s_val_t v = s_fetch(e, cfg);
    switch (e->type) {
    case LISA_CFG_STRING:
        snprintf(buf, len, "%s", v.s ? v.s : "");
        break;
    case LISA_CFG_INT64:
        snprintf(buf, len, "%lld", (long long) v.i);
        break;
    case LISA_CFG_UINT64:
        snprintf(buf, len, "%llu", (unsigned long long) v.u);
        break;
    case LISA_CFG_DOUBLE:
        snprintf(buf, len, "%.17g", v.d);
        break;
    case LISA_CFG_BOOL:
        snprintf(buf, len, "%s", v.b ? "true" : "false");
        break;
    case LISA_CFG_DURATION:
        s_format_unit(v.u, dur, order, 5, buf, len);
        if (v.u == 0)
            snprintf(buf, len, "0ms");
        break;
    case LISA_CFG_SIZE:
        s_format_unit(v.u, size, order, 4, buf, len);
        break;
    }
    return buf;
}

void
lisa_config_dump(const lisa_config_entry_t *table, size_t n, const void *cfg,
                 const lisa_config_source_t *sources)
{
    char buf[512];
    for (size_t i = 0; i < n; i++) {
        const lisa_config_entry_t *e = &table[i];
        const char *val = e->flags & LISA_CFG_SECRET
                              ? "***"
                              : lisa_config_format(e, cfg, buf, sizeof buf);
        if (e->type == LISA_CFG_STRING && !s_fetch(e, cfg).s)
            val = "(unset)";
        if (sources)
            lisa_log_info("config %s = %s (%s)", e->name, val,
                          sources[i].where);
        else
            lisa_log_info("config %s = %s", e->name, val);
    }
}

/* Metavariable shown after a flag in --help. */
static const char *
s_metavar(lisa_config_type_t t)
{
    static const char *const names[] = {"STR",  "INT",      "UINT", "NUM",
                                        "BOOL", "DURATION", "SIZE"};
    return (unsigned) t < 7 ? names[t] : "?";
}

/* Bounds of e as text: "a .. b", ">= a", "<= b" or "". */
static const char *
s_range_text(const lisa_config_entry_t *e, char *buf, size_t len)
{
    const char *what = e->type == LISA_CFG_STRING ? "length " : "";
    if (e->min && e->max)
        snprintf(buf, len, "%s%s .. %s", what, e->min, e->max);
    else if (e->min)
        snprintf(buf, len, "%s>= %s", what, e->min);
    else if (e->max)
        snprintf(buf, len, "%s<= %s", what, e->max);
    else
        buf[0] = 0;
    return buf;
}

/* Default of e as text: its `def`, or the zero value for a NULL default. */
static const char *
s_default_text(const lisa_config_entry_t *e)
{
    static const char *const zero[] = {NULL,    "0",   "0", "0",
                                       "false", "0ms", "0"};
    if (e->def || (unsigned) e->type >= 7)
        return e->def;
    return zero[e->type];
}

void
lisa_config_help(FILE *out, const char *prog, const char *about,
                 const lisa_config_entry_t *table, size_t n)
{
    fprintf(out, "usage: %s [--config FILE] [OPTIONS] [name=value ...]\n\n",
            prog ? prog : "lisa");
    if (about && *about)
        fprintf(out, "%s\n\n", about);
    fprintf(out, "options (precedence: default < file < env < flag):\n");
    fprintf(out, "  %-28s %s\n", "--config FILE",
            "read 'name = value' lines from FILE");
    fprintf(out, "  %-28s %s\n", "--help, -h", "print this help and exit");
    for (size_t i = 0; i < n; i++) {
        const lisa_config_entry_t *e = &table[i];
        char lhs[96], range[96];
        const char *def = s_default_text(e);
        if (e->flag && e->type == LISA_CFG_BOOL)
            snprintf(lhs, sizeof lhs, "%s[=BOOL]", e->flag);
        else if (e->flag)
            snprintf(lhs, sizeof lhs, "%s %s", e->flag, s_metavar(e->type));
        else
            snprintf(lhs, sizeof lhs, "%s=%s", e->name, s_metavar(e->type));
        fprintf(out, "  %-28s %s\n", lhs, e->help ? e->help : "");
        fprintf(out, "  %-28s name %s", "", e->name);
        if (e->env)
            fprintf(out, ", env %s", e->env);
        if (def && !(e->flags & LISA_CFG_SECRET))
            fprintf(out, ", default %s", def);
        if (e->flags & LISA_CFG_REQUIRED)
            fprintf(out, ", required");
        if (*s_range_text(e, range, sizeof range))
            fprintf(out, ", %s", range);
        fprintf(out, "\n");
    }
}

/* Writes s as Markdown table text ('|' escaped, newlines as spaces). */
static void
s_md_text(FILE *out, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '|')
            fputs("\\|", out);
        else
            fputc(*s == '\n' ? ' ' : *s, out);
    }
}

/* Writes s as one Markdown table cell, in backticks when `code`. */
static void
s_md_cell(FILE *out, const char *s, bool code)
{
    if (!s || !*s) {
        fputs(" | ", out);
        return;
    }
    fputs(code ? "`" : "", out);
    s_md_text(out, s);
    fputs(code ? "` | " : " | ", out);
}

lisa_rc_t
lisa_config_markdown(FILE *out, const char *title,
                     const lisa_config_entry_t *table, size_t n)
{
    char range[96];
    fprintf(out, "### %s\n\n", title ? title : "Configuration");
    fprintf(out, "| Name | Flag | Environment | Type | Default | Range | "
                 "Description |\n");
    fprintf(out, "|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++) {
        const lisa_config_entry_t *e = &table[i];
        fputs("| ", out);
        s_md_cell(out, e->name, true);
        s_md_cell(out, e->flag, true);
        s_md_cell(out, e->env, true);
        s_md_cell(out, lisa_config_type_str(e->type), false);
        s_md_cell(out,
                  e->flags & LISA_CFG_SECRET ? "(secret)" : s_default_text(e),
                  !(e->flags & LISA_CFG_SECRET));
        s_md_cell(out, s_range_text(e, range, sizeof range), false);
        s_md_text(out, e->help);
        fprintf(out, "%s |\n",
                e->flags & LISA_CFG_REQUIRED ? " (required)" : "");
    }
    fputc('\n', out);
    return ferror(out) ? LISA_ERR : LISA_OK;
}
