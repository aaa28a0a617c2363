/*
 * trn_gguf: a reader of GGUF v3 files (llama.cpp's single-file models).
 *
 * A GGUF file is a header, a table of typed metadata (key -> value), a
 * table of tensors (name, shape, ggml type, offset) and the tensor data,
 * each tensor at a multiple of general.alignment (32 by default) from the
 * data's start. The reader maps the file, checks every size and offset
 * against it, and keeps the metadata as a JSON object (integers, reals,
 * booleans, strings, arrays of them).
 *
 * On top of the tables it gives what the trainer needs from such a file:
 * - tensors as fp32: F32, F16, BF16, Q8_0, Q4_0 and Q4_1 are dequantized
 *   (other ggml types are refused by name);
 * - the model: a trn_config_t from the {arch}.* keys (llama, qwen2,
 *   qwen3) and each Hugging Face tensor from its llama.cpp name
 *   (blk.N.attn_q.weight, ...), with the Q/K row permutation that
 *   llama.cpp applies to Llama's q and k projections undone;
 * - the tokenizer: a Hugging Face tokenizer.json (byte-level BPE: token
 *   list, merges, control and user-defined tokens as added tokens, the
 *   pre-tokenizer that tokenizer.ggml.pre names) and a
 *   tokenizer_config.json with the special tokens and the file's chat
 *   template.
 */
#ifndef TRN_GGUF_H
#define TRN_GGUF_H

#include "lisa/lisa_rc.h"
#include "trn_model.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds on what a file may declare. */
#define TRN_GGUF_MAX_TENSORS (1u << 16)
#define TRN_GGUF_MAX_KV      (1u << 16)
#define TRN_GGUF_MAX_STRING  (1u << 22) /* bytes of one string */
#define TRN_GGUF_MAX_ARRAY   (1u << 25) /* elements of one array */
#define TRN_GGUF_MAX_DIMS    4

/* The ggml tensor types the reader dequantizes. */
typedef enum {
    TRN_GGML_F32 = 0,
    TRN_GGML_F16 = 1,
    TRN_GGML_Q4_0 = 2,
    TRN_GGML_Q4_1 = 3,
    TRN_GGML_Q8_0 = 8,
    TRN_GGML_BF16 = 30,
} trn_ggml_type_t;

/* One tensor of the table. ne[0] is the fastest-varying dimension (a
 * [rows, cols] matrix has ne = {cols, rows}). */
typedef struct {
    const char *name;
    int ndim;
    int64_t ne[TRN_GGUF_MAX_DIMS];
    uint32_t type;
    size_t numel;
    size_t nbytes;
    const uint8_t *data; /* in the mapped file */
} trn_gguf_tensor_t;

typedef struct trn_gguf trn_gguf_t;

/* Maps and parses `path`. LISA_INVALID (err says where) for a file that is
 * not GGUF v3 or whose tables do not fit the file; LISA_TOOLARGE past the
 * bounds above. */
lisa_rc_t trn_gguf_open(const char *path, trn_gguf_t **out,
                        trn_err_t *err) LISA_NODISCARD;

/* The same over a buffer in memory, which must outlive the reader (its
 * tensors point into it). */
lisa_rc_t trn_gguf_parse(const uint8_t *buf, size_t len, trn_gguf_t **out,
                         trn_err_t *err) LISA_NODISCARD;

/* Unmaps and frees; safe on NULL and twice. */
void trn_gguf_destroy(trn_gguf_t **g);

/* The metadata as a JSON object keyed as in the file (borrowed). */
const json_t *trn_gguf_meta(const trn_gguf_t *g);

/* Number of tensors, tensor i (borrowed), a tensor by name (or NULL). */
size_t trn_gguf_count(const trn_gguf_t *g);
const trn_gguf_tensor_t *trn_gguf_tensor(const trn_gguf_t *g, size_t i);
const trn_gguf_tensor_t *trn_gguf_find(const trn_gguf_t *g, const char *name);

/* Name of a ggml type ("Q4_0", ...; "?" for an unknown one). */
const char *trn_ggml_type_name(uint32_t type);

/* Dequantizes tensor t into out[numel]. LISA_UNSUPPORTED for a type the
 * reader does not know. */
lisa_rc_t trn_gguf_to_f32(const trn_gguf_tensor_t *t, float *out,
                          trn_err_t *err) LISA_NODISCARD;

/* The model's config from general.architecture and its keys. */
lisa_rc_t trn_gguf_config(const trn_gguf_t *g, trn_config_t *cfg,
                          trn_err_t *err) LISA_NODISCARD;

/* Reads the tensor that Hugging Face calls `hf_name` (e.g.
 * "model.layers.3.self_attn.q_proj.weight") into out, which has `numel`
 * elements in Hugging Face's layout. LISA_NOTFOUND when the file has no
 * such tensor, LISA_INVALID for a wrong size. */
lisa_rc_t trn_gguf_read_hf(const trn_gguf_t *g, const trn_config_t *cfg,
                           const char *hf_name, float *out, size_t numel,
                           trn_err_t *err) LISA_NODISCARD;

/* A tokenizer.json for the file's byte-level BPE tokenizer (caller's
 * string), or NULL with err set. */
char *trn_gguf_tokenizer_json(const trn_gguf_t *g, trn_err_t *err);

/* Writes tokenizer.json and tokenizer_config.json (special tokens, chat
 * template) into the existing directory `dir`. */
lisa_rc_t trn_gguf_write_tokenizer(const trn_gguf_t *g, const char *dir,
                                   trn_err_t *err) LISA_NODISCARD;

#endif
