#include "lisa/lisa_list.h"

#include <criterion/criterion.h>

typedef struct s_node {
    struct s_node *prev, *next;
    int v;
} s_node_t;

/* The values from the head on, as a number (digits in order). */
static int
s_digits(const s_node_t *head)
{
    int d = 0;
    for (const s_node_t *n = head; n; n = n->next) {
        cr_assert(n->next == NULL || n->next->prev == n, "links agree");
        d = d * 10 + n->v;
    }
    return d;
}

Test(lisa_list, usage)
{
    s_node_t a = {.v = 1}, b = {.v = 2}, c = {.v = 3};
    s_node_t *head = NULL;
    LISA_LIST_PUSH(head, &a);
    LISA_LIST_PUSH(head, &b);
    LISA_LIST_PUSH(head, &c);
    cr_assert_eq(s_digits(head), 321);
    cr_assert_null(head->prev);
    LISA_LIST_UNLINK(head, &b); /* the middle */
    cr_assert_eq(s_digits(head), 31);
    cr_assert(b.prev == NULL && b.next == NULL);
    LISA_LIST_UNLINK(head, &c); /* the head */
    cr_assert_eq(head, &a);
    cr_assert_null(a.prev);
    LISA_LIST_UNLINK(head, &a); /* the last one */
    cr_assert_null(head);
}

Test(lisa_list, unlink_of_the_tail_and_push_after)
{
    s_node_t a = {.v = 1}, b = {.v = 2};
    s_node_t *head = NULL;
    LISA_LIST_PUSH(head, &a);
    LISA_LIST_PUSH(head, &b);
    LISA_LIST_UNLINK(head, &a); /* the tail */
    cr_assert_eq(s_digits(head), 2);
    cr_assert_null(b.next);
    LISA_LIST_PUSH(head, &a); /* an unlinked node goes back in */
    cr_assert_eq(s_digits(head), 12);
}
