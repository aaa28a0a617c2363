/*
 * trn_gguf: GGUF v3 files read into the trainer's model and tokenizer
 * (see trn_gguf.h).
 *
 * The file is mapped read-only; a cursor walks the header and the two
 * tables, and every length it reads is checked against what is left of
 * the file before it is used, so a truncated or hostile file is an error,
 * never a read past the end. Tensor data stays in the mapping until a
 * tensor is dequantized.
 */
#include "trn_gguf.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"
#include "trn_err.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_MAGIC        0x46554747u /* "GGUF" little-endian */
#define S_ALIGN_DEF    32u
#define S_MAX_DEPTH    2 /* arrays of arrays at most */
#define S_MAX_TEMPLATE (1u << 20)

/* GGUF metadata value types. */
enum {
    S_U8 = 0,
    S_I8,
    S_U16,
    S_I16,
    S_U32,
    S_I32,
    S_F32,
    S_BOOL,
    S_STRING,
    S_ARRAY,
    S_U64,
    S_I64,
    S_F64,
};

struct trn_gguf {
    uint8_t *map;
    size_t size;
    bool mapped; /* map is ours to unmap (else the caller's buffer) */
    json_t *meta;
    trn_gguf_tensor_t *t;
    char **names;
    size_t nt;
};

typedef struct {
    const uint8_t *p, *end;
    trn_err_t *err;
    lisa_rc_t rc;
} s_cur_t;

static bool
s_need(s_cur_t *c, size_t n, const char *what)
{
    if (c->rc != LISA_OK)
        return false;
    if ((size_t) (c->end - c->p) < n) {
        c->rc =
            trn_fail(c->err, LISA_INVALID, "gguf: truncated at byte %zu (%s)",
                     (size_t) (c->end - c->p), what);
        return false;
    }
    return true;
}

static uint64_t
s_uint(s_cur_t *c, size_t n, const char *what)
{
    uint64_t v = 0;
    if (!s_need(c, n, what))
        return 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t) c->p[i] << (8 * i);
    c->p += n;
    return v;
}

/* A GGUF string: u64 length, bytes. Points into the file. */
static const char *
s_str(s_cur_t *c, size_t *len, const char *what)
{
    uint64_t n = s_uint(c, 8, what);
    if (c->rc != LISA_OK)
        return NULL;
    if (n > TRN_GGUF_MAX_STRING) {
        c->rc = trn_fail(c->err, LISA_TOOLARGE,
                         "gguf: %s is %llu bytes long (at most %u)", what,
                         (unsigned long long) n, TRN_GGUF_MAX_STRING);
        return NULL;
    }
    if (!s_need(c, (size_t) n, what))
        return NULL;
    const char *s = (const char *) c->p;
    c->p += n;
    *len = (size_t) n;
    return s;
}

static float
s_f32_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float
s_f16(uint16_t h)
{
    uint32_t sign = (uint32_t) (h >> 15) << 31;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) { /* zero or subnormal: m * 2^-24 */
        float v = (float) m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (e == 31)
        return s_f32_bits(sign | 0x7f800000u | (m << 13));
    return s_f32_bits(sign | ((e + 112) << 23) | (m << 13));
}

static uint16_t
s_u16(const uint8_t *p)
{
    return (uint16_t) (p[0] | (p[1] << 8));
}

