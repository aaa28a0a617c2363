/*
 * trn_blocks: the engine's block manager: which KV-cache blocks are free,
 * which hold a known prefix, and who uses them.
 *
 * The KV cache is n_blocks blocks of block_size positions (the backend
 * holds their contents; this module only counts and names them). A
 * sequence is a list of block ids. A block that is full can be committed:
 * it is then content-addressed by a 64-bit hash chained from the start of
 * the sequence (the parent block's hash and the block's own token ids), so
 * another sequence whose tokens start the same way finds it and uses it
 * instead of recomputing it (the next turn of a conversation, the other
 * samples of a prompt). Lookups compare the stored token ids and parent
 * hash as well as the hash, so a hash collision can never hand out a
 * wrong block.
 *
 * Blocks are reference-counted. A released block whose count reaches 0
 * stays cached (and findable) in a least-recently-released list; fresh
 * allocations take never-used or flushed blocks first, then evict from the
 * list's cold end. Releasing a sequence's blocks from its last to its first
 * keeps a shared prefix warmer than the tails that hang off it.
 *
 * Not thread-safe: the engine thread owns it.
 */
#ifndef TRN_BLOCKS_H
#define TRN_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

typedef struct trn_blocks trn_blocks_t;

typedef struct {
    uint64_t lookups;      /* trn_blocks_match calls */
    uint64_t query_blocks; /* full blocks those calls asked about */
    uint64_t hit_blocks;   /* ... and found */
    uint64_t evictions;    /* cached blocks reused for new content */
    size_t free;           /* blocks with no content and no user */
    size_t cached;         /* unreferenced blocks holding a prefix */
    size_t used;           /* referenced blocks */
} trn_blocks_stats_t;

/* A manager of n_blocks (> 0, < 2^31) blocks of block_size (> 0)
 * positions; NULL on bad sizes. */
trn_blocks_t *trn_blocks_new(size_t n_blocks, size_t block_size);
/* Safe on NULL and twice. */
void trn_blocks_destroy(trn_blocks_t **bm);

/* Blocks an allocation may take now (free plus evictable cached). */
size_t trn_blocks_available(const trn_blocks_t *bm);
size_t trn_blocks_total(const trn_blocks_t *bm);

/* The time (any non-decreasing count: milliseconds, steps) that releases
 * from now on record; earlier values are ignored. */
void trn_blocks_set_now(trn_blocks_t *bm, uint64_t now);

/* Blocks an allocation may take without evicting a block released at or
 * after time `before`: free ones, then cached ones from the cold end that
 * were released earlier (the allocations take them in that order).
 * Counting stops at `enough`. */
size_t trn_blocks_available_before(const trn_blocks_t *bm, uint64_t before,
                                   size_t enough);
size_t trn_blocks_size(const trn_blocks_t *bm);

/* The longest run of committed blocks that holds tokens[0 .. k*bs) for
 * k <= max_blocks: takes a reference on each, writes their ids to out and
 * returns k; *chain receives the hash of the last one (0 when k is 0). */
size_t trn_blocks_match(trn_blocks_t *bm, const int32_t *tokens, size_t n,
                        size_t max_blocks, int32_t *out, uint64_t *chain);

/* A block for new content (reference count 1), or -1 when every block is
 * referenced. */
int32_t trn_blocks_alloc(trn_blocks_t *bm);

/* Commits full block `id` holding tokens[0 .. bs) after the prefix whose
 * last block hash is `parent` (0: the sequence's start); returns its
 * hash, the parent of the next block. If an equal block is already
 * committed the call still returns the hash and leaves `id` uncommitted
 * (the earlier copy stays the one found). */
uint64_t trn_blocks_commit(trn_blocks_t *bm, int32_t id, uint64_t parent,
                           const int32_t *tokens);

/* Takes one more reference on block `id`, which the caller already holds
 * one on (a sequence forked from another shares its full blocks). */
void trn_blocks_ref(trn_blocks_t *bm, int32_t id);

/* Drops a reference (block ids from match, alloc or ref). */
void trn_blocks_release(trn_blocks_t *bm, int32_t id);

/* Forgets every committed prefix (the weights changed): unreferenced
 * blocks become free, referenced ones stay with their users, uncommitted. */
void trn_blocks_flush(trn_blocks_t *bm);

trn_blocks_stats_t trn_blocks_stats(const trn_blocks_t *bm);

#endif
