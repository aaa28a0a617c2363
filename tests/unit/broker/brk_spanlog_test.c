/*
 * brk_spanlog tests on real segment files in a temporary directory, and
 * the store's recovery of span rows against a torn log. The first test
 * is the usage example.
 */
#include "brk_spanlog.h"
#include "brk_store.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_dir[256];

static void
s_setup(void)
{
    snprintf(s_dir, sizeof s_dir, "/tmp/brk_spanlog_test_XXXXXX");
    cr_assert_not_null(mkdtemp(s_dir));
}

static void
s_teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

static void
s_seg_path(uint32_t seg, char *out, size_t cap)
{
    snprintf(out, cap, "%s/spans/%08x.log", s_dir, seg);
}

static off_t
s_size(uint32_t seg)
{
    char p[300];
    s_seg_path(seg, p, sizeof p);
    struct stat st;
    return stat(p, &st) == 0 ? st.st_size : -1;
}

static void
s_append_raw(uint32_t seg, const void *data, size_t n)
{
    char p[300];
    s_seg_path(seg, p, sizeof p);
    int fd = open(p, O_WRONLY | O_APPEND);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, data, n), (ssize_t) n);
    close(fd);
}

TestSuite(brk_spanlog, .init = s_setup, .fini = s_teardown);

Test(brk_spanlog, usage)
{
    /* Open, write a record, keep it, flush and sync, read it back. */
    brk_spanlog_t *log = brk_spanlog_open(s_dir, 1 << 20, true);
    cr_assert_not_null(log);
    const uint8_t data[] = "token ids and logprobs";
    brk_spanlog_ref_t ref;
    cr_assert_eq(brk_spanlog_write(log, data, sizeof data, &ref), LISA_OK);
    brk_spanlog_keep(log, &ref);
    cr_assert_eq(brk_spanlog_flush(log), LISA_OK);
    cr_assert_eq(brk_spanlog_sync(log), LISA_OK);
    cr_assert_eq(s_size(1), (off_t) (BRK_SPANLOG_HEADER + sizeof data));
    uint8_t back[sizeof data];
    cr_assert_eq(brk_spanlog_read(log, &ref, back), LISA_OK);
    cr_assert_arr_eq(back, data, sizeof data);
    cr_assert_eq(brk_spanlog_end(log), BRK_SPANLOG_HEADER + sizeof data);
    brk_spanlog_close(&log);
    cr_assert_null(log);
}

Test(brk_spanlog, crc32c_matches_the_standard_check_value)
{
    /* CRC-32C of "123456789" is 0xE3069283 (RFC 3720, appendix B.4). */
    cr_assert_eq(brk_spanlog_crc32c(0, "123456789", 9), 0xE3069283u);
    /* 32 zero bytes: 0x8A9136AA (RFC 3720 B.4). */
    uint8_t z[32] = {0};
    cr_assert_eq(brk_spanlog_crc32c(0, z, sizeof z), 0x8A9136AAu);
    /* split computation gives the same value */
    cr_assert_eq(
        brk_spanlog_crc32c(brk_spanlog_crc32c(0, "12345", 5), "6789", 4),
        0xE3069283u);
}

Test(brk_spanlog, unkept_record_is_overwritten)
{
    brk_spanlog_t *log = brk_spanlog_open(s_dir, 1 << 20, false);
    brk_spanlog_ref_t a, b;
    cr_assert_eq(brk_spanlog_write(log, (const uint8_t *) "dup", 3, &a),
                 LISA_OK);
    cr_assert_eq(brk_spanlog_write(log, (const uint8_t *) "new!", 4, &b),
                 LISA_OK);
    cr_assert_eq(a.offset, b.offset);
    brk_spanlog_keep(log, &b);
    uint8_t buf[4];
    cr_assert_eq(brk_spanlog_read(log, &b, buf), LISA_OK);
    cr_assert_arr_eq(buf, "new!", 4);
    brk_spanlog_close(&log);
}

