/*
 * trn_safetensors tests: write/read round trips in every dtype, and files
 * that must be refused with a clear reason (truncated, oversized header,
 * offsets outside the file, byte counts that do not match the shape,
 * unknown dtypes, duplicate names). Model loading from such files, and
 * from sharded checkpoints, is tested here too. The first test is the
 * usage example.
 */
#include "trn_model.h"
#include "trn_safetensors.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];

static void
setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/trn_st_XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir));
}

static void
teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    cr_assert_eq(system(cmd), 0);
}

static char *
path_in(const char *name)
{
    static char p[160];
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    return p;
}

/* Writes a raw file: 8-byte length, header text, then `data_len` zeros. */
static void
write_raw(const char *path, uint64_t declared, const char *hdr, size_t data_len)
{
    FILE *f = fopen(path, "wb");
    unsigned char l8[8];
    for (int i = 0; i < 8; i++)
        l8[i] = (unsigned char) (declared >> (8 * i));
    fwrite(l8, 1, 8, f);
    fwrite(hdr, 1, strlen(hdr), f);
    for (size_t i = 0; i < data_len; i++)
        fputc(0, f);
    fclose(f);
}

static lisa_rc_t
open_raw(const char *hdr, size_t data_len, trn_err_t *err)
{
    write_raw(path_in("x.safetensors"), strlen(hdr), hdr, data_len);
    trn_st_t *st = NULL;
    lisa_rc_t rc = trn_st_open(path_in("x.safetensors"), &st, err);
    trn_st_destroy(&st);
    return rc;
}

Test(trn_safetensors, usage, .init = setup, .fini = teardown)
{
    float w[6] = {1, -2, 3.5f, 0.25f, 1e-3f, 7};
    int64_t ids[3] = {5, 6, 7};
    int64_t s23[2] = {2, 3}, s3[1] = {3};
    trn_st_writer_t *wr = trn_st_writer_new();
    trn_st_writer_add_f32(wr, "w", TRN_DT_F32, 2, s23, w);
    trn_st_writer_add_f32(wr, "w_bf16", TRN_DT_BF16, 2, s23, w);
    trn_st_writer_add_raw(wr, "ids", TRN_DT_I64, 1, s3, ids);
    trn_err_t err;
    cr_assert_eq(trn_st_writer_write(wr, path_in("a.safetensors"), &err),
                 LISA_OK, "%s", err.msg);
    trn_st_writer_destroy(&wr);
    cr_assert_null(wr);

    trn_st_t *st = NULL;
    cr_assert_eq(trn_st_open(path_in("a.safetensors"), &st, &err), LISA_OK,
                 "%s", err.msg);
    cr_assert_eq(trn_st_count(st), 3);
    const trn_st_tensor_t *t = trn_st_find(st, "w");
    cr_assert_eq(t->dtype, TRN_DT_F32);
    cr_assert_eq(t->ndim, 2);
    cr_assert_eq(t->shape[1], 3);
    float back[6];
    cr_assert_eq(trn_st_to_f32(t, back), LISA_OK);
    cr_assert_arr_eq(back, w, sizeof w);
    cr_assert_eq(trn_st_to_f32(trn_st_find(st, "w_bf16"), back), LISA_OK);
    for (int i = 0; i < 6; i++)
        cr_assert(fabsf(back[i] - w[i]) <= fabsf(w[i]) / 256);
    cr_assert_eq(trn_st_to_f32(trn_st_find(st, "ids"), back), LISA_UNSUPPORTED);
    cr_assert_null(trn_st_find(st, "nope"));
    trn_st_destroy(&st);
    trn_st_destroy(&st);
}

