/*
 * brk_store: SQLite schema, migrations and the statements the broker runs.
 *
 * Layout. `groups` holds each prompt's task once (packed TaskSpec, ground
 * truth included); `rollouts` one row per sampled rollout with its current
 * state, the current attempt's lease and deadline, and the retry gate
 * (not_before_ms); `attempts` one row per attempt; `spans` the token
 * record of every chat call, keyed by (rollout, attempt, seq) so a repeated
 * push is a no-op; `transitions` the append-only history of every state
 * change; `idempotency` the first reply of keyed requests; `meta` a few
 * counters (policy version, event sequence).
 *
 * Prepared statements are cached by their index in s_sql; the broker runs
 * the same few statements millions of times.
 */
#include "brk_store.h"

#include "brk_spanlog.h"
#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* One entry per schema version: migration i moves user_version i to i+1. */
static const char *const s_migrations[] = {
    /* 0 -> 1: the core tables. */
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "CREATE TABLE groups(group_id TEXT PRIMARY KEY, run_id TEXT NOT NULL,"
    " step INTEGER NOT NULL, task BLOB NOT NULL);"
    "CREATE TABLE rollouts(rollout_id TEXT PRIMARY KEY,"
    " group_id TEXT NOT NULL, run_id TEXT NOT NULL, step INTEGER NOT NULL,"
    " policy_version INTEGER NOT NULL, mode INTEGER NOT NULL,"
    " state INTEGER NOT NULL, failure_kind INTEGER NOT NULL,"
    " reason TEXT NOT NULL, attempts INTEGER NOT NULL,"
    " max_attempts INTEGER NOT NULL, created_ms INTEGER NOT NULL,"
    " deadline_ms INTEGER NOT NULL, ended_ms INTEGER NOT NULL,"
    " reward BLOB, task_id TEXT NOT NULL, data_source TEXT NOT NULL,"
    " index_in_group INTEGER NOT NULL, not_before_ms INTEGER NOT NULL,"
    " lease_ms INTEGER NOT NULL);"
    "CREATE INDEX rollouts_state ON rollouts(state, not_before_ms);"
    "CREATE INDEX rollouts_run ON rollouts(run_id, step);"
    "CREATE TABLE attempts(rollout_id TEXT NOT NULL, attempt INTEGER NOT NULL,"
    " state INTEGER NOT NULL, failure_kind INTEGER NOT NULL,"
    " reason TEXT NOT NULL, sandbox_id TEXT NOT NULL,"
    " controller_id TEXT NOT NULL, claimed_ms INTEGER NOT NULL,"
    " started_ms INTEGER NOT NULL, ended_ms INTEGER NOT NULL,"
    " lease_expiry_ms INTEGER NOT NULL, deadline_ms INTEGER NOT NULL,"
    " result BLOB, expected_spans INTEGER NOT NULL,"
    " PRIMARY KEY(rollout_id, attempt));"
    "CREATE TABLE spans(rollout_id TEXT NOT NULL, attempt INTEGER NOT NULL,"
    " seq INTEGER NOT NULL, body BLOB NOT NULL,"
    " UNIQUE(rollout_id, attempt, seq));"
    "CREATE TABLE transitions(id INTEGER PRIMARY KEY,"
    " rollout_id TEXT NOT NULL, attempt INTEGER NOT NULL,"
    " from_state INTEGER NOT NULL, to_state INTEGER NOT NULL,"
    " event TEXT NOT NULL, reason TEXT NOT NULL, time_ms INTEGER NOT NULL);",
    /* 1 -> 2: idempotent enqueue and per-rollout history lookups. */
    "CREATE TABLE idempotency(key TEXT PRIMARY KEY, reply BLOB NOT NULL,"
    " created_ms INTEGER NOT NULL);"
    "CREATE INDEX transitions_rollout ON transitions(rollout_id, id);",
    /* 2 -> 3: span bytes move to the span log (brk_spanlog); a row keeps
     * where its record is (segment, offset of the record, payload length)
     * in a table clustered on the key, one b-tree per insert. Rows from
     * before keep their bytes in `body` (segment NULL); new rows have no
     * body. */
    "CREATE TABLE spans3(rollout_id TEXT NOT NULL, attempt INTEGER NOT NULL,"
    " seq INTEGER NOT NULL, segment INTEGER, off INTEGER, len INTEGER,"
    " body BLOB, PRIMARY KEY(rollout_id, attempt, seq)) WITHOUT ROWID;"
    "INSERT INTO spans3(rollout_id, attempt, seq, body)"
    " SELECT rollout_id, attempt, seq, body FROM spans;"
    "DROP TABLE spans;"
    "ALTER TABLE spans3 RENAME TO spans;",
};

#define S_ROLLOUT_COLS                                                         \
    "rollout_id, group_id, run_id, step, policy_version, mode, state,"         \
    " failure_kind, reason, attempts, max_attempts, created_ms, deadline_ms,"  \
    " ended_ms, reward, task_id, data_source, index_in_group"
#define S_ATTEMPT_COLS                                                         \
    "a.rollout_id, a.attempt, a.state, a.failure_kind, a.reason,"              \
    " a.sandbox_id, a.controller_id, a.claimed_ms, a.started_ms,"              \
    " a.ended_ms, a.lease_expiry_ms, a.deadline_ms, a.result,"                 \
    " (SELECT COUNT(*) FROM spans s WHERE s.rollout_id = a.rollout_id"         \
    "  AND s.attempt = a.attempt)"

enum {
    Q_META_GET,
    Q_META_SET,
    Q_GROUP_PUT,
    Q_GROUP_GET,
    Q_ROLLOUT_PUT,
    Q_ROLLOUT_UPDATE,
    Q_ROLLOUT_GET,
    Q_ATTEMPT_PUT,
    Q_ATTEMPT_GET,
    Q_ATTEMPTS_OF,
    Q_TRANSITION_PUT,
    Q_TRANSITIONS_OF,
    Q_SPAN_PUT,
    Q_SPAN_SEQS,
    Q_SPANS_OF,
    Q_SPANS_OF_ATTEMPT,
    Q_SPAN_SEGMENTS,
    Q_SPAN_RECOVER,
    Q_CLAIMABLE,
    Q_CLAIMABLE_RUN,
    Q_DUE,
    Q_IN_STATE,
    Q_IN_STATE_RUN,
    Q_OPEN_OF_RUN,
    Q_COUNTS,
    Q_COUNTS_RUN,
    Q_SPAN_COUNT,
    Q_DEL_SPANS,
    Q_DEL_ATTEMPTS,
    Q_DEL_TRANSITIONS,
    Q_DEL_ROLLOUT,
    Q_DEL_GROUP,
    Q_IDEM_GET,
    Q_IDEM_PUT,
    Q_EXTEND_LEASES,
    Q__COUNT
};

