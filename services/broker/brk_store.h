/*
 * brk_store: the broker's durable record, an embedded SQLite file.
 *
 * The file is <data_dir>/broker.db in WAL mode. The broker is its only
 * writer and runs one transaction per loop iteration (group commit): all
 * writes of the iteration go in, COMMIT makes them durable, and only then
 * are replies sent. Span bytes live in the span log (brk_spanlog) beside
 * the file; a span row only says where its record is. SQLite never fsyncs
 * at COMMIT: brk_store_sync fsyncs the span log and the WAL (the broker's
 * syncer thread calls it after each group commit), so an acknowledged
 * write survives power loss; without it, a COMMIT survives a killed
 * process (the data is in the OS page cache) but not a power cut.
 *
 * The schema is versioned (PRAGMA user_version) and migrated forward at
 * open, one transaction per step. Records cross this interface as the
 * protobuf structs of lisa.proto; what this module returns is allocated
 * from the caller's arena and lives until the arena is reset.
 */
#ifndef BRK_STORE_H
#define BRK_STORE_H

#include "brk_arena.h"
#include "lisa.pb-c.h"
#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct brk_store_t brk_store_t;

/* Schema version this build migrates to. */
#define BRK_STORE_SCHEMA 3

/* Opens (creating when needed) <dir>/broker.db and migrates it. `sync_full`
 * selects synchronous=FULL over NORMAL. NULL on failure (logged). */
brk_store_t *brk_store_open(const char *dir, bool sync_full);
/* brk_store_open with the span log's segment size bound (bytes). */
brk_store_t *brk_store_open_ex(const char *dir, bool sync_full,
                               uint64_t segment_max);
/* Closes the store; accepts NULL, sets *self to NULL. An open transaction
 * is rolled back. */
void brk_store_close(brk_store_t **self);
/* The schema version of the open file. */
int brk_store_schema(brk_store_t *self);

/* Span log writes move from COMMIT to brk_store_sync (brk_spanlog_defer):
 * for a caller that acknowledges only after brk_store_sync and runs it on
 * another thread, which then copies the span bytes into the file instead
 * of the thread that runs the transactions. */
void brk_store_defer_span_writes(brk_store_t *self);

/* Starts the iteration's transaction unless one is open. */
lisa_rc_t brk_store_begin(brk_store_t *self) LISA_NODISCARD;
/* Commits the open transaction (no-op when none); durable on LISA_OK. */
lisa_rc_t brk_store_commit(brk_store_t *self) LISA_NODISCARD;
/* Rolls the open transaction back (no-op when none). */
void brk_store_rollback(brk_store_t *self);
/* fdatasync of the span log, then of the WAL file: makes every COMMIT
 * (and every span record) that returned before the call durable against
 * power loss. Safe to call from another thread
 * than the one using the store (it only touches file descriptors and the
 * span log's hand-over buffer, under the span log's mutex). */
lisa_rc_t brk_store_sync(brk_store_t *self) LISA_NODISCARD;

/* Opens a savepoint inside the transaction (one request's writes). */
lisa_rc_t brk_store_savepoint(brk_store_t *self) LISA_NODISCARD;
/* Keeps the savepoint's writes in the transaction. */
void brk_store_savepoint_keep(brk_store_t *self);
/* Undoes the savepoint's writes; the transaction stays open. */
void brk_store_savepoint_undo(brk_store_t *self);
/* Number of COMMITs so far (each is one group commit). */
uint64_t brk_store_commits(const brk_store_t *self);

/* A numeric setting kept in the store (policy version, event sequence). */
uint64_t brk_store_meta_get(brk_store_t *self, const char *key, uint64_t def);
lisa_rc_t brk_store_meta_set(brk_store_t *self, const char *key,
                             uint64_t value) LISA_NODISCARD;

/* Stores the task of a group (ground truth included). */
lisa_rc_t brk_store_group_put(brk_store_t *self, const char *group_id,
                              const char *run_id, uint64_t step,
                              const Lisa__TaskSpec *task) LISA_NODISCARD;
/* The task of a group, owned by `arena`. LISA_NOTFOUND when absent. */
lisa_rc_t brk_store_group_task(brk_store_t *self, brk_arena_t *arena,
                               const char *group_id,
                               Lisa__TaskSpec **out) LISA_NODISCARD;

/* Inserts a new rollout (LISA_CONFLICT when the id exists). */
lisa_rc_t brk_store_rollout_put(brk_store_t *self,
                                const Lisa__Rollout *r) LISA_NODISCARD;
/* Writes the mutable fields of r, plus the retry gate and current lease. */
lisa_rc_t brk_store_rollout_update(brk_store_t *self, const Lisa__Rollout *r,
                                   uint64_t not_before_ms,
                                   uint64_t lease_ms) LISA_NODISCARD;
/* Reads one rollout into the arena; LISA_NOTFOUND when absent. */
lisa_rc_t brk_store_rollout_get(brk_store_t *self, brk_arena_t *arena,
                                const char *id,
                                Lisa__Rollout **out) LISA_NODISCARD;

/* Inserts or updates attempt (rollout_id, attempt); expected_spans only
 * ever grows. */
lisa_rc_t brk_store_attempt_put(brk_store_t *self, const Lisa__Attempt *a,
                                uint32_t expected_spans) LISA_NODISCARD;