/* One metadata value of type `type` as JSON (new reference), or NULL. */
static json_t *
s_value(s_cur_t *c, uint32_t type, int depth, const char *key)
{
    size_t len;
    switch (type) {
    case S_U8:
    case S_I8:
    case S_U16:
    case S_I16:
    case S_U32:
    case S_I32:
    case S_U64:
    case S_I64: {
        static const size_t sz[] = {1, 1, 2, 2, 4, 4, 0, 0, 0, 0, 8, 8};
        size_t n = sz[type];
        uint64_t u = s_uint(c, n, key);
        if (c->rc != LISA_OK)
            return NULL;
        bool is_signed =
            type == S_I8 || type == S_I16 || type == S_I32 || type == S_I64;
        if (is_signed && n < 8 && (u >> (8 * n - 1)) & 1)
            u |= ~(uint64_t) 0 << (8 * n); /* sign-extend */
        if (!is_signed && u > (uint64_t) INT64_MAX) {
            c->rc = trn_fail(c->err, LISA_INVALID,
                             "gguf: %s does not fit an int64", key);
            return NULL;
        }
        int64_t v;
        memcpy(&v, &u, sizeof v);
        return json_integer((json_int_t) v);
    }
    case S_F32:
        return c->rc == LISA_OK ? json_real((double) s_f32_bits(
                                      (uint32_t) s_uint(c, 4, key)))
                                : NULL;
    case S_F64: {
        uint64_t u = s_uint(c, 8, key);
        double d;
        memcpy(&d, &u, sizeof d);
        return c->rc == LISA_OK ? json_real(d) : NULL;
    }
    case S_BOOL: {
        uint64_t b = s_uint(c, 1, key);
        return c->rc == LISA_OK ? json_boolean(b != 0) : NULL;
    }
    case S_STRING: {
        const char *s = s_str(c, &len, key);
        if (!s)
            return NULL;
        json_t *j = json_stringn(s, len);
        if (!j)
            c->rc = trn_fail(c->err, LISA_INVALID,
                             "gguf: %s holds a string that is not UTF-8", key);
        return j;
    }
    case S_ARRAY: {
        uint32_t et = (uint32_t) s_uint(c, 4, key);
        uint64_t n = s_uint(c, 8, key);
        if (c->rc != LISA_OK)
            return NULL;
        if (depth >= S_MAX_DEPTH || n > TRN_GGUF_MAX_ARRAY) {
            c->rc = trn_fail(c->err, LISA_TOOLARGE,
                             "gguf: %s: array too deep or of %llu elements",
                             key, (unsigned long long) n);
            return NULL;
        }
        /* every element takes at least one byte */
        if (!s_need(c, (size_t) n, key))
            return NULL;
        json_t *a = json_array();
        for (uint64_t i = 0; i < n; i++) {
            json_t *e = s_value(c, et, depth + 1, key);
            if (!e) {
                json_decref(a);
                return NULL;
            }
            json_array_append_new(a, e);
        }
        return a;
    }
    default:
        c->rc = trn_fail(c->err, LISA_INVALID,
                         "gguf: %s has unknown value type %u", key, type);
        return NULL;
    }
}

/* Bytes a tensor of `type` with `numel` elements takes (0: unknown). */
static size_t
s_type_bytes(uint32_t type, size_t numel, size_t *block)
{
    *block = 1;
    switch (type) {
    case TRN_GGML_F32:
        return numel * 4;
    case TRN_GGML_F16:
    case TRN_GGML_BF16:
        return numel * 2;
    case TRN_GGML_Q8_0:
        *block = 32;
        return numel / 32 * 34;
    case TRN_GGML_Q4_0:
        *block = 32;
        return numel / 32 * 18;
    case TRN_GGML_Q4_1:
        *block = 32;
        return numel / 32 * 20;
    default:
        return 0;
    }
}

const char *
trn_ggml_type_name(uint32_t type)
{
    switch (type) {
    case TRN_GGML_F32:
        return "F32";
    case TRN_GGML_F16:
        return "F16";
    case TRN_GGML_BF16:
        return "BF16";
    case TRN_GGML_Q8_0:
        return "Q8_0";
    case TRN_GGML_Q4_0:
        return "Q4_0";
    case TRN_GGML_Q4_1:
        return "Q4_1";
    default:
        return "?";
    }
}

