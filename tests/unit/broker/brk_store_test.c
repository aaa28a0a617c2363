/*
 * brk_store tests on a real SQLite file in a temporary directory. The
 * first test is the usage example.
 */
#include "brk_store.h"

#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char s_dir[256];

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/brk_store_test_XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
}

static void
s_teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

static Lisa__Rollout
s_rollout(const char *id, const char *run)
{
    Lisa__Rollout r = LISA__ROLLOUT__INIT;
    r.rollout_id = (char *) id;
    r.group_id = "g-1";
    r.run_id = (char *) run;
    r.state = LISA__ROLLOUT_STATE__ROLLOUT_QUEUED;
    r.reason = "";
    r.max_attempts = 3;
    r.task_id = "t";
    r.data_source = "math";
    return r;
}

TestSuite(brk_store, .init = s_setup, .fini = s_teardown);

Test(brk_store, usage)
{
    /* Open (creates and migrates), write in a transaction, commit, read. */
    brk_store_t *st = brk_store_open(s_dir, true);
    cr_assert_not_null(st);
    cr_assert_eq(brk_store_schema(st), BRK_STORE_SCHEMA);
    brk_arena_t *a = brk_arena_new();

    cr_assert_eq(brk_store_begin(st), LISA_OK);
    Lisa__TaskSpec task = LISA__TASK_SPEC__INIT;
    task.problem_statement = "2+2?";
    task.ground_truth = "4";
    cr_assert_eq(brk_store_group_put(st, "g-1", "run", 0, &task), LISA_OK);
    Lisa__Rollout r = s_rollout("r-1", "run");
    cr_assert_eq(brk_store_rollout_put(st, &r), LISA_OK);
    cr_assert_eq(brk_store_commit(st), LISA_OK);
    cr_assert_eq(brk_store_commits(st), 1);

    Lisa__Rollout *got = NULL;
    cr_assert_eq(brk_store_rollout_get(st, a, "r-1", &got), LISA_OK);
    cr_assert_str_eq(got->run_id, "run");
    cr_assert_eq(got->state, LISA__ROLLOUT_STATE__ROLLOUT_QUEUED);
    Lisa__TaskSpec *t = NULL;
    cr_assert_eq(brk_store_group_task(st, a, "g-1", &t), LISA_OK);
    cr_assert_str_eq(t->ground_truth, "4");
    cr_assert_eq(brk_store_rollout_get(st, a, "r-2", &got), LISA_NOTFOUND);

    brk_arena_destroy(&a);
    brk_store_close(&st);
    brk_store_close(&st); /* safe twice */
}

Test(brk_store, committed_writes_survive_reopen_and_rollback_discards)
{
    brk_store_t *st = brk_store_open(s_dir, false);
    brk_arena_t *a = brk_arena_new();
    cr_assert_eq(brk_store_begin(st), LISA_OK);
    Lisa__Rollout r1 = s_rollout("r-1", "run");
    cr_assert_eq(brk_store_rollout_put(st, &r1), LISA_OK);
    cr_assert_eq(brk_store_meta_set(st, "policy_version", 7), LISA_OK);
    cr_assert_eq(brk_store_commit(st), LISA_OK);
    cr_assert_eq(brk_store_begin(st), LISA_OK);
    Lisa__Rollout r2 = s_rollout("r-2", "run");
    cr_assert_eq(brk_store_rollout_put(st, &r2), LISA_OK);
    brk_store_rollback(st);
    brk_store_close(&st);

    st = brk_store_open(s_dir, false);
    Lisa__Rollout *got = NULL;
    cr_assert_eq(brk_store_rollout_get(st, a, "r-1", &got), LISA_OK);
    cr_assert_eq(brk_store_rollout_get(st, a, "r-2", &got), LISA_NOTFOUND);
    cr_assert_eq(brk_store_meta_get(st, "policy_version", 0), 7);
    cr_assert_eq(brk_store_meta_get(st, "nothing", 99), 99);
    /* a duplicate id is a conflict */
    cr_assert_eq(brk_store_begin(st), LISA_OK);
    cr_assert_eq(brk_store_rollout_put(st, &r1), LISA_CONFLICT);
    brk_store_rollback(st);
    brk_arena_destroy(&a);
    brk_store_close(&st);
}