Test(trn_safetensors, bf16_and_f16_conversions)
{
    cr_assert_eq(trn_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(trn_bf16_to_f32(0x3f80), 1.0f);
    /* round to nearest even: 1 + 2^-8 is a tie, goes to 1 */
    cr_assert_eq(trn_f32_to_bf16(1.00390625f), 0x3f80);
    /* 1 + 3 * 2^-8 ties up to the even neighbour 1 + 2^-6 */
    cr_assert_eq(trn_f32_to_bf16(1.01171875f), 0x3f82);
    cr_assert(isnan(trn_bf16_to_f32(trn_f32_to_bf16(NAN))));
    /* F16 through a file: 1.0, -2.0, 65504, smallest subnormal */
    uint16_t h[4] = {0x3c00, 0xc000, 0x7bff, 0x0001};
    trn_st_tensor_t t = {.dtype = TRN_DT_F16, .numel = 4, .data = h};
    float f[4];
    cr_assert_eq(trn_st_to_f32(&t, f), LISA_OK);
    cr_assert_eq(f[0], 1.0f);
    cr_assert_eq(f[1], -2.0f);
    cr_assert_eq(f[2], 65504.0f);
    cr_assert_float_eq(f[3], 5.960464477539063e-08f, 1e-15);
}

Test(trn_safetensors, bad_files_are_refused, .init = setup, .fini = teardown)
{
    trn_err_t err;
    trn_st_t *st = NULL;
    /* missing */
    cr_assert_eq(trn_st_open(path_in("none"), &st, &err), LISA_NOTFOUND);
    cr_assert(strstr(err.msg, "cannot open"));
    /* too short */
    FILE *f = fopen(path_in("short"), "wb");
    fputs("abc", f);
    fclose(f);
    cr_assert_eq(trn_st_open(path_in("short"), &st, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "too short"));
    /* header length over the bound */
    write_raw(path_in("big"), (uint64_t) 1 << 40, "{}", 0);
    cr_assert_eq(trn_st_open(path_in("big"), &st, &err), LISA_TOOLARGE);
    cr_assert(strstr(err.msg, "exceeds"));
    /* header length past the end of the file */
    write_raw(path_in("trunc"), 4096, "{}", 0);
    cr_assert_eq(trn_st_open(path_in("trunc"), &st, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "truncated"));
    /* not JSON / not an object */
    cr_assert_eq(open_raw("{\"a\":", 0, &err), LISA_INVALID);
    cr_assert_eq(open_raw("[1,2]", 0, &err), LISA_INVALID);
    /* data truncated: offsets past the data section */
    cr_assert_eq(open_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],"
                          "\"data_offsets\":[0,16]}}",
                          8, &err),
                 LISA_INVALID);
    cr_assert(strstr(err.msg, "outside"), "%s", err.msg);
    /* byte count does not match the shape */
    cr_assert_eq(open_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],"
                          "\"data_offsets\":[0,16]}}",
                          16, &err),
                 LISA_INVALID);
    cr_assert(strstr(err.msg, "its shape needs 12"), "%s", err.msg);
    /* unknown dtype */
    cr_assert_eq(open_raw("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],"
                          "\"data_offsets\":[0,4]}}",
                          4, &err),
                 LISA_UNSUPPORTED);
    cr_assert(strstr(err.msg, "F8_E4M3"));
    /* negative dimension, missing fields, duplicate names */
    cr_assert_eq(open_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],"
                          "\"data_offsets\":[0,4]}}",
                          4, &err),
                 LISA_INVALID);
    cr_assert_eq(open_raw("{\"w\":{\"dtype\":\"F32\"}}", 0, &err),
                 LISA_INVALID);
    cr_assert_eq(open_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                          "\"data_offsets\":[0,4]},\"w\":{\"dtype\":\"F32\","
                          "\"shape\":[1],\"data_offsets\":[0,4]}}",
                          4, &err),
                 LISA_INVALID);
    /* a dimension product that overflows */
    cr_assert_eq(open_raw("{\"w\":{\"dtype\":\"F32\",\"shape\":"
                          "[4294967296,4294967296],\"data_offsets\":[0,4]}}",
                          4, &err),
                 LISA_INVALID);
    cr_assert(strstr(err.msg, "too large"), "%s", err.msg);
}

static trn_config_t
small_config(bool tied)
{
    trn_config_t c = {.hidden_size = 8,
                      .intermediate_size = 12,
                      .num_hidden_layers = 2,
                      .num_attention_heads = 2,
                      .num_key_value_heads = 1,
                      .head_dim = 4,
                      .vocab_size = 11,
                      .max_position_embeddings = 32,
                      .rms_norm_eps = 1e-6,
                      .rope_theta = 1e6,
                      .tie_word_embeddings = tied};
    return c;
}

static void
write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

