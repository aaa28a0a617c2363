/*
 * trn_gguf tests: a GGUF v3 file built byte by byte (metadata of every
 * scalar type and an array, tensors in F32, F16, Q8_0, Q4_0 and Q4_1 with
 * values worked out by hand) reads back as written; truncated, misaligned
 * and otherwise malformed files are refused with a reason. The reader
 * against llama.cpp's own writer and transformers is
 * tests/integration/trainer/test_gguf_oracle.py. The first test is the
 * usage example.
 */
#include "trn_gguf.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    uint8_t b[8192];
    size_t n;
} buf_t;

static void
put(buf_t *b, const void *p, size_t n)
{
    cr_assert_leq(b->n + n, sizeof b->b);
    memcpy(b->b + b->n, p, n);
    b->n += n;
}

static void
u32(buf_t *b, uint32_t v)
{
    put(b, &v, 4);
}

static void
u64(buf_t *b, uint64_t v)
{
    put(b, &v, 8);
}

static void
str(buf_t *b, const char *s)
{
    u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void
kv_u32(buf_t *b, const char *k, uint32_t v)
{
    str(b, k);
    u32(b, 4); /* UINT32 */
    u32(b, v);
}

static void
tensor_info(buf_t *b, const char *name, uint64_t ne0, uint32_t type,
            uint64_t off)
{
    str(b, name);
    u32(b, 1);
    u64(b, ne0);
    u32(b, type);
    u64(b, off);
}

/* Writes the file and returns its path (static buffer). */
static const char *
write_file(const buf_t *b)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/trn_gguf_XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, b->b, b->n), (ssize_t) b->n);
    close(fd);
    return path;
}

/* A file: 5 metadata keys, tensors a (F32 [4]), h (F16 [2]), q (Q8_0
 * [32]), f (Q4_0 [32]), g (Q4_1 [32]). */
static void
build(buf_t *b, size_t *data_at)
{
    memset(b, 0, sizeof *b);
    u32(b, 0x46554747u);
    u32(b, 3);
    u64(b, 5);
    u64(b, 5);
    str(b, "general.architecture");
    u32(b, 8);
    str(b, "llama");
    kv_u32(b, "llama.block_count", 2);
    str(b, "t.i8");
    u32(b, 1);
    put(b, "\xfe", 1); /* -2 */
    str(b, "t.f32");
    u32(b, 6);
    float f = 0.5f;
    put(b, &f, 4);
    str(b, "t.arr");
    u32(b, 9);
    u32(b, 8);
    u64(b, 2);
    str(b, "x");
    str(b, "y");
    tensor_info(b, "a", 4, 0, 0);
    tensor_info(b, "h", 2, 1, 32);
    tensor_info(b, "q", 32, 8, 64);
    tensor_info(b, "f", 32, 2, 128);
    tensor_info(b, "g", 32, 3, 160);
    b->n = (b->n + 31) / 32 * 32;
    *data_at = b->n;
    float a[4] = {1, -2, 3.5f, 0};
    put(b, a, sizeof a);
    b->n = *data_at + 32;
    uint16_t h[2] = {0x3c00, 0xc000}; /* 1.0, -2.0 */
    put(b, h, sizeof h);
    b->n = *data_at + 64;
    uint16_t d = 0x3800; /* 0.5 */
    put(b, &d, 2);
    for (int j = 0; j < 32; j++) {
        int8_t q = (int8_t) (j - 16);
        put(b, &q, 1);
    }
    b->n = *data_at + 128;
    d = 0x4000; /* 2.0 */
    put(b, &d, 2);
    for (int j = 0; j < 16; j++) {
        uint8_t q = (uint8_t) ((j & 0xf) | ((15 - j) << 4));
        put(b, &q, 1);
    }
    b->n = *data_at + 160;
    uint16_t dm[2] = {0x3c00, 0xbc00}; /* d 1.0, m -1.0 */
    put(b, dm, sizeof dm);
    for (int j = 0; j < 16; j++) {
        uint8_t q = (uint8_t) (j | (j << 4));
        put(b, &q, 1);
    }
}

Test(trn_gguf, usage)
{
    buf_t b;
    size_t at;
    build(&b, &at);
    const char *path = write_file(&b);
    /* Open a file, look at its metadata, dequantize a tensor. */
    trn_gguf_t *g = NULL;
    trn_err_t err;
    cr_assert_eq(trn_gguf_open(path, &g, &err), LISA_OK, "%s", err.msg);
    const json_t *meta = trn_gguf_meta(g);
    cr_assert_str_eq(
        json_string_value(json_object_get(meta, "general.architecture")),
        "llama");
    cr_assert_eq(json_integer_value(json_object_get(meta, "llama.block_count")),
                 2);
    cr_assert_eq(json_integer_value(json_object_get(meta, "t.i8")), -2);
    cr_assert_float_eq(json_real_value(json_object_get(meta, "t.f32")), 0.5,
                       1e-9);
    cr_assert_str_eq(
        json_string_value(json_array_get(json_object_get(meta, "t.arr"), 1)),
        "y");
    cr_assert_eq(trn_gguf_count(g), 5);
    const trn_gguf_tensor_t *q = trn_gguf_find(g, "q");
    cr_assert_not_null(q);
    cr_assert_str_eq(trn_ggml_type_name(q->type), "Q8_0");
    float out[32];
    cr_assert_eq(trn_gguf_to_f32(q, out, &err), LISA_OK);
    for (int j = 0; j < 32; j++)
        cr_assert_float_eq(out[j], 0.5f * (float) (j - 16), 0);
    trn_gguf_destroy(&g);
    trn_gguf_destroy(&g);
    unlink(path);
}