/* Reads the tensor table; data_start is computed after it. */
static lisa_rc_t
s_tensors(trn_gguf_t *g, s_cur_t *c, uint64_t nt, size_t align)
{
    g->t = lisa_calloc(nt ? (size_t) nt : 1, sizeof *g->t);
    g->names = lisa_calloc(nt ? (size_t) nt : 1, sizeof *g->names);
    uint64_t *offs = lisa_calloc(nt ? (size_t) nt : 1, sizeof *offs);
    for (uint64_t i = 0; i < nt && c->rc == LISA_OK; i++) {
        trn_gguf_tensor_t *t = &g->t[i];
        size_t len;
        const char *nm = s_str(c, &len, "tensor name");
        uint32_t nd = (uint32_t) s_uint(c, 4, "tensor dims");
        if (c->rc != LISA_OK)
            break;
        g->names[i] = lisa_malloc(len + 1);
        memcpy(g->names[i], nm, len);
        g->names[i][len] = 0;
        t->name = g->names[i];
        g->nt = (size_t) i + 1;
        if (nd < 1 || nd > TRN_GGUF_MAX_DIMS) {
            c->rc =
                trn_fail(c->err, LISA_INVALID,
                         "gguf: tensor '%s' has %u dimensions", t->name, nd);
            break;
        }
        t->ndim = (int) nd;
        size_t numel = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t ne = s_uint(c, 8, "tensor shape");
            if (c->rc != LISA_OK)
                break;
            if (ne < 1 || ne > ((uint64_t) 1 << 40) ||
                numel > ((size_t) 1 << 40) / (size_t) ne) {
                c->rc = trn_fail(c->err, LISA_INVALID,
                                 "gguf: tensor '%s' has a bad shape", t->name);
                break;
            }
            t->ne[d] = (int64_t) ne;
            numel *= (size_t) ne;
        }
        t->type = (uint32_t) s_uint(c, 4, "tensor type");
        offs[i] = s_uint(c, 8, "tensor offset");
        if (c->rc != LISA_OK)
            break;
        t->numel = numel;
        size_t block;
        t->nbytes = s_type_bytes(t->type, numel, &block);
        if (t->nbytes == 0 || t->ne[0] % (int64_t) block != 0) {
            c->rc = trn_fail(c->err, LISA_UNSUPPORTED,
                             "gguf: tensor '%s' has type %u (%s), which lisa "
                             "does not read (F32, F16, BF16, Q8_0, Q4_0, "
                             "Q4_1), or rows that are not whole blocks",
                             t->name, t->type, trn_ggml_type_name(t->type));
            break;
        }
        for (uint64_t k = 0; k < i; k++)
            if (strcmp(g->names[k], t->name) == 0) {
                c->rc = trn_fail(c->err, LISA_INVALID,
                                 "gguf: tensor '%s' appears twice", t->name);
                break;
            }
    }
    if (c->rc == LISA_OK) {
        size_t pos = (size_t) (c->p - g->map);
        size_t data = (pos + align - 1) / align * align;
        for (size_t i = 0; i < g->nt; i++) {
            trn_gguf_tensor_t *t = &g->t[i];
            if (offs[i] % align != 0 || data > g->size ||
                offs[i] > g->size - data ||
                t->nbytes > g->size - data - (size_t) offs[i]) {
                c->rc =
                    trn_fail(c->err, LISA_INVALID,
                             "gguf: tensor '%s' (offset %llu, %zu bytes) "
                             "is misaligned or outside the file",
                             t->name, (unsigned long long) offs[i], t->nbytes);
                break;
            }
            t->data = g->map + data + offs[i];
        }
    }
    lisa_free(&offs);
    return c->rc;
}

/* Parses the tables of g->map[0..size). */
static lisa_rc_t
s_parse(trn_gguf_t *g, const char *what, trn_err_t *err)
{
    g->meta = json_object();
    s_cur_t c = {g->map, g->map + g->size, err, LISA_OK};
    uint32_t magic = (uint32_t) s_uint(&c, 4, "magic");
    uint32_t version = (uint32_t) s_uint(&c, 4, "version");
    uint64_t nt = s_uint(&c, 8, "tensor count");
    uint64_t nkv = s_uint(&c, 8, "metadata count");
    if (c.rc != LISA_OK)
        return c.rc;
    if (magic != S_MAGIC || version != 3)
        return trn_fail(err, LISA_INVALID,
                        "%s: not a GGUF v3 file (magic %08x, version %u)", what,
                        magic, version);
    if (nt > TRN_GGUF_MAX_TENSORS || nkv > TRN_GGUF_MAX_KV)
        return trn_fail(err, LISA_TOOLARGE,
                        "%s: %llu tensors and %llu metadata keys exceed the "
                        "bounds",
                        what, (unsigned long long) nt,
                        (unsigned long long) nkv);
    for (uint64_t i = 0; i < nkv && c.rc == LISA_OK; i++) {
        size_t klen;
        const char *k = s_str(&c, &klen, "metadata key");
        uint32_t type = (uint32_t) s_uint(&c, 4, "metadata type");
        if (c.rc != LISA_OK)
            break;
        char key[256];
        if (klen == 0 || klen >= sizeof key)
            return trn_fail(err, LISA_INVALID, "%s: metadata key of %zu bytes",
                            what, klen);
        memcpy(key, k, klen);
        key[klen] = 0;
        json_t *v = s_value(&c, type, 0, key);
        if (!v)
            break;
        if (json_object_get(g->meta, key)) {
            json_decref(v);
            return trn_fail(err, LISA_INVALID,
                            "%s: metadata key %s appears twice", what, key);
        }
        json_object_set_new(g->meta, key, v);
    }
    if (c.rc != LISA_OK)
        return c.rc;
    size_t align = S_ALIGN_DEF;
    json_t *al = json_object_get(g->meta, "general.alignment");
    if (al) {
        json_int_t a = json_integer_value(al);
        if (!json_is_integer(al) || a < 1 || a > 65536 || (a & (a - 1)))
            return trn_fail(err, LISA_INVALID,
                            "%s: general.alignment must be a power of two",
                            what);
        align = (size_t) a;
    }
    return s_tensors(g, &c, nt, align);
}