Test(trn_safetensors, model_load_refuses_mismatches, .init = setup,
     .fini = teardown)
{
    trn_config_t cfg = small_config(false);
    trn_model_t *m = trn_model_new_random(&cfg, 1, 0.1f, 1);
    trn_err_t err;
    cr_assert_eq(trn_model_save(m, g_dir, TRN_SAVE_F32, &err), LISA_OK);
    trn_model_t *r = NULL;

    /* a config whose hidden_size disagrees with the weights */
    char *cfgp = path_in("config.json");
    FILE *f = fopen(cfgp, "r");
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    char *bad = strdup(buf);
    char *p = strstr(bad, "\"intermediate_size\": 12");
    cr_assert_not_null(p);
    p[strlen("\"intermediate_size\": 1")] = '6';
    write_text(cfgp, bad);
    free(bad);
    cr_assert_eq(trn_model_load(g_dir, 1, &r, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "model.layers.0.mlp.gate_proj.weight"), "%s",
              err.msg);
    cr_assert(strstr(err.msg, "shape [12, 8]"), "%s", err.msg);
    cr_assert(strstr(err.msg, "needs [16, 8]"), "%s", err.msg);
    write_text(cfgp, buf);

    /* a missing tensor: weights of a tied model for an untied config */
    trn_config_t tied = small_config(true);
    trn_model_t *mt = trn_model_new_random(&tied, 1, 0.1f, 1);
    char sub[128];
    snprintf(sub, sizeof sub, "%s/t", g_dir);
    cr_assert_eq(mkdir(sub, 0755), 0);
    cr_assert_eq(trn_model_save(mt, sub, TRN_SAVE_BF16, &err), LISA_OK);
    char from[200], to[200];
    snprintf(from, sizeof from, "%s/model.safetensors", sub);
    snprintf(to, sizeof to, "%s/model.safetensors", g_dir);
    cr_assert_eq(rename(from, to), 0);
    cr_assert_eq(trn_model_load(g_dir, 1, &r, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "'lm_head.weight' is missing"), "%s", err.msg);

    /* no weights at all */
    unlink(to);
    cr_assert_eq(trn_model_load(g_dir, 1, &r, &err), LISA_NOTFOUND);
    cr_assert(strstr(err.msg, "model.safetensors"), "%s", err.msg);
    /* no config */
    unlink(cfgp);
    cr_assert_eq(trn_model_load(g_dir, 1, &r, &err), LISA_NOTFOUND);
    cr_assert(strstr(err.msg, "config.json"));
    cr_assert_null(r);
    trn_model_destroy(&m);
    trn_model_destroy(&mt);
}

Test(trn_safetensors, sharded_checkpoint_loads, .init = setup, .fini = teardown)
{
    trn_config_t cfg = small_config(false);
    trn_model_t *m = trn_model_new_random(&cfg, 4, 0.1f, 1);
    trn_err_t err;
    cr_assert_eq(trn_model_save(m, g_dir, TRN_SAVE_F32, &err), LISA_OK);
    unlink(path_in("model.safetensors"));
    /* split the tensors over two shards: even and odd indices */
    trn_st_writer_t *w[2] = {trn_st_writer_new(), trn_st_writer_new()};
    char idx[16384];
    size_t off =
        (size_t) snprintf(idx, sizeof idx, "{\"metadata\":{},\"weight_map\":{");
    for (size_t i = 0; i < trn_model_num_tensors(m); i++) {
        int64_t shape[2];
        int nd = trn_model_tensor_shape(m, i, shape);
        const char *name = trn_model_tensor_name(m, i);
        trn_st_writer_add_f32(w[i % 2], name, i % 2 ? TRN_DT_BF16 : TRN_DT_F32,
                              nd, shape, trn_model_tensor_data(m, i));
        off += (size_t) snprintf(idx + off, sizeof idx - off,
                                 "%s\"%s\":\"model-%05zu-of-00002."
                                 "safetensors\"",
                                 i ? "," : "", name, i % 2 + 1);
    }
    snprintf(idx + off, sizeof idx - off, "}}");
    cr_assert_eq(trn_st_writer_write(
                     w[0], path_in("model-00001-of-00002.safetensors"), &err),
                 LISA_OK);
    cr_assert_eq(trn_st_writer_write(
                     w[1], path_in("model-00002-of-00002.safetensors"), &err),
                 LISA_OK);
    trn_st_writer_destroy(&w[0]);
    trn_st_writer_destroy(&w[1]);
    write_text(path_in("model.safetensors.index.json"), idx);
    trn_model_t *r = NULL;
    cr_assert_eq(trn_model_load(g_dir, 1, &r, &err), LISA_OK, "%s", err.msg);
    for (size_t i = 0; i < trn_model_num_tensors(m); i++) {
        const float *a = trn_model_tensor_data(m, i);
        const float *b = trn_model_tensor_data(r, i);
        for (size_t k = 0; k < trn_model_tensor_numel(m, i); k++) {
            float want = i % 2 ? trn_bf16_to_f32(trn_f32_to_bf16(a[k])) : a[k];
            if (b[k] != want)
                cr_assert_eq(b[k], want, "tensor %zu element %zu", i, k);
        }
    }
    trn_model_destroy(&r);
    /* an index naming a shard outside the directory is refused */
    write_text(path_in("model.safetensors.index.json"),
               "{\"weight_map\":{\"model.norm.weight\":\"../x\"}}");
    cr_assert_eq(trn_model_load(g_dir, 1, &r, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "bad file name"), "%s", err.msg);
    write_text(path_in("model.safetensors.index.json"), "{}");
    cr_assert_eq(trn_model_load(g_dir, 1, &r, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "weight_map"), "%s", err.msg);
    trn_model_destroy(&m);
}

