/*
 * rwd_rouge: rouge-score tokenization + bit-parallel LCS. See rwd_rouge.h.
 *
 * Tokens are interned into small integer ids with an open-addressing hash
 * table built from the reference. For every reference id a list of its
 * positions is kept (CSR layout), so the match mask of a candidate token is
 * set and cleared sparsely while the two full-width passes (V + U and
 * V - U) are the only O(m/64) work per candidate token.
 */
#include "rwd_rouge.h"

#include "lisa/lisa_mem.h"
#include "rwd_porter.h"

#include <czmq.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *buf;   /* stemmed token bytes, back to back */
    size_t *off; /* token i is buf[off[i] .. off[i] + len[i]) */
    size_t *len;
    size_t n;
    bool truncated;
} s_toks_t;

/* Lowercased ASCII alnum for byte position i of s, or 0 for a separator;
 * *adv gets the number of bytes consumed. */
static char
s_char(const unsigned char *s, size_t len, size_t i, size_t *adv)
{
    unsigned char c = s[i];
    *adv = 1;
    if (c < 0x80) {
        if (c >= 'A' && c <= 'Z')
            return (char) (c - 'A' + 'a');
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
            return (char) c;
        return 0;
    }
    /* U+0130 (capital I with dot) lowercases to "i" + U+0307. */
    if (c == 0xC4 && i + 1 < len && s[i + 1] == 0xB0) {
        *adv = 2;
        return 'i';
    }
    /* U+212A (Kelvin sign) lowercases to "k". */
    if (c == 0xE2 && i + 2 < len && s[i + 1] == 0x84 && s[i + 2] == 0xAA) {
        *adv = 3;
        return 'k';
    }
    return 0;
}

static void
s_tokenize(const char *text, size_t len, s_toks_t *t)
{
    const unsigned char *s = (const unsigned char *) text;
    /* Upper bounds: each token needs at least one byte, and stemming may
     * add one byte (plus slack) per token. */
    size_t maxtok = len / 2 + 1;
    if (maxtok > RWD_ROUGE_MAX_TOKENS)
        maxtok = RWD_ROUGE_MAX_TOKENS;
    t->buf = lisa_malloc(len + 2 * maxtok + 2);
    t->off = lisa_malloc(maxtok * sizeof *t->off);
    t->len = lisa_malloc(maxtok * sizeof *t->len);
    t->n = 0;
    t->truncated = false;
    size_t w = 0, i = 0;
    while (i < len) {
        size_t adv;
        char c = s_char(s, len, i, &adv);
        if (!c) {
            i += adv;
            continue;
        }
        if (t->n == maxtok) {
            t->truncated = true;
            break;
        }
        size_t start = w;
        while (i < len && c) {
            t->buf[w++] = c;
            i += adv;
            /* U+0130 yields "i" and then a separator (U+0307). */
            if (adv == 2)
                break;
            if (i < len)
                c = s_char(s, len, i, &adv);
        }
        size_t tl = w - start;
        if (tl > 3) {
            tl = rwd_porter_stem(t->buf + start, tl);
            w = start + tl;
        }
        t->off[t->n] = start;
        t->len[t->n] = tl;
        t->n++;
    }
}

static void
s_toks_free(s_toks_t *t)
{
    lisa_free(&t->buf);
    lisa_free(&t->off);
    lisa_free(&t->len);
}

static uint64_t
s_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char) s[i];
        h *= 1099511628211ull;
    }
    return h;
}

typedef struct {
    size_t cap;    /* power of two */
    int32_t *slot; /* id or -1 */
    const s_toks_t *toks;
    size_t *first; /* token index that defined each id */
    size_t ids;
} s_table_t;

static int32_t
s_lookup(const s_table_t *tb, const char *s, size_t n, size_t *at)
{
    size_t i = (size_t) s_hash(s, n) & (tb->cap - 1);
    for (;;) {
        int32_t id = tb->slot[i];
        if (id < 0) {
            *at = i;
            return -1;
        }
        size_t k = tb->first[id];
        if (tb->toks->len[k] == n &&
            memcmp(tb->toks->buf + tb->toks->off[k], s, n) == 0)
            return id;
        i = (i + 1) & (tb->cap - 1);
    }
}

size_t
rwd_rouge_tokens(const char *text, size_t len, char *out, size_t cap)
{
    s_toks_t t;
    s_tokenize(text, len, &t);
    size_t w = 0, k = 0;
    for (; k < t.n; k++) {
        size_t need = t.len[k] + (k ? 1 : 0);
        if (w + need + 1 > cap)
            break;
        if (k)
            out[w++] = ' ';
        memcpy(out + w, t.buf + t.off[k], t.len[k]);
        w += t.len[k];
    }
    if (cap)
        out[w] = '\0';
    s_toks_free(&t);
    return k;
}

