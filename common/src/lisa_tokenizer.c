/*
 * lisa_tokenizer: byte-level BPE as Hugging Face `tokenizers` runs it.
 *
 * Loading turns tokenizer.json into flat tables:
 *   - per id: its vocabulary spelling ("form") and the bytes it decodes to,
 *     both in one arena;
 *   - a form -> id open-addressing map (token_to_id, merge loading);
 *   - byte -> id for the 256 single-byte tokens BPE starts from;
 *   - (left id, right id) -> (rank, merged id) for the merges;
 *   - the added tokens, in two sets as HF keeps them: those matched on the
 *     raw text and those (flagged `normalized`) matched after NFC.
 *
 * Encoding walks the text once: added tokens first (leftmost, longest at
 * that position), each gap normalized (NFC), split by the pre-tokenizer
 * regexes (PCRE2, JIT), and each piece merged by BPE. BPE keeps a heap of
 * candidate pairs ordered by (rank, position): the lowest-ranked pair,
 * leftmost on ties, merges first, and stale heap entries are skipped; this
 * is linear-logarithmic even for a megabyte of spaces. Results for short
 * pieces are remembered in a bounded word cache (cleared when full).
 */
#include "lisa/lisa_tokenizer.h"

#include "lisa/lisa_hash.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "lisa/lisa_unicode.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define S_MAX_REGEX      4
#define S_MAX_ADDED      4096
#define S_MAX_VOCAB      (4u * 1024u * 1024u)
#define S_CACHE_SLOTS    (1u << 16)
#define S_CACHE_ARENA    (8u * 1024u * 1024u)
#define S_CACHE_WORD_MAX 128u

/* The GPT-2 pre-tokenizer pattern (ByteLevel with use_regex: true). */
static const char s_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

enum { S_KIND_PRESENT = 1, S_KIND_ADDED = 2, S_KIND_SPECIAL = 4 };

typedef struct {
    int32_t id;
    bool special, single_word, lstrip, rstrip, normalized;
    char *content; /* as matched: NFC of the content when normalized */
    size_t len;
} s_added_t;

typedef struct {
    s_added_t **toks;
    size_t n;
    uint8_t first[256]; /* 1 when some token starts with this byte */
} s_matcher_t;

typedef struct {
    uint64_t key; /* left << 32 | right */
    uint32_t rank;
    int32_t id; /* merged id; -1 marks an empty slot */
} s_merge_t;

typedef struct {
    uint64_t hash;
    uint32_t key_off, key_len; /* key_len 0: empty slot */
    uint32_t ids_off, n_ids;
} s_cache_slot_t;

struct lisa_tokenizer_t {
    size_t n_ids;        /* highest id + 1 */
    uint32_t *form_off;  /* per id, into arena */
    uint32_t *form_len;  /* per id */
    uint32_t *bytes_off; /* per id, into arena */
    uint32_t *bytes_len; /* per id */
    uint8_t *kind;       /* per id: S_KIND_* */
    char *arena;
    size_t arena_len, arena_cap;

    int32_t *smap; /* form -> id, open addressing, -1 empty */
    size_t smap_cap;

    int32_t byte_id[256];
    s_merge_t *merges;
    size_t merges_cap;

    s_added_t *added;
    size_t n_added;
    s_matcher_t raw_set;
    s_matcher_t norm_set;

    bool nfc;
    pcre2_code *re[S_MAX_REGEX];
    bool jit[S_MAX_REGEX];   /* re[i] was JIT-compiled: match through the
                              * JIT's direct entry (no per-call checks) */
    bool ascii[S_MAX_REGEX]; /* re[i] is S_QWEN_SPLIT: ASCII text is split
                              * by s_ascii_match instead */
    size_t n_re;
    /* The patterns are linear per match, but a whitespace run of many
     * megabytes backtracks once per byte: PCRE2's default match limit
     * (10 million) would refuse texts HF accepts. */
    pcre2_match_context *mctx;

    int32_t eos, im_start, im_end, endoftext;
    char *chat_template; /* tokenizer_config.json's, or NULL */

    pthread_mutex_t cache_lock;
    s_cache_slot_t *cache;
    uint8_t *cache_keys;
    int32_t *cache_ids;
    size_t cache_count, cache_keys_len, cache_ids_len;
};

/* ---------------------------------------------------------------- hashing */

static uint64_t
s_hash_bytes(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

static size_t
s_pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

/* ------------------------------------------------------------------ arena */

static uint32_t
s_arena_put(lisa_tokenizer_t *self, const void *p, size_t n)
{
    if (self->arena_len + n > self->arena_cap) {
        size_t cap = self->arena_cap ? self->arena_cap : 1u << 20;
        while (cap < self->arena_len + n)
            cap *= 2;
        self->arena = lisa_realloc(self->arena, cap);
        self->arena_cap = cap;
    }
    uint32_t off = (uint32_t) self->arena_len;
    if (n)
        memcpy(self->arena + off, p, n);
    self->arena_len += n;
    return off;
}

/* ------------------------------------------------------- form -> id map */

static int32_t
s_smap_find(const lisa_tokenizer_t *self, const char *s, size_t n)
{
    if (!self->smap)
        return -1;
    size_t mask = self->smap_cap - 1;
    size_t i = (size_t) s_hash_bytes(s, n) & mask;
    for (;;) {
        int32_t id = self->smap[i];
        if (id < 0)
            return -1;
        if (self->form_len[id] == n &&
            memcmp(self->arena + self->form_off[id], s, n) == 0)
            return id;
        i = (i + 1) & mask;
    }
}

static void
s_smap_insert(lisa_tokenizer_t *self, int32_t id)
{
    const char *s = self->arena + self->form_off[id];
    size_t n = self->form_len[id];
    size_t mask = self->smap_cap - 1;
    size_t i = (size_t) s_hash_bytes(s, n) & mask;
    while (self->smap[i] >= 0) {
        int32_t o = self->smap[i];
        if (self->form_len[o] == n &&
            memcmp(self->arena + self->form_off[o], s, n) == 0) {
            self->smap[i] = id; /* a later definition wins */
            return;
        }
        i = (i + 1) & mask;
    }
    self->smap[i] = id;
}

/* ------------------------------------------------------------ merge map */

static const s_merge_t *
s_merge_find(const lisa_tokenizer_t *self, int32_t a, int32_t b)
{
    uint64_t key = ((uint64_t) (uint32_t) a << 32) | (uint32_t) b;
    size_t mask = self->merges_cap - 1;
    size_t i = (size_t) lisa_hash_mix64(key) & mask;
    for (;;) {
        const s_merge_t *m = &self->merges[i];
        if (m->id < 0)
            return NULL;
        if (m->key == key)
            return m;
        i = (i + 1) & mask;
    }
}

static void
s_merge_insert(lisa_tokenizer_t *self, int32_t a, int32_t b, uint32_t rank,
               int32_t id)
{
    uint64_t key = ((uint64_t) (uint32_t) a << 32) | (uint32_t) b;
    size_t mask = self->merges_cap - 1;
    size_t i = (size_t) lisa_hash_mix64(key) & mask;
    while (self->merges[i].id >= 0) {
        if (self->merges[i].key == key) {
            /* a pair listed twice keeps its last rank, as HF's map does */
            self->merges[i].rank = rank;
            self->merges[i].id = id;
            return;
        }
        i = (i + 1) & mask;
    }
    self->merges[i] = (s_merge_t){.key = key, .rank = rank, .id = id};
}

/* ---------------------------------------------------------------- loading */

/* Decode bytes of a spelling: each char through the byte-level alphabet,
 * or the spelling's own UTF-8 when some char is outside it (HF's rule). */
static void
s_set_token(lisa_tokenizer_t *self, int32_t id, const char *form, size_t n,
            uint8_t kind)
{
    self->form_off[id] = s_arena_put(self, form, n);
    self->form_len[id] = (uint32_t) n;
    s_arena_put(self, "", 1); /* NUL for id_to_token */
    uint8_t tmp[256];
    uint8_t *buf = n <= sizeof tmp ? tmp : lisa_malloc(n);
    size_t k = 0;
    bool ok = true;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += lisa_utf8_next(form + i, n - i, &cp);
        int b = lisa_bytelevel_byte(cp);
        if (b < 0) {
            ok = false;
            break;
        }
        buf[k++] = (uint8_t) b;
    }
    if (ok) {
        self->bytes_off[id] = s_arena_put(self, buf, k);
        self->bytes_len[id] = (uint32_t) k;
    } else {
        self->bytes_off[id] = self->form_off[id];
        self->bytes_len[id] = (uint32_t) n;
    }
    if (buf != tmp)
        lisa_free(&buf);
    self->kind[id] = (uint8_t) (self->kind[id] | kind | S_KIND_PRESENT);
}

