/*
 * brk_arena: a list of blocks plus a list of owned protobuf messages.
 *
 * Blocks are 64 KiB (or the request's size when bigger); allocations are
 * 16-byte aligned bumps inside the newest block. A reset frees every block
 * but the first, so a broker that answers small requests allocates nothing
 * in steady state.
 */
#include "brk_arena.h"

#include "lisa/lisa_mem.h"

#include <string.h>

#define S_BLOCK (64u * 1024u)

typedef struct s_block_t {
    struct s_block_t *next;
    size_t size;
    size_t used;
    _Alignas(16) unsigned char data[];
} s_block_t;

struct brk_arena_t {
    s_block_t *blocks;
    ProtobufCMessage **owned;
    size_t n_owned;
    size_t cap_owned;
};

static s_block_t *
s_block(size_t size)
{
    s_block_t *b = lisa_malloc(sizeof *b + size);
    b->next = NULL;
    b->size = size;
    b->used = 0;
    return b;
}

brk_arena_t *
brk_arena_new(void)
{
    brk_arena_t *self = lisa_calloc(1, sizeof *self);
    self->blocks = s_block(S_BLOCK);
    return self;
}

void
brk_arena_reset(brk_arena_t *self)
{
    for (size_t i = 0; i < self->n_owned; i++)
        protobuf_c_message_free_unpacked(self->owned[i], NULL);
    self->n_owned = 0;
    s_block_t *b = self->blocks;
    while (b->next) {
        s_block_t *n = b->next;
        b->next = n->next;
        lisa_free(&n);
    }
    b->used = 0;
}

void
brk_arena_destroy(brk_arena_t **pself)
{
    if (!pself || !*pself)
        return;
    brk_arena_t *self = *pself;
    brk_arena_reset(self);
    lisa_free(&self->blocks);
    lisa_free(&self->owned);
    lisa_free(pself);
}

void *
brk_arena_alloc(brk_arena_t *self, size_t n)
{
    n = (n + 15u) & ~(size_t) 15u;
    s_block_t *head = self->blocks;
    /* The first block stays first; new blocks go right behind it. */
    s_block_t *cur = head->next ? head->next : head;
    if (cur->size - cur->used < n) {
        cur = s_block(n > S_BLOCK ? n : S_BLOCK);
        cur->next = head->next;
        head->next = cur;
    }
    void *p = cur->data + cur->used;
    cur->used += n;
    memset(p, 0, n);
    return p;
}

char *
brk_arena_strndup(brk_arena_t *self, const char *s, size_t n)
{
    char *p = brk_arena_alloc(self, n + 1);
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *
brk_arena_strdup(brk_arena_t *self, const char *s)
{
    if (!s)
        s = "";
    return brk_arena_strndup(self, s, strlen(s));
}

void
brk_arena_own(brk_arena_t *self, ProtobufCMessage *msg)
{
    if (!msg)
        return;
    if (self->n_owned == self->cap_owned) {
        self->cap_owned = self->cap_owned ? self->cap_owned * 2 : 64;
        self->owned =
            lisa_realloc(self->owned, self->cap_owned * sizeof *self->owned);
    }
    self->owned[self->n_owned++] = msg;
}
