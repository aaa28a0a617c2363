/*
 * lisa_list: an intrusive doubly linked list of structs with `prev` and
 * `next` members, headed by a pointer (the first element, NULL when
 * empty). Two macros, so that each kind of element keeps its own type:
 *
 *     LISA_LIST_PUSH(self->calls, call);    // call becomes the first
 *     LISA_LIST_UNLINK(self->calls, call);  // out, its links cleared
 *
 * Both are O(1); the caller keeps any count. `head` is evaluated more
 * than once: pass an lvalue without side effects.
 */
#ifndef LISA_LIST_H
#define LISA_LIST_H

#include <stddef.h>

#define LISA_LIST_PUSH(head, node)                                             \
    do {                                                                       \
        (node)->prev = NULL;                                                   \
        (node)->next = (head);                                                 \
        if (head)                                                              \
            (head)->prev = (node);                                             \
        (head) = (node);                                                       \
    } while (0)

#define LISA_LIST_UNLINK(head, node)                                           \
    do {                                                                       \
        if ((node)->prev)                                                      \
            (node)->prev->next = (node)->next;                                 \
        else                                                                   \
            (head) = (node)->next;                                             \
        if ((node)->next)                                                      \
            (node)->next->prev = (node)->prev;                                 \
        (node)->prev = (node)->next = NULL;                                    \
    } while (0)

#endif