static bool
s_json_bool(json_t *obj, const char *key, bool dflt)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v))
        return dflt;
    return json_is_true(v);
}

static bool
s_json_str_is(json_t *obj, const char *key, const char *want)
{
    json_t *v = json_object_get(obj, key);
    return v && json_is_string(v) && strcmp(json_string_value(v), want) == 0;
}

/* True when key is absent, null or the empty string. */
static bool
s_json_empty_str(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return !v || json_is_null(v) ||
           (json_is_string(v) && json_string_length(v) == 0);
}

/* HF compiles the pre-tokenizer with Oniguruma, whose \s is the Unicode
 * White_Space property; PCRE2's \s also takes U+180E (an old Zs). The
 * pattern is rewritten with White_Space spelled out so both agree. */
#define S_WS_CLASS "\\t-\\r\\x{85}\\p{Z}"

static char *
s_rewrite_pattern(const char *p)
{
    size_t n = strlen(p);
    char *o = lisa_malloc(n * 24 + 1);
    size_t k = 0;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\\' && i + 1 < n) {
            char c = p[i + 1];
            const char *rep = NULL;
            if (c == 's')
                rep = in_class ? S_WS_CLASS : "[" S_WS_CLASS "]";
            else if (c == 'S' && !in_class)
                rep = "[^" S_WS_CLASS "]";
            if (rep) {
                memcpy(o + k, rep, strlen(rep));
                k += strlen(rep);
            } else {
                o[k++] = p[i];
                o[k++] = c;
            }
            i++;
            continue;
        }
        if (!in_class && p[i] == '[') {
            in_class = true;
            o[k++] = p[i];
            /* a leading ']' or '^]' is a literal */
            if (i + 1 < n && p[i + 1] == '^')
                o[k++] = p[++i];
            if (i + 1 < n && p[i + 1] == ']')
                o[k++] = p[++i];
            continue;
        }
        if (in_class && p[i] == ']')
            in_class = false;
        o[k++] = p[i];
    }
    o[k] = '\0';
    return o;
}

/* The Qwen2/Qwen3 pre-tokenizer pattern, as tokenizer.json writes it. */
static const char S_QWEN_SPLIT[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* ASCII classes of S_QWEN_SPLIT under PCRE2_UCP: \s is tab, LF, VT, FF,
 * CR and space; \p{L} the letters; \p{N} the digits. */
static bool
s_a_space(unsigned char c)
{
    return c == ' ' || (c >= 0x09 && c <= 0x0d);
}

static bool
s_a_letter(unsigned char c)
{
    return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
}

static bool
s_a_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static bool
s_a_crlf(unsigned char c)
{
    return c == '\r' || c == '\n';
}

/* The end of S_QWEN_SPLIT's match at pos in ASCII text s[0, n) (pos < n):
 * the match always starts at pos there, as some alternative takes any
 * ASCII character; the alternatives are tried in the pattern's order,
 * with PCRE's greedy backtracking worked out per alternative. */
static size_t
s_ascii_match(const unsigned char *s, size_t n, size_t pos)
{
    unsigned char c = s[pos];
    /* (?i:'s|'t|'re|'ve|'m|'ll|'d) */
    if (c == '\'' && pos + 1 < n) {
        unsigned char a = s[pos + 1] | 0x20;
        if (a == 's' || a == 't' || a == 'm' || a == 'd')
            return pos + 2;
        if (pos + 2 < n) {
            unsigned char b = s[pos + 2] | 0x20;
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
                (a == 'l' && b == 'l'))
                return pos + 3;
        }
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    size_t p = pos;
    if (!s_a_crlf(c) && !s_a_letter(c) && !s_a_digit(c) && pos + 1 < n &&
        s_a_letter(s[pos + 1]))
        p = pos + 1;
    if (s_a_letter(s[p])) {
        while (p < n && s_a_letter(s[p]))
            p++;
        return p;
    }
    /* \p{N} */
    if (s_a_digit(c))
        return pos + 1;
    /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
    p = pos;
    if (c == ' ' && pos + 1 < n)
        p = pos + 1;
#define S_A_OTHER(x) (!s_a_space(x) && !s_a_letter(x) && !s_a_digit(x))
    if (!S_A_OTHER(s[p]) && p != pos)
        p = pos; /* the optional space gives back */
    if (S_A_OTHER(s[p])) {
        while (p < n && S_A_OTHER(s[p]))
            p++;
        while (p < n && s_a_crlf(s[p]))
            p++;
        return p;
    }
#undef S_A_OTHER
    /* whitespace from here: j ends the run */
    size_t j = pos;
    while (j < n && s_a_space(s[j]))
        j++;
    /* \s*[\r\n]+ : through the run's last CR or LF */
    for (size_t k = j; k > pos; k--)
        if (s_a_crlf(s[k - 1]))
            return k;
    /* \s+(?!\S) : the run, less its last character unless it ends s */
    if (j == n)
        return j;
    if (j - pos >= 2)
        return j - 1;
    /* \s+ */
    return j;
}

static lisa_rc_t
s_add_regex(lisa_tokenizer_t *self, const char *pattern_in)
{
    char *pattern = s_rewrite_pattern(pattern_in);
    if (self->n_re >= S_MAX_REGEX) {
        lisa_log_error("tokenizer: too many pre-tokenizer regexes");
        return LISA_UNSUPPORTED;
    }
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR) pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
    lisa_free(&pattern);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        lisa_log_error("tokenizer: bad pre-tokenizer regex at %zu: %s",
                       (size_t) off, (const char *) msg);
        return LISA_INVALID;
    }
    /* JIT is an accelerator: without it matching still works. */
    self->jit[self->n_re] = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    self->ascii[self->n_re] = strcmp(pattern_in, S_QWEN_SPLIT) == 0;
    self->re[self->n_re++] = re;
    return LISA_OK;
}

static lisa_rc_t
s_load_normalizer(lisa_tokenizer_t *self, json_t *n)
{
    if (!n || json_is_null(n))
        return LISA_OK;
    if (s_json_str_is(n, "type", "NFC")) {
        self->nfc = true;
        return LISA_OK;
    }
    if (s_json_str_is(n, "type", "Sequence")) {
        json_t *list = json_object_get(n, "normalizers");
        size_t i;
        json_t *it;
        if (!json_is_array(list))
            goto bad;
        json_array_foreach(list, i, it)
        {
            if (!s_json_str_is(it, "type", "NFC"))
                goto bad;
            self->nfc = true;
        }
        return LISA_OK;
    }
bad:
    lisa_log_error("tokenizer: unsupported normalizer (only NFC)");
    return LISA_UNSUPPORTED;
}

