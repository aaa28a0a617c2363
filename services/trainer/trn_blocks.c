/*
 * trn_blocks: KV-cache block accounting and the prefix cache (see
 * trn_blocks.h).
 *
 * State per block: a reference count, whether it is committed (its hash,
 * its parent's hash and its tokens recorded), and links in either the free
 * stack (no content, no user) or the cached list (content, no user; a
 * doubly linked list from cold to warm). The hash table maps a hash to the
 * committed block that has it: open addressing with linear probing and
 * backward-shift deletion, sized to twice the blocks, so it never fills.
 */
#include "trn_blocks.h"

#include "lisa/lisa_hash.h"
#include "lisa/lisa_mem.h"

#include <stdbool.h>
#include <string.h>

#define S_NONE (-1)

struct trn_blocks {
    size_t n, bs;
    uint32_t *ref;
    uint8_t *committed;
    uint64_t *hash, *parent;
    int32_t *tokens;      /* [n][bs] */
    int32_t *prev, *next; /* cached list */
    int32_t head, tail;   /* cold end, warm end */
    uint64_t *stamp;      /* when each cached block was released */
    uint64_t now;         /* the stamp releases take */
    int32_t *stack;       /* free stack */
    size_t n_free, n_cached;
    int32_t *table; /* hash table of block ids, S_NONE empty */
    size_t tmask;
    trn_blocks_stats_t st;
};

static uint64_t
s_hash(uint64_t parent, const int32_t *tok, size_t bs)
{
    uint64_t h = lisa_hash_mix64(parent ^ 0x9e3779b97f4a7c15ull);
    for (size_t i = 0; i < bs; i++)
        h = (h ^ (uint32_t) tok[i]) * 0x100000001b3ull;
    h = lisa_hash_mix64(h);
    return h ? h : 1; /* 0 names the sequence's start */
}

trn_blocks_t *
trn_blocks_new(size_t n_blocks, size_t block_size)
{
    if (n_blocks == 0 || n_blocks >= ((size_t) 1 << 31) || block_size == 0 ||
        block_size > 4096)
        return NULL;
    trn_blocks_t *bm = lisa_calloc(1, sizeof *bm);
    bm->n = n_blocks;
    bm->bs = block_size;
    bm->ref = lisa_calloc(n_blocks, sizeof *bm->ref);
    bm->committed = lisa_calloc(n_blocks, 1);
    bm->hash = lisa_calloc(n_blocks, sizeof *bm->hash);
    bm->parent = lisa_calloc(n_blocks, sizeof *bm->parent);
    bm->tokens = lisa_calloc(n_blocks * block_size, sizeof *bm->tokens);
    bm->prev = lisa_calloc(n_blocks, sizeof *bm->prev);
    bm->next = lisa_calloc(n_blocks, sizeof *bm->next);
    bm->stack = lisa_calloc(n_blocks, sizeof *bm->stack);
    bm->stamp = lisa_calloc(n_blocks, sizeof *bm->stamp);
    size_t cap = 16;
    while (cap < 2 * n_blocks)
        cap <<= 1;
    bm->table = lisa_malloc(cap * sizeof *bm->table);
    for (size_t i = 0; i < cap; i++)
        bm->table[i] = S_NONE;
    bm->tmask = cap - 1;
    /* the stack pops block 0 first */
    for (size_t i = 0; i < n_blocks; i++)
        bm->stack[i] = (int32_t) (n_blocks - 1 - i);
    bm->n_free = n_blocks;
    bm->head = bm->tail = S_NONE;
    return bm;
}

void
trn_blocks_destroy(trn_blocks_t **bmp)
{
    if (!bmp || !*bmp)
        return;
    trn_blocks_t *bm = *bmp;
    lisa_free(&bm->ref);
    lisa_free(&bm->committed);
    lisa_free(&bm->hash);
    lisa_free(&bm->parent);
    lisa_free(&bm->tokens);
    lisa_free(&bm->prev);
    lisa_free(&bm->next);
    lisa_free(&bm->stack);
    lisa_free(&bm->stamp);
    lisa_free(&bm->table);
    lisa_free(bmp);
}

size_t
trn_blocks_available(const trn_blocks_t *bm)
{
    return bm->n_free + bm->n_cached;
}

void
trn_blocks_set_now(trn_blocks_t *bm, uint64_t now)
{
    if (now > bm->now)
        bm->now = now;
}

size_t
trn_blocks_available_before(const trn_blocks_t *bm, uint64_t before,
                            size_t enough)
{
    size_t k = bm->n_free;
    /* the list runs from the earliest release to the latest */
    for (int32_t id = bm->head;
         k < enough && id != S_NONE && bm->stamp[id] < before;
         id = bm->next[id])
        k++;
    return k;
}

size_t
trn_blocks_total(const trn_blocks_t *bm)
{
    return bm->n;
}

size_t
trn_blocks_size(const trn_blocks_t *bm)
{
    return bm->bs;
}

/* ---- cached list ------------------------------------------------------ */

static void
s_list_remove(trn_blocks_t *bm, int32_t id)
{
    int32_t p = bm->prev[id], n = bm->next[id];
    if (p != S_NONE)
        bm->next[p] = n;
    else
        bm->head = n;
    if (n != S_NONE)
        bm->prev[n] = p;
    else
        bm->tail = p;
    bm->n_cached--;
}

static void
s_list_push_warm(trn_blocks_t *bm, int32_t id)
{
    bm->prev[id] = bm->tail;
    bm->next[id] = S_NONE;
    if (bm->tail != S_NONE)
        bm->next[bm->tail] = id;
    else
        bm->head = id;
    bm->tail = id;
    bm->n_cached++;
}

