/*
 * trn_safetensors: reading and writing the safetensors file format.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of
 * JSON mapping each tensor name to {dtype, shape, data_offsets}, then the
 * raw data. Checkpoints of every model we train come in this format, and
 * transformers loads what we write back.
 *
 * Reading maps the file read-only and validates the whole header before
 * anything is used: the header length is bounded (TRN_ST_MAX_HEADER), every
 * entry has a known dtype, at most TRN_ST_MAX_DIMS dimensions, a byte range
 * inside the file whose length matches its shape, and names are unique.
 * Writing lays tensors out in the order they were added, pads the header
 * with spaces to 8 bytes, and marks the file {"format": "pt"}.
 */
#ifndef TRN_SAFETENSORS_H
#define TRN_SAFETENSORS_H

#include "trn_model.h"

#include <stddef.h>
#include <stdint.h>

#define TRN_ST_MAX_HEADER  (100u * 1024u * 1024u)
#define TRN_ST_MAX_DIMS    8
#define TRN_ST_MAX_TENSORS 100000

typedef enum {
    TRN_DT_F32 = 0,
    TRN_DT_BF16 = 1,
    TRN_DT_F16 = 2,
    TRN_DT_I32 = 3,
    TRN_DT_I64 = 4
} trn_dtype_t;

/* One tensor of an open file; `data` points into the mapping. */
typedef struct {
    const char *name;
    trn_dtype_t dtype;
    int ndim;
    int64_t shape[TRN_ST_MAX_DIMS];
    size_t numel;
    const void *data;
    size_t nbytes;
} trn_st_tensor_t;

typedef struct trn_st trn_st_t;

/* Opens and validates `path`. LISA_NOTFOUND if it cannot be opened,
 * LISA_TOOLARGE for an oversized header, LISA_INVALID for anything else
 * malformed, LISA_UNSUPPORTED for an unknown dtype. */
lisa_rc_t trn_st_open(const char *path, trn_st_t **out,
                      trn_err_t *err) LISA_NODISCARD;

/* Validates a whole file already in memory (`data` must outlive the
 * result, which borrows it); the same checks and codes as trn_st_open. */
lisa_rc_t trn_st_parse(const void *data, size_t len, trn_st_t **out,
                       trn_err_t *err) LISA_NODISCARD;

/* Closes the file; safe on NULL and twice. */
void trn_st_destroy(trn_st_t **st);

/* Number of tensors. */
size_t trn_st_count(const trn_st_t *st);

/* Tensor i (in header order; borrowed, valid until destroy). */
const trn_st_tensor_t *trn_st_at(const trn_st_t *st, size_t i);

/* Tensor named `name`, or NULL. */
const trn_st_tensor_t *trn_st_find(const trn_st_t *st, const char *name);

/* Bytes per element of a dtype. */
size_t trn_dtype_size(trn_dtype_t dt);

/* Name of a dtype as safetensors spells it ("F32", "BF16", ...). */
const char *trn_dtype_name(trn_dtype_t dt);

/* Converts a floating tensor (F32, BF16, F16) to fp32 into dst[numel].
 * LISA_UNSUPPORTED for integer tensors. */
lisa_rc_t trn_st_to_f32(const trn_st_tensor_t *t, float *dst) LISA_NODISCARD;

/* Round-to-nearest-even fp32 -> bf16 bits, and back. */
uint16_t trn_f32_to_bf16(float f);
float trn_bf16_to_f32(uint16_t h);

typedef struct trn_st_writer trn_st_writer_t;

/* A writer with no tensors. */
trn_st_writer_t *trn_st_writer_new(void);

/* Frees the writer; safe on NULL and twice. */
void trn_st_writer_destroy(trn_st_writer_t **w);

/* Adds an fp32 array stored as `dtype` (F32 or BF16). The name is copied;
 * `data` must stay valid until trn_st_writer_write. */
void trn_st_writer_add_f32(trn_st_writer_t *w, const char *name,
                           trn_dtype_t dtype, int ndim, const int64_t *shape,
                           const float *data);

/* Adds raw bytes already in `dtype` (numel from the shape). */
void trn_st_writer_add_raw(trn_st_writer_t *w, const char *name,
                           trn_dtype_t dtype, int ndim, const int64_t *shape,
                           const void *data);

/* Writes everything to `path` (through a temporary file and a rename). */
lisa_rc_t trn_st_writer_write(const trn_st_writer_t *w, const char *path,
                              trn_err_t *err) LISA_NODISCARD;

#endif
