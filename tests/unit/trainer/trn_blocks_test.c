/*
 * trn_blocks tests: allocation, the prefix cache (chained hashes, exact
 * token comparison, longest prefix), reference counts, eviction order and
 * flushing. The first test is the usage example.
 */
#include "trn_blocks.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

Test(trn_blocks, usage)
{
    /* 8 blocks of 4 positions */
    trn_blocks_t *bm = trn_blocks_new(8, 4);
    cr_assert(bm);
    int32_t tok[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    /* a first request computes everything: nothing is cached yet */
    int32_t got[3];
    uint64_t chain = 0;
    cr_assert_eq(trn_blocks_match(bm, tok, 12, 3, got, &chain), 0);
    cr_assert_eq(chain, 0);
    int32_t mine[3];
    uint64_t parent = 0;
    for (int i = 0; i < 3; i++) {
        mine[i] = trn_blocks_alloc(bm);
        cr_assert_geq(mine[i], 0);
        /* computed and full: commit it under its prefix */
        parent = trn_blocks_commit(bm, mine[i], parent, tok + 4 * i);
    }
    cr_assert_eq(trn_blocks_available(bm), 5);
    /* the request ends: released, last block first; they stay cached */
    for (int i = 2; i >= 0; i--)
        trn_blocks_release(bm, mine[i]);
    cr_assert_eq(trn_blocks_available(bm), 8);
    trn_blocks_stats_t st = trn_blocks_stats(bm);
    cr_assert_eq(st.cached, 3);
    /* the next turn starts with the same 10 tokens: two full blocks hit */
    cr_assert_eq(trn_blocks_match(bm, tok, 10, 3, got, &chain), 2);
    cr_assert_eq(got[0], mine[0]);
    cr_assert_eq(got[1], mine[1]);
    cr_assert_neq(chain, 0);
    st = trn_blocks_stats(bm);
    cr_assert_eq(st.used, 2);
    cr_assert_eq(st.hit_blocks, 2);
    trn_blocks_release(bm, got[1]);
    trn_blocks_release(bm, got[0]);
    trn_blocks_destroy(&bm);
    cr_assert_null(bm);
    trn_blocks_destroy(&bm);
}

Test(trn_blocks, a_block_is_found_only_after_the_same_prefix)
{
    trn_blocks_t *bm = trn_blocks_new(8, 2);
    int32_t a[4] = {1, 2, 3, 4}, b[4] = {9, 9, 3, 4};
    int32_t x = trn_blocks_alloc(bm), y = trn_blocks_alloc(bm);
    uint64_t h = trn_blocks_commit(bm, x, 0, a);
    trn_blocks_commit(bm, y, h, a + 2);
    trn_blocks_release(bm, y);
    trn_blocks_release(bm, x);
    int32_t got[2];
    uint64_t chain;
    /* b's second block has a's tokens but another parent: no hit */
    cr_assert_eq(trn_blocks_match(bm, b, 4, 2, got, &chain), 0);
    /* a prefix that differs inside the first block: no hit either */
    int32_t c[4] = {1, 7, 3, 4};
    cr_assert_eq(trn_blocks_match(bm, c, 4, 2, got, &chain), 0);
    /* max_blocks bounds the match */
    cr_assert_eq(trn_blocks_match(bm, a, 4, 1, got, &chain), 1);
    cr_assert_eq(chain, h);
    trn_blocks_release(bm, got[0]);
    trn_blocks_destroy(&bm);
}

Test(trn_blocks, shared_blocks_are_counted_and_never_handed_out)
{
    trn_blocks_t *bm = trn_blocks_new(3, 2);
    int32_t a[2] = {5, 6};
    int32_t x = trn_blocks_alloc(bm);
    trn_blocks_commit(bm, x, 0, a);
    /* two more users of x */
    int32_t g1, g2;
    cr_assert_eq(trn_blocks_match(bm, a, 2, 1, &g1, NULL), 1);
    cr_assert_eq(trn_blocks_match(bm, a, 2, 1, &g2, NULL), 1);
    cr_assert_eq(g1, x);
    cr_assert_eq(g2, x);
    trn_blocks_release(bm, x);
    trn_blocks_release(bm, g1);
    /* still referenced once: the two other blocks are all there is */
    cr_assert_eq(trn_blocks_available(bm), 2);
    int32_t p = trn_blocks_alloc(bm), q = trn_blocks_alloc(bm);
    cr_assert(p >= 0 && q >= 0 && p != x && q != x && p != q);
    cr_assert_eq(trn_blocks_alloc(bm), -1);
    trn_blocks_release(bm, g2);
    /* now x is evictable: the next allocation takes it, and it is gone
     * from the cache */
    cr_assert_eq(trn_blocks_alloc(bm), x);
    cr_assert_eq(trn_blocks_stats(bm).evictions, 1);
    int32_t g3;
    cr_assert_eq(trn_blocks_match(bm, a, 2, 1, &g3, NULL), 0);
    /* double release and bad ids are ignored */
    trn_blocks_release(bm, p);
    trn_blocks_release(bm, p);
    trn_blocks_release(bm, -1);
    trn_blocks_release(bm, 99);
    cr_assert_eq(trn_blocks_available(bm), 1);
    trn_blocks_destroy(&bm);
}

Test(trn_blocks, a_forked_sequence_shares_blocks_by_reference)
{
    trn_blocks_t *bm = trn_blocks_new(2, 2);
    int32_t a[2] = {1, 2};
    /* an uncommitted block (no prefix cache) shared by a fork */
    int32_t x = trn_blocks_alloc(bm);
    trn_blocks_ref(bm, x);
    cr_assert_eq(trn_blocks_stats(bm).used, 1);
    trn_blocks_release(bm, x);
    cr_assert_eq(trn_blocks_available(bm), 1); /* the fork still holds it */
    trn_blocks_release(bm, x);
    cr_assert_eq(trn_blocks_stats(bm).free, 2);
    /* a committed one stays cached after its last user */
    x = trn_blocks_alloc(bm);
    trn_blocks_commit(bm, x, 0, a);
    trn_blocks_ref(bm, x);
    trn_blocks_release(bm, x);
    trn_blocks_release(bm, x);
    cr_assert_eq(trn_blocks_stats(bm).cached, 1);
    /* a block nobody holds cannot be shared: ref is ignored */
    trn_blocks_ref(bm, x);
    trn_blocks_ref(bm, -1);
    trn_blocks_ref(bm, 7);
    cr_assert_eq(trn_blocks_stats(bm).used, 0);
    cr_assert_eq(trn_blocks_stats(bm).cached, 1);
    trn_blocks_destroy(&bm);
}

Test(trn_blocks, free_blocks_go_first_then_the_coldest_cached)
{
    trn_blocks_t *bm = trn_blocks_new(4, 1);
    int32_t t[4] = {10, 11, 12, 13};
    int32_t ids[4];
    uint64_t h = 0;
    for (int i = 0; i < 4; i++) {
        ids[i] = trn_blocks_alloc(bm);
        h = trn_blocks_commit(bm, ids[i], h, t + i);
    }
    /* released last first: block 3 is the coldest, block 0 the warmest */
    for (int i = 3; i >= 0; i--)
        trn_blocks_release(bm, ids[i]);
    cr_assert_eq(trn_blocks_alloc(bm), ids[3]);
    cr_assert_eq(trn_blocks_alloc(bm), ids[2]);
    /* the prefix t[0..1] is still whole */
    int32_t got[4];
    cr_assert_eq(trn_blocks_match(bm, t, 4, 4, got, NULL), 2);
    trn_blocks_destroy(&bm);
}

Test(trn_blocks, an_equal_block_committed_twice_keeps_the_first)
{
    trn_blocks_t *bm = trn_blocks_new(4, 2);
    int32_t a[2] = {3, 4};
    int32_t x = trn_blocks_alloc(bm), y = trn_blocks_alloc(bm);
    uint64_t hx = trn_blocks_commit(bm, x, 0, a);
    uint64_t hy = trn_blocks_commit(bm, y, 0, a);
    cr_assert_eq(hx, hy);
    trn_blocks_release(bm, y); /* uncommitted: straight back to free */
    cr_assert_eq(trn_blocks_stats(bm).free, 3);
    trn_blocks_release(bm, x);
    cr_assert_eq(trn_blocks_stats(bm).cached, 1);
    int32_t g;
    cr_assert_eq(trn_blocks_match(bm, a, 2, 1, &g, NULL), 1);
    cr_assert_eq(g, x);
    trn_blocks_release(bm, g);
    trn_blocks_destroy(&bm);
}

Test(trn_blocks, flush_forgets_every_prefix)
{
    trn_blocks_t *bm = trn_blocks_new(4, 2);
    int32_t a[4] = {1, 2, 3, 4};
    int32_t x = trn_blocks_alloc(bm), y = trn_blocks_alloc(bm);
    uint64_t h = trn_blocks_commit(bm, x, 0, a);
    trn_blocks_commit(bm, y, h, a + 2);
    trn_blocks_release(bm, y); /* x stays in use */
    trn_blocks_flush(bm);
    trn_blocks_stats_t st = trn_blocks_stats(bm);
    cr_assert_eq(st.cached, 0);
    cr_assert_eq(st.free, 3);
    cr_assert_eq(st.used, 1);
    int32_t got[2];
    cr_assert_eq(trn_blocks_match(bm, a, 4, 2, got, NULL), 0);
    /* x, released after the flush, is free (uncommitted) */
    trn_blocks_release(bm, x);
    cr_assert_eq(trn_blocks_stats(bm).free, 4);
    trn_blocks_destroy(&bm);
}

Test(trn_blocks, bad_sizes)
{
    cr_assert_null(trn_blocks_new(0, 4));
    cr_assert_null(trn_blocks_new(4, 0));
    cr_assert_null(trn_blocks_new((size_t) 1 << 31, 4));
}

/* Many random sequences against a model of the table: every block handed
 * out is unreferenced, every match returns blocks whose committed tokens
 * are the query's, the counts add up, and the hash table survives many
 * removals (backward-shift deletion). */
Test(trn_blocks, random_workload_keeps_the_invariants)
{
    enum { N = 64, BS = 2, SEQ = 12, ROUNDS = 4000 };
    trn_blocks_t *bm = trn_blocks_new(N, BS);
    int32_t content[N][BS];
    int refs[N];
    memset(refs, 0, sizeof refs);
    srand(7);
    int32_t held[8][SEQ / BS];
    size_t nheld[8] = {0};
    for (int r = 0; r < ROUNDS; r++) {
        int s = rand() % 8;
        /* release what sequence s held */
        for (size_t i = nheld[s]; i-- > 0;) {
            trn_blocks_release(bm, held[s][i]);
            refs[held[s][i]]--;
        }
        nheld[s] = 0;
        /* a new sequence over a small alphabet, so prefixes repeat */
        int32_t tok[SEQ];
        for (int i = 0; i < SEQ; i++)
            tok[i] = rand() % 3;
        uint64_t chain = 0;
        size_t k = trn_blocks_match(bm, tok, SEQ, SEQ / BS, held[s], &chain);
        for (size_t i = 0; i < k; i++) {
            cr_assert_eq(
                memcmp(content[held[s][i]], tok + i * BS, sizeof content[0]),
                0);
            refs[held[s][i]]++;
        }
        nheld[s] = k;
        for (size_t i = k; i < SEQ / BS; i++) {
            int32_t id = trn_blocks_alloc(bm);
            if (id < 0)
                break;
            cr_assert_eq(refs[id], 0, "block %d handed out while in use", id);
            refs[id]++;
            memcpy(content[id], tok + i * BS, sizeof content[0]);
            chain = trn_blocks_commit(bm, id, chain, tok + i * BS);
            held[s][nheld[s]++] = id;
        }
        trn_blocks_stats_t st = trn_blocks_stats(bm);
        cr_assert_eq(st.free + st.cached + st.used, (size_t) N);
        size_t used = 0;
        for (int i = 0; i < N; i++)
            used += refs[i] > 0;
        cr_assert_eq(st.used, used);
    }
    cr_assert_gt(trn_blocks_stats(bm).hit_blocks, 0);
    cr_assert_gt(trn_blocks_stats(bm).evictions, 0);
    trn_blocks_destroy(&bm);
}

Test(trn_blocks, blocks_released_recently_are_counted_apart)
{
    /* 4 blocks of 2: one free, one released at time 10, two at 20 */
    trn_blocks_t *bm = trn_blocks_new(4, 2);
    int32_t tok[6] = {1, 2, 3, 4, 5, 6}, id[3];
    uint64_t parent = 0;
    for (int i = 0; i < 3; i++) {
        id[i] = trn_blocks_alloc(bm);
        parent = trn_blocks_commit(bm, id[i], parent, tok + 2 * i);
    }
    trn_blocks_set_now(bm, 10);
    trn_blocks_release(bm, id[2]);
    trn_blocks_set_now(bm, 20);
    trn_blocks_set_now(bm, 15); /* time does not go back */
    trn_blocks_release(bm, id[1]);
    trn_blocks_release(bm, id[0]);
    cr_assert_eq(trn_blocks_available(bm), 4);
    cr_assert_eq(trn_blocks_available_before(bm, 10, 4), 1);
    cr_assert_eq(trn_blocks_available_before(bm, 11, 4), 2);
    cr_assert_eq(trn_blocks_available_before(bm, 21, 4), 4);
    cr_assert_eq(trn_blocks_available_before(bm, 21, 3), 3); /* enough */
    /* allocations take them in that order: the free one, then the one
     * released first; the prefix released last stays findable */
    int32_t a = trn_blocks_alloc(bm), b = trn_blocks_alloc(bm);
    cr_assert_neq(a, id[2]);
    cr_assert_eq(b, id[2]);
    int32_t got[3];
    uint64_t chain = 0;
    cr_assert_eq(trn_blocks_match(bm, tok, 6, 3, got, &chain), 2);
    trn_blocks_release(bm, got[1]);
    trn_blocks_release(bm, got[0]);
    trn_blocks_release(bm, a);
    trn_blocks_release(bm, b);
    trn_blocks_destroy(&bm);
}