Test(brk_store, savepoint_undo_keeps_the_rest_of_the_transaction)
{
    brk_store_t *st = brk_store_open(s_dir, true);
    brk_arena_t *a = brk_arena_new();
    cr_assert_eq(brk_store_begin(st), LISA_OK);
    Lisa__Rollout r1 = s_rollout("r-1", "run"), r2 = s_rollout("r-2", "run");
    cr_assert_eq(brk_store_savepoint(st), LISA_OK);
    cr_assert_eq(brk_store_rollout_put(st, &r1), LISA_OK);
    brk_store_savepoint_keep(st);
    cr_assert_eq(brk_store_savepoint(st), LISA_OK);
    cr_assert_eq(brk_store_rollout_put(st, &r2), LISA_OK);
    brk_store_savepoint_undo(st);
    cr_assert_eq(brk_store_commit(st), LISA_OK);
    Lisa__Rollout *got = NULL;
    cr_assert_eq(brk_store_rollout_get(st, a, "r-1", &got), LISA_OK);
    cr_assert_eq(brk_store_rollout_get(st, a, "r-2", &got), LISA_NOTFOUND);
    brk_arena_destroy(&a);
    brk_store_close(&st);
}

static Lisa__Span
s_span(const char *rid, uint32_t seq)
{
    static uint32_t ids[3] = {1, 2, 3};
    static float lp[3] = {-1.0f, -2.0f, -3.0f};
    Lisa__Span s = LISA__SPAN__INIT;
    s.rollout_id = (char *) rid;
    s.attempt = 1;
    s.seq = seq;
    s.prev_seq = (int32_t) seq - 1;
    s.n_appended_ids = 3;
    s.appended_ids = ids;
    s.n_response_ids = 3;
    s.response_ids = ids;
    s.n_response_logprobs = 3;
    s.response_logprobs = lp;
    return s;
}

Test(brk_store, spans_are_idempotent_and_status_finds_gaps)
{
    brk_store_t *st = brk_store_open(s_dir, true);
    brk_arena_t *a = brk_arena_new();
    cr_assert_eq(brk_store_begin(st), LISA_OK);
    uint32_t order[] = {0, 1, 3, 1};
    bool dup = false;
    for (size_t i = 0; i < 4; i++) {
        Lisa__Span s = s_span("r-1", order[i]);
        cr_assert_eq(brk_store_span_put(st, &s, NULL, 0, &dup), LISA_OK);
        cr_assert_eq(dup, i == 3);
    }
    cr_assert_eq(brk_store_commit(st), LISA_OK);
    int32_t contig = 0;
    uint32_t count = 0;
    cr_assert_eq(brk_store_span_status(st, "r-1", 1, &contig, &count), LISA_OK);
    cr_assert_eq(contig, 1);
    cr_assert_eq(count, 3);
    cr_assert_eq(brk_store_span_status(st, "r-9", 1, &contig, &count), LISA_OK);
    cr_assert_eq(contig, -1);
    cr_assert_eq(count, 0);
    Lisa__Span **spans = NULL;
    size_t n = 0;
    cr_assert_eq(brk_store_spans_of(st, a, "r-1", 0, &spans, &n), LISA_OK);
    cr_assert_eq(n, 3);
    cr_assert_eq(spans[2]->seq, 3);
    cr_assert_eq(spans[2]->n_response_logprobs, 3);
    cr_assert_float_eq(spans[2]->response_logprobs[1], -2.0f, 1e-6);
    brk_arena_destroy(&a);
    brk_store_close(&st);
}

