/*
 * lisa_ids tests. The first test is the usage example.
 */
#include "lisa/lisa_ids.h"

#include <criterion/criterion.h>

Test(lisa_ids, usage)
{
    lisa_ids_t *ids = lisa_ids_new(3);
    cr_assert_eq(lisa_ids_push(ids, 10), LISA_OK);
    const int32_t more[] = {11, 12};
    cr_assert_eq(lisa_ids_append(ids, more, 2), LISA_OK);
    cr_assert_eq(lisa_ids_len(ids), 3);
    cr_assert_eq(lisa_ids_data(ids)[2], 12);
    /* the bound holds */
    cr_assert_eq(lisa_ids_push(ids, 13), LISA_TOOLARGE);
    cr_assert_eq(lisa_ids_len(ids), 3);
    lisa_ids_truncate(ids, 1);
    cr_assert_eq(lisa_ids_len(ids), 1);
    lisa_ids_clear(ids);
    cr_assert_eq(lisa_ids_len(ids), 0);
    cr_assert_eq(lisa_ids_max(ids), 3);
    lisa_ids_destroy(&ids);
    cr_assert_null(ids);
    lisa_ids_destroy(&ids);
}

Test(lisa_ids, grows_to_the_bound)
{
    cr_assert_null(lisa_ids_new(0));
    lisa_ids_t *ids = lisa_ids_new(100000);
    size_t pushed = 0, right = 0;
    for (int32_t i = 0; i < 100000; i++)
        pushed += lisa_ids_push(ids, i) == LISA_OK;
    for (int32_t i = 0; i < 100000; i++)
        right += lisa_ids_data(ids)[i] == i;
    cr_assert_eq(pushed, 100000);
    cr_assert_eq(right, 100000);
    cr_assert_eq(lisa_ids_append(ids, (const int32_t[]){1}, 1), LISA_TOOLARGE);
    cr_assert_eq(lisa_ids_append(ids, NULL, 0), LISA_OK);
    lisa_ids_destroy(&ids);
}