static lisa_rc_t
s_load_pretok_one(lisa_tokenizer_t *self, json_t *p, bool *bytelevel)
{
    if (s_json_str_is(p, "type", "ByteLevel")) {
        if (s_json_bool(p, "add_prefix_space", false)) {
            lisa_log_error("tokenizer: ByteLevel add_prefix_space "
                           "unsupported");
            return LISA_UNSUPPORTED;
        }
        *bytelevel = true;
        if (s_json_bool(p, "use_regex", true))
            return s_add_regex(self, s_gpt2_pattern);
        return LISA_OK;
    }
    if (s_json_str_is(p, "type", "Split")) {
        json_t *pat = json_object_get(p, "pattern");
        json_t *re = pat ? json_object_get(pat, "Regex") : NULL;
        if (!json_is_string(re) || !s_json_str_is(p, "behavior", "Isolated") ||
            s_json_bool(p, "invert", false)) {
            lisa_log_error("tokenizer: unsupported Split (need a Regex, "
                           "Isolated, not inverted)");
            return LISA_UNSUPPORTED;
        }
        return s_add_regex(self, json_string_value(re));
    }
    lisa_log_error("tokenizer: unsupported pre-tokenizer");
    return LISA_UNSUPPORTED;
}

static lisa_rc_t
s_load_pretok(lisa_tokenizer_t *self, json_t *p)
{
    bool bytelevel = false;
    lisa_rc_t rc = LISA_OK;
    if (p && s_json_str_is(p, "type", "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers");
        size_t i;
        json_t *it;
        if (!json_is_array(list)) {
            lisa_log_error("tokenizer: Sequence without pretokenizers");
            return LISA_INVALID;
        }
        json_array_foreach(list, i, it)
        {
            rc = s_load_pretok_one(self, it, &bytelevel);
            if (rc != LISA_OK)
                return rc;
        }
    } else if (p && !json_is_null(p)) {
        rc = s_load_pretok_one(self, p, &bytelevel);
        if (rc != LISA_OK)
            return rc;
    }
    if (!bytelevel) {
        lisa_log_error("tokenizer: only byte-level BPE is supported "
                       "(no ByteLevel pre-tokenizer)");
        return LISA_UNSUPPORTED;
    }
    return LISA_OK;
}

static lisa_rc_t
s_load_model_shape(json_t *model)
{
    if (!json_is_object(model) || !s_json_str_is(model, "type", "BPE")) {
        lisa_log_error("tokenizer: model is not BPE");
        return LISA_UNSUPPORTED;
    }
    json_t *dropout = json_object_get(model, "dropout");
    if ((dropout && !json_is_null(dropout)) ||
        s_json_bool(model, "byte_fallback", false) ||
        s_json_bool(model, "ignore_merges", false) ||
        !s_json_empty_str(model, "continuing_subword_prefix") ||
        !s_json_empty_str(model, "end_of_word_suffix") ||
        !s_json_empty_str(model, "unk_token")) {
        lisa_log_error("tokenizer: unsupported BPE options (dropout, "
                       "byte_fallback, ignore_merges, affixes, unk)");
        return LISA_UNSUPPORTED;
    }
    return LISA_OK;
}

/* ----------------------------------------------------- tokenizer.json scan
 *
 * tokenizer.json is mostly two huge members, model.vocab (an object of
 * ~150k string -> id) and model.merges (~150k pairs). A general JSON DOM
 * spends seconds allocating them; this scanner reads those two straight
 * into flat lists and hands every other (small) member to jansson.
 */

typedef struct {
    const char *s;
    size_t n, i;
    bool err;
} s_scan_t;

/* Strings collected from the scan: text in one arena, plus per entry an
 * offset, a length and an integer (the id for vocab, unused for merges). */
typedef struct {
    char *arena;
    size_t len, cap;
    uint32_t *off, *slen;
    int64_t *val;
    size_t count, room;
} s_list_t;

static void
s_list_free(s_list_t *l)
{
    lisa_free(&l->arena);
    lisa_free(&l->off);
    lisa_free(&l->slen);
    lisa_free(&l->val);
}

static void
s_list_add(s_list_t *l, const char *str, size_t n, int64_t val)
{
    if (l->count == l->room) {
        l->room = l->room ? l->room * 2 : 1024;
        l->off = lisa_realloc(l->off, l->room * sizeof *l->off);
        l->slen = lisa_realloc(l->slen, l->room * sizeof *l->slen);
        l->val = lisa_realloc(l->val, l->room * sizeof *l->val);
    }
    if (l->len + n > l->cap) {
        size_t cap = l->cap ? l->cap : 1u << 16;
        while (cap < l->len + n)
            cap *= 2;
        l->arena = lisa_realloc(l->arena, cap);
        l->cap = cap;
    }
    if (n)
        memcpy(l->arena + l->len, str, n);
    l->off[l->count] = (uint32_t) l->len;
    l->slen[l->count] = (uint32_t) n;
    l->val[l->count] = val;
    l->count++;
    l->len += n;
}

static void
s_ws(s_scan_t *sc)
{
    while (sc->i < sc->n && (sc->s[sc->i] == ' ' || sc->s[sc->i] == '\n' ||
                             sc->s[sc->i] == '\t' || sc->s[sc->i] == '\r'))
        sc->i++;
}

static bool
s_eat(s_scan_t *sc, char c)
{
    s_ws(sc);
    if (sc->i < sc->n && sc->s[sc->i] == c) {
        sc->i++;
        return true;
    }
    return false;
}

static bool
s_u4(s_scan_t *sc, uint32_t *v)
{
    if (sc->n - sc->i < 4)
        return false;
    *v = 0;
    for (int k = 0; k < 4; k++) {
        int h = lisa_hex_digit(sc->s[sc->i++]);
        if (h < 0)
            return false;
        *v = (*v << 4) | (uint32_t) h;
    }
    return true;
}