Test(trn_safetensors, parse_from_memory, .init = setup, .fini = teardown)
{
    /* the fuzz seed is a real file behind one selector byte */
    FILE *f = fopen(
        LISA_SOURCE_DIR "/tests/fuzz/seeds/fuzz_checkpoint/safetensors", "rb");
    cr_assert_not_null(f);
    unsigned char buf[512];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    trn_st_t *st = NULL;
    trn_err_t err;
    cr_assert_eq(trn_st_parse(buf + 1, n - 1, &st, &err), LISA_OK, "%s",
                 err.msg);
    cr_assert_eq(trn_st_count(st), 3);
    float v[4];
    cr_assert_eq(trn_st_to_f32(trn_st_find(st, "a"), v), LISA_OK);
    cr_assert_eq(v[3], 4.0f);
    cr_assert_eq(trn_st_to_f32(trn_st_find(st, "b"), v), LISA_OK);
    cr_assert_eq(v[0], 1.0f);
    cr_assert_eq(v[2], 3.0f);
    trn_st_destroy(&st);
    /* one byte short: the last tensor no longer fits */
    cr_assert_eq(trn_st_parse(buf + 1, n - 2, &st, &err), LISA_INVALID);
    cr_assert_null(st);
    cr_assert(strstr(err.msg, "safetensors buffer"), "%s", err.msg);
}

static char *
slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

Test(trn_safetensors, transformers_checkpoint_round_trip, .init = setup,
     .fini = teardown)
{
    /* a directory transformers wrote, saved again by us */
    trn_model_t *m = NULL, *r = NULL;
    trn_err_t err;
    cr_assert_eq(trn_model_load(LISA_SOURCE_DIR "/tests/fixtures/qwen3-tiny/"
                                                "untied",
                                1, &m, &err),
                 LISA_OK, "%s", err.msg);
    write_text(path_in("model.safetensors.index.json"), "{\"weight_map\":{}}");
    cr_assert_eq(trn_model_save(m, g_dir, TRN_SAVE_F32, &err), LISA_OK, "%s",
                 err.msg);
    /* the stale index is gone, the generation config came along */
    cr_assert_null(slurp(path_in("model.safetensors.index.json")));
    cr_assert_not_null(slurp(path_in("generation_config.json")));
    /* config.json keeps transformers' own fields */
    char *cfg = slurp(path_in("config.json"));
    cr_assert(strstr(cfg, "\"layer_types\""), "%s", cfg);
    cr_assert(strstr(cfg, "\"rope_parameters\""));
    cr_assert(strstr(cfg, "\"float32\""));
    cr_assert_eq(trn_model_load(g_dir, 1, &r, &err), LISA_OK, "%s", err.msg);
    cr_assert_arr_eq(trn_model_params(r), trn_model_params(m),
                     trn_model_num_params(m) * sizeof(float));
    cr_assert_float_eq(trn_model_config(r)->rope_theta, 1e6, 1e-3);
    int32_t tok[4] = {5, 100, 7, 300};
    float a[4 * 512], b[4 * 512];
    cr_assert_eq(trn_model_logits(m, tok, 4, a, NULL), LISA_OK);
    cr_assert_eq(trn_model_logits(r, tok, 4, b, NULL), LISA_OK);
    cr_assert_arr_eq(a, b, sizeof a);
    trn_model_destroy(&m);
    trn_model_destroy(&r);
}