static const char *const s_sql[Q__COUNT] = {
    [Q_META_GET] = "SELECT value FROM meta WHERE key = ?1",
    [Q_META_SET] = "INSERT INTO meta(key, value) VALUES(?1, ?2)"
                   " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
    [Q_GROUP_PUT] = "INSERT OR IGNORE INTO groups(group_id, run_id, step, task)"
                    " VALUES(?1, ?2, ?3, ?4)",
    [Q_GROUP_GET] = "SELECT task FROM groups WHERE group_id = ?1",
    [Q_ROLLOUT_PUT] =
        "INSERT INTO rollouts(" S_ROLLOUT_COLS ", not_before_ms, lease_ms)"
        " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
        " ?15, ?16, ?17, ?18, ?19, ?20)",
    [Q_ROLLOUT_UPDATE] =
        "UPDATE rollouts SET state = ?2, failure_kind = ?3, reason = ?4,"
        " attempts = ?5, deadline_ms = ?6, ended_ms = ?7, reward = ?8,"
        " not_before_ms = ?9, lease_ms = ?10 WHERE rollout_id = ?1",
    [Q_ROLLOUT_GET] =
        "SELECT " S_ROLLOUT_COLS " FROM rollouts WHERE rollout_id = ?1",
    [Q_ATTEMPT_PUT] =
        "INSERT INTO attempts(rollout_id, attempt, state,"
        " failure_kind, reason, sandbox_id, controller_id, claimed_ms,"
        " started_ms, ended_ms, lease_expiry_ms, deadline_ms, result,"
        " expected_spans) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,"
        " ?11, ?12, ?13, ?14) ON CONFLICT(rollout_id, attempt) DO UPDATE SET"
        " state = excluded.state, failure_kind = excluded.failure_kind,"
        " reason = excluded.reason, sandbox_id = excluded.sandbox_id,"
        " controller_id = excluded.controller_id,"
        " claimed_ms = excluded.claimed_ms, started_ms = excluded.started_ms,"
        " ended_ms = excluded.ended_ms,"
        " lease_expiry_ms = excluded.lease_expiry_ms,"
        " deadline_ms = excluded.deadline_ms, result = excluded.result,"
        " expected_spans = MAX(expected_spans, excluded.expected_spans)",
    [Q_ATTEMPT_GET] = "SELECT " S_ATTEMPT_COLS " FROM attempts a"
                      " WHERE a.rollout_id = ?1 AND a.attempt = ?2",
    [Q_ATTEMPTS_OF] = "SELECT " S_ATTEMPT_COLS " FROM attempts a"
                      " WHERE a.rollout_id = ?1 ORDER BY a.attempt",
    [Q_TRANSITION_PUT] =
        "INSERT INTO transitions(rollout_id, attempt, from_state, to_state,"
        " event, reason, time_ms) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [Q_TRANSITIONS_OF] =
        "SELECT rollout_id, attempt, from_state, to_state, event, reason,"
        " time_ms FROM transitions WHERE rollout_id = ?1 ORDER BY id",
    [Q_SPAN_PUT] = "INSERT OR IGNORE INTO spans(rollout_id, attempt, seq,"
                   " segment, off, len) VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
    [Q_SPAN_SEQS] = "SELECT seq FROM spans WHERE rollout_id = ?1"
                    " AND attempt = ?2 ORDER BY seq",
    [Q_SPANS_OF] = "SELECT body, segment, off, len FROM spans"
                   " WHERE rollout_id = ?1 ORDER BY attempt, seq",
    [Q_SPANS_OF_ATTEMPT] = "SELECT body, segment, off, len FROM spans"
                           " WHERE rollout_id = ?1 AND attempt = ?2"
                           " ORDER BY seq",
    [Q_SPAN_SEGMENTS] = "SELECT DISTINCT segment FROM spans"
                        " WHERE segment IS NOT NULL",
    [Q_SPAN_RECOVER] = "DELETE FROM spans WHERE segment > ?1"
                       " OR (segment = ?1 AND off + 12 + len > ?2)",
    [Q_CLAIMABLE] = "SELECT rollout_id FROM rollouts WHERE state = 1"
                    " AND not_before_ms <= ?1 ORDER BY created_ms, rowid"
                    " LIMIT ?2",
    [Q_CLAIMABLE_RUN] = "SELECT rollout_id FROM rollouts WHERE state = 1"
                        " AND not_before_ms <= ?1 AND run_id = ?3"
                        " ORDER BY created_ms, rowid LIMIT ?2",
    [Q_DUE] = "SELECT rollout_id FROM rollouts WHERE state IN (2, 3, 4)"
              " AND (deadline_ms <= ?1 OR (state IN (2, 3) AND lease_ms <= ?1))"
              " LIMIT ?2",
    [Q_IN_STATE] = "SELECT rollout_id FROM rollouts WHERE state = ?1",
    [Q_IN_STATE_RUN] =
        "SELECT rollout_id FROM rollouts WHERE state = ?1 AND run_id = ?2",
    [Q_OPEN_OF_RUN] = "SELECT rollout_id FROM rollouts WHERE run_id = ?1"
                      " AND state IN (1, 2, 3, 4)",
    [Q_COUNTS] = "SELECT state, COUNT(*) FROM rollouts GROUP BY state",
    [Q_COUNTS_RUN] = "SELECT state, COUNT(*) FROM rollouts WHERE run_id = ?1"
                     " GROUP BY state",
    [Q_SPAN_COUNT] = "SELECT COUNT(*) FROM spans",
    [Q_DEL_SPANS] = "DELETE FROM spans WHERE rollout_id = ?1",
    [Q_DEL_ATTEMPTS] = "DELETE FROM attempts WHERE rollout_id = ?1",
    [Q_DEL_TRANSITIONS] = "DELETE FROM transitions WHERE rollout_id = ?1",
    [Q_DEL_ROLLOUT] = "DELETE FROM rollouts WHERE rollout_id = ?1",
    [Q_DEL_GROUP] = "DELETE FROM groups WHERE group_id = ?1 AND NOT EXISTS"
                    " (SELECT 1 FROM rollouts WHERE group_id = ?1)",
    [Q_IDEM_GET] = "SELECT reply FROM idempotency WHERE key = ?1",
    [Q_EXTEND_LEASES] =
        "UPDATE rollouts SET lease_ms = ?1 WHERE state IN (2, 3)"
        " AND lease_ms < ?1",
    [Q_IDEM_PUT] = "INSERT OR IGNORE INTO idempotency(key, reply, created_ms)"
                   " VALUES(?1, ?2, ?3)",
};

struct brk_store_t {
    sqlite3 *db;
    sqlite3_stmt *stmt[Q__COUNT];
    bool in_txn;
    uint64_t commits;
    int schema;
    sqlite3_stmt *sp_begin, *sp_keep, *sp_undo;
    /* Stored spans, kept here because COUNT(*) over a big table is slow:
     * span_total is committed, span_delta is the open transaction's change,
     * span_mark the delta when the current savepoint began. */
    uint64_t span_total;
    int64_t span_delta;
    int64_t span_mark;
    /* the checkpointer thread and its own connection */
    pthread_t ckpt_thread;
    bool ckpt_running;
    pthread_mutex_t ckpt_mu;
    pthread_cond_t ckpt_cv;
    bool ckpt_stop;
    sqlite3 *ckpt_db;
    char *path;
    int wal_fd;         /* the -wal file, for brk_store_sync */
    brk_spanlog_t *log; /* span bytes; rows here say where they are */
    uint8_t *span_buf;  /* packing / reading buffer for one span */
    size_t span_cap;
};

