/*
 * trn_safetensors: safetensors reader (mmap, validated header) and writer.
 *
 * The reader trusts nothing in the file: the header length is checked
 * against both the bound and the file size before it is parsed, every
 * entry's byte range is checked against the data section, and the byte
 * count must equal numel * dtype size, with numel computed under an
 * overflow check. Files are written through a temporary name and renamed,
 * so a crash never leaves a half-written checkpoint under the real name.
 */
#include "trn_safetensors.h"

#include "lisa/lisa_mem.h"
#include "trn_err.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct trn_st {
    void *map;
    size_t map_len;
    trn_st_tensor_t *tensors;
    size_t n;
};

static const struct {
    const char *name;
    trn_dtype_t dt;
    size_t size;
} s_dtypes[] = {
    {"F32", TRN_DT_F32, 4}, {"BF16", TRN_DT_BF16, 2}, {"F16", TRN_DT_F16, 2},
    {"I32", TRN_DT_I32, 4}, {"I64", TRN_DT_I64, 8},
};
#define S_NDTYPES (sizeof s_dtypes / sizeof s_dtypes[0])

size_t
trn_dtype_size(trn_dtype_t dt)
{
    for (size_t i = 0; i < S_NDTYPES; i++)
        if (s_dtypes[i].dt == dt)
            return s_dtypes[i].size;
    return 0;
}

const char *
trn_dtype_name(trn_dtype_t dt)
{
    for (size_t i = 0; i < S_NDTYPES; i++)
        if (s_dtypes[i].dt == dt)
            return s_dtypes[i].name;
    return "?";
}

static int
s_dtype_parse(const char *s, trn_dtype_t *out)
{
    for (size_t i = 0; i < S_NDTYPES; i++)
        if (strcmp(s_dtypes[i].name, s) == 0) {
            *out = s_dtypes[i].dt;
            return 0;
        }
    return -1;
}

uint16_t
trn_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet NaN */
        return (uint16_t) ((u >> 16) | 0x40u);
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    return (uint16_t) (u >> 16);
}

float
trn_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t) h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float
s_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t) (h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400u));
            u = sign | ((uint32_t) (127 - 15 - e) << 23) |
                ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

lisa_rc_t
trn_st_to_f32(const trn_st_tensor_t *t, float *dst)
{
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case TRN_DT_F32:
        memcpy(dst, p, t->numel * 4);
        return LISA_OK;
    case TRN_DT_BF16:
        for (size_t i = 0; i < t->numel; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = trn_bf16_to_f32(h);
        }
        return LISA_OK;
    case TRN_DT_F16:
        for (size_t i = 0; i < t->numel; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = s_f16_to_f32(h);
        }
        return LISA_OK;
    case TRN_DT_I32:
    case TRN_DT_I64:
        break;
    }
    return LISA_UNSUPPORTED;
}

static void
s_free_tensors(trn_st_t *st)
{
    for (size_t i = 0; i < st->n; i++)
        lisa_free(&st->tensors[i].name);
    lisa_free(&st->tensors);
    st->n = 0;
}

void
trn_st_destroy(trn_st_t **pst)
{
    if (!pst || !*pst)
        return;
    trn_st_t *st = *pst;
    s_free_tensors(st);
    if (st->map && st->map != MAP_FAILED)
        munmap(st->map, st->map_len);
    lisa_free(pst);
}