lisa_rc_t
trn_gguf_open(const char *path, trn_gguf_t **out, trn_err_t *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return trn_fail(err, LISA_NOTFOUND, "%s: cannot open: %s", path,
                        strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 24) {
        close(fd);
        return trn_fail(err, LISA_INVALID, "%s: not a GGUF file (too short)",
                        path);
    }
    trn_gguf_t *g = lisa_calloc(1, sizeof *g);
    g->size = (size_t) sb.st_size;
    void *map = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        lisa_free(&g);
        return trn_fail(err, LISA_ERR, "%s: cannot map: %s", path,
                        strerror(errno));
    }
    g->map = map;
    g->mapped = true;
    lisa_rc_t rc = s_parse(g, path, err);
    if (rc != LISA_OK) {
        trn_gguf_destroy(&g);
        return rc;
    }
    *out = g;
    return LISA_OK;
}

lisa_rc_t
trn_gguf_parse(const uint8_t *buf, size_t len, trn_gguf_t **out, trn_err_t *err)
{
    *out = NULL;
    trn_gguf_t *g = lisa_calloc(1, sizeof *g);
    g->map = (uint8_t *) (uintptr_t) buf;
    g->size = len;
    lisa_rc_t rc = s_parse(g, "gguf", err);
    if (rc != LISA_OK) {
        trn_gguf_destroy(&g);
        return rc;
    }
    *out = g;
    return LISA_OK;
}

void
trn_gguf_destroy(trn_gguf_t **pg)
{
    if (!pg || !*pg)
        return;
    trn_gguf_t *g = *pg;
    if (g->map && g->mapped)
        munmap(g->map, g->size);
    json_decref(g->meta);
    for (size_t i = 0; i < g->nt; i++)
        lisa_free(&g->names[i]);
    lisa_free(&g->names);
    lisa_free(&g->t);
    lisa_free(pg);
}

const json_t *
trn_gguf_meta(const trn_gguf_t *g)
{
    return g->meta;
}

size_t
trn_gguf_count(const trn_gguf_t *g)
{
    return g->nt;
}

const trn_gguf_tensor_t *
trn_gguf_tensor(const trn_gguf_t *g, size_t i)
{
    return i < g->nt ? &g->t[i] : NULL;
}

const trn_gguf_tensor_t *
trn_gguf_find(const trn_gguf_t *g, const char *name)
{
    for (size_t i = 0; i < g->nt; i++)
        if (strcmp(g->t[i].name, name) == 0)
            return &g->t[i];
    return NULL;
}

/* ---- dequantization ---------------------------------------------------- */