/* Reads a string into *buf (grown as needed; not NUL-terminated). */
static bool
s_str(s_scan_t *sc, char **buf, size_t *cap, size_t *len)
{
    *len = 0;
    if (!s_eat(sc, '"'))
        return false;
    for (;;) {
        if (sc->i >= sc->n)
            return false;
        if (*len + 8 > *cap) {
            *cap = *cap ? *cap * 2 : 256;
            *buf = lisa_realloc(*buf, *cap);
        }
        char c = sc->s[sc->i++];
        if (c == '"')
            return true;
        if ((unsigned char) c < 0x20)
            return false;
        if (c != '\\') {
            (*buf)[(*len)++] = c;
            continue;
        }
        if (sc->i >= sc->n)
            return false;
        char e = sc->s[sc->i++];
        uint32_t cp;
        switch (e) {
        case '"':
        case '\\':
        case '/':
            (*buf)[(*len)++] = e;
            break;
        case 'b':
            (*buf)[(*len)++] = '\b';
            break;
        case 'f':
            (*buf)[(*len)++] = '\f';
            break;
        case 'n':
            (*buf)[(*len)++] = '\n';
            break;
        case 'r':
            (*buf)[(*len)++] = '\r';
            break;
        case 't':
            (*buf)[(*len)++] = '\t';
            break;
        case 'u':
            if (!s_u4(sc, &cp))
                return false;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (sc->n - sc->i < 2 || sc->s[sc->i] != '\\' ||
                    sc->s[sc->i + 1] != 'u')
                    return false;
                sc->i += 2;
                if (!s_u4(sc, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return false;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return false;
            }
            *len += lisa_utf8_put(cp, *buf + *len);
            break;
        default:
            return false;
        }
    }
}

static bool
s_int(s_scan_t *sc, int64_t *v)
{
    s_ws(sc);
    bool neg = false;
    if (sc->i < sc->n && sc->s[sc->i] == '-') {
        neg = true;
        sc->i++;
    }
    size_t start = sc->i;
    int64_t x = 0;
    while (sc->i < sc->n && sc->s[sc->i] >= '0' && sc->s[sc->i] <= '9') {
        if (x > (INT64_MAX - 9) / 10)
            return false;
        x = x * 10 + (sc->s[sc->i++] - '0');
    }
    if (sc->i == start)
        return false;
    *v = neg ? -x : x;
    return true;
}

/* Skips one value of any kind (checked by jansson later when kept). */
static bool
s_skip(s_scan_t *sc, int depth)
{
    if (depth > 128)
        return false;
    s_ws(sc);
    if (sc->i >= sc->n)
        return false;
    char c = sc->s[sc->i];
    if (c == '"') {
        for (sc->i++; sc->i < sc->n; sc->i++) {
            if (sc->s[sc->i] == '\\')
                sc->i++;
            else if (sc->s[sc->i] == '"') {
                sc->i++;
                return true;
            }
        }
        return false;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        sc->i++;
        if (s_eat(sc, close))
            return true;
        do {
            if (c == '{') {
                if (!s_skip(sc, depth + 1) || !s_eat(sc, ':'))
                    return false;
            }
            if (!s_skip(sc, depth + 1))
                return false;
        } while (s_eat(sc, ','));
        return s_eat(sc, close);
    }
    size_t start = sc->i;
    while (sc->i < sc->n && sc->s[sc->i] != ',' && sc->s[sc->i] != '}' &&
           sc->s[sc->i] != ']' && sc->s[sc->i] != ' ' && sc->s[sc->i] != '\n' &&
           sc->s[sc->i] != '\t' && sc->s[sc->i] != '\r')
        sc->i++;
    return sc->i > start;
}

/* Parses the value at the cursor with jansson (skipping it first). */
static json_t *
s_small(s_scan_t *sc)
{
    s_ws(sc);
    size_t start = sc->i;
    if (!s_skip(sc, 0))
        return NULL;
    json_error_t jerr;
    return json_loadb(sc->s + start, sc->i - start, JSON_DECODE_ANY, &jerr);
}

static bool
s_scan_vocab(s_scan_t *sc, s_list_t *vocab)
{
    char *buf = NULL;
    size_t cap = 0, len = 0;
    bool ok = false;
    if (!s_eat(sc, '{'))
        goto out;
    if (s_eat(sc, '}')) {
        ok = true;
        goto out;
    }
    do {
        int64_t id;
        if (!s_str(sc, &buf, &cap, &len) || !s_eat(sc, ':') || !s_int(sc, &id))
            goto out;
        s_list_add(vocab, buf, len, id);
    } while (s_eat(sc, ','));
    ok = s_eat(sc, '}');
out:
    lisa_free(&buf);
    return ok;
}

/* Merges as ["a", "b"] pairs or "a b" strings: two list entries each. */
static bool
s_scan_merges(s_scan_t *sc, s_list_t *merges)
{
    char *buf = NULL;
    size_t cap = 0, len = 0;
    bool ok = false;
    if (!s_eat(sc, '['))
        goto out;
    if (s_eat(sc, ']')) {
        ok = true;
        goto out;
    }
    do {
        if (s_eat(sc, '[')) {
            for (int k = 0; k < 2; k++) {
                if ((k == 1 && !s_eat(sc, ',')) || !s_str(sc, &buf, &cap, &len))
                    goto out;
                s_list_add(merges, buf, len, 0);
            }
            if (!s_eat(sc, ']'))
                goto out;
        } else {
            if (!s_str(sc, &buf, &cap, &len))
                goto out;
            const char *sp = memchr(buf, ' ', len);
            if (!sp)
                goto out;
            size_t la = (size_t) (sp - buf);
            s_list_add(merges, buf, la, 0);
            s_list_add(merges, sp + 1, len - la - 1, 0);
        }
    } while (s_eat(sc, ','));
    ok = s_eat(sc, ']');
out:
    lisa_free(&buf);
    return ok;
}

/* Splits tokenizer.json into small members (a jansson object, with
 * "model" holding the model's small members) and the two big lists. */
static lisa_rc_t
s_scan_file(const char *data, size_t len, json_t **root, s_list_t *vocab,
            s_list_t *merges, bool *have_vocab)
{
    s_scan_t sc = {.s = data, .n = len};
    char *key = NULL;
    size_t kcap = 0, klen = 0;
    json_t *model = NULL;
    *root = json_object();
    *have_vocab = false;
    if (!s_eat(&sc, '{'))
        goto bad;
    if (s_eat(&sc, '}'))
        goto done;
    do {
        if (!s_str(&sc, &key, &kcap, &klen) || !s_eat(&sc, ':'))
            goto bad;
        if (klen == 5 && memcmp(key, "model", 5) == 0) {
            s_ws(&sc);
            if (sc.i >= sc.n || sc.s[sc.i] != '{') {
                json_t *v = s_small(&sc);
                if (!v)
                    goto bad;
                json_object_setn_new(*root, key, klen, v);
                continue;
            }
            model = json_object();
            sc.i++;
            if (!s_eat(&sc, '}')) {
                do {
                    if (!s_str(&sc, &key, &kcap, &klen) || !s_eat(&sc, ':'))
                        goto bad;
                    if (klen == 5 && memcmp(key, "vocab", 5) == 0) {
                        if (!s_scan_vocab(&sc, vocab))
                            goto bad;
                        *have_vocab = true;
                    } else if (klen == 6 && memcmp(key, "merges", 6) == 0) {
                        if (!s_scan_merges(&sc, merges))
                            goto bad;
                    } else {
                        json_t *v = s_small(&sc);
                        if (!v)
                            goto bad;
                        json_object_setn_new(model, key, klen, v);
                    }
                } while (s_eat(&sc, ','));
                if (!s_eat(&sc, '}'))
                    goto bad;
            }
            json_object_set_new(*root, "model", model);
            model = NULL;
        } else {
            json_t *v = s_small(&sc);
            if (!v)
                goto bad;
            json_object_setn_new(*root, key, klen, v);
        }
    } while (s_eat(&sc, ','));
    if (!s_eat(&sc, '}'))
        goto bad;
done:
    s_ws(&sc);
    if (sc.i != sc.n)
        goto bad;
    lisa_free(&key);
    return LISA_OK;
bad:
    lisa_log_error("tokenizer: tokenizer.json is malformed near byte %zu",
                   sc.i);
    lisa_free(&key);
    json_decref(model);
    json_decref(*root);
    *root = NULL;
    return LISA_INVALID;
}

/* Largest id named anywhere; LISA_INVALID on a bad id. */
static lisa_rc_t
s_scan_ids(const s_list_t *vocab, json_t *added, size_t *n_ids)
{
    json_int_t max = -1;
    json_t *v;
    for (size_t k = 0; k < vocab->count; k++) {
        if (vocab->val[k] < 0 || vocab->val[k] >= (int64_t) S_MAX_VOCAB) {
            lisa_log_error("tokenizer: bad vocab id");
            return LISA_INVALID;
        }
        if (vocab->val[k] > max)
            max = (json_int_t) vocab->val[k];
    }
    size_t i;
    json_array_foreach(added, i, v)
    {
        json_t *id = json_object_get(v, "id");
        json_t *c = json_object_get(v, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (json_int_t) S_MAX_VOCAB ||
            !json_is_string(c) || json_string_length(c) == 0) {
            lisa_log_error("tokenizer: bad added token");
            return LISA_INVALID;
        }
        if (json_integer_value(id) > max)
            max = json_integer_value(id);
    }
    if (max < 0) {
        lisa_log_error("tokenizer: empty vocabulary");
        return LISA_INVALID;
    }
    *n_ids = (size_t) max + 1;
    return LISA_OK;
}

static lisa_rc_t
s_load_merges(lisa_tokenizer_t *self, const s_list_t *merges)
{
    size_t n = merges->count / 2;
    self->merges_cap = s_pow2_at_least(n * 2 + 16);
    self->merges = lisa_malloc(self->merges_cap * sizeof *self->merges);
    for (size_t i = 0; i < self->merges_cap; i++)
        self->merges[i].id = -1;
    char *buf = NULL;
    size_t cap = 0;
    lisa_rc_t rc = LISA_OK;
    for (size_t r = 0; r < n; r++) {
        const char *a = merges->arena + merges->off[2 * r];
        size_t la = merges->slen[2 * r];
        const char *b = merges->arena + merges->off[2 * r + 1];
        size_t lb = merges->slen[2 * r + 1];
        int32_t ia = s_smap_find(self, a, la);
        int32_t ib = s_smap_find(self, b, lb);
        if (la + lb + 1 > cap) {
            cap = (la + lb + 1) * 2;
            buf = lisa_realloc(buf, cap);
        }
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        int32_t ic = s_smap_find(self, buf, la + lb);
        if (ia < 0 || ib < 0 || ic < 0) {
            lisa_log_error("tokenizer: merge %zu names a token outside the "
                           "vocabulary",
                           r);
            rc = LISA_INVALID;
            goto out;
        }
        s_merge_insert(self, ia, ib, (uint32_t) r, ic);
    }
out:
    lisa_free(&buf);
    return rc;
}

static void
s_matcher_add(s_matcher_t *m, s_added_t *t)
{
    m->toks = lisa_realloc(m->toks, (m->n + 1) * sizeof *m->toks);
    m->toks[m->n++] = t;
    m->first[(uint8_t) t->content[0]] = 1;
}

static lisa_rc_t
s_load_added(lisa_tokenizer_t *self, json_t *added)
{
    size_t n = json_array_size(added);
    if (n > S_MAX_ADDED) {
        lisa_log_error("tokenizer: too many added tokens (%zu)", n);
        return LISA_TOOLARGE;
    }
    self->added = lisa_calloc(n ? n : 1, sizeof *self->added);
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(added, i);
        s_added_t *t = &self->added[self->n_added++];
        t->id = (int32_t) json_integer_value(json_object_get(o, "id"));
        const char *c = json_string_value(json_object_get(o, "content"));
        size_t len = json_string_length(json_object_get(o, "content"));
        if (!lisa_utf8_valid(c, len)) {
            lisa_log_error("tokenizer: added token is not UTF-8");
            return LISA_INVALID;
        }
        t->special = s_json_bool(o, "special", false);
        t->single_word = s_json_bool(o, "single_word", false);
        t->lstrip = s_json_bool(o, "lstrip", false);
        t->rstrip = s_json_bool(o, "rstrip", false);
        t->normalized = s_json_bool(o, "normalized", !t->special);
        uint8_t kind =
            (uint8_t) (S_KIND_ADDED | (t->special ? S_KIND_SPECIAL : 0));
        s_set_token(self, t->id, c, len, kind);
        t->content = lisa_strndup(c, len);
        t->len = len;
        if (t->normalized && self->nfc) {
            char *nf = NULL;
            size_t nl = 0;
            if (lisa_utf8_nfc(c, len, &nf, &nl) != LISA_OK)
                return LISA_ERR;
            if (nf) {
                lisa_free(&t->content);
                t->content = nf;
                t->len = nl;
            }
        }
    }
    /* Matchers are built after every token is known (pointers are
     * stable: `added` is not resized any more). */
    for (size_t i = 0; i < self->n_added; i++) {
        s_added_t *t = &self->added[i];
        s_matcher_add(t->normalized ? &self->norm_set : &self->raw_set, t);
    }
    return LISA_OK;
}