/* Parses one header entry into *t; data_len is the data section's size. */
static lisa_rc_t
s_parse_entry(const char *path, const char *name, json_t *v,
              const unsigned char *data, size_t data_len, trn_st_tensor_t *t,
              trn_err_t *err)
{
    if (!json_is_object(v))
        return trn_fail(err, LISA_INVALID, "%s: entry '%s' is not an object",
                        path, name);
    json_t *jdt = json_object_get(v, "dtype");
    json_t *jshape = json_object_get(v, "shape");
    json_t *joff = json_object_get(v, "data_offsets");
    if (!json_is_string(jdt) || !json_is_array(jshape) ||
        !json_is_array(joff) || json_array_size(joff) != 2)
        return trn_fail(err, LISA_INVALID,
                        "%s: entry '%s' needs dtype, shape and two "
                        "data_offsets",
                        path, name);
    if (s_dtype_parse(json_string_value(jdt), &t->dtype) != 0)
        return trn_fail(err, LISA_UNSUPPORTED,
                        "%s: tensor '%s' has unsupported dtype %s", path, name,
                        json_string_value(jdt));
    size_t nd = json_array_size(jshape);
    if (nd > TRN_ST_MAX_DIMS)
        return trn_fail(err, LISA_INVALID, "%s: tensor '%s' has %zu dims", path,
                        name, nd);
    t->ndim = (int) nd;
    size_t numel = 1;
    for (size_t d = 0; d < nd; d++) {
        json_t *e = json_array_get(jshape, d);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return trn_fail(err, LISA_INVALID,
                            "%s: tensor '%s' has a bad dimension", path, name);
        uint64_t dim = (uint64_t) json_integer_value(e);
        if (dim != 0 && numel > SIZE_MAX / 16 / dim)
            return trn_fail(err, LISA_INVALID, "%s: tensor '%s' is too large",
                            path, name);
        numel *= (size_t) dim;
        t->shape[d] = (int64_t) dim;
    }
    json_t *jb = json_array_get(joff, 0), *je = json_array_get(joff, 1);
    if (!json_is_integer(jb) || !json_is_integer(je) ||
        json_integer_value(jb) < 0 ||
        json_integer_value(je) < json_integer_value(jb) ||
        (uint64_t) json_integer_value(je) > data_len)
        return trn_fail(err, LISA_INVALID,
                        "%s: tensor '%s' has data_offsets outside the file "
                        "(truncated?)",
                        path, name);
    size_t b = (size_t) json_integer_value(jb);
    size_t e = (size_t) json_integer_value(je);
    if (e - b != numel * trn_dtype_size(t->dtype))
        return trn_fail(err, LISA_INVALID,
                        "%s: tensor '%s' holds %zu bytes, its shape needs %zu",
                        path, name, e - b, numel * trn_dtype_size(t->dtype));
    t->numel = numel;
    t->data = data + b;
    t->nbytes = e - b;
    return LISA_OK;
}

/* Validates `len` bytes at `p` (the whole file) into st's tensor table.
 * `what` names the source in messages. */
static lisa_rc_t
s_parse(trn_st_t *st, const unsigned char *p, size_t len, const char *what,
        trn_err_t *err)
{
    lisa_rc_t rc = LISA_OK;
    json_t *root = NULL;
    if (len < 8)
        return trn_fail(err, LISA_INVALID,
                        "%s: %zu bytes is too short for a safetensors file",
                        what, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | p[i];
    if (hlen > TRN_ST_MAX_HEADER)
        return trn_fail(err, LISA_TOOLARGE,
                        "%s: header of %llu bytes exceeds the %u-byte bound",
                        what, (unsigned long long) hlen, TRN_ST_MAX_HEADER);
    if (hlen > len - 8)
        return trn_fail(err, LISA_INVALID,
                        "%s: header of %llu bytes runs past the end of the "
                        "file (truncated?)",
                        what, (unsigned long long) hlen);
    json_error_t jerr;
    root = json_loadb((const char *) p + 8, (size_t) hlen,
                      JSON_REJECT_DUPLICATES, &jerr);
    if (!root || !json_is_object(root)) {
        rc = trn_fail(err, LISA_INVALID, "%s: header is not a JSON object: %s",
                      what, root ? "wrong type" : jerr.text);
        goto out;
    }
    size_t cap = json_object_size(root);
    if (cap > TRN_ST_MAX_TENSORS) {
        rc = trn_fail(err, LISA_TOOLARGE, "%s: %zu tensors is too many", what,
                      cap);
        goto out;
    }
    st->tensors = lisa_calloc(cap ? cap : 1, sizeof *st->tensors);
    const unsigned char *data = p + 8 + hlen;
    size_t data_len = len - 8 - (size_t) hlen;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        trn_st_tensor_t *t = &st->tensors[st->n];
        rc = s_parse_entry(what, key, val, data, data_len, t, err);
        if (rc != LISA_OK)
            goto out;
        t->name = lisa_strdup(key);
        st->n++;
    }
out:
    json_decref(root);
    return rc;
}

