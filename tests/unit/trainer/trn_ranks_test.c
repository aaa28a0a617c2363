/*
 * trn_ranks tests: how the settings and a launcher's environment decide a
 * process's rank, and which combinations are refused with a reason. The
 * first test is the usage example.
 */
#include "trn_ranks.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static trn_run_cfg_t
s_cfg(void)
{
    trn_run_cfg_t c;
    memset(&c, 0, sizeof c);
    c.world = 1;
    c.nodes = 1;
    c.gpus_per_node = 1;
    return c;
}

static void
s_clean_env(void)
{
    unsetenv("LISA_TRN_SPAWNED");
    unsetenv("LISA_TRN_LOCAL_RANK");
}

Test(trn_ranks, usage, .init = s_clean_env)
{
    /* one node of four GPUs: this process is rank 0 and launches three */
    trn_run_cfg_t c = s_cfg();
    c.gpus_per_node = 4;
    trn_ranks_plan_t p;
    char err[256] = "";
    cr_assert_eq(trn_ranks_plan(&c, true, &p, err, sizeof err), LISA_OK, "%s",
                 err);
    cr_assert_eq(p.world, 4);
    cr_assert_eq(p.rank, 0);
    cr_assert_eq(p.launch, 4);
    cr_assert_eq(p.local_rank, 0);
    cr_assert_not(p.spawned);
    trn_ranks_t *r = trn_ranks_new();
    cr_assert_not_null(r);
    cr_assert_eq(trn_ranks_count(r), 0);
    cr_assert_eq(trn_ranks_alive(r), 1);
    cr_assert_eq(trn_ranks_reap(r, 0), 0);
    trn_ranks_destroy(&r);
    cr_assert_null(r);
    trn_ranks_destroy(&r);
}

Test(trn_ranks, second_node_starts_at_its_first_rank, .init = s_clean_env)
{
    trn_run_cfg_t c = s_cfg();
    c.nodes = 2;
    c.node_rank = 1;
    c.gpus_per_node = 2;
    c.bootstrap = "tcp://10.0.0.1:7300";
    trn_ranks_plan_t p;
    char err[256] = "";
    cr_assert_eq(trn_ranks_plan(&c, true, &p, err, sizeof err), LISA_OK);
    cr_assert_eq(p.world, 4);
    cr_assert_eq(p.rank, 2);
    cr_assert_eq(p.launch, 2);
}

Test(trn_ranks, launched_rank_reads_its_local_rank, .init = s_clean_env)
{
    trn_run_cfg_t c = s_cfg();
    c.gpus_per_node = 4; /* the launcher's flags; the rank's own win */
    c.world = 4;
    c.rank = 3;
    setenv("LISA_TRN_SPAWNED", "1", 1);
    setenv("LISA_TRN_LOCAL_RANK", "3", 1);
    trn_ranks_plan_t p;
    char err[256] = "";
    cr_assert_eq(trn_ranks_plan(&c, true, &p, err, sizeof err), LISA_OK, "%s",
                 err);
    cr_assert(p.spawned);
    cr_assert_eq(p.local_rank, 3);
    cr_assert_eq(p.rank, 3);
    cr_assert_eq(p.world, 4);
    cr_assert_eq(p.launch, 1);
    /* a local rank that is not a number is refused, not read as 0 */
    setenv("LISA_TRN_LOCAL_RANK", "3x", 1);
    cr_assert_eq(trn_ranks_plan(&c, true, &p, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "LISA_TRN_LOCAL_RANK") != NULL, "%s", err);
    setenv("LISA_TRN_LOCAL_RANK", "-1", 1);
    cr_assert_eq(trn_ranks_plan(&c, true, &p, err, sizeof err), LISA_INVALID);
}

Test(trn_ranks, bad_combinations_are_refused_clearly, .init = s_clean_env)
{
    trn_ranks_plan_t p;
    char err[256] = "";
    trn_run_cfg_t c = s_cfg();
    c.gpus_per_node = 0;
    cr_assert_eq(trn_ranks_plan(&c, true, &p, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "at least 1") != NULL, "%s", err);

    c = s_cfg();
    c.nodes = 2;
    c.node_rank = 2;
    c.gpus_per_node = 2;
    cr_assert_eq(trn_ranks_plan(&c, true, &p, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "trainer.node_rank") != NULL, "%s", err);

    c = s_cfg();
    c.gpus_per_node = 4;
    c.world = 8;
    cr_assert_eq(trn_ranks_plan(&c, true, &p, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "trainer.world_size 8") != NULL, "%s", err);

    c = s_cfg();
    c.world = 2;
    c.rank = 2;
    cr_assert_eq(trn_ranks_plan(&c, true, &p, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "bad rank 2 of world size 2") != NULL, "%s", err);

    c = s_cfg();
    c.gpus_per_node = 2;
    cr_assert_eq(trn_ranks_plan(&c, false, &p, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "serve runs one rank") != NULL, "%s", err);

    c = s_cfg();
    c.world = 2;
    c.rank = 1;
    cr_assert_eq(trn_ranks_plan(&c, true, &p, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "needs trainer.bootstrap") != NULL, "%s", err);
    c.bootstrap = "tcp://127.0.0.1:7300";
    cr_assert_eq(trn_ranks_plan(&c, true, &p, err, sizeof err), LISA_OK);
}
