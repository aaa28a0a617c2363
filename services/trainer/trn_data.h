/*
 * trn_data: the training and validation prompts, from verl-format files.
 *
 * A file is a JSON array of records or JSON Lines (one record per line),
 * as verl's converters write train_verl.json / test_verl.json. A record:
 *
 *   {"prompt": [...chat messages...], "data_source": "math_mini",
 *    "reward_model": {"ground_truth": "70", ...},
 *    "extra_info": {"id": "aime25_0_00", "problem_statement": "...",
 *                   "input_files": "{\"a.txt\": \"...\"}", "qa_type": ...}}
 *
 * Required: data_source (string), reward_model.ground_truth (string, or a
 * number / array / object kept as its JSON text), and a problem statement
 * (extra_info.problem_statement, else the content of the last message of
 * prompt). extra_info.id (string or integer) defaults to "<file>#<index>".
 * extra_info.input_files is an object, or a string holding a JSON object,
 * mapping file names to text; they become the task's documents. The rest of
 * extra_info (without any ground_truth) travels as the task's extra_info.
 * Errors name the file and the record (0-based index, or JSONL line).
 *
 * A list is comma-separated paths; a directory stands for its *.json and
 * *.jsonl files in name order. The order of a training run is a seeded
 * shuffle per epoch (or the file order), cut into batches; a position is
 * (epoch, batch) so a checkpoint can resume exactly.
 */
#ifndef TRN_DATA_H
#define TRN_DATA_H

#include "lisa/lisa_rc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRN_DATA_MAX_FILE    (1024u * 1024u * 1024u) /* bytes of one file */
#define TRN_DATA_MAX_LINE    (256u * 1024u * 1024u)  /* bytes of one line */
#define TRN_DATA_MAX_RECORDS (1u << 24)
#define TRN_DATA_MAX_FILES   1024u /* files in one list */

typedef struct {
    char *name;
    char *content;
    size_t len;
} trn_doc_t;

typedef struct {
    char *id;
    char *data_source;
    char *problem;
    char *ground_truth;
    char *extra_json; /* extra_info minus ground_truth, "{}" when none */
    trn_doc_t *docs;
    size_t n_docs;
} trn_sample_t;

typedef struct trn_data trn_data_t;

/* Loads every record of a comma-separated list of files / directories.
 * LISA_OK; LISA_NOTFOUND (a path does not exist); LISA_INVALID (bad JSON,
 * missing field: err names file and record; empty list or no records). */
lisa_rc_t trn_data_load(const char *list, trn_data_t **out, char *err,
                        size_t errlen) LISA_NODISCARD;

/* Frees the data; safe on NULL and twice. */
void trn_data_destroy(trn_data_t **d);

/* Number of records. */
size_t trn_data_len(const trn_data_t *d);

/* Record i (borrowed), or NULL past the end. */
const trn_sample_t *trn_data_get(const trn_data_t *d, size_t i);

/* The order of epoch `epoch`: perm[n] is a permutation of 0..n-1, a seeded
 * Fisher-Yates shuffle when `shuffle`, else the identity. Deterministic. */
void trn_data_order(size_t n, bool shuffle, uint64_t seed, uint64_t epoch,
                    size_t *perm);

#endif