/* Reads attempt n of a rollout; LISA_NOTFOUND when absent. */
lisa_rc_t brk_store_attempt_get(brk_store_t *self, brk_arena_t *arena,
                                const char *id, uint32_t n,
                                Lisa__Attempt **out) LISA_NODISCARD;
/* Every attempt of a rollout, oldest first, with span counts. */
lisa_rc_t brk_store_attempts_of(brk_store_t *self, brk_arena_t *arena,
                                const char *id, Lisa__Attempt ***out,
                                size_t *n) LISA_NODISCARD;

/* Appends a transitions row. */
lisa_rc_t brk_store_transition(brk_store_t *self, const char *id,
                               uint32_t attempt, Lisa__RolloutState from,
                               Lisa__RolloutState to, const char *event,
                               const char *reason,
                               uint64_t time_ms) LISA_NODISCARD;
/* The transition log of a rollout, oldest first. */
lisa_rc_t brk_store_transitions_of(brk_store_t *self, brk_arena_t *arena,
                                   const char *id, Lisa__Transition ***out,
                                   size_t *n) LISA_NODISCARD;

/* Stores a span unless (rollout, attempt, seq) is present (*dup = true):
 * its bytes go to the span log, an index row into the transaction.
 * `raw`/`raw_len`, when not NULL, are the span's bytes as received (the
 * packed form of *span), stored as they are instead of packing again. */
lisa_rc_t brk_store_span_put(brk_store_t *self, const Lisa__Span *span,
                             const uint8_t *raw, size_t raw_len,
                             bool *dup) LISA_NODISCARD;
/* Same for a span known only by its key and its packed bytes `raw`
 * (what brk_spanscan reads off the wire), stored as they are. */
lisa_rc_t brk_store_span_put_raw(brk_store_t *self, const char *rollout_id,
                                 uint32_t attempt, uint32_t seq,
                                 const uint8_t *raw, size_t raw_len,
                                 bool *dup) LISA_NODISCARD;
/* Highest seq with every lower seq present (-1: none), and the count. */
lisa_rc_t brk_store_span_status(brk_store_t *self, const char *id,
                                uint32_t attempt, int32_t *contiguous,
                                uint32_t *count) LISA_NODISCARD;
/* Spans of a rollout (attempt 0: all attempts), by attempt then seq. */
lisa_rc_t brk_store_spans_of(brk_store_t *self, brk_arena_t *arena,
                             const char *id, uint32_t attempt,
                             Lisa__Span ***out, size_t *n) LISA_NODISCARD;

/* Ids of queued rollouts claimable at now (backoff passed), oldest first. */
lisa_rc_t brk_store_claimable(brk_store_t *self, brk_arena_t *arena,
                              const char *run_id, uint64_t now_ms, size_t limit,
                              char ***ids, size_t *n) LISA_NODISCARD;
/* Ids of open rollouts whose lease (claimed/running) or deadline passed. */
lisa_rc_t brk_store_due(brk_store_t *self, brk_arena_t *arena, uint64_t now_ms,
                        size_t limit, char ***ids, size_t *n) LISA_NODISCARD;
/* Ids of rollouts in `state` (optionally of one run). */
lisa_rc_t brk_store_in_state(brk_store_t *self, brk_arena_t *arena,
                             Lisa__RolloutState state, const char *run_id,
                             char ***ids, size_t *n) LISA_NODISCARD;
/* Ids of open (non-terminal) rollouts of a run. */
lisa_rc_t brk_store_open_of_run(brk_store_t *self, brk_arena_t *arena,
                                const char *run_id, char ***ids,
                                size_t *n) LISA_NODISCARD;

/* Filtered, paged listing (QueryReq without ids); *next is "" at the end. */
lisa_rc_t brk_store_list(brk_store_t *self, brk_arena_t *arena,
                         const char *run_id, bool by_step, uint64_t step,
                         Lisa__RolloutState state, bool terminal_only,
                         const char *after, size_t limit, Lisa__Rollout ***out,
                         size_t *n, char **next) LISA_NODISCARD;

/* Rollout counts per state (of one run when run_id is not empty) and the
 * number of stored spans, into *st. */
lisa_rc_t brk_store_counts(brk_store_t *self, const char *run_id,
                           Lisa__Stats *st) LISA_NODISCARD;

/* Deletes a rollout with its attempts, spans and transitions (and its
 * group when no rollout of it is left). */
lisa_rc_t brk_store_prune(brk_store_t *self, const char *id) LISA_NODISCARD;

/* Deletes the span log segments (but the current one) that no span row
 * names any more. Only between transactions (LISA_CONFLICT inside one),
 * and only once the deletions that freed them are durable: a segment
 * removed before its rows' deletion is durable could be missed. */
lisa_rc_t brk_store_span_gc(brk_store_t *self, size_t *dropped) LISA_NODISCARD;

/* Moves every open lease that ends before lease_ms to lease_ms (used at
 * start-up, so attempts are not failed for the broker's own downtime). */
lisa_rc_t brk_store_extend_leases(brk_store_t *self,
                                  uint64_t lease_ms) LISA_NODISCARD;

/* Idempotency records: the packed reply of the first call under `key`. */
lisa_rc_t brk_store_idem_get(brk_store_t *self, brk_arena_t *arena,
                             const char *key, uint8_t **data,
                             size_t *len) LISA_NODISCARD;
lisa_rc_t brk_store_idem_put(brk_store_t *self, const char *key,
                             const uint8_t *data, size_t len,
                             uint64_t now_ms) LISA_NODISCARD;

#endif