static lisa_rc_t
s_load(lisa_tokenizer_t *self, json_t *root, const s_list_t *vocab,
       const s_list_t *merges, bool have_vocab)
{
    lisa_rc_t rc;
    if (!json_is_object(root)) {
        lisa_log_error("tokenizer: tokenizer.json is not an object");
        return LISA_INVALID;
    }
    json_t *model = json_object_get(root, "model");
    rc = s_load_model_shape(model);
    if (rc != LISA_OK)
        return rc;
    json_t *added = json_object_get(root, "added_tokens");
    if (!have_vocab) {
        lisa_log_error("tokenizer: model.vocab is not an object");
        return LISA_INVALID;
    }
    if (added && !json_is_null(added) && !json_is_array(added)) {
        lisa_log_error("tokenizer: added_tokens is not an array");
        return LISA_INVALID;
    }
    if (!json_is_array(added))
        added = NULL;
    json_t *empty = json_array();
    rc = s_scan_ids(vocab, added ? added : empty, &self->n_ids);
    json_decref(empty);
    if (rc != LISA_OK)
        return rc;

    rc = s_load_normalizer(self, json_object_get(root, "normalizer"));
    if (rc != LISA_OK)
        return rc;
    rc = s_load_pretok(self, json_object_get(root, "pre_tokenizer"));
    if (rc != LISA_OK)
        return rc;
    json_t *dec = json_object_get(root, "decoder");
    if (!dec || !s_json_str_is(dec, "type", "ByteLevel")) {
        lisa_log_error("tokenizer: decoder must be ByteLevel");
        return LISA_UNSUPPORTED;
    }
    json_t *post = json_object_get(root, "post_processor");
    if (post && !json_is_null(post) &&
        !s_json_str_is(post, "type", "ByteLevel")) {
        lisa_log_error("tokenizer: unsupported post_processor (only "
                       "ByteLevel or none)");
        return LISA_UNSUPPORTED;
    }

    size_t n = self->n_ids;
    self->form_off = lisa_calloc(n, sizeof *self->form_off);
    self->form_len = lisa_calloc(n, sizeof *self->form_len);
    self->bytes_off = lisa_calloc(n, sizeof *self->bytes_off);
    self->bytes_len = lisa_calloc(n, sizeof *self->bytes_len);
    self->kind = lisa_calloc(n, sizeof *self->kind);

    for (size_t i = 0; i < vocab->count; i++) {
        const char *k = vocab->arena + vocab->off[i];
        size_t kl = vocab->slen[i];
        if (!lisa_utf8_valid(k, kl)) {
            lisa_log_error("tokenizer: vocab key is not UTF-8");
            return LISA_INVALID;
        }
        int32_t id = (int32_t) vocab->val[i];
        if (self->kind[id] & S_KIND_PRESENT) {
            lisa_log_error("tokenizer: vocab id %d used twice", (int) id);
            return LISA_INVALID;
        }
        s_set_token(self, id, k, kl, 0);
    }
    if (added) {
        rc = s_load_added(self, added);
        if (rc != LISA_OK)
            return rc;
    }

    self->smap_cap = s_pow2_at_least(n * 2);
    self->smap = lisa_malloc(self->smap_cap * sizeof *self->smap);
    memset(self->smap, 0xff, self->smap_cap * sizeof *self->smap);
    /* Model vocabulary first, added tokens last so that their spelling
     * maps to the added id (HF looks the added vocabulary up first). */
    for (size_t id = 0; id < n; id++)
        if ((self->kind[id] & (S_KIND_PRESENT | S_KIND_ADDED)) ==
            S_KIND_PRESENT)
            s_smap_insert(self, (int32_t) id);
    for (size_t i = 0; i < self->n_added; i++)
        s_smap_insert(self, self->added[i].id);

    for (int b = 0; b < 256; b++) {
        char form[4];
        size_t fl = lisa_utf8_put(lisa_bytelevel_char((uint8_t) b), form);
        self->byte_id[b] = s_smap_find(self, form, fl);
    }
    rc = s_load_merges(self, merges);
    if (rc != LISA_OK)
        return rc;

    self->im_start = s_smap_find(self, "<|im_start|>", 12);
    self->im_end = s_smap_find(self, "<|im_end|>", 10);
    self->endoftext = s_smap_find(self, "<|endoftext|>", 13);
    self->eos = self->im_end >= 0 ? self->im_end : self->endoftext;
    return LISA_OK;
}