/* Size bound of one span log segment. */
#define S_SEGMENT_MAX (64u << 20)

/* WAL frames (pages) above which the checkpointer stops being polite and
 * makes writers wait until the log restarts: bounds the WAL file. */
#define S_WAL_HARD_FRAMES 32768
#define S_CKPT_PERIOD_MS  100

/* The checkpointer copies committed pages from the WAL into the database
 * file on its own connection and thread, so the loop's COMMITs never
 * carry a checkpoint. PASSIVE checkpoints never block the writer; only a
 * WAL past S_WAL_HARD_FRAMES gets a RESTART, which does. */
static void *
s_checkpointer(void *arg)
{
    brk_store_t *self = arg;
    pthread_mutex_lock(&self->ckpt_mu);
    while (!self->ckpt_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += S_CKPT_PERIOD_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&self->ckpt_cv, &self->ckpt_mu, &ts);
        if (self->ckpt_stop)
            break;
        pthread_mutex_unlock(&self->ckpt_mu);
        int log = 0, done = 0;
        int rc = sqlite3_wal_checkpoint_v2(
            self->ckpt_db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
        if (rc == SQLITE_OK && log > S_WAL_HARD_FRAMES)
            rc = sqlite3_wal_checkpoint_v2(
                self->ckpt_db, NULL, SQLITE_CHECKPOINT_RESTART, &log, &done);
        if (rc != SQLITE_OK && rc != SQLITE_BUSY)
            lisa_log_warn("store: checkpoint failed: %s",
                          sqlite3_errmsg(self->ckpt_db));
        pthread_mutex_lock(&self->ckpt_mu);
    }
    pthread_mutex_unlock(&self->ckpt_mu);
    return NULL;
}

static lisa_rc_t
s_checkpointer_start(brk_store_t *self, bool sync_full)
{
    if (sqlite3_open_v2(self->path, &self->ckpt_db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK)
        return LISA_ERR;
    sqlite3_busy_timeout(self->ckpt_db, 5000);
    if (sqlite3_exec(self->ckpt_db,
                     sync_full ? "PRAGMA synchronous = FULL"
                               : "PRAGMA synchronous = NORMAL",
                     NULL, NULL, NULL) != SQLITE_OK)
        return LISA_ERR;
    pthread_mutex_init(&self->ckpt_mu, NULL);
    pthread_cond_init(&self->ckpt_cv, NULL);
    if (pthread_create(&self->ckpt_thread, NULL, s_checkpointer, self) != 0) {
        pthread_mutex_destroy(&self->ckpt_mu);
        pthread_cond_destroy(&self->ckpt_cv);
        return LISA_ERR;
    }
    self->ckpt_running = true;
    return LISA_OK;
}

static void
s_checkpointer_stop(brk_store_t *self)
{
    if (self->ckpt_running) {
        pthread_mutex_lock(&self->ckpt_mu);
        self->ckpt_stop = true;
        pthread_cond_signal(&self->ckpt_cv);
        pthread_mutex_unlock(&self->ckpt_mu);
        pthread_join(self->ckpt_thread, NULL);
        pthread_mutex_destroy(&self->ckpt_mu);
        pthread_cond_destroy(&self->ckpt_cv);
        self->ckpt_running = false;
    }
    if (self->ckpt_db) {
        sqlite3_close(self->ckpt_db);
        self->ckpt_db = NULL;
    }
}

static lisa_rc_t
s_exec(brk_store_t *self, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(self->db, sql, NULL, NULL, &err) != SQLITE_OK) {
        lisa_log_error("store: %s (in: %.60s)", err ? err : "?", sql);
        sqlite3_free(err);
        return LISA_ERR;
    }
    return LISA_OK;
}

/* The cached statement i, reset and with bindings cleared. */
static sqlite3_stmt *
s_stmt(brk_store_t *self, int i)
{
    if (!self->stmt[i]) {
        if (sqlite3_prepare_v3(self->db, s_sql[i], -1,
                               SQLITE_PREPARE_PERSISTENT, &self->stmt[i],
                               NULL) != SQLITE_OK) {
            lisa_log_error("store: prepare failed: %s",
                           sqlite3_errmsg(self->db));
            return NULL;
        }
    }
    sqlite3_stmt *st = self->stmt[i];
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return st;
}

static void
s_text(sqlite3_stmt *st, int i, const char *s)
{
    sqlite3_bind_text(st, i, s ? s : "", -1, SQLITE_STATIC);
}

static void
s_int(sqlite3_stmt *st, int i, uint64_t v)
{
    sqlite3_bind_int64(st, i, (sqlite3_int64) v);
}

/* Binds the packed form of msg (NULL binds SQL NULL); *buf is freed by the
 * caller after the step. */
static void
s_blob(sqlite3_stmt *st, int i, const ProtobufCMessage *msg, uint8_t **buf)
{
    *buf = NULL;
    if (!msg) {
        sqlite3_bind_null(st, i);
        return;
    }
    size_t n = protobuf_c_message_get_packed_size(msg);
    *buf = lisa_malloc(n ? n : 1);
    protobuf_c_message_pack(msg, *buf);
    sqlite3_bind_blob(st, i, *buf, (int) n, SQLITE_STATIC);
}

static lisa_rc_t
s_done(brk_store_t *self, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        lisa_log_error("store: step failed: %s", sqlite3_errmsg(self->db));
        return rc == SQLITE_CONSTRAINT ? LISA_CONFLICT : LISA_ERR;
    }
    return LISA_OK;
}

static char *
s_col_text(brk_arena_t *a, sqlite3_stmt *st, int i)
{
    const char *t = (const char *) sqlite3_column_text(st, i);
    return brk_arena_strndup(a, t ? t : "",
                             (size_t) sqlite3_column_bytes(st, i));
}

static uint64_t
s_col_u64(sqlite3_stmt *st, int i)
{
    return (uint64_t) sqlite3_column_int64(st, i);
}

static uint32_t
s_col_u32(sqlite3_stmt *st, int i)
{
    return (uint32_t) sqlite3_column_int64(st, i);
}

/* Unpacks a blob column as `desc` (owned by the arena); NULL if NULL. */
static ProtobufCMessage *
s_col_msg(brk_arena_t *a, sqlite3_stmt *st, int i,
          const ProtobufCMessageDescriptor *desc)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return NULL;
    const void *p = sqlite3_column_blob(st, i);
    size_t n = (size_t) sqlite3_column_bytes(st, i);
    ProtobufCMessage *m =
        protobuf_c_message_unpack(desc, NULL, n, (const uint8_t *) p);
    brk_arena_own(a, m);
    return m;
}

