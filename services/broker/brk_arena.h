/*
 * brk_arena: scratch memory for building one reply.
 *
 * The broker answers each request by filling protobuf-c structs that point
 * at strings and arrays it copied out of SQLite rows. Tracking every one
 * of those allocations by hand is where leaks come from, so they all come
 * from an arena that is reset once the reply is packed. Unpacked protobuf
 * messages (spans read back from the store) can be handed to the arena
 * too, and are freed at the same reset.
 */
#ifndef BRK_ARENA_H
#define BRK_ARENA_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

typedef struct brk_arena_t brk_arena_t;

/* New empty arena. */
brk_arena_t *brk_arena_new(void);
/* Frees everything and the arena; accepts NULL, sets *self to NULL. */
void brk_arena_destroy(brk_arena_t **self);
/* Frees everything allocated since the last reset; the arena stays usable. */
void brk_arena_reset(brk_arena_t *self);
/* n zeroed bytes, valid until the next reset. */
void *brk_arena_alloc(brk_arena_t *self, size_t n);
/* Copy of s (NULL gives ""), valid until the next reset. */
char *brk_arena_strdup(brk_arena_t *self, const char *s);
/* Copy of n bytes of s as a NUL-terminated string. */
char *brk_arena_strndup(brk_arena_t *self, const char *s, size_t n);
/* Takes ownership of an unpacked message; freed at the next reset. */
void brk_arena_own(brk_arena_t *self, ProtobufCMessage *msg);

#endif