lisa_tokenizer_t *
lisa_tokenizer_new_from_json(const char *data, size_t len)
{
    if (len > LISA_TOKENIZER_MAX_FILE) {
        lisa_log_error("tokenizer: tokenizer.json too large (%zu bytes)", len);
        return NULL;
    }
    json_t *root = NULL;
    s_list_t vocab = {0}, merges = {0};
    bool have_vocab = false;
    if (s_scan_file(data, len, &root, &vocab, &merges, &have_vocab) !=
        LISA_OK) {
        s_list_free(&vocab);
        s_list_free(&merges);
        return NULL;
    }
    lisa_tokenizer_t *self = lisa_calloc(1, sizeof *self);
    pthread_mutex_init(&self->cache_lock, NULL);
    self->mctx = pcre2_match_context_create(NULL);
    pcre2_set_match_limit(self->mctx, UINT32_MAX);
    self->cache = lisa_calloc(S_CACHE_SLOTS, sizeof *self->cache);
    self->cache_keys = lisa_malloc(S_CACHE_ARENA);
    self->cache_ids = lisa_malloc(S_CACHE_ARENA);
    lisa_rc_t rc = s_load(self, root, &vocab, &merges, have_vocab);
    json_decref(root);
    s_list_free(&vocab);
    s_list_free(&merges);
    if (rc != LISA_OK)
        lisa_tokenizer_destroy(&self);
    return self;
}