Test(trn_gguf, every_type_dequantizes)
{
    buf_t b;
    size_t at;
    build(&b, &at);
    const char *path = write_file(&b);
    trn_gguf_t *g = NULL;
    cr_assert_eq(trn_gguf_open(path, &g, NULL), LISA_OK);
    float out[32];
    cr_assert_eq(trn_gguf_to_f32(trn_gguf_find(g, "a"), out, NULL), LISA_OK);
    cr_assert(out[0] == 1 && out[1] == -2 && out[2] == 3.5f && out[3] == 0);
    cr_assert_eq(trn_gguf_to_f32(trn_gguf_find(g, "h"), out, NULL), LISA_OK);
    cr_assert(out[0] == 1 && out[1] == -2);
    /* Q4_0: low nibbles are elements 0..15, high ones 16..31, (q-8)*d */
    cr_assert_eq(trn_gguf_to_f32(trn_gguf_find(g, "f"), out, NULL), LISA_OK);
    for (int j = 0; j < 16; j++) {
        cr_assert_float_eq(out[j], 2.0f * (float) (j - 8), 0);
        cr_assert_float_eq(out[j + 16], 2.0f * (float) (15 - j - 8), 0);
    }
    /* Q4_1: q * d + m */
    cr_assert_eq(trn_gguf_to_f32(trn_gguf_find(g, "g"), out, NULL), LISA_OK);
    for (int j = 0; j < 16; j++) {
        cr_assert_float_eq(out[j], (float) j - 1.0f, 0);
        cr_assert_float_eq(out[j + 16], (float) j - 1.0f, 0);
    }
    /* the config needs the architecture's keys and token_embd.weight */
    trn_config_t cfg;
    trn_err_t err;
    cr_assert_eq(trn_gguf_config(g, &cfg, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "token_embd"), "%s", err.msg);
    trn_gguf_destroy(&g);
    unlink(path);
}

/* The first occurrence of needle[0..n) in the buffer (or NULL). */
static uint8_t *
find(uint8_t *hay, size_t len, const char *needle, size_t n)
{
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(hay + i, needle, n) == 0)
            return hay + i;
    return NULL;
}

static void
expect_refused(buf_t *b, lisa_rc_t rc, const char *why)
{
    const char *path = write_file(b);
    trn_gguf_t *g = NULL;
    trn_err_t err = {{0}};
    cr_assert_eq(trn_gguf_open(path, &g, &err), rc, "%s", err.msg);
    cr_assert_null(g);
    cr_assert(strstr(err.msg, why), "'%s' lacks '%s'", err.msg, why);
    unlink(path);
}

Test(trn_gguf, malformed_files_are_refused)
{
    buf_t b;
    size_t at;
    build(&b, &at);
    /* every truncation of the tables or the data */
    size_t full = b.n;
    for (size_t n = 24; n < full; n += 7) {
        b.n = n;
        const char *path = write_file(&b);
        trn_gguf_t *g = NULL;
        lisa_rc_t rc = trn_gguf_open(path, &g, NULL);
        cr_assert_neq(rc, LISA_OK, "truncated at %zu opened", n);
        cr_assert_null(g);
        unlink(path);
    }
    build(&b, &at);
    b.b[4] = 2; /* version 2 */
    expect_refused(&b, LISA_INVALID, "GGUF v3");
    build(&b, &at);
    memcpy(b.b + 8, &(uint64_t){1u << 20}, 8); /* tensor count */
    expect_refused(&b, LISA_TOOLARGE, "bounds");
    /* a tensor type lisa does not read (Q5_0 = 6) */
    build(&b, &at);
    uint8_t *t = find(b.b, b.n, "\x01\x00\x00\x00\x00\x00\x00\x00h", 9);
    cr_assert_not_null(t);
    t[9 + 4 + 8] = 6;
    expect_refused(&b, LISA_UNSUPPORTED, "type 6");
    /* a misaligned offset */
    build(&b, &at);
    t = find(b.b, b.n, "\x01\x00\x00\x00\x00\x00\x00\x00h", 9);
    t[9 + 4 + 8 + 4] = 33;
    expect_refused(&b, LISA_INVALID, "misaligned");
    /* an unknown metadata type */
    build(&b, &at);
    t = find(b.b, b.n, "t.f32", 5);
    t[5] = 77;
    expect_refused(&b, LISA_INVALID, "unknown value type");
}