lisa_rc_t
trn_gguf_to_f32(const trn_gguf_tensor_t *t, float *out, trn_err_t *err)
{
    const uint8_t *p = t->data;
    size_t n = t->numel;
    switch (t->type) {
    case TRN_GGML_F32:
        memcpy(out, p, n * sizeof(float));
        return LISA_OK;
    case TRN_GGML_F16:
        for (size_t i = 0; i < n; i++)
            out[i] = s_f16(s_u16(p + 2 * i));
        return LISA_OK;
    case TRN_GGML_BF16:
        for (size_t i = 0; i < n; i++)
            out[i] = s_f32_bits((uint32_t) s_u16(p + 2 * i) << 16);
        return LISA_OK;
    case TRN_GGML_Q8_0: /* blocks of 32: f16 scale, 32 int8 */
        for (size_t b = 0; b < n / 32; b++, p += 34) {
            float d = s_f16(s_u16(p));
            for (size_t j = 0; j < 32; j++)
                out[b * 32 + j] = d * (float) (int8_t) p[2 + j];
        }
        return LISA_OK;
    case TRN_GGML_Q4_0: /* f16 scale, 16 bytes: low nibbles 0..15, high
                           16..31, each (q - 8) * d */
        for (size_t b = 0; b < n / 32; b++, p += 18) {
            float d = s_f16(s_u16(p));
            for (size_t j = 0; j < 16; j++) {
                out[b * 32 + j] = d * (float) ((int) (p[2 + j] & 0xf) - 8);
                out[b * 32 + j + 16] = d * (float) ((int) (p[2 + j] >> 4) - 8);
            }
        }
        return LISA_OK;
    case TRN_GGML_Q4_1: /* f16 scale, f16 minimum, nibbles as Q4_0: q*d+m */
        for (size_t b = 0; b < n / 32; b++, p += 20) {
            float d = s_f16(s_u16(p)), m = s_f16(s_u16(p + 2));
            for (size_t j = 0; j < 16; j++) {
                out[b * 32 + j] = d * (float) (p[4 + j] & 0xf) + m;
                out[b * 32 + j + 16] = d * (float) (p[4 + j] >> 4) + m;
            }
        }
        return LISA_OK;
    default:
        return trn_fail(err, LISA_UNSUPPORTED,
                        "gguf: tensor '%s' has unsupported type %u", t->name,
                        t->type);
    }
}

/* ---- the model --------------------------------------------------------- */

static const struct {
    const char *arch;
    trn_family_t family;
} s_archs[] = {
    {"llama", TRN_FAMILY_LLAMA},
    {"qwen2", TRN_FAMILY_QWEN2},
    {"qwen3", TRN_FAMILY_QWEN3},
};

/* {arch}.<suffix> as an integer (def when absent; -1 when malformed). */
static int64_t
s_arch_int(const trn_gguf_t *g, const char *arch, const char *suffix,
           int64_t def)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    json_t *v = json_object_get(g->meta, key);
    if (!v)
        return def;
    return json_is_integer(v) ? (int64_t) json_integer_value(v) : -1;
}