static char *
s_read_file(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            if (cap >= max + 1)
                break;
            cap = cap ? cap * 2 : 1u << 16;
            if (cap > max + 1)
                cap = max + 1;
            buf = lisa_realloc(buf, cap + 1);
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        if (r == 0)
            break;
        n += r;
    }
    bool err = ferror(f) != 0;
    fclose(f);
    if (err || n > max) {
        lisa_free(&buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

lisa_tokenizer_t *
lisa_tokenizer_new_from_file(const char *path)
{
    size_t len = 0;
    char *data = s_read_file(path, LISA_TOKENIZER_MAX_FILE, &len);
    if (!data) {
        lisa_log_error("tokenizer: cannot read %s (missing or over %u "
                       "bytes)",
                       path, LISA_TOKENIZER_MAX_FILE);
        return NULL;
    }
    lisa_tokenizer_t *self = lisa_tokenizer_new_from_json(data, len);
    lisa_free(&data);
    return self;
}

lisa_tokenizer_t *
lisa_tokenizer_new_from_dir(const char *dir)
{
    char path[4096];
    int w = snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (w < 0 || (size_t) w >= sizeof path) {
        lisa_log_error("tokenizer: directory name too long");
        return NULL;
    }
    lisa_tokenizer_t *self = lisa_tokenizer_new_from_file(path);
    if (!self)
        return NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    if (cfg) {
        json_t *eos = json_object_get(cfg, "eos_token");
        if (json_is_object(eos)) /* {"content": ...} form */
            eos = json_object_get(eos, "content");
        if (json_is_string(eos)) {
            int32_t id = s_smap_find(self, json_string_value(eos),
                                     json_string_length(eos));
            if (id >= 0)
                self->eos = id;
            else
                lisa_log_warn("tokenizer: eos_token '%s' not in vocabulary",
                              json_string_value(eos));
        }
        json_t *ct = json_object_get(cfg, "chat_template");
        if (json_is_string(ct) &&
            json_string_length(ct) <= LISA_TOKENIZER_MAX_CHAT_TEMPLATE)
            self->chat_template = lisa_strdup(json_string_value(ct));
        else if (ct && !json_is_null(ct))
            lisa_log_warn("tokenizer: chat_template in %s is not a string "
                          "(a list of named templates?) or too large; "
                          "ignored",
                          path);
        json_decref(cfg);
    }
    if (!self->chat_template) {
        /* transformers 5 saves the template beside the config */
        size_t n = 0;
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        self->chat_template =
            s_read_file(path, LISA_TOKENIZER_MAX_CHAT_TEMPLATE, &n);
        if (self->chat_template && strlen(self->chat_template) != n)
            lisa_free(&self->chat_template); /* a NUL inside: not text */
    }
    return self;
}

const char *
lisa_tokenizer_chat_template(const lisa_tokenizer_t *self)
{
    return self->chat_template;
}

void
lisa_tokenizer_destroy(lisa_tokenizer_t **p)
{
    if (!p || !*p)
        return;
    lisa_tokenizer_t *self = *p;
    lisa_free(&self->chat_template);
    lisa_free(&self->form_off);
    lisa_free(&self->form_len);
    lisa_free(&self->bytes_off);
    lisa_free(&self->bytes_len);
    lisa_free(&self->kind);
    lisa_free(&self->arena);
    lisa_free(&self->smap);
    lisa_free(&self->merges);
    for (size_t i = 0; i < self->n_added; i++)
        lisa_free(&self->added[i].content);
    lisa_free(&self->added);
    lisa_free(&self->raw_set.toks);
    lisa_free(&self->norm_set.toks);
    for (size_t i = 0; i < self->n_re; i++)
        pcre2_code_free(self->re[i]);
    if (self->mctx)
        pcre2_match_context_free(self->mctx);
    pthread_mutex_destroy(&self->cache_lock);
    lisa_free(&self->cache);
    lisa_free(&self->cache_keys);
    lisa_free(&self->cache_ids);
    lisa_free(p);
}

/* --------------------------------------------------------------- encoding */

typedef struct {
    uint32_t rank;
    int32_t pos;
} s_heap_t;

/* Per-call scratch: BPE arrays, regex match data. */
typedef struct {
    int32_t *sym, *prev, *next;
    s_heap_t *heap;
    size_t cap; /* symbols */
    pcre2_match_data *md[S_MAX_REGEX];
    bool allow_special;
} s_work_t;

static void
s_work_free(s_work_t *w)
{
    lisa_free(&w->sym);
    lisa_free(&w->prev);
    lisa_free(&w->next);
    lisa_free(&w->heap);
    for (size_t i = 0; i < S_MAX_REGEX; i++)
        if (w->md[i])
            pcre2_match_data_free(w->md[i]);
}

static bool
s_heap_less(s_heap_t a, s_heap_t b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void
s_heap_push(s_heap_t *h, size_t *n, s_heap_t e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!s_heap_less(e, h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static s_heap_t
s_heap_pop(s_heap_t *h, size_t *n)
{
    s_heap_t top = h[0];
    s_heap_t last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && s_heap_less(h[c + 1], h[c]))
            c++;
        if (!s_heap_less(h[c], last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

static void
s_work_reserve(s_work_t *w, size_t n)
{
    if (n <= w->cap)
        return;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n)
        cap *= 2;
    w->sym = lisa_realloc(w->sym, cap * sizeof *w->sym);
    w->prev = lisa_realloc(w->prev, cap * sizeof *w->prev);
    w->next = lisa_realloc(w->next, cap * sizeof *w->next);
    w->heap = lisa_realloc(w->heap, 3 * cap * sizeof *w->heap);
    w->cap = cap;
}

static void
s_heap_push_pair(const lisa_tokenizer_t *self, s_work_t *w, size_t *hn,
                 int32_t pos)
{
    int32_t nx = w->next[pos];
    if (pos < 0 || nx < 0)
        return;
    const s_merge_t *m = s_merge_find(self, w->sym[pos], w->sym[nx]);
    if (m)
        s_heap_push(w->heap, hn, (s_heap_t){.rank = m->rank, .pos = pos});
}

/* BPE of one piece; ids appended to out. */
static lisa_rc_t
s_bpe(const lisa_tokenizer_t *self, s_work_t *w, const uint8_t *b, size_t n,
      lisa_ids_t *out)
{
    s_work_reserve(w, n);
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = self->byte_id[b[i]];
        if (id < 0)
            continue; /* not in the vocabulary, no unk token: dropped */
        w->sym[m] = id;
        w->prev[m] = m - 1;
        w->next[m] = m + 1;
        m++;
    }
    if (m == 0)
        return LISA_OK;
    w->next[m - 1] = -1;
    size_t hn = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        s_heap_push_pair(self, w, &hn, i);
    while (hn > 0) {
        s_heap_t e = s_heap_pop(w->heap, &hn);
        int32_t pos = e.pos;
        if (w->sym[pos] < 0)
            continue;
        int32_t nx = w->next[pos];
        if (nx < 0)
            continue;
        const s_merge_t *mg = s_merge_find(self, w->sym[pos], w->sym[nx]);
        if (!mg || mg->rank != e.rank)
            continue; /* stale */
        w->sym[pos] = mg->id;
        w->sym[nx] = -1;
        w->next[pos] = w->next[nx];
        if (w->next[nx] >= 0)
            w->prev[w->next[nx]] = pos;
        if (w->prev[pos] >= 0)
            s_heap_push_pair(self, w, &hn, w->prev[pos]);
        s_heap_push_pair(self, w, &hn, pos);
    }
    for (int32_t i = 0; i >= 0; i = w->next[i]) {
        lisa_rc_t rc = lisa_ids_push(out, w->sym[i]);
        if (rc != LISA_OK)
            return rc;
    }
    return LISA_OK;
}

/* Looks a word up in the cache; copies its ids to out on a hit. */
static int
s_cache_get(lisa_tokenizer_t *self, const uint8_t *b, size_t n, uint64_t h,
            lisa_ids_t *out, lisa_rc_t *rc)
{
    int hit = 0;
    pthread_mutex_lock(&self->cache_lock);
    size_t mask = S_CACHE_SLOTS - 1;
    for (size_t i = (size_t) h & mask;; i = (i + 1) & mask) {
        s_cache_slot_t *s = &self->cache[i];
        if (s->key_len == 0)
            break;
        if (s->hash == h && s->key_len == n &&
            memcmp(self->cache_keys + s->key_off, b, n) == 0) {
            *rc = lisa_ids_append(out, self->cache_ids + s->ids_off, s->n_ids);
            hit = 1;
            break;
        }
    }
    pthread_mutex_unlock(&self->cache_lock);
    return hit;
}

static void
s_cache_put(lisa_tokenizer_t *self, const uint8_t *b, size_t n, uint64_t h,
            const int32_t *ids, size_t nids)
{
    pthread_mutex_lock(&self->cache_lock);
    if (self->cache_count >= S_CACHE_SLOTS / 2 ||
        self->cache_keys_len + n > S_CACHE_ARENA ||
        (self->cache_ids_len + nids) * sizeof(int32_t) > S_CACHE_ARENA) {
        memset(self->cache, 0, S_CACHE_SLOTS * sizeof *self->cache);
        self->cache_count = 0;
        self->cache_keys_len = 0;
        self->cache_ids_len = 0;
    }
    size_t mask = S_CACHE_SLOTS - 1;
    size_t i = (size_t) h & mask;
    while (self->cache[i].key_len != 0) {
        s_cache_slot_t *s = &self->cache[i];
        if (s->hash == h && s->key_len == n &&
            memcmp(self->cache_keys + s->key_off, b, n) == 0)
            goto out; /* another thread got here first */
        i = (i + 1) & mask;
    }
    memcpy(self->cache_keys + self->cache_keys_len, b, n);
    memcpy(self->cache_ids + self->cache_ids_len, ids, nids * sizeof(int32_t));
    self->cache[i] =
        (s_cache_slot_t){.hash = h,
                         .key_off = (uint32_t) self->cache_keys_len,
                         .key_len = (uint32_t) n,
                         .ids_off = (uint32_t) self->cache_ids_len,
                         .n_ids = (uint32_t) nids};
    self->cache_keys_len += n;
    self->cache_ids_len += nids;
    self->cache_count++;
out:
    pthread_mutex_unlock(&self->cache_lock);
}

static lisa_rc_t
s_word(lisa_tokenizer_t *self, s_work_t *w, const uint8_t *b, size_t n,
       lisa_ids_t *out)
{
    if (n == 0)
        return LISA_OK;
    if (n == 1 && self->byte_id[b[0]] >= 0)
        return lisa_ids_push(out, self->byte_id[b[0]]);
    if (n > S_CACHE_WORD_MAX)
        return s_bpe(self, w, b, n, out);
    uint64_t h = s_hash_bytes(b, n);
    lisa_rc_t rc = LISA_OK;
    if (s_cache_get(self, b, n, h, out, &rc))
        return rc;
    size_t before = lisa_ids_len(out);
    rc = s_bpe(self, w, b, n, out);
    if (rc == LISA_OK)
        s_cache_put(self, b, n, h, lisa_ids_data(out) + before,
                    lisa_ids_len(out) - before);
    return rc;
}

/* Splits s by regex `level` (Isolated: matches and gaps are both pieces)
 * and passes each piece down; below the last regex, pieces go to BPE. */
static lisa_rc_t
s_pretok(lisa_tokenizer_t *self, s_work_t *w, size_t level, const char *s,
         size_t n, lisa_ids_t *out)
{
    if (n == 0)
        return LISA_OK;
    if (level >= self->n_re)
        return s_word(self, w, (const uint8_t *) s, n, out);
    if (self->ascii[level]) {
        /* ASCII text: the pattern's matches without pcre2 */
        size_t i = 0;
        while (i < n && (unsigned char) s[i] < 0x80)
            i++;
        if (i == n) {
            for (size_t pos = 0; pos < n;) {
                size_t me = s_ascii_match((const unsigned char *) s, n, pos);
                lisa_rc_t rc =
                    s_pretok(self, w, level + 1, s + pos, me - pos, out);
                if (rc != LISA_OK)
                    return rc;
                pos = me;
            }
            return LISA_OK;
        }
    }
    pcre2_code *re = self->re[level];
    if (!w->md[level])
        w->md[level] = pcre2_match_data_create_from_pattern(re, NULL);
    pcre2_match_data *md = w->md[level];
    size_t pos = 0, last = 0;
    lisa_rc_t rc = LISA_OK;
    while (pos < n) {
        /* the text was checked as UTF-8 once, in lisa_tokenizer_encode */
        int r =
            self->jit[level]
                ? pcre2_jit_match(re, (PCRE2_SPTR) s, n, pos, 0, md, self->mctx)
                : pcre2_match(re, (PCRE2_SPTR) s, n, pos, PCRE2_NO_UTF_CHECK,
                              md, self->mctx);
        if (r == PCRE2_ERROR_NOMATCH)
            break;
        if (r < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(r, msg, sizeof msg);
            lisa_log_error("tokenizer: pre-tokenizer match failed: %s",
                           (const char *) msg);
            return LISA_ERR;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: step one character */
            uint32_t cp;
            pos = ms + lisa_utf8_next(s + ms, n - ms, &cp);
            continue;
        }
        if (ms > last) {
            rc = s_pretok(self, w, level + 1, s + last, ms - last, out);
            if (rc != LISA_OK)
                return rc;
        }
        rc = s_pretok(self, w, level + 1, s + ms, me - ms, out);
        if (rc != LISA_OK)
            return rc;
        pos = last = me;
    }
    if (last < n)
        rc = s_pretok(self, w, level + 1, s + last, n - last, out);
    return rc;
}

static uint32_t
s_cp_before(const char *s, size_t at)
{
    size_t i = at;
    do
        i--;
    while (i > 0 && ((uint8_t) s[i] & 0xC0) == 0x80);
    uint32_t cp;
    lisa_utf8_next(s + i, at - i, &cp);
    return cp;
}

/* Finds the next usable added token in s[from..n): leftmost start,
 * longest at that start. Returns false when none; *skip_to is where the
 * scan resumes when a match is refused. */
static bool
s_find_added(const s_matcher_t *m, const char *s, size_t n, size_t from,
             size_t *ms, size_t *me, const s_added_t **tok)
{
    const uint8_t *b = (const uint8_t *) s;
    for (size_t i = from; i < n; i++) {
        if (!m->first[b[i]])
            continue;
        const s_added_t *best = NULL;
        for (size_t k = 0; k < m->n; k++) {
            const s_added_t *t = m->toks[k];
            if (t->len <= n - i && (!best || t->len > best->len) &&
                memcmp(s + i, t->content, t->len) == 0)
                best = t;
        }
        if (best) {
            *ms = i;
            *me = i + best->len;
            *tok = best;
            return true;
        }
    }
    return false;
}

static lisa_rc_t s_normalized(lisa_tokenizer_t *self, s_work_t *w,
                              const char *s, size_t n, lisa_ids_t *out);

/* Splits s on the added tokens of matcher m; gaps go to `next`. */
static lisa_rc_t
s_split_added(lisa_tokenizer_t *self, s_work_t *w, const s_matcher_t *m,
              const char *s, size_t n, bool raw, lisa_ids_t *out)
{
    size_t start_offset = 0, from = 0;
    size_t ms, me;
    const s_added_t *t;
    lisa_rc_t rc = LISA_OK;
    while (m->n > 0 && from < n && s_find_added(m, s, n, from, &ms, &me, &t)) {
        from = me;
        if (t->special && !w->allow_special)
            continue;
        if (t->single_word) {
            uint32_t cp;
            bool start_ok =
                ms == 0 || !lisa_unicode_is_word(s_cp_before(s, ms));
            bool stop_ok = me == n;
            if (!stop_ok) {
                lisa_utf8_next(s + me, n - me, &cp);
                stop_ok = !lisa_unicode_is_word(cp);
            }
            if (!start_ok || !stop_ok)
                continue;
        }
        if (t->lstrip) {
            size_t ns = ms;
            while (ns > 0 && lisa_unicode_is_space(s_cp_before(s, ns))) {
                uint32_t cp = s_cp_before(s, ns);
                char tmp[4];
                ns -= lisa_utf8_put(cp, tmp);
            }
            ms = ns > start_offset ? ns : start_offset;
        }
        if (t->rstrip) {
            while (me < n) {
                uint32_t cp;
                size_t k = lisa_utf8_next(s + me, n - me, &cp);
                if (!lisa_unicode_is_space(cp))
                    break;
                me += k;
            }
        }
        if (ms < start_offset)
            continue;
        if (ms > start_offset) {
            rc = raw ? s_normalized(self, w, s + start_offset,
                                    ms - start_offset, out)
                     : s_pretok(self, w, 0, s + start_offset, ms - start_offset,
                                out);
            if (rc != LISA_OK)
                return rc;
        }
        rc = lisa_ids_push(out, t->id);
        if (rc != LISA_OK)
            return rc;
        start_offset = me;
        if (from < me)
            from = me;
    }
    if (start_offset < n)
        rc =
            raw ? s_normalized(self, w, s + start_offset, n - start_offset, out)
                : s_pretok(self, w, 0, s + start_offset, n - start_offset, out);
    return rc;
}

/* A gap between raw-matched added tokens: NFC, then the normalized added
 * tokens, then the pre-tokenizer. */
static lisa_rc_t
s_normalized(lisa_tokenizer_t *self, s_work_t *w, const char *s, size_t n,
             lisa_ids_t *out)
{
    char *nf = NULL;
    size_t nl = 0;
    if (self->nfc) {
        lisa_rc_t rc = lisa_utf8_nfc(s, n, &nf, &nl);
        if (rc != LISA_OK)
            return rc;
        if (nf) {
            s = nf;
            n = nl;
        }
    }
    lisa_rc_t rc = s_split_added(self, w, &self->norm_set, s, n, false, out);
    lisa_free(&nf);
    return rc;
}

lisa_rc_t
lisa_tokenizer_encode(lisa_tokenizer_t *self, const char *text, size_t len,
                      bool allow_special, lisa_ids_t *out)
{
    if (len > LISA_TOKENIZER_MAX_TEXT)
        return LISA_TOOLARGE;
    if (len > 0 && !lisa_utf8_valid(text, len))
        return LISA_INVALID;
    size_t before = lisa_ids_len(out);
    s_work_t w = {.allow_special = allow_special};
    lisa_rc_t rc =
        s_split_added(self, &w, &self->raw_set, text, len, true, out);
    s_work_free(&w);
    if (rc != LISA_OK)
        lisa_ids_truncate(out, before);
    return rc;
}

/* --------------------------------------------------------------- decoding */

lisa_rc_t
lisa_tokenizer_decode(const lisa_tokenizer_t *self, const int32_t *ids,
                      size_t n, unsigned flags, char **text, size_t *len)
{
    *text = NULL;
    if (len)
        *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t) id >= self->n_ids ||
            !(self->kind[id] & S_KIND_PRESENT)) {
            if (flags & LISA_DECODE_STRICT)
                return LISA_INVALID;
            continue;
        }
        total += self->bytes_len[id];
    }
    uint8_t *buf = lisa_malloc(total + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t) id >= self->n_ids ||
            !(self->kind[id] & S_KIND_PRESENT))
            continue;
        if ((flags & LISA_DECODE_SKIP_SPECIAL) &&
            (self->kind[id] & S_KIND_SPECIAL))
            continue;
        memcpy(buf + k, self->arena + self->bytes_off[id], self->bytes_len[id]);
        k += self->bytes_len[id];
    }
    *text = lisa_utf8_lossy(buf, k, len);
    lisa_free(&buf);
    return LISA_OK;
}