Test(brk_spanlog, torn_tail_is_cut_at_open)
{
    brk_spanlog_t *log = brk_spanlog_open(s_dir, 1 << 20, true);
    brk_spanlog_ref_t refs[3];
    for (int i = 0; i < 3; i++) {
        uint8_t rec[100];
        memset(rec, 'a' + i, sizeof rec);
        cr_assert_eq(brk_spanlog_write(log, rec, sizeof rec, &refs[i]),
                     LISA_OK);
        brk_spanlog_keep(log, &refs[i]);
    }
    uint64_t end = brk_spanlog_end(log);
    brk_spanlog_close(&log);

    /* a header promising more bytes than follow (a write cut short) */
    const uint8_t torn[] = {0x4e, 0x50, 0x53, 0x4c, 200, 0,   0,
                            0,    1,    2,    3,    4,   'x', 'y'};
    s_append_raw(1, torn, sizeof torn);
    log = brk_spanlog_open(s_dir, 1 << 20, true);
    cr_assert_not_null(log);
    cr_assert_eq(brk_spanlog_truncated(log), sizeof torn);
    cr_assert_eq(brk_spanlog_end(log), end);
    cr_assert_eq(s_size(1), (off_t) end);
    brk_spanlog_close(&log);

    /* a whole record whose checksum does not match: cut as well */
    uint8_t bad[BRK_SPANLOG_HEADER + 4] = {
        0x4e, 0x50, 0x53, 0x4c, 4, 0, 0, 0, 9, 9, 9, 9, 'a', 'b', 'c', 'd'};
    s_append_raw(1, bad, sizeof bad);
    log = brk_spanlog_open(s_dir, 1 << 20, true);
    cr_assert_eq(brk_spanlog_truncated(log), sizeof bad);
    cr_assert_eq(brk_spanlog_end(log), end);

    /* the records before the tear are intact, and writing goes on */
    uint8_t buf[100];
    cr_assert_eq(brk_spanlog_read(log, &refs[2], buf), LISA_OK);
    cr_assert_eq(buf[0], 'c');
    brk_spanlog_ref_t r;
    cr_assert_eq(brk_spanlog_write(log, (const uint8_t *) "next", 4, &r),
                 LISA_OK);
    cr_assert_eq(r.offset, end);
    brk_spanlog_keep(log, &r);
    brk_spanlog_close(&log);
}

Test(brk_spanlog, damaged_record_is_refused_on_read)
{
    brk_spanlog_t *log = brk_spanlog_open(s_dir, 1 << 20, false);
    brk_spanlog_ref_t r;
    cr_assert_eq(brk_spanlog_write(log, (const uint8_t *) "abcdef", 6, &r),
                 LISA_OK);
    brk_spanlog_keep(log, &r);
    cr_assert_eq(brk_spanlog_flush(log), LISA_OK);
    char p[300];
    s_seg_path(1, p, sizeof p);
    int fd = open(p, O_WRONLY);
    cr_assert_eq(pwrite(fd, "Z", 1, BRK_SPANLOG_HEADER + 2), 1);
    close(fd);
    uint8_t buf[6];
    cr_assert_eq(brk_spanlog_read(log, &r, buf), LISA_ERR);
    brk_spanlog_close(&log);
}

Test(brk_spanlog, buffered_records_read_back_and_discard_drops_them)
{
    brk_spanlog_t *log = brk_spanlog_open(s_dir, 1 << 20, false);
    brk_spanlog_ref_t a, b;
    cr_assert_eq(brk_spanlog_write(log, (const uint8_t *) "first", 5, &a),
                 LISA_OK);
    brk_spanlog_keep(log, &a);
    cr_assert_eq(brk_spanlog_flush(log), LISA_OK);
    cr_assert_eq(brk_spanlog_write(log, (const uint8_t *) "second", 6, &b),
                 LISA_OK);
    brk_spanlog_keep(log, &b);
    uint8_t buf[6];
    cr_assert_eq(brk_spanlog_read(log, &b, buf), LISA_OK); /* from memory */
    cr_assert_arr_eq(buf, "second", 6);
    cr_assert_eq(s_size(1), (off_t) (BRK_SPANLOG_HEADER + 5));
    brk_spanlog_discard(log); /* its transaction rolled back */
    cr_assert_eq(brk_spanlog_end(log), BRK_SPANLOG_HEADER + 5);
    cr_assert_eq(brk_spanlog_read(log, &b, buf), LISA_ERR);
    brk_spanlog_close(&log);
    cr_assert_eq(s_size(1), (off_t) (BRK_SPANLOG_HEADER + 5));
}