static lisa_rc_t
s_migrate(brk_store_t *self)
{
    sqlite3_stmt *st = NULL;
    sqlite3_prepare_v2(self->db, "PRAGMA user_version", -1, &st, NULL);
    int v = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
    sqlite3_finalize(st);
    int want = (int) (sizeof s_migrations / sizeof s_migrations[0]);
    if (v < 0 || v > want) {
        lisa_log_error("store: schema version %d is newer than this build (%d)",
                       v, want);
        return LISA_UNSUPPORTED;
    }
    while (v < want) {
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", v + 1);
        if (s_exec(self, "BEGIN IMMEDIATE") != LISA_OK)
            return LISA_ERR;
        if (s_exec(self, s_migrations[v]) != LISA_OK ||
            s_exec(self, pragma) != LISA_OK) {
            s_exec(self, "ROLLBACK");
            return LISA_ERR;
        }
        if (s_exec(self, "COMMIT") != LISA_OK)
            return LISA_ERR;
        lisa_log_info("store: migrated schema to version %d", v + 1);
        v++;
    }
    self->schema = v;
    return LISA_OK;
}

/* Drops index rows that point past the span log's recovered end: their
 * records were never made whole, so they were never acknowledged. */
static lisa_rc_t
s_span_recover(brk_store_t *self)
{
    sqlite3_stmt *st = s_stmt(self, Q_SPAN_RECOVER);
    if (!st)
        return LISA_ERR;
    s_int(st, 1, brk_spanlog_segment(self->log));
    s_int(st, 2, brk_spanlog_end(self->log));
    lisa_rc_t rc = s_done(self, st);
    int gone = sqlite3_changes(self->db);
    if (rc == LISA_OK && gone > 0)
        lisa_log_warn("store: dropped %d span rows past the span log's end "
                      "(never acknowledged)",
                      gone);
    return rc;
}

brk_store_t *
brk_store_open(const char *dir, bool sync_full)
{
    return brk_store_open_ex(dir, sync_full, S_SEGMENT_MAX);
}

brk_store_t *
brk_store_open_ex(const char *dir, bool sync_full, uint64_t segment_max)
{
    if (mkdir(dir, 0750) != 0 && errno != EEXIST) {
        lisa_log_error("store: cannot create '%s': %s", dir, strerror(errno));
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/broker.db", dir);
    brk_store_t *self = lisa_calloc(1, sizeof *self);
    self->wal_fd = -1;
    self->path = lisa_strdup(path);
    if (sqlite3_open_v2(path, &self->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                            SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        lisa_log_error("store: cannot open '%s': %s", path,
                       self->db ? sqlite3_errmsg(self->db) : "no memory");
        brk_store_close(&self);
        return NULL;
    }
    /* Page size only matters before the first table exists; 16 KiB pages
     * keep a span (a few KiB of ids and logprobs) to one or two pages. */
    const char *setup = sync_full ? "PRAGMA page_size = 16384;"
                                    "PRAGMA journal_mode = WAL;"
                                    "PRAGMA synchronous = FULL;"
                                    "PRAGMA wal_autocheckpoint = 0;"
                                    "PRAGMA cache_size = -65536;"
                                    "PRAGMA foreign_keys = OFF;"
                                    "PRAGMA temp_store = MEMORY;"
                                  : "PRAGMA page_size = 16384;"
                                    "PRAGMA journal_mode = WAL;"
                                    "PRAGMA synchronous = NORMAL;"
                                    "PRAGMA wal_autocheckpoint = 0;"
                                    "PRAGMA cache_size = -65536;"
                                    "PRAGMA foreign_keys = OFF;"
                                    "PRAGMA temp_store = MEMORY;";
    sqlite3_busy_timeout(self->db, 5000);
    if (s_exec(self, setup) != LISA_OK || s_migrate(self) != LISA_OK) {
        brk_store_close(&self);
        return NULL;
    }
    /* the broker fsyncs the log itself (brk_store_sync) before acking */
    self->log = brk_spanlog_open(dir, segment_max, true);
    if (!self->log || s_span_recover(self) != LISA_OK) {
        brk_store_close(&self);
        return NULL;
    }
    sqlite3_stmt *st = s_stmt(self, Q_SPAN_COUNT);
    if (st && sqlite3_step(st) == SQLITE_ROW)
        self->span_total = s_col_u64(st, 0);
    if (st)
        sqlite3_reset(st);
    if (sqlite3_prepare_v2(self->db, "SAVEPOINT req", -1, &self->sp_begin,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(self->db, "RELEASE req", -1, &self->sp_keep, NULL) !=
            SQLITE_OK ||
        sqlite3_prepare_v2(self->db, "ROLLBACK TO req", -1, &self->sp_undo,
                           NULL) != SQLITE_OK ||
        s_checkpointer_start(self, sync_full) != LISA_OK) {
        lisa_log_error("store: cannot set up '%s'", path);
        brk_store_close(&self);
        return NULL;
    }
    /* The WAL exists (the migrations wrote to it) and stays while any
     * connection is open: SQLite reuses it from the start after a full
     * checkpoint but never unlinks it under an open connection. */
    char wal[4200];
    snprintf(wal, sizeof wal, "%s-wal", path);
    self->wal_fd = open(wal, O_RDWR | O_CLOEXEC);
    if (self->wal_fd < 0) {
        lisa_log_error("store: cannot open '%s': %s", wal, strerror(errno));
        brk_store_close(&self);
        return NULL;
    }
    return self;
}

void
brk_store_close(brk_store_t **pself)
{
    if (!pself || !*pself)
        return;
    brk_store_t *self = *pself;
    s_checkpointer_stop(self);
    if (self->in_txn)
        brk_store_rollback(self);
    for (int i = 0; i < Q__COUNT; i++)
        sqlite3_finalize(self->stmt[i]);
    sqlite3_finalize(self->sp_begin);
    sqlite3_finalize(self->sp_keep);
    sqlite3_finalize(self->sp_undo);
    sqlite3_close(self->db);
    if (self->wal_fd >= 0)
        close(self->wal_fd);
    brk_spanlog_close(&self->log);
    lisa_free(&self->span_buf);
    lisa_free(&self->path);
    lisa_free(pself);
}

int
brk_store_schema(brk_store_t *self)
{
    return self->schema;
}

lisa_rc_t
brk_store_begin(brk_store_t *self)
{
    if (self->in_txn)
        return LISA_OK;
    lisa_rc_t rc = s_exec(self, "BEGIN IMMEDIATE");
    if (rc == LISA_OK)
        self->in_txn = true;
    return rc;
}

lisa_rc_t
brk_store_commit(brk_store_t *self)
{
    if (!self->in_txn)
        return LISA_OK;
    /* the span records this transaction's rows name reach the file first */
    lisa_rc_t rc = brk_spanlog_flush(self->log);
    if (rc != LISA_OK) {
        brk_store_rollback(self);
        return LISA_UNAVAILABLE;
    }
    rc = s_exec(self, "COMMIT");
    if (rc != LISA_OK) {
        brk_store_rollback(self);
        return LISA_UNAVAILABLE;
    }
    self->in_txn = false;
    self->commits++;
    self->span_total =
        (uint64_t) ((int64_t) self->span_total + self->span_delta);
    self->span_delta = 0;
    return LISA_OK;
}

void
brk_store_rollback(brk_store_t *self)
{
    if (!self->in_txn)
        return;
    /* Statements hold read cursors; reset them so ROLLBACK can proceed. */
    for (int i = 0; i < Q__COUNT; i++)
        if (self->stmt[i])
            sqlite3_reset(self->stmt[i]);
    (void) s_exec(self, "ROLLBACK");
    brk_spanlog_discard(self->log);
    self->in_txn = false;
    self->span_delta = 0;
}

void
brk_store_defer_span_writes(brk_store_t *self)
{
    brk_spanlog_defer(self->log, true);
}

/* The span log's fdatasync, on its own thread so it overlaps the WAL's. */
static void *
s_log_sync(void *arg)
{
    return brk_spanlog_sync(arg) == LISA_OK ? NULL : (void *) 1;
}

lisa_rc_t
brk_store_sync(brk_store_t *self)
{
    /* Both files at once: the two fdatasyncs share the device's latency
     * (and the file system's journal commit) instead of adding up. */
    pthread_t t;
    bool threaded = pthread_create(&t, NULL, s_log_sync, self->log) == 0;
    lisa_rc_t rc = threaded ? LISA_OK : brk_spanlog_sync(self->log);
    while (fdatasync(self->wal_fd) != 0) {
        if (errno == EINTR)
            continue;
        lisa_log_error("store: fdatasync of the WAL: %s", strerror(errno));
        rc = LISA_ERR;
        break;
    }
    if (threaded) {
        void *res = NULL;
        pthread_join(t, &res);
        if (res)
            rc = LISA_ERR;
    }
    return rc;
}

/* Steps a prepared control statement once. */
static lisa_rc_t
s_step_once(brk_store_t *self, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        lisa_log_error("store: %s", sqlite3_errmsg(self->db));
        return LISA_ERR;
    }
    return LISA_OK;
}

lisa_rc_t
brk_store_savepoint(brk_store_t *self)
{
    self->span_mark = self->span_delta;
    return s_step_once(self, self->sp_begin);
}

void
brk_store_savepoint_keep(brk_store_t *self)
{
    (void) s_step_once(self, self->sp_keep);
}

void
brk_store_savepoint_undo(brk_store_t *self)
{
    for (int i = 0; i < Q__COUNT; i++)
        if (self->stmt[i])
            sqlite3_reset(self->stmt[i]);
    (void) s_step_once(self, self->sp_undo);
    (void) s_step_once(self, self->sp_keep);
    self->span_delta = self->span_mark;
}

uint64_t
brk_store_commits(const brk_store_t *self)
{
    return self->commits;
}

uint64_t
brk_store_meta_get(brk_store_t *self, const char *key, uint64_t def)
{
    sqlite3_stmt *st = s_stmt(self, Q_META_GET);
    if (!st)
        return def;
    s_text(st, 1, key);
    uint64_t v = sqlite3_step(st) == SQLITE_ROW ? s_col_u64(st, 0) : def;
    sqlite3_reset(st);
    return v;
}

lisa_rc_t
brk_store_meta_set(brk_store_t *self, const char *key, uint64_t value)
{
    sqlite3_stmt *st = s_stmt(self, Q_META_SET);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, key);
    s_int(st, 2, value);
    return s_done(self, st);
}

lisa_rc_t
brk_store_group_put(brk_store_t *self, const char *group_id, const char *run_id,
                    uint64_t step, const Lisa__TaskSpec *task)
{
    sqlite3_stmt *st = s_stmt(self, Q_GROUP_PUT);
    if (!st)
        return LISA_ERR;
    uint8_t *buf = NULL;
    s_text(st, 1, group_id);
    s_text(st, 2, run_id);
    s_int(st, 3, step);
    s_blob(st, 4, &task->base, &buf);
    lisa_rc_t rc = s_done(self, st);
    lisa_free(&buf);
    return rc;
}

lisa_rc_t
brk_store_group_task(brk_store_t *self, brk_arena_t *arena,
                     const char *group_id, Lisa__TaskSpec **out)
{
    *out = NULL;
    sqlite3_stmt *st = s_stmt(self, Q_GROUP_GET);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, group_id);
    if (sqlite3_step(st) == SQLITE_ROW)
        *out = (Lisa__TaskSpec *) s_col_msg(arena, st, 0,
                                            &lisa__task_spec__descriptor);
    sqlite3_reset(st);
    return *out ? LISA_OK : LISA_NOTFOUND;
}