lisa_rc_t
trn_st_parse(const void *data, size_t len, trn_st_t **out, trn_err_t *err)
{
    trn_st_t *st = lisa_calloc(1, sizeof *st);
    lisa_rc_t rc = s_parse(st, data, len, "safetensors buffer", err);
    if (rc != LISA_OK)
        trn_st_destroy(&st);
    *out = st;
    return rc;
}

lisa_rc_t
trn_st_open(const char *path, trn_st_t **out, trn_err_t *err)
{
    lisa_rc_t rc = LISA_OK;
    *out = NULL;
    trn_st_t *st = lisa_calloc(1, sizeof *st);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = trn_fail(err, LISA_NOTFOUND, "%s: cannot open: %s", path,
                      strerror(errno));
        goto out;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        rc = trn_fail(err, LISA_INVALID, "%s: not a regular file", path);
        goto out;
    }
    if (sb.st_size < 8) {
        rc = trn_fail(err, LISA_INVALID,
                      "%s: %lld bytes is too short for a safetensors file",
                      path, (long long) sb.st_size);
        goto out;
    }
    st->map_len = (size_t) sb.st_size;
    st->map = mmap(NULL, st->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (st->map == MAP_FAILED) {
        st->map = NULL;
        rc = trn_fail(err, LISA_ERR, "%s: mmap failed: %s", path,
                      strerror(errno));
        goto out;
    }
    rc = s_parse(st, st->map, st->map_len, path, err);
    if (rc != LISA_OK)
        goto out;
    *out = st;
    st = NULL;
out:
    if (fd >= 0)
        close(fd);
    trn_st_destroy(&st);
    return rc;
}

size_t
trn_st_count(const trn_st_t *st)
{
    return st->n;
}

const trn_st_tensor_t *
trn_st_at(const trn_st_t *st, size_t i)
{
    return i < st->n ? &st->tensors[i] : NULL;
}

const trn_st_tensor_t *
trn_st_find(const trn_st_t *st, const char *name)
{
    for (size_t i = 0; i < st->n; i++)
        if (strcmp(st->tensors[i].name, name) == 0)
            return &st->tensors[i];
    return NULL;
}

/* ---- writer ------------------------------------------------------------ */

typedef struct {
    char *name;
    trn_dtype_t dtype;
    int ndim;
    int64_t shape[TRN_ST_MAX_DIMS];
    size_t numel;
    const float *f32; /* converted on write, or */
    const void *raw;  /* written as is */
} s_wentry_t;

struct trn_st_writer {
    s_wentry_t *e;
    size_t n, cap;
};

trn_st_writer_t *
trn_st_writer_new(void)
{
    return lisa_calloc(1, sizeof(trn_st_writer_t));
}

void
trn_st_writer_destroy(trn_st_writer_t **pw)
{
    if (!pw || !*pw)
        return;
    trn_st_writer_t *w = *pw;
    for (size_t i = 0; i < w->n; i++)
        lisa_free(&w->e[i].name);
    lisa_free(&w->e);
    lisa_free(pw);
}

static s_wentry_t *
s_writer_push(trn_st_writer_t *w, const char *name, trn_dtype_t dtype, int ndim,
              const int64_t *shape)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->e = lisa_realloc(w->e, w->cap * sizeof *w->e);
    }
    s_wentry_t *e = &w->e[w->n++];
    memset(e, 0, sizeof *e);
    e->name = lisa_strdup(name);
    e->dtype = dtype;
    e->ndim = ndim;
    e->numel = 1;
    for (int d = 0; d < ndim; d++) {
        e->shape[d] = shape[d];
        e->numel *= (size_t) shape[d];
    }
    return e;
}

