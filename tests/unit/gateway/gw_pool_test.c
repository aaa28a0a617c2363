/*
 * gw_pool: sticky routing, least-loaded fallback, health, pause, sync.
 */
#include "gw_pool.h"

#include <criterion/criterion.h>
#include <string.h>

/* Usage: two static engines; an attempt sticks to its engine. */
Test(gw_pool, usage)
{
    gw_pool_t *p = gw_pool_new(0, 2);
    cr_assert_eq(
        gw_pool_add_static(p, "a=http://127.0.0.1:1,b=http://127.0.0.1:2"),
        LISA_OK);
    cr_assert_eq(gw_pool_size(p), 2);
    const char *id, *url;
    cr_assert_eq(gw_pool_pick(p, "b", &id, &url), LISA_OK);
    cr_assert_str_eq(id, "b");
    cr_assert_str_eq(url, "http://127.0.0.1:2");
    gw_pool_call_started(p, "b");
    /* no sticky: least loaded is a */
    cr_assert_eq(gw_pool_pick(p, NULL, &id, &url), LISA_OK);
    cr_assert_str_eq(id, "a");
    gw_pool_call_ended(p, "b", false);
    cr_assert_eq(gw_pool_inflight(p, NULL), 0);
    gw_pool_destroy(&p);
    cr_assert_null(p);
}

Test(gw_pool, down_paused_full_and_sync)
{
    gw_pool_t *p = gw_pool_new(1, 2);
    cr_assert_eq(gw_pool_add_static(p, "http://127.0.0.1:1"), LISA_OK);
    cr_assert_eq(gw_pool_upsert(p, "x", "http://127.0.0.1:9", 3, false, true),
                 LISA_OK);
    const char *id, *url;
    /* e0 full -> x */
    gw_pool_call_started(p, "e0");
    cr_assert_eq(gw_pool_pick(p, "e0", &id, &url), LISA_OK);
    cr_assert_str_eq(id, "x");
    /* x down after two connection errors */
    gw_pool_call_started(p, "x");
    gw_pool_call_ended(p, "x", true);
    gw_pool_call_started(p, "x");
    gw_pool_call_ended(p, "x", true);
    bool up;
    cr_assert(gw_pool_at(p, 1, NULL, NULL, &up, NULL, NULL));
    cr_assert_not(up);
    /* e0 full, x down -> busy */
    cr_assert_eq(gw_pool_pick(p, NULL, &id, &url), LISA_AGAIN);
    gw_pool_call_ended(p, "e0", false);
    gw_pool_health(p, "x", true);
    gw_pool_pause_all(p, true);
    cr_assert_eq(gw_pool_pick(p, NULL, &id, &url), LISA_AGAIN);
    gw_pool_pause_all(p, false);
    cr_assert_eq(gw_pool_pick(p, "x", &id, &url), LISA_OK);
    cr_assert_str_eq(id, "x");
    /* a sync that does not list x removes it, keeps the static engine */
    gw_pool_sync_begin(p);
    cr_assert_eq(gw_pool_sync_end(p), 1);
    cr_assert_eq(gw_pool_size(p), 1);
    gw_pool_call_ended(p, "x", false); /* harmless after removal */
    gw_pool_health(p, "e0", false);
    gw_pool_health(p, "e0", false);
    cr_assert_eq(gw_pool_pick(p, NULL, &id, &url), LISA_UNAVAILABLE);
    cr_assert_eq(gw_pool_add_static(p, "ftp://x"), LISA_INVALID);
    gw_pool_destroy(&p);
}

/* A group's attempts go where its first went while that engine is below
 * its advertised batch; over it, least loaded (the group stays home); a
 * group whose engine went away moves. */
Test(gw_pool, groups_share_an_engine_while_load_allows)
{
    gw_pool_t *p = gw_pool_new(0, 1);
    cr_assert_eq(
        gw_pool_add_static(p, "a=http://127.0.0.1:1,b=http://127.0.0.1:2"),
        LISA_OK);
    gw_pool_set_capacity(p, "a", 2);
    gw_pool_set_capacity(p, "b", 2);
    const char *id, *url;
    cr_assert_null(gw_pool_group_engine(p, "g1"));
    cr_assert_eq(gw_pool_pick_group(p, NULL, "g1", &id, &url), LISA_OK);
    char home[8];
    snprintf(home, sizeof home, "%s", id);
    const char *other = strcmp(home, "a") == 0 ? "b" : "a";
    cr_assert_str_eq(gw_pool_group_engine(p, "g1"), home);
    gw_pool_call_started(p, home);
    /* least loaded would be the other engine; the group stays */
    cr_assert_eq(gw_pool_pick_group(p, NULL, "g1", &id, &url), LISA_OK);
    cr_assert_str_eq(id, home);
    gw_pool_call_started(p, home);
    /* at its batch: this attempt goes to the other, the group stays */
    cr_assert_eq(gw_pool_pick_group(p, NULL, "g1", &id, &url), LISA_OK);
    cr_assert_str_eq(id, other);
    cr_assert_str_eq(gw_pool_group_engine(p, "g1"), home);
    /* an attempt already on an engine keeps it */
    cr_assert_eq(gw_pool_pick_group(p, other, "g1", &id, &url), LISA_OK);
    cr_assert_str_eq(id, other);
    gw_pool_call_ended(p, home, false);
    cr_assert_eq(gw_pool_pick_group(p, NULL, "g1", &id, &url), LISA_OK);
    cr_assert_str_eq(id, home);
    /* a second group is placed by load: on the other engine */
    cr_assert_eq(gw_pool_pick_group(p, NULL, "g2", &id, &url), LISA_OK);
    cr_assert_str_eq(id, other);
    /* home down: the group moves */
    gw_pool_call_ended(p, home, true);
    cr_assert_eq(gw_pool_pick_group(p, NULL, "g1", &id, &url), LISA_OK);
    cr_assert_str_eq(id, other);
    cr_assert_str_eq(gw_pool_group_engine(p, "g1"), other);
    /* no group: least loaded as before */
    cr_assert_eq(gw_pool_pick_group(p, NULL, NULL, &id, &url), LISA_OK);
    cr_assert_eq(gw_pool_pick_group(p, NULL, "", &id, &url), LISA_OK);
    gw_pool_destroy(&p);
}