static void
s_bind_rollout_mut(sqlite3_stmt *st, const Lisa__Rollout *r, uint8_t **buf)
{
    s_int(st, 2, (uint64_t) r->state);
    s_int(st, 3, (uint64_t) r->failure_kind);
    s_text(st, 4, r->reason);
    s_int(st, 5, r->attempts);
    s_int(st, 6, r->deadline_ms);
    s_int(st, 7, r->ended_ms);
    s_blob(st, 8, r->has_reward && r->reward ? &r->reward->base : NULL, buf);
}

lisa_rc_t
brk_store_rollout_put(brk_store_t *self, const Lisa__Rollout *r)
{
    sqlite3_stmt *st = s_stmt(self, Q_ROLLOUT_PUT);
    if (!st)
        return LISA_ERR;
    uint8_t *buf = NULL;
    s_text(st, 1, r->rollout_id);
    s_text(st, 2, r->group_id);
    s_text(st, 3, r->run_id);
    s_int(st, 4, r->step);
    s_int(st, 5, r->policy_version);
    s_int(st, 6, (uint64_t) r->mode);
    s_int(st, 7, (uint64_t) r->state);
    s_int(st, 8, (uint64_t) r->failure_kind);
    s_text(st, 9, r->reason);
    s_int(st, 10, r->attempts);
    s_int(st, 11, r->max_attempts);
    s_int(st, 12, r->created_ms);
    s_int(st, 13, r->deadline_ms);
    s_int(st, 14, r->ended_ms);
    s_blob(st, 15, r->has_reward && r->reward ? &r->reward->base : NULL, &buf);
    s_text(st, 16, r->task_id);
    s_text(st, 17, r->data_source);
    s_int(st, 18, r->index_in_group);
    s_int(st, 19, 0);
    s_int(st, 20, 0);
    lisa_rc_t rc = s_done(self, st);
    lisa_free(&buf);
    return rc;
}