/* Deferred writes: a flush hands records over, the sync writes them. */
Test(brk_spanlog, deferred_records_reach_the_file_at_sync)
{
    brk_spanlog_t *log = brk_spanlog_open(s_dir, 1 << 20, true);
    brk_spanlog_defer(log, true);
    brk_spanlog_ref_t a, b, c;
    cr_assert_eq(brk_spanlog_write(log, (const uint8_t *) "first", 5, &a),
                 LISA_OK);
    brk_spanlog_keep(log, &a);
    cr_assert_eq(brk_spanlog_flush(log), LISA_OK);
    cr_assert_eq(brk_spanlog_write(log, (const uint8_t *) "second", 6, &b),
                 LISA_OK);
    brk_spanlog_keep(log, &b);
    cr_assert_eq(brk_spanlog_flush(log), LISA_OK);
    cr_assert_eq(s_size(1), 0); /* handed over, not written */
    cr_assert_eq(brk_spanlog_sync(log), LISA_OK);
    cr_assert_eq(s_size(1), (off_t) (2 * BRK_SPANLOG_HEADER + 11));
    /* a record handed over and not synced yet still reads back */
    cr_assert_eq(brk_spanlog_write(log, (const uint8_t *) "third", 5, &c),
                 LISA_OK);
    brk_spanlog_keep(log, &c);
    cr_assert_eq(brk_spanlog_flush(log), LISA_OK);
    uint8_t buf[8];
    cr_assert_eq(brk_spanlog_read(log, &c, buf), LISA_OK);
    cr_assert_arr_eq(buf, "third", 5);
    cr_assert_eq(brk_spanlog_read(log, &a, buf), LISA_OK);
    cr_assert_arr_eq(buf, "first", 5);
    brk_spanlog_close(&log);
    log = brk_spanlog_open(s_dir, 1 << 20, true);
    cr_assert_eq(brk_spanlog_end(log), 3 * BRK_SPANLOG_HEADER + 16);
    cr_assert_eq(brk_spanlog_truncated(log), 0);
    brk_spanlog_close(&log);
}

typedef struct {
    brk_spanlog_t *log;
    volatile int stop;
    int failures;
} s_syncer_arg_t;

static void *
s_sync_loop(void *p)
{
    s_syncer_arg_t *a = p;
    while (!a->stop)
        if (brk_spanlog_sync(a->log) != LISA_OK)
            a->failures++;
    return NULL;
}

/* A thread syncing all the time while the writer flushes and seals small
 * segments: every record is in its segment, whole, after close. */
Test(brk_spanlog, deferred_writes_with_a_concurrent_syncer)
{
    brk_spanlog_t *log = brk_spanlog_open(s_dir, 64 << 10, true);
    brk_spanlog_defer(log, true);
    s_syncer_arg_t arg = {log, 0, 0};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, s_sync_loop, &arg), 0);
    enum { N = 600 };
    static brk_spanlog_ref_t refs[N];
    uint8_t rec[1000];
    for (int i = 0; i < N; i++) {
        memset(rec, (int) (i & 0xff), sizeof rec);
        size_t len = 100 + (size_t) (i * 7) % 900;
        cr_assert_eq(brk_spanlog_write(log, rec, len, &refs[i]), LISA_OK);
        brk_spanlog_keep(log, &refs[i]);
        if (i % 3 == 2)
            cr_assert_eq(brk_spanlog_flush(log), LISA_OK);
        if (i % 50 == 49) {
            /* read back a record a few flushes old */
            uint8_t got[1000];
            const brk_spanlog_ref_t *r = &refs[i - 10];
            cr_assert_eq(brk_spanlog_read(log, r, got), LISA_OK);
            cr_assert_eq(got[0], (uint8_t) ((i - 10) & 0xff));
        }
    }
    arg.stop = 1;
    pthread_join(t, NULL);
    cr_assert_eq(arg.failures, 0);
    cr_assert_gt(brk_spanlog_segment(log), 3);
    brk_spanlog_close(&log);
    log = brk_spanlog_open(s_dir, 64 << 10, true);
    cr_assert_eq(brk_spanlog_truncated(log), 0);
    for (int i = 0; i < N; i++) {
        uint8_t got[1000];
        cr_assert_eq(brk_spanlog_read(log, &refs[i], got), LISA_OK, "rec %d",
                     i);
        cr_assert_eq(got[refs[i].len - 1], (uint8_t) (i & 0xff));
    }
    brk_spanlog_close(&log);
}