static double
s_arch_real(const trn_gguf_t *g, const char *arch, const char *suffix,
            double def)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    json_t *v = json_object_get(g->meta, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

lisa_rc_t
trn_gguf_config(const trn_gguf_t *g, trn_config_t *cfg, trn_err_t *err)
{
    const char *arch =
        json_string_value(json_object_get(g->meta, "general.architecture"));
    if (!arch)
        return trn_fail(err, LISA_INVALID,
                        "gguf: no general.architecture string");
    size_t k = 0;
    while (k < sizeof s_archs / sizeof s_archs[0] &&
           strcmp(s_archs[k].arch, arch) != 0)
        k++;
    if (k == sizeof s_archs / sizeof s_archs[0])
        return trn_fail(err, LISA_UNSUPPORTED,
                        "gguf: architecture \"%.64s\" is not supported "
                        "(llama, qwen2, qwen3)",
                        arch);
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    const char *st = json_string_value(json_object_get(g->meta, key));
    if (st && strcmp(st, "none") != 0)
        return trn_fail(err, LISA_UNSUPPORTED,
                        "gguf: RoPE scaling \"%.32s\" is not supported", st);
    trn_config_t c;
    memset(&c, 0, sizeof c);
    c.family = s_archs[k].family;
    c.hidden_size = s_arch_int(g, arch, "embedding_length", 0);
    c.intermediate_size = s_arch_int(g, arch, "feed_forward_length", 0);
    c.num_hidden_layers = s_arch_int(g, arch, "block_count", 0);
    c.num_attention_heads = s_arch_int(g, arch, "attention.head_count", 0);
    c.num_key_value_heads =
        s_arch_int(g, arch, "attention.head_count_kv", c.num_attention_heads);
    c.head_dim = s_arch_int(
        g, arch, "attention.key_length",
        c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
    c.max_position_embeddings = s_arch_int(g, arch, "context_length", 2048);
    c.rms_norm_eps =
        s_arch_real(g, arch, "attention.layer_norm_rms_epsilon", 1e-6);
    c.rope_theta = s_arch_real(g, arch, "rope.freq_base", 10000.0);
    const trn_gguf_tensor_t *emb = trn_gguf_find(g, "token_embd.weight");
    if (!emb || emb->ndim != 2)
        return trn_fail(err, LISA_INVALID,
                        "gguf: no two-dimensional token_embd.weight");
    c.vocab_size = s_arch_int(g, arch, "vocab_size", emb->ne[1]);
    c.tie_word_embeddings = trn_gguf_find(g, "output.weight") == NULL;
    if (c.num_attention_heads > 0 &&
        s_arch_int(g, arch, "attention.value_length", c.head_dim) != c.head_dim)
        return trn_fail(err, LISA_UNSUPPORTED,
                        "gguf: key and value heads of different sizes");
    lisa_rc_t rc = trn_config_validate(&c, err);
    if (rc != LISA_OK)
        return rc;
    *cfg = c;
    return LISA_OK;
}

/* Hugging Face layer-tensor suffix -> llama.cpp's. */
static const struct {
    const char *hf, *gguf;
} s_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

/* llama.cpp's name of a Hugging Face tensor; false when there is none. */
static bool
s_gguf_name(const char *hf, char *out, size_t cap)
{
    if (strcmp(hf, "model.embed_tokens.weight") == 0)
        return snprintf(out, cap, "token_embd.weight") > 0;
    if (strcmp(hf, "model.norm.weight") == 0)
        return snprintf(out, cap, "output_norm.weight") > 0;
    if (strcmp(hf, "lm_head.weight") == 0)
        return snprintf(out, cap, "output.weight") > 0;
    unsigned layer;
    int n = 0;
    if (sscanf(hf, "model.layers.%u.%n", &layer, &n) != 1 || n == 0)
        return false;
    for (size_t i = 0; i < sizeof s_names / sizeof s_names[0]; i++)
        if (strcmp(hf + n, s_names[i].hf) == 0) {
            int w = snprintf(out, cap, "blk.%u.%s", layer, s_names[i].gguf);
            return w > 0 && (size_t) w < cap;
        }
    return false;
}

/* Undoes llama.cpp's permutation of Llama's q or k rows: within a head of
 * hd rows, gguf row 2j + i holds Hugging Face row i * hd/2 + j. */
static void
s_unpermute(float *w, size_t rows, size_t cols, size_t heads)
{
    size_t hd = rows / heads, half = hd / 2;
    float *tmp = lisa_malloc(hd * cols * sizeof(float));
    for (size_t h = 0; h < heads; h++) {
        float *blk = w + h * hd * cols;
        memcpy(tmp, blk, hd * cols * sizeof(float));
        for (size_t j = 0; j < half; j++)
            for (size_t i = 0; i < 2; i++)
                memcpy(blk + (i * half + j) * cols, tmp + (2 * j + i) * cols,
                       cols * sizeof(float));
    }
    lisa_free(&tmp);
}

lisa_rc_t
trn_gguf_read_hf(const trn_gguf_t *g, const trn_config_t *cfg,
                 const char *hf_name, float *out, size_t numel, trn_err_t *err)
{
    char name[160];
    if (!s_gguf_name(hf_name, name, sizeof name))
        return trn_fail(err, LISA_NOTFOUND,
                        "gguf: no llama.cpp name for tensor '%s'", hf_name);
    const trn_gguf_tensor_t *t = trn_gguf_find(g, name);
    if (!t)
        return trn_fail(err, LISA_NOTFOUND,
                        "gguf: tensor '%s' (%s) is missing from the file", name,
                        hf_name);
    if (t->numel != numel)
        return trn_fail(err, LISA_INVALID,
                        "gguf: tensor '%s' has %zu elements, the config "
                        "needs %zu",
                        name, t->numel, numel);
    lisa_rc_t rc = trn_gguf_to_f32(t, out, err);
    if (rc != LISA_OK)
        return rc;
    if (cfg->family == TRN_FAMILY_LLAMA) {
        bool q = strstr(hf_name, "self_attn.q_proj.") != NULL;
        bool k = strstr(hf_name, "self_attn.k_proj.") != NULL;
        if (q || k) {
            size_t heads = (size_t) (q ? cfg->num_attention_heads
                                       : cfg->num_key_value_heads);
            size_t rows = heads * (size_t) cfg->head_dim;
            s_unpermute(out, rows, numel / rows, heads);
        }
    }
    return LISA_OK;
}

/* ---- the tokenizer ----------------------------------------------------- */

/* The GPT-2 byte -> character map of byte-level BPE. */
static uint32_t
s_byte_char(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
        (b >= 0xae && b <= 0xff))
        return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) ||
              (x >= 0xae && x <= 0xff)))
            n++;
    return 256 + n;
}