lisa_rc_t
brk_store_rollout_update(brk_store_t *self, const Lisa__Rollout *r,
                         uint64_t not_before_ms, uint64_t lease_ms)
{
    sqlite3_stmt *st = s_stmt(self, Q_ROLLOUT_UPDATE);
    if (!st)
        return LISA_ERR;
    uint8_t *buf = NULL;
    s_text(st, 1, r->rollout_id);
    s_bind_rollout_mut(st, r, &buf);
    s_int(st, 9, not_before_ms);
    s_int(st, 10, lease_ms);
    lisa_rc_t rc = s_done(self, st);
    lisa_free(&buf);
    if (rc == LISA_OK && sqlite3_changes(self->db) == 0)
        rc = LISA_NOTFOUND;
    return rc;
}

static Lisa__Rollout *
s_row_rollout(brk_arena_t *a, sqlite3_stmt *st)
{
    Lisa__Rollout *r = brk_arena_alloc(a, sizeof *r);
    lisa__rollout__init(r);
    r->rollout_id = s_col_text(a, st, 0);
    r->group_id = s_col_text(a, st, 1);
    r->run_id = s_col_text(a, st, 2);
    r->step = s_col_u64(st, 3);
    r->policy_version = s_col_u64(st, 4);
    r->mode = (Lisa__Mode) sqlite3_column_int(st, 5);
    r->state = (Lisa__RolloutState) sqlite3_column_int(st, 6);
    r->failure_kind = (Lisa__FailureKind) sqlite3_column_int(st, 7);
    r->reason = s_col_text(a, st, 8);
    r->attempts = s_col_u32(st, 9);
    r->max_attempts = s_col_u32(st, 10);
    r->created_ms = s_col_u64(st, 11);
    r->deadline_ms = s_col_u64(st, 12);
    r->ended_ms = s_col_u64(st, 13);
    r->reward =
        (Lisa__Reward *) s_col_msg(a, st, 14, &lisa__reward__descriptor);
    r->has_reward = r->reward != NULL;
    r->task_id = s_col_text(a, st, 15);
    r->data_source = s_col_text(a, st, 16);
    r->index_in_group = s_col_u32(st, 17);
    return r;
}

lisa_rc_t
brk_store_rollout_get(brk_store_t *self, brk_arena_t *arena, const char *id,
                      Lisa__Rollout **out)
{
    *out = NULL;
    sqlite3_stmt *st = s_stmt(self, Q_ROLLOUT_GET);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, id);
    if (sqlite3_step(st) == SQLITE_ROW)
        *out = s_row_rollout(arena, st);
    sqlite3_reset(st);
    return *out ? LISA_OK : LISA_NOTFOUND;
}

lisa_rc_t
brk_store_attempt_put(brk_store_t *self, const Lisa__Attempt *a,
                      uint32_t expected_spans)
{
    sqlite3_stmt *st = s_stmt(self, Q_ATTEMPT_PUT);
    if (!st)
        return LISA_ERR;
    uint8_t *buf = NULL;
    s_text(st, 1, a->rollout_id);
    s_int(st, 2, a->attempt);
    s_int(st, 3, (uint64_t) a->state);
    s_int(st, 4, (uint64_t) a->failure_kind);
    s_text(st, 5, a->reason);
    s_text(st, 6, a->sandbox_id);
    s_text(st, 7, a->controller_id);
    s_int(st, 8, a->claimed_ms);
    s_int(st, 9, a->started_ms);
    s_int(st, 10, a->ended_ms);
    s_int(st, 11, a->lease_expiry_ms);
    s_int(st, 12, a->deadline_ms);
    s_blob(st, 13, a->result ? &a->result->base : NULL, &buf);
    s_int(st, 14, expected_spans);
    lisa_rc_t rc = s_done(self, st);
    lisa_free(&buf);
    return rc;
}

static Lisa__Attempt *
s_row_attempt(brk_arena_t *a, sqlite3_stmt *st)
{
    Lisa__Attempt *t = brk_arena_alloc(a, sizeof *t);
    lisa__attempt__init(t);
    t->rollout_id = s_col_text(a, st, 0);
    t->attempt = s_col_u32(st, 1);
    t->state = (Lisa__AttemptState) sqlite3_column_int(st, 2);
    t->failure_kind = (Lisa__FailureKind) sqlite3_column_int(st, 3);
    t->reason = s_col_text(a, st, 4);
    t->sandbox_id = s_col_text(a, st, 5);
    t->controller_id = s_col_text(a, st, 6);
    t->claimed_ms = s_col_u64(st, 7);
    t->started_ms = s_col_u64(st, 8);
    t->ended_ms = s_col_u64(st, 9);
    t->lease_expiry_ms = s_col_u64(st, 10);
    t->deadline_ms = s_col_u64(st, 11);
    t->result = (Lisa__AttemptResult *) s_col_msg(
        a, st, 12, &lisa__attempt_result__descriptor);
    t->span_count = s_col_u32(st, 13);
    return t;
}

lisa_rc_t
brk_store_attempt_get(brk_store_t *self, brk_arena_t *arena, const char *id,
                      uint32_t n, Lisa__Attempt **out)
{
    *out = NULL;
    sqlite3_stmt *st = s_stmt(self, Q_ATTEMPT_GET);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, id);
    s_int(st, 2, n);
    if (sqlite3_step(st) == SQLITE_ROW)
        *out = s_row_attempt(arena, st);
    sqlite3_reset(st);
    return *out ? LISA_OK : LISA_NOTFOUND;
}

/* Growable pointer array in the arena (doubling; old copies stay until
 * reset, which is fine for reply-sized lists). */
static void
s_push(brk_arena_t *a, void ***arr, size_t *n, size_t *cap, void *item)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        void **na = brk_arena_alloc(a, nc * sizeof *na);
        if (*n)
            memcpy(na, *arr, *n * sizeof *na);
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*n)++] = item;
}

lisa_rc_t
brk_store_attempts_of(brk_store_t *self, brk_arena_t *arena, const char *id,
                      Lisa__Attempt ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    sqlite3_stmt *st = s_stmt(self, Q_ATTEMPTS_OF);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, id);
    while (sqlite3_step(st) == SQLITE_ROW)
        s_push(arena, (void ***) out, n, &cap, s_row_attempt(arena, st));
    sqlite3_reset(st);
    return LISA_OK;
}

lisa_rc_t
brk_store_transition(brk_store_t *self, const char *id, uint32_t attempt,
                     Lisa__RolloutState from, Lisa__RolloutState to,
                     const char *event, const char *reason, uint64_t time_ms)
{
    sqlite3_stmt *st = s_stmt(self, Q_TRANSITION_PUT);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, id);
    s_int(st, 2, attempt);
    s_int(st, 3, (uint64_t) from);
    s_int(st, 4, (uint64_t) to);
    s_text(st, 5, event);
    s_text(st, 6, reason);
    s_int(st, 7, time_ms);
    return s_done(self, st);
}