static bool
s_only_two(uint32_t seg, void *arg)
{
    (void) arg;
    return seg == 2;
}

Test(brk_spanlog, segments_rotate_and_dead_ones_are_dropped)
{
    brk_spanlog_t *log = brk_spanlog_open(s_dir, 256, true);
    brk_spanlog_ref_t r;
    uint8_t rec[100] = {0};
    for (int i = 0; i < 8; i++) {
        rec[0] = (uint8_t) i;
        cr_assert_eq(brk_spanlog_write(log, rec, sizeof rec, &r), LISA_OK);
        brk_spanlog_keep(log, &r);
    }
    /* two 112-byte records per 256-byte segment: 4 segments */
    cr_assert_eq(brk_spanlog_segment(log), 4);
    cr_assert_eq(s_size(1), 224);
    /* a record larger than the bound gets a segment of its own */
    uint8_t big[600] = {0};
    cr_assert_eq(brk_spanlog_write(log, big, sizeof big, &r), LISA_OK);
    brk_spanlog_keep(log, &r);
    cr_assert_eq(r.segment, 5);
    cr_assert_eq(brk_spanlog_flush(log), LISA_OK);
    /* segments 1, 3 and 4 hold nothing live; the current one stays */
    cr_assert_eq(brk_spanlog_drop(log, s_only_two, NULL), 3);
    cr_assert_eq(s_size(1), -1);
    cr_assert_eq(s_size(2), 224);
    cr_assert_eq(s_size(3), -1);
    cr_assert_eq(s_size(5), 600 + BRK_SPANLOG_HEADER);
    brk_spanlog_close(&log);
    /* reopening continues the last segment */
    log = brk_spanlog_open(s_dir, 256, true);
    cr_assert_eq(brk_spanlog_segment(log), 5);
    cr_assert_eq(brk_spanlog_end(log), 600 + BRK_SPANLOG_HEADER);
    brk_spanlog_close(&log);
}

static Lisa__Span
s_span(const char *rid, uint32_t seq, uint32_t *ids, float *lp, size_t n)
{
    Lisa__Span s = LISA__SPAN__INIT;
    s.rollout_id = (char *) rid;
    s.attempt = 1;
    s.seq = seq;
    s.prev_seq = (int32_t) seq - 1;
    s.n_response_ids = n;
    s.response_ids = ids;
    s.n_response_logprobs = n;
    s.response_logprobs = lp;
    return s;
}