Test(brk_store, claimable_respects_backoff_and_order_and_due_finds_leases)
{
    brk_store_t *st = brk_store_open(s_dir, true);
    brk_arena_t *a = brk_arena_new();
    cr_assert_eq(brk_store_begin(st), LISA_OK);
    const char *ids[] = {"r-a", "r-b", "r-c"};
    for (size_t i = 0; i < 3; i++) {
        Lisa__Rollout r = s_rollout(ids[i], i == 2 ? "other" : "run");
        r.created_ms = 100 + i;
        cr_assert_eq(brk_store_rollout_put(st, &r), LISA_OK);
    }
    Lisa__Rollout *ra = NULL;
    cr_assert_eq(brk_store_rollout_get(st, a, "r-a", &ra), LISA_OK);
    cr_assert_eq(brk_store_rollout_update(st, ra, 5000, 0), LISA_OK);
    char **got = NULL;
    size_t n = 0;
    cr_assert_eq(brk_store_claimable(st, a, NULL, 1000, 10, &got, &n), LISA_OK);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(got[0], "r-b");
    cr_assert_eq(brk_store_claimable(st, a, "run", 6000, 10, &got, &n),
                 LISA_OK);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(got[0], "r-a");
    /* r-b runs with a lease ending at 2000 and a deadline at 9000 */
    Lisa__Rollout *rb = NULL;
    cr_assert_eq(brk_store_rollout_get(st, a, "r-b", &rb), LISA_OK);
    rb->state = LISA__ROLLOUT_STATE__ROLLOUT_RUNNING;
    rb->deadline_ms = 9000;
    cr_assert_eq(brk_store_rollout_update(st, rb, 0, 2000), LISA_OK);
    cr_assert_eq(brk_store_due(st, a, 1999, 10, &got, &n), LISA_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(brk_store_due(st, a, 2000, 10, &got, &n), LISA_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(brk_store_extend_leases(st, 5000), LISA_OK);
    cr_assert_eq(brk_store_due(st, a, 4000, 10, &got, &n), LISA_OK);
    cr_assert_eq(n, 0);
    Lisa__Stats stats = LISA__STATS__INIT;
    cr_assert_eq(brk_store_counts(st, "run", &stats), LISA_OK);
    cr_assert_eq(stats.queued, 1);
    cr_assert_eq(stats.running, 1);
    cr_assert_eq(brk_store_commit(st), LISA_OK);
    brk_arena_destroy(&a);
    brk_store_close(&st);
}

Test(brk_store, list_pages_and_prune_removes_everything)
{
    brk_store_t *st = brk_store_open(s_dir, true);
    brk_arena_t *a = brk_arena_new();
    cr_assert_eq(brk_store_begin(st), LISA_OK);
    char id[16];
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof id, "r-%d", i);
        Lisa__Rollout r = s_rollout(id, "run");
        r.state = LISA__ROLLOUT_STATE__ROLLOUT_SUCCEEDED;
        cr_assert_eq(brk_store_rollout_put(st, &r), LISA_OK);
        Lisa__Span s = s_span(id, 0);
        bool dup;
        cr_assert_eq(brk_store_span_put(st, &s, NULL, 0, &dup), LISA_OK);
        cr_assert_eq(brk_store_transition(st, id, 1, 4, 5, "scored", "", 1),
                     LISA_OK);
    }
    Lisa__Rollout **rs = NULL;
    size_t n = 0;
    char *next = NULL;
    cr_assert_eq(
        brk_store_list(st, a, "run", false, 0, 0, true, "", 2, &rs, &n, &next),
        LISA_OK);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(next, "r-1");
    cr_assert_eq(brk_store_list(st, a, "run", false, 0, 0, true, next, 10, &rs,
                                &n, &next),
                 LISA_OK);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(next, "");
    cr_assert_eq(brk_store_prune(st, "r-0"), LISA_OK);
    cr_assert_eq(brk_store_prune(st, "r-0"), LISA_NOTFOUND);
    Lisa__Transition **tr = NULL;
    cr_assert_eq(brk_store_transitions_of(st, a, "r-0", &tr, &n), LISA_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(brk_store_transitions_of(st, a, "r-1", &tr, &n), LISA_OK);
    cr_assert_eq(n, 1);
    cr_assert_str_eq(tr[0]->event, "scored");
    Lisa__Stats stats = LISA__STATS__INIT;
    cr_assert_eq(brk_store_counts(st, NULL, &stats), LISA_OK);
    cr_assert_eq(stats.succeeded, 4);
    cr_assert_eq(stats.spans, 4);
    cr_assert_eq(brk_store_commit(st), LISA_OK);
    brk_arena_destroy(&a);
    brk_store_close(&st);
}

Test(brk_store, a_newer_schema_is_refused)
{
    brk_store_t *st = brk_store_open(s_dir, true);
    brk_store_close(&st);
    char path[300];
    snprintf(path, sizeof path, "%s/broker.db", s_dir);
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(db);
    cr_assert_null(brk_store_open(s_dir, true));
}

Test(brk_store, idempotency_records)
{
    brk_store_t *st = brk_store_open(s_dir, true);
    brk_arena_t *a = brk_arena_new();
    uint8_t *data = NULL;
    size_t len = 0;
    cr_assert_eq(brk_store_idem_get(st, a, "k", &data, &len), LISA_NOTFOUND);
    cr_assert_eq(brk_store_begin(st), LISA_OK);
    cr_assert_eq(brk_store_idem_put(st, "k", (const uint8_t *) "abc", 3, 1),
                 LISA_OK);
    cr_assert_eq(brk_store_idem_put(st, "k", (const uint8_t *) "xyz", 3, 2),
                 LISA_OK);
    cr_assert_eq(brk_store_commit(st), LISA_OK);
    cr_assert_eq(brk_store_idem_get(st, a, "k", &data, &len), LISA_OK);
    cr_assert_eq(len, 3);
    cr_assert_eq(memcmp(data, "abc", 3), 0);
    brk_arena_destroy(&a);
    brk_store_close(&st);
}