/* True when every character of s is in the byte-level alphabet. */
static bool
s_byte_level(const char *s)
{
    const unsigned char *p = (const unsigned char *) s;
    while (*p) {
        uint32_t cp;
        if (*p < 0x80) {
            cp = *p++;
        } else if ((*p & 0xe0) == 0xc0 && p[1]) {
            cp = ((uint32_t) (p[0] & 0x1f) << 6) | (p[1] & 0x3f);
            p += 2;
        } else {
            return false;
        }
        bool ok = false;
        if (cp < 0x100)
            ok = s_byte_char(cp) == cp;
        else if (cp < 0x144)
            ok = true;
        if (!ok)
            return false;
    }
    return true;
}

/* The token spelled in the byte-level alphabet. */
static json_t *
s_respell(const char *s)
{
    if (s_byte_level(s))
        return json_string(s);
    char buf[4096];
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
        uint32_t cp = s_byte_char(*p);
        if (o + 3 >= sizeof buf)
            return NULL;
        if (cp < 0x80) {
            buf[o++] = (char) cp;
        } else {
            buf[o++] = (char) (0xc0 | (cp >> 6));
            buf[o++] = (char) (0x80 | (cp & 0x3f));
        }
    }
    buf[o] = 0;
    return json_string(buf);
}

/* Pre-tokenizer split patterns by tokenizer.ggml.pre (the rest: GPT-2's
 * ByteLevel regex). */