Test(brk_spanlog, store_drops_rows_past_a_torn_log_end)
{
    /* Rows whose record was cut from the log (never fsynced, so never
     * acknowledged) are dropped at open; the rest read back whole. */
    brk_store_t *st = brk_store_open(s_dir, true);
    cr_assert_not_null(st);
    uint32_t ids[50];
    float lp[50];
    for (int i = 0; i < 50; i++) {
        ids[i] = (uint32_t) i * 7;
        lp[i] = -0.25f * (float) i;
    }
    cr_assert_eq(brk_store_begin(st), LISA_OK);
    for (uint32_t seq = 0; seq < 4; seq++) {
        Lisa__Span s = s_span("r-1", seq, ids, lp, 50);
        bool dup = true;
        cr_assert_eq(brk_store_span_put(st, &s, NULL, 0, &dup), LISA_OK);
        cr_assert_not(dup);
    }
    /* idempotent on (rollout, attempt, seq) */
    Lisa__Span again = s_span("r-1", 2, ids, lp, 10);
    bool dup = false;
    cr_assert_eq(brk_store_span_put(st, &again, NULL, 0, &dup), LISA_OK);
    cr_assert(dup);
    cr_assert_eq(brk_store_commit(st), LISA_OK);
    cr_assert_eq(brk_store_sync(st), LISA_OK);
    brk_store_close(&st);

    /* cut the last record in half, as a power cut before its fsync would */
    off_t size = s_size(1);
    char p[300];
    s_seg_path(1, p, sizeof p);
    cr_assert_eq(truncate(p, size - 100), 0);

    st = brk_store_open(s_dir, true);
    cr_assert_not_null(st);
    brk_arena_t *a = brk_arena_new();
    Lisa__Span **out = NULL;
    size_t n = 0;
    cr_assert_eq(brk_store_spans_of(st, a, "r-1", 0, &out, &n), LISA_OK);
    cr_assert_eq(n, 3);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(out[i]->seq, i);
        cr_assert_eq(out[i]->n_response_ids, 50);
        cr_assert_eq(out[i]->response_ids[49], 49 * 7);
        cr_assert_float_eq(out[i]->response_logprobs[3], -0.75f, 1e-6);
    }
    int32_t contiguous = 0;
    uint32_t count = 0;
    cr_assert_eq(brk_store_span_status(st, "r-1", 1, &contiguous, &count),
                 LISA_OK);
    cr_assert_eq(contiguous, 2);
    cr_assert_eq(count, 3);
    /* the lost span can be sent again */
    cr_assert_eq(brk_store_begin(st), LISA_OK);
    Lisa__Span s3 = s_span("r-1", 3, ids, lp, 50);
    cr_assert_eq(brk_store_span_put(st, &s3, NULL, 0, &dup), LISA_OK);
    cr_assert_not(dup);
    cr_assert_eq(brk_store_commit(st), LISA_OK);
    brk_arena_reset(a);
    cr_assert_eq(brk_store_spans_of(st, a, "r-1", 1, &out, &n), LISA_OK);
    cr_assert_eq(n, 4);
    brk_arena_destroy(&a);
    brk_store_close(&st);
}

Test(brk_spanlog, spans_stored_before_the_log_still_read_back)
{
    /* A schema-2 file kept span bytes in the table; after the migration
     * they read back as before, next to spans in the log. */
    Lisa__Span old = s_span("r-old", 0, NULL, NULL, 0);
    old.n_appended_ids = 0;
    uint8_t buf[256];
    size_t n = lisa__span__pack(&old, buf);
    char path[300];
    snprintf(path, sizeof path, "%s/broker.db", s_dir);
    sqlite3 *db = NULL;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db,
                              "CREATE TABLE spans(rollout_id TEXT NOT NULL,"
                              " attempt INTEGER NOT NULL, seq INTEGER NOT NULL,"
                              " body BLOB NOT NULL,"
                              " UNIQUE(rollout_id, attempt, seq));"
                              "PRAGMA user_version = 2;",
                              NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_stmt *st = NULL;
    cr_assert_eq(
        sqlite3_prepare_v2(db, "INSERT INTO spans VALUES('r-old', 1, 0, ?)", -1,
                           &st, NULL),
        SQLITE_OK);
    sqlite3_bind_blob(st, 1, buf, (int) n, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);

    brk_store_t *store = brk_store_open(s_dir, true);
    cr_assert_not_null(store);
    cr_assert_eq(brk_store_schema(store), BRK_STORE_SCHEMA);
    cr_assert_eq(brk_store_begin(store), LISA_OK);
    uint32_t ids[3] = {7, 8, 9};
    float lp[3] = {-1, -2, -3};
    Lisa__Span s1 = s_span("r-old", 1, ids, lp, 3);
    bool dup = true;
    cr_assert_eq(brk_store_span_put(store, &s1, NULL, 0, &dup), LISA_OK);
    cr_assert_not(dup);
    /* the old span's key still makes a repeat a duplicate */
    cr_assert_eq(brk_store_span_put(store, &old, NULL, 0, &dup), LISA_OK);
    cr_assert(dup);
    cr_assert_eq(brk_store_commit(store), LISA_OK);
    brk_arena_t *a = brk_arena_new();
    Lisa__Span **out = NULL;
    size_t k = 0;
    cr_assert_eq(brk_store_spans_of(store, a, "r-old", 0, &out, &k), LISA_OK);
    cr_assert_eq(k, 2);
    cr_assert_eq(out[0]->seq, 0);
    cr_assert_eq(out[0]->n_response_ids, 0);
    cr_assert_eq(out[1]->seq, 1);
    cr_assert_eq(out[1]->response_ids[2], 9);
    brk_arena_destroy(&a);
    brk_store_close(&store);
}