lisa_rc_t
brk_store_transitions_of(brk_store_t *self, brk_arena_t *arena, const char *id,
                         Lisa__Transition ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    sqlite3_stmt *st = s_stmt(self, Q_TRANSITIONS_OF);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, id);
    while (sqlite3_step(st) == SQLITE_ROW) {
        Lisa__Transition *t = brk_arena_alloc(arena, sizeof *t);
        lisa__transition__init(t);
        t->rollout_id = s_col_text(arena, st, 0);
        t->attempt = s_col_u32(st, 1);
        t->from_state = (Lisa__RolloutState) sqlite3_column_int(st, 2);
        t->to_state = (Lisa__RolloutState) sqlite3_column_int(st, 3);
        t->event = s_col_text(arena, st, 4);
        t->reason = s_col_text(arena, st, 5);
        t->time_ms = s_col_u64(st, 6);
        s_push(arena, (void ***) out, n, &cap, t);
    }
    sqlite3_reset(st);
    return LISA_OK;
}

/* A buffer of at least n bytes, kept for the next span. */
static uint8_t *
s_span_buf(brk_store_t *self, size_t n)
{
    if (n > self->span_cap) {
        lisa_free(&self->span_buf);
        self->span_cap = n < 65536 ? 65536 : n;
        self->span_buf = lisa_malloc(self->span_cap);
    }
    return self->span_buf;
}

lisa_rc_t
brk_store_span_put(brk_store_t *self, const Lisa__Span *span,
                   const uint8_t *raw, size_t raw_len, bool *dup)
{
    if (!raw) {
        raw_len = protobuf_c_message_get_packed_size(&span->base);
        raw = s_span_buf(self, raw_len + 1);
        protobuf_c_message_pack(&span->base, self->span_buf);
    }
    return brk_store_span_put_raw(self, span->rollout_id, span->attempt,
                                  span->seq, raw, raw_len, dup);
}

lisa_rc_t
brk_store_span_put_raw(brk_store_t *self, const char *rollout_id,
                       uint32_t attempt, uint32_t seq, const uint8_t *raw,
                       size_t raw_len, bool *dup)
{
    *dup = false;
    sqlite3_stmt *st = s_stmt(self, Q_SPAN_PUT);
    if (!st)
        return LISA_ERR;
    /* written first, kept only when the row is new: a duplicate's bytes
     * are overwritten by the next record */
    brk_spanlog_ref_t ref;
    lisa_rc_t rc = brk_spanlog_write(self->log, raw, raw_len, &ref);
    if (rc != LISA_OK)
        return rc;
    s_text(st, 1, rollout_id);
    s_int(st, 2, attempt);
    s_int(st, 3, seq);
    s_int(st, 4, ref.segment);
    s_int(st, 5, ref.offset);
    s_int(st, 6, ref.len);
    rc = s_done(self, st);
    if (rc != LISA_OK)
        return rc;
    *dup = sqlite3_changes(self->db) == 0;
    if (!*dup) {
        brk_spanlog_keep(self->log, &ref);
        self->span_delta++;
    }
    return LISA_OK;
}

lisa_rc_t
brk_store_span_status(brk_store_t *self, const char *id, uint32_t attempt,
                      int32_t *contiguous, uint32_t *count)
{
    *contiguous = -1;
    *count = 0;
    sqlite3_stmt *st = s_stmt(self, Q_SPAN_SEQS);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, id);
    s_int(st, 2, attempt);
    bool gap = false;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t seq = sqlite3_column_int64(st, 0);
        if (!gap && seq == (int64_t) *contiguous + 1)
            *contiguous = (int32_t) seq;
        else
            gap = true;
        (*count)++;
    }
    sqlite3_reset(st);
    return LISA_OK;
}

lisa_rc_t
brk_store_spans_of(brk_store_t *self, brk_arena_t *arena, const char *id,
                   uint32_t attempt, Lisa__Span ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    size_t cap = 0;
    sqlite3_stmt *st = s_stmt(self, attempt ? Q_SPANS_OF_ATTEMPT : Q_SPANS_OF);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, id);
    if (attempt)
        s_int(st, 2, attempt);
    lisa_rc_t rc = LISA_OK;
    while (sqlite3_step(st) == SQLITE_ROW) {
        ProtobufCMessage *m = NULL;
        if (sqlite3_column_type(st, 1) == SQLITE_NULL) {
            m = s_col_msg(arena, st, 0, &lisa__span__descriptor);
        } else {
            brk_spanlog_ref_t ref = {.segment = s_col_u32(st, 1),
                                     .offset = s_col_u64(st, 2),
                                     .len = s_col_u32(st, 3)};
            if (ref.len > BRK_SPANLOG_MAX_RECORD) {
                rc = LISA_ERR;
                break;
            }
            uint8_t *buf = s_span_buf(self, ref.len + 1);
            if (brk_spanlog_read(self->log, &ref, buf) != LISA_OK) {
                rc = LISA_ERR;
                break;
            }
            m = protobuf_c_message_unpack(&lisa__span__descriptor, NULL,
                                          ref.len, buf);
            brk_arena_own(arena, m);
        }
        if (m)
            s_push(arena, (void ***) out, n, &cap, m);
    }
    sqlite3_reset(st);
    return rc;
}

/* Runs a statement that yields ids in column 0. */
static lisa_rc_t
s_ids(brk_arena_t *arena, sqlite3_stmt *st, char ***ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    size_t cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW)
        s_push(arena, (void ***) ids, n, &cap, s_col_text(arena, st, 0));
    sqlite3_reset(st);
    return LISA_OK;
}

lisa_rc_t
brk_store_claimable(brk_store_t *self, brk_arena_t *arena, const char *run_id,
                    uint64_t now_ms, size_t limit, char ***ids, size_t *n)
{
    bool by_run = run_id && *run_id;
    sqlite3_stmt *st = s_stmt(self, by_run ? Q_CLAIMABLE_RUN : Q_CLAIMABLE);
    if (!st)
        return LISA_ERR;
    s_int(st, 1, now_ms);
    s_int(st, 2, limit);
    if (by_run)
        s_text(st, 3, run_id);
    return s_ids(arena, st, ids, n);
}

lisa_rc_t
brk_store_due(brk_store_t *self, brk_arena_t *arena, uint64_t now_ms,
              size_t limit, char ***ids, size_t *n)
{
    sqlite3_stmt *st = s_stmt(self, Q_DUE);
    if (!st)
        return LISA_ERR;
    s_int(st, 1, now_ms);
    s_int(st, 2, limit);
    return s_ids(arena, st, ids, n);
}

lisa_rc_t
brk_store_in_state(brk_store_t *self, brk_arena_t *arena,
                   Lisa__RolloutState state, const char *run_id, char ***ids,
                   size_t *n)
{
    bool by_run = run_id && *run_id;
    sqlite3_stmt *st = s_stmt(self, by_run ? Q_IN_STATE_RUN : Q_IN_STATE);
    if (!st)
        return LISA_ERR;
    s_int(st, 1, (uint64_t) state);
    if (by_run)
        s_text(st, 2, run_id);
    return s_ids(arena, st, ids, n);
}

lisa_rc_t
brk_store_open_of_run(brk_store_t *self, brk_arena_t *arena, const char *run_id,
                      char ***ids, size_t *n)
{
    sqlite3_stmt *st = s_stmt(self, Q_OPEN_OF_RUN);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, run_id);
    return s_ids(arena, st, ids, n);
}