/* ---------------------------------------------------------------- lookups */

static bool
s_known(const lisa_tokenizer_t *self, int32_t id)
{
    return id >= 0 && (size_t) id < self->n_ids &&
           (self->kind[id] & S_KIND_PRESENT);
}

const char *
lisa_tokenizer_id_to_token(const lisa_tokenizer_t *self, int32_t id)
{
    return s_known(self, id) ? self->arena + self->form_off[id] : NULL;
}

const uint8_t *
lisa_tokenizer_token_bytes(const lisa_tokenizer_t *self, int32_t id,
                           size_t *len)
{
    if (!s_known(self, id))
        return NULL;
    *len = self->bytes_len[id];
    return (const uint8_t *) self->arena + self->bytes_off[id];
}

int32_t
lisa_tokenizer_token_to_id(const lisa_tokenizer_t *self, const char *token)
{
    return token ? s_smap_find(self, token, strlen(token)) : -1;
}

size_t
lisa_tokenizer_vocab_size(const lisa_tokenizer_t *self)
{
    return self->n_ids;
}

bool
lisa_tokenizer_is_special(const lisa_tokenizer_t *self, int32_t id)
{
    return s_known(self, id) && (self->kind[id] & S_KIND_SPECIAL);
}

bool
lisa_tokenizer_is_added(const lisa_tokenizer_t *self, int32_t id)
{
    return s_known(self, id) && (self->kind[id] & S_KIND_ADDED);
}

int32_t
lisa_tokenizer_eos_id(const lisa_tokenizer_t *self)
{
    return self->eos;
}

int32_t
lisa_tokenizer_im_start_id(const lisa_tokenizer_t *self)
{
    return self->im_start;
}

int32_t
lisa_tokenizer_im_end_id(const lisa_tokenizer_t *self)
{
    return self->im_end;
}

int32_t
lisa_tokenizer_endoftext_id(const lisa_tokenizer_t *self)
{
    return self->endoftext;
}