double
rwd_rouge_l(const char *target, size_t tlen, const char *pred, size_t plen,
            int64_t deadline_ms, rwd_rouge_info_t *info)
{
    rwd_rouge_info_t local;
    if (!info)
        info = &local;
    memset(info, 0, sizeof *info);
    s_toks_t a, b;
    s_tokenize(target, tlen, &a);
    s_tokenize(pred, plen, &b);
    info->target_tokens = a.n;
    info->pred_tokens = b.n;
    info->truncated = a.truncated || b.truncated;
    double f = 0.0;
    if (a.n == 0 || b.n == 0)
        goto out;

    /* Intern the reference tokens and list each id's positions. */
    s_table_t tb = {0};
    tb.cap = 16;
    while (tb.cap < 2 * a.n)
        tb.cap <<= 1;
    tb.slot = lisa_malloc(tb.cap * sizeof *tb.slot);
    memset(tb.slot, 0xff, tb.cap * sizeof *tb.slot);
    tb.toks = &a;
    tb.first = lisa_malloc(a.n * sizeof *tb.first);
    int32_t *aid = lisa_malloc(a.n * sizeof *aid);
    for (size_t i = 0; i < a.n; i++) {
        size_t at;
        int32_t id = s_lookup(&tb, a.buf + a.off[i], a.len[i], &at);
        if (id < 0) {
            id = (int32_t) tb.ids;
            tb.first[tb.ids++] = i;
            tb.slot[at] = id;
        }
        aid[i] = id;
    }
    size_t *start = lisa_calloc(tb.ids + 1, sizeof *start);
    size_t *pos = lisa_malloc(a.n * sizeof *pos);
    for (size_t i = 0; i < a.n; i++)
        start[aid[i] + 1]++;
    for (size_t k = 0; k < tb.ids; k++)
        start[k + 1] += start[k];
    size_t *fill = lisa_malloc((tb.ids + 1) * sizeof *fill);
    memcpy(fill, start, (tb.ids + 1) * sizeof *fill);
    for (size_t i = 0; i < a.n; i++)
        pos[fill[aid[i]]++] = i;

    /* Bit-parallel LCS (Allison-Dix / Hyyro): V starts all ones; for each
     * candidate token, U = V & M; V = (V + U) | (V - U). LCS = zeros.
     * The match mask M of a rare token is set and cleared sparsely; tokens
     * with more positions than the vector has words get a dense mask, so
     * every candidate token costs O(m / 64) whatever the repetition. At
     * most a.n / words (about 64) ids can be dense: memory stays O(m). */
    size_t words = (a.n + 63) / 64;
    uint64_t *v = lisa_malloc(words * sizeof *v);
    uint64_t *u = lisa_calloc(words, sizeof *u);
    memset(v, 0xff, words * sizeof *v);
    size_t *dense = lisa_malloc(tb.ids * sizeof *dense);
    size_t ndense = 0;
    for (size_t k = 0; k < tb.ids; k++)
        if (start[k + 1] - start[k] > words)
            ndense++;
    uint64_t *masks = lisa_calloc(ndense ? ndense * words : 1, sizeof *masks);
    ndense = 0;
    for (size_t k = 0; k < tb.ids; k++) {
        dense[k] = SIZE_MAX;
        if (start[k + 1] - start[k] <= words)
            continue;
        dense[k] = ndense++;
        uint64_t *mk = masks + dense[k] * words;
        for (size_t q = start[k]; q < start[k + 1]; q++)
            mk[pos[q] / 64] |= 1ull << (pos[q] % 64);
    }
    for (size_t j = 0; j < b.n; j++) {
        size_t at;
        if (deadline_ms > 0 && (j & 1023) == 1023 &&
            zclock_mono() > deadline_ms) {
            info->timed_out = true;
            break;
        }
        int32_t id = s_lookup(&tb, b.buf + b.off[j], b.len[j], &at);
        if (id < 0)
            continue;
        const uint64_t *m = u;
        if (dense[id] != SIZE_MAX)
            m = masks + dense[id] * words;
        else
            for (size_t q = start[id]; q < start[id + 1]; q++)
                u[pos[q] / 64] |= 1ull << (pos[q] % 64);
        unsigned carry = 0, borrow = 0;
        for (size_t w = 0; w < words; w++) {
            uint64_t vw = v[w] & m[w]; /* U restricted to V */
            uint64_t sum = v[w] + vw;
            unsigned c1 = sum < v[w];
            uint64_t sum2 = sum + carry;
            unsigned c2 = sum2 < sum;
            uint64_t diff = v[w] - vw;
            unsigned b1 = v[w] < vw;
            uint64_t diff2 = diff - borrow;
            unsigned b2 = diff < (uint64_t) borrow;
            carry = c1 | c2;
            borrow = b1 | b2;
            v[w] = sum2 | diff2;
        }
        if (dense[id] == SIZE_MAX)
            for (size_t q = start[id]; q < start[id + 1]; q++)
                u[pos[q] / 64] = 0;
    }
    size_t ones = 0;
    for (size_t w = 0; w < words; w++) {
        uint64_t x = v[w];
        if (w == words - 1 && a.n % 64)
            x &= (1ull << (a.n % 64)) - 1;
        ones += (size_t) __builtin_popcountll(x);
    }
    size_t lcs = a.n - ones;
    info->lcs = lcs;
    double p = (double) lcs / (double) b.n;
    double r = (double) lcs / (double) a.n;
    info->precision = p;
    info->recall = r;
    f = p + r > 0 ? 2 * p * r / (p + r) : 0.0;
    if (info->timed_out)
        f = 0.0;

    lisa_free(&v);
    lisa_free(&u);
    lisa_free(&dense);
    lisa_free(&masks);
    lisa_free(&fill);
    lisa_free(&pos);
    lisa_free(&start);
    lisa_free(&aid);
    lisa_free(&tb.first);
    lisa_free(&tb.slot);
out:
    s_toks_free(&a);
    s_toks_free(&b);
    return f;
}