/* ---- hash table ------------------------------------------------------- */

static bool
s_equal(const trn_blocks_t *bm, int32_t id, uint64_t h, uint64_t parent,
        const int32_t *tok)
{
    return bm->hash[id] == h && bm->parent[id] == parent &&
           memcmp(bm->tokens + (size_t) id * bm->bs, tok,
                  bm->bs * sizeof *tok) == 0;
}

/* The committed block equal to (h, parent, tok), or S_NONE. */
static int32_t
s_find(const trn_blocks_t *bm, uint64_t h, uint64_t parent, const int32_t *tok)
{
    for (size_t i = (size_t) h & bm->tmask;; i = (i + 1) & bm->tmask) {
        int32_t id = bm->table[i];
        if (id == S_NONE)
            return S_NONE;
        if (s_equal(bm, id, h, parent, tok))
            return id;
    }
}

static bool
s_hash_taken(const trn_blocks_t *bm, uint64_t h)
{
    for (size_t i = (size_t) h & bm->tmask;; i = (i + 1) & bm->tmask) {
        int32_t id = bm->table[i];
        if (id == S_NONE)
            return false;
        if (bm->hash[id] == h)
            return true;
    }
}

static void
s_table_insert(trn_blocks_t *bm, int32_t id)
{
    size_t i = (size_t) bm->hash[id] & bm->tmask;
    while (bm->table[i] != S_NONE)
        i = (i + 1) & bm->tmask;
    bm->table[i] = id;
}

/* Removes `id` and shifts later entries of its run back (no tombstones). */
static void
s_table_remove(trn_blocks_t *bm, int32_t id)
{
    size_t i = (size_t) bm->hash[id] & bm->tmask;
    while (bm->table[i] != id)
        i = (i + 1) & bm->tmask;
    bm->table[i] = S_NONE;
    for (size_t j = (i + 1) & bm->tmask; bm->table[j] != S_NONE;
         j = (j + 1) & bm->tmask) {
        int32_t e = bm->table[j];
        size_t home = (size_t) bm->hash[e] & bm->tmask;
        /* e may move into the hole at i unless its home lies in (i, j] */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            bm->table[i] = e;
            bm->table[j] = S_NONE;
            i = j;
        }
    }
}

/* ---- API -------------------------------------------------------------- */

size_t
trn_blocks_match(trn_blocks_t *bm, const int32_t *tokens, size_t n,
                 size_t max_blocks, int32_t *out, uint64_t *chain)
{
    size_t want = n / bm->bs, k = 0;
    if (want > max_blocks)
        want = max_blocks;
    uint64_t parent = 0;
    bm->st.lookups++;
    bm->st.query_blocks += want;
    for (; k < want; k++) {
        const int32_t *tok = tokens + k * bm->bs;
        uint64_t h = s_hash(parent, tok, bm->bs);
        int32_t id = s_find(bm, h, parent, tok);
        if (id == S_NONE)
            break;
        if (bm->ref[id] == 0)
            s_list_remove(bm, id);
        bm->ref[id]++;
        out[k] = id;
        parent = h;
    }
    bm->st.hit_blocks += k;
    if (chain)
        *chain = parent;
    return k;
}

int32_t
trn_blocks_alloc(trn_blocks_t *bm)
{
    int32_t id;
    if (bm->n_free > 0) {
        id = bm->stack[--bm->n_free];
    } else if (bm->head != S_NONE) {
        id = bm->head;
        s_list_remove(bm, id);
        s_table_remove(bm, id);
        bm->committed[id] = 0;
        bm->st.evictions++;
    } else {
        return S_NONE;
    }
    bm->ref[id] = 1;
    return id;
}

uint64_t
trn_blocks_commit(trn_blocks_t *bm, int32_t id, uint64_t parent,
                  const int32_t *tokens)
{
    uint64_t h = s_hash(parent, tokens, bm->bs);
    if (id < 0 || (size_t) id >= bm->n || bm->committed[id] ||
        s_hash_taken(bm, h))
        return h;
    bm->hash[id] = h;
    bm->parent[id] = parent;
    memcpy(bm->tokens + (size_t) id * bm->bs, tokens, bm->bs * sizeof *tokens);
    bm->committed[id] = 1;
    s_table_insert(bm, id);
    return h;
}

void
trn_blocks_ref(trn_blocks_t *bm, int32_t id)
{
    if (id < 0 || (size_t) id >= bm->n || bm->ref[id] == 0)
        return; /* only a held block can be shared */
    bm->ref[id]++;
}

void
trn_blocks_release(trn_blocks_t *bm, int32_t id)
{
    if (id < 0 || (size_t) id >= bm->n || bm->ref[id] == 0)
        return;
    if (--bm->ref[id] > 0)
        return;
    if (bm->committed[id]) {
        bm->stamp[id] = bm->now;
        s_list_push_warm(bm, id);
    } else
        bm->stack[bm->n_free++] = id;
}

void
trn_blocks_flush(trn_blocks_t *bm)
{
    for (size_t i = 0; i <= bm->tmask; i++)
        bm->table[i] = S_NONE;
    while (bm->head != S_NONE) {
        int32_t id = bm->head;
        s_list_remove(bm, id);
        bm->stack[bm->n_free++] = id;
    }
    memset(bm->committed, 0, bm->n);
}

trn_blocks_stats_t
trn_blocks_stats(const trn_blocks_t *bm)
{
    trn_blocks_stats_t s = bm->st;
    s.free = bm->n_free;
    s.cached = bm->n_cached;
    s.used = bm->n - bm->n_free - bm->n_cached;
    return s;
}