void
trn_st_writer_add_f32(trn_st_writer_t *w, const char *name, trn_dtype_t dtype,
                      int ndim, const int64_t *shape, const float *data)
{
    s_writer_push(w, name, dtype, ndim, shape)->f32 = data;
}

void
trn_st_writer_add_raw(trn_st_writer_t *w, const char *name, trn_dtype_t dtype,
                      int ndim, const int64_t *shape, const void *data)
{
    s_writer_push(w, name, dtype, ndim, shape)->raw = data;
}

static int
s_write_entry(FILE *f, const s_wentry_t *e)
{
    size_t esz = trn_dtype_size(e->dtype);
    if (e->raw || e->dtype == TRN_DT_F32) {
        const void *src = e->raw ? e->raw : (const void *) e->f32;
        return fwrite(src, esz, e->numel, f) == e->numel ? 0 : -1;
    }
    uint16_t buf[4096];
    for (size_t i = 0; i < e->numel;) {
        size_t k = e->numel - i < 4096 ? e->numel - i : 4096;
        for (size_t j = 0; j < k; j++)
            buf[j] = trn_f32_to_bf16(e->f32[i + j]);
        if (fwrite(buf, 2, k, f) != k)
            return -1;
        i += k;
    }
    return 0;
}

lisa_rc_t
trn_st_writer_write(const trn_st_writer_t *w, const char *path, trn_err_t *err)
{
    lisa_rc_t rc = LISA_OK;
    char *hdr = NULL, *tmp = NULL;
    FILE *f = NULL;
    json_t *root = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    size_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const s_wentry_t *e = &w->e[i];
        json_t *ent = json_object();
        json_t *shape = json_array();
        for (int d = 0; d < e->ndim; d++)
            json_array_append_new(shape, json_integer(e->shape[d]));
        size_t nb = e->numel * trn_dtype_size(e->dtype);
        json_t *offs = json_array();
        json_array_append_new(offs, json_integer((json_int_t) off));
        json_array_append_new(offs, json_integer((json_int_t) (off + nb)));
        json_object_set_new(ent, "dtype",
                            json_string(trn_dtype_name(e->dtype)));
        json_object_set_new(ent, "shape", shape);
        json_object_set_new(ent, "data_offsets", offs);
        json_object_set_new(root, e->name, ent);
        off += nb;
    }
    hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!hdr) {
        rc = trn_fail(err, LISA_ERR, "%s: cannot encode header", path);
        goto out;
    }
    size_t hl = strlen(hdr);
    size_t padded = (hl + 7) / 8 * 8;
    size_t tlen = strlen(path) + 8;
    tmp = lisa_malloc(tlen);
    snprintf(tmp, tlen, "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (!f) {
        rc = trn_fail(err, LISA_ERR, "%s: cannot create: %s", tmp,
                      strerror(errno));
        goto out;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char) ((uint64_t) padded >> (8 * i));
    int bad = fwrite(len8, 1, 8, f) != 8 || fwrite(hdr, 1, hl, f) != hl;
    for (size_t i = hl; i < padded && !bad; i++)
        bad = fputc(' ', f) == EOF;
    for (size_t i = 0; i < w->n && !bad; i++)
        bad = s_write_entry(f, &w->e[i]) != 0;
    if (fclose(f) != 0)
        bad = 1;
    f = NULL;
    if (bad || rename(tmp, path) != 0) {
        rc = trn_fail(err, LISA_ERR, "%s: write failed: %s", path,
                      strerror(errno));
        unlink(tmp);
        goto out;
    }
out:
    if (f)
        fclose(f);
    lisa_free(&tmp);
    free(hdr);
    json_decref(root);
    return rc;
}