lisa_rc_t
brk_store_list(brk_store_t *self, brk_arena_t *arena, const char *run_id,
               bool by_step, uint64_t step, Lisa__RolloutState state,
               bool terminal_only, const char *after, size_t limit,
               Lisa__Rollout ***out, size_t *n, char **next)
{
    *out = NULL;
    *n = 0;
    *next = brk_arena_strdup(arena, "");
    char sql[1024];
    int len = snprintf(sql, sizeof sql,
                       "SELECT " S_ROLLOUT_COLS " FROM rollouts WHERE"
                       " rollout_id > ?1");
    if (run_id && *run_id)
        len +=
            snprintf(sql + len, sizeof sql - (size_t) len, " AND run_id = ?2");
    if (by_step)
        len += snprintf(sql + len, sizeof sql - (size_t) len, " AND step = ?3");
    if (state)
        len +=
            snprintf(sql + len, sizeof sql - (size_t) len, " AND state = ?4");
    if (terminal_only)
        len += snprintf(sql + len, sizeof sql - (size_t) len,
                        " AND state IN (5, 6, 7)");
    snprintf(sql + len, sizeof sql - (size_t) len,
             " ORDER BY rollout_id LIMIT ?5");
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(self->db, sql, -1, &st, NULL) != SQLITE_OK) {
        lisa_log_error("store: %s", sqlite3_errmsg(self->db));
        return LISA_ERR;
    }
    s_text(st, 1, after);
    s_text(st, 2, run_id);
    s_int(st, 3, step);
    s_int(st, 4, (uint64_t) state);
    s_int(st, 5, limit + 1);
    size_t cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (*n == limit) {
            *next = brk_arena_strdup(arena, (*out)[*n - 1]->rollout_id);
            break;
        }
        s_push(arena, (void ***) out, n, &cap, s_row_rollout(arena, st));
    }
    sqlite3_finalize(st);
    return LISA_OK;
}

lisa_rc_t
brk_store_counts(brk_store_t *self, const char *run_id, Lisa__Stats *s)
{
    bool by_run = run_id && *run_id;
    sqlite3_stmt *st = s_stmt(self, by_run ? Q_COUNTS_RUN : Q_COUNTS);
    if (!st)
        return LISA_ERR;
    if (by_run)
        s_text(st, 1, run_id);
    while (sqlite3_step(st) == SQLITE_ROW) {
        uint64_t c = s_col_u64(st, 1);
        switch (sqlite3_column_int(st, 0)) {
        case 1:
            s->queued = c;
            break;
        case 2:
            s->claimed = c;
            break;
        case 3:
            s->running = c;
            break;
        case 4:
            s->scoring = c;
            break;
        case 5:
            s->succeeded = c;
            break;
        case 6:
            s->failed = c;
            break;
        case 7:
            s->cancelled = c;
            break;
        default:
            break;
        }
    }
    sqlite3_reset(st);
    s->spans = (uint64_t) ((int64_t) self->span_total + self->span_delta);
    return LISA_OK;
}

lisa_rc_t
brk_store_prune(brk_store_t *self, const char *id)
{
    char group[256] = "";
    sqlite3_stmt *st = s_stmt(self, Q_ROLLOUT_GET);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, id);
    if (sqlite3_step(st) == SQLITE_ROW)
        snprintf(group, sizeof group, "%s",
                 (const char *) sqlite3_column_text(st, 1));
    sqlite3_reset(st);
    if (!group[0])
        return LISA_NOTFOUND;
    static const int dels[] = {Q_DEL_SPANS, Q_DEL_ATTEMPTS, Q_DEL_TRANSITIONS,
                               Q_DEL_ROLLOUT};
    for (size_t i = 0; i < sizeof dels / sizeof dels[0]; i++) {
        st = s_stmt(self, dels[i]);
        if (!st)
            return LISA_ERR;
        s_text(st, 1, id);
        lisa_rc_t rc = s_done(self, st);
        if (rc != LISA_OK)
            return rc;
        if (dels[i] == Q_DEL_SPANS)
            self->span_delta -= sqlite3_changes(self->db);
    }
    st = s_stmt(self, Q_DEL_GROUP);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, group);
    return s_done(self, st);
}

/* Segment numbers that still have rows, sorted, for s_segment_live. */
typedef struct {
    uint32_t *v;
    size_t n;
} s_segset_t;

static bool
s_segment_live(uint32_t segment, void *arg)
{
    const s_segset_t *set = arg;
    for (size_t i = 0; i < set->n; i++)
        if (set->v[i] == segment)
            return true;
    return false;
}

lisa_rc_t
brk_store_span_gc(brk_store_t *self, size_t *dropped)
{
    *dropped = 0;
    if (self->in_txn)
        return LISA_CONFLICT;
    sqlite3_stmt *st = s_stmt(self, Q_SPAN_SEGMENTS);
    if (!st)
        return LISA_ERR;
    s_segset_t set = {0};
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (set.n == cap) {
            cap = cap ? cap * 2 : 64;
            set.v = lisa_realloc(set.v, cap * sizeof *set.v);
        }
        set.v[set.n++] = s_col_u32(st, 0);
    }
    sqlite3_reset(st);
    if (rc != SQLITE_DONE) {
        lisa_free(&set.v);
        return LISA_ERR;
    }
    *dropped = brk_spanlog_drop(self->log, s_segment_live, &set);
    lisa_free(&set.v);
    return LISA_OK;
}

lisa_rc_t
brk_store_idem_get(brk_store_t *self, brk_arena_t *arena, const char *key,
                   uint8_t **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    sqlite3_stmt *st = s_stmt(self, Q_IDEM_GET);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, key);
    lisa_rc_t rc = LISA_NOTFOUND;
    if (sqlite3_step(st) == SQLITE_ROW) {
        *len = (size_t) sqlite3_column_bytes(st, 0);
        *data = brk_arena_alloc(arena, *len + 1);
        if (*len)
            memcpy(*data, sqlite3_column_blob(st, 0), *len);
        rc = LISA_OK;
    }
    sqlite3_reset(st);
    return rc;
}

lisa_rc_t
brk_store_idem_put(brk_store_t *self, const char *key, const uint8_t *data,
                   size_t len, uint64_t now_ms)
{
    sqlite3_stmt *st = s_stmt(self, Q_IDEM_PUT);
    if (!st)
        return LISA_ERR;
    s_text(st, 1, key);
    sqlite3_bind_blob(st, 2, data, (int) len, SQLITE_STATIC);
    s_int(st, 3, now_ms);
    return s_done(self, st);
}

lisa_rc_t
brk_store_extend_leases(brk_store_t *self, uint64_t lease_ms)
{
    sqlite3_stmt *st = s_stmt(self, Q_EXTEND_LEASES);
    if (!st)
        return LISA_ERR;
    s_int(st, 1, lease_ms);
    return s_done(self, st);
}