static const char s_llama3_split[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char s_qwen2_split[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const struct {
    const char *pre;
    const char *split;
} s_pres[] = {
    {"llama3", s_llama3_split},    {"llama-v3", s_llama3_split},
    {"llama-bpe", s_llama3_split}, {"smaug-bpe", s_llama3_split},
    {"qwen2", s_qwen2_split},      {"deepseek-r1-qwen", s_qwen2_split},
};

static json_t *
s_pre_tokenizer(const char *pre)
{
    const char *split = NULL;
    for (size_t i = 0; pre && i < sizeof s_pres / sizeof s_pres[0]; i++)
        if (strcmp(pre, s_pres[i].pre) == 0)
            split = s_pres[i].split;
    if (!split)
        return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel",
                         "add_prefix_space", 0, "trim_offsets", 1, "use_regex",
                         1);
    return json_pack(
        "{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type",
        "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", split,
        "behavior", "Isolated", "invert", 0, "type", "ByteLevel",
        "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0);
}

/* The file's tokenizer as a tokenizer.json object (new reference). */
static json_t *
s_tokenizer(const trn_gguf_t *g, trn_err_t *err)
{
    const json_t *m = g->meta;
    const char *model =
        json_string_value(json_object_get(m, "tokenizer.ggml.model"));
    json_t *toks = json_object_get(m, "tokenizer.ggml.tokens");
    json_t *types = json_object_get(m, "tokenizer.ggml.token_type");
    json_t *merges = json_object_get(m, "tokenizer.ggml.merges");
    if (!model || strcmp(model, "gpt2") != 0 || !json_is_array(toks) ||
        !json_is_array(merges)) {
        trn_fail(err, LISA_UNSUPPORTED,
                 "gguf: the tokenizer is not byte-level BPE (tokenizer.ggml."
                 "model \"gpt2\" with tokens and merges)");
        return NULL;
    }
    json_t *vocab = json_object(), *added = json_array(), *mlist = json_array();
    size_t n = json_array_size(toks);
    for (size_t i = 0; i < n; i++) {
        const char *tok = json_string_value(json_array_get(toks, i));
        json_int_t ty = json_integer_value(json_array_get(types, i));
        json_t *sp = tok ? s_respell(tok) : NULL;
        if (!sp) {
            trn_fail(err, LISA_INVALID, "gguf: token %zu is not a string", i);
            goto fail;
        }
        /* control tokens outside the byte alphabet are llama.cpp's
         * mislabels and are left plain, as transformers does */
        bool whole = s_byte_level(tok);
        bool control = ty == 3 && whole, user = ty == 4 && whole;
        json_object_set_new(vocab, json_string_value(sp),
                            json_integer((json_int_t) i));
        json_decref(sp);
        if (control || user)
            json_array_append_new(
                added, json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id",
                                 (json_int_t) i, "content", tok, "single_word",
                                 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                                 "special", control));
    }
    for (size_t i = 0; i < json_array_size(merges); i++) {
        const char *mg = json_string_value(json_array_get(merges, i));
        if (!mg) {
            trn_fail(err, LISA_INVALID, "gguf: merge %zu is not a string", i);
            goto fail;
        }
        json_array_append_new(mlist, json_string(mg));
    }
    const char *pre =
        json_string_value(json_object_get(m, "tokenizer.ggml.pre"));
    return json_pack(
        "{s:s, s:n, s:n, s:o, s:n, s:o, s:{s:s, s:b, s:b, s:b}, "
        "s:{s:s, s:b, s:b, s:b}, s:{s:s, s:n, s:n, s:s, s:s, s:b, s:b, "
        "s:b, s:o, s:o}}",
        "version", "1.0", "truncation", "padding", "added_tokens", added,
        "normalizer", "pre_tokenizer", s_pre_tokenizer(pre), "post_processor",
        "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0,
        "use_regex", 0, "decoder", "type", "ByteLevel", "add_prefix_space", 0,
        "trim_offsets", 1, "use_regex", 1, "model", "type", "BPE", "dropout",
        "unk_token", "continuing_subword_prefix", "", "end_of_word_suffix", "",
        "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab,
        "merges", mlist);
fail:
    json_decref(vocab);
    json_decref(added);
    json_decref(mlist);
    return NULL;
}

char *
trn_gguf_tokenizer_json(const trn_gguf_t *g, trn_err_t *err)
{
    json_t *t = s_tokenizer(g, err);
    if (!t)
        return NULL;
    char *s = json_dumps(t, JSON_PRESERVE_ORDER | JSON_COMPACT);
    json_decref(t);
    return s;
}

/* The token with the id under `key`, or NULL. */
static const char *
s_special(const trn_gguf_t *g, const char *key)
{
    json_t *id = json_object_get(g->meta, key);
    if (!json_is_integer(id))
        return NULL;
    return json_string_value(
        json_array_get(json_object_get(g->meta, "tokenizer.ggml.tokens"),
                       (size_t) json_integer_value(id)));
}

static lisa_rc_t
s_write_json(json_t *j, const char *dir, const char *name, trn_err_t *err)
{
    char path[4096], tmp[4112];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (json_dump_file(j, tmp, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 ||
        rename(tmp, path) != 0) {
        unlink(tmp);
        return trn_fail(err, LISA_ERR, "%s: cannot write: %s", path,
                        strerror(errno));
    }
    return LISA_OK;
}

lisa_rc_t
trn_gguf_write_tokenizer(const trn_gguf_t *g, const char *dir, trn_err_t *err)
{
    json_t *tok = s_tokenizer(g, err);
    if (!tok)
        return LISA_UNSUPPORTED;
    lisa_rc_t rc = s_write_json(tok, dir, "tokenizer.json", err);
    json_decref(tok);
    if (rc != LISA_OK)
        return rc;
    json_t *tc = json_object();
    json_object_set_new(tc, "tokenizer_class",
                        json_string("PreTrainedTokenizerFast"));
    static const struct {
        const char *hf, *key;
    } sp[] = {
        {"bos_token", "tokenizer.ggml.bos_token_id"},
        {"eos_token", "tokenizer.ggml.eos_token_id"},
        {"unk_token", "tokenizer.ggml.unknown_token_id"},
        {"pad_token", "tokenizer.ggml.padding_token_id"},
    };
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        const char *s = s_special(g, sp[i].key);
        if (s)
            json_object_set_new(tc, sp[i].hf, json_string(s));
    }
    json_t *ab = json_object_get(g->meta, "tokenizer.ggml.add_bos_token");
    json_object_set_new(tc, "add_bos_token", json_boolean(json_is_true(ab)));
    json_t *tpl = json_object_get(g->meta, "tokenizer.chat_template");
    if (json_is_string(tpl) && json_string_length(tpl) <= S_MAX_TEMPLATE)
        json_object_set(tc, "chat_template", tpl);
    rc = s_write_json(tc, dir, "tokenizer_config.json", err);
    json_decref(tc);
    return rc;
}
