/*
 * trn_model_config: a model's config.json (Qwen3, Llama, Qwen2), parsed
 * and checked into a trn_config_t (trn_config_parse, trn_config_load).
 *
 * The family comes from a table of model_type / architecture names. The
 * fields are read from one declarative table (name, required or the
 * default transformers' configs use, bounds). Features this trainer does
 * not implement (biases the family does not have, sliding windows, RoPE
 * scaling, another activation) are refused by name rather than silently
 * ignored, because a model computed without them would train on wrong
 * numbers.
 */
#include "lisa/lisa_mem.h"
#include "trn_err.h"
#include "trn_model.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum { S_INT, S_REAL, S_BOOL } s_kind_t;

typedef struct {
    const char *name;
    s_kind_t kind;
    bool required;
    double def; /* default when not required; NAN: derived later */
    double lo, hi;
    size_t off;
} s_field_t;

#define S_OFF(f) offsetof(trn_config_t, f)

static const s_field_t s_fields[] = {
    {"hidden_size", S_INT, true, 0, 1, TRN_MAX_HIDDEN, S_OFF(hidden_size)},
    {"intermediate_size", S_INT, true, 0, 1, 16.0 * TRN_MAX_HIDDEN,
     S_OFF(intermediate_size)},
    {"num_hidden_layers", S_INT, true, 0, 1, TRN_MAX_LAYERS,
     S_OFF(num_hidden_layers)},
    {"num_attention_heads", S_INT, true, 0, 1, TRN_MAX_HEADS,
     S_OFF(num_attention_heads)},
    {"vocab_size", S_INT, true, 0, 1, TRN_MAX_VOCAB, S_OFF(vocab_size)},
    {"num_key_value_heads", S_INT, false, (double) NAN, 1, TRN_MAX_HEADS,
     S_OFF(num_key_value_heads)},
    {"head_dim", S_INT, false, (double) NAN, 2, TRN_MAX_HEAD_DIM,
     S_OFF(head_dim)},
    {"max_position_embeddings", S_INT, false, 32768, 1, TRN_MAX_POSITIONS,
     S_OFF(max_position_embeddings)},
    {"rms_norm_eps", S_REAL, false, 1e-6, 0, 1, S_OFF(rms_norm_eps)},
    {"rope_theta", S_REAL, false, 10000, 1, 1e12, S_OFF(rope_theta)},
    {"tie_word_embeddings", S_BOOL, false, 0, 0, 1, S_OFF(tie_word_embeddings)},
};
#define S_NFIELDS (sizeof s_fields / sizeof s_fields[0])

static void
s_store(trn_config_t *cfg, const s_field_t *f, double v)
{
    char *p = (char *) cfg + f->off;
    switch (f->kind) {
    case S_INT: {
        int64_t i = (int64_t) v;
        memcpy(p, &i, sizeof i);
        break;
    }
    case S_REAL:
        memcpy(p, &v, sizeof v);
        break;
    case S_BOOL: {
        bool b = v != 0;
        memcpy(p, &b, sizeof b);
        break;
    }
    }
}

/* Reads field f from the JSON object into cfg. */
static lisa_rc_t
s_read_field(json_t *root, const s_field_t *f, trn_config_t *cfg,
             trn_err_t *err)
{
    json_t *v = json_object_get(root, f->name);
    if (f->kind == S_REAL && strcmp(f->name, "rope_theta") == 0 && !v) {
        json_t *rp = json_object_get(root, "rope_parameters");
        if (json_is_object(rp))
            v = json_object_get(rp, "rope_theta");
    }
    if (!v || json_is_null(v)) {
        if (f->required)
            return trn_fail(err, LISA_INVALID,
                            "config.json: missing required field '%s'",
                            f->name);
        if (!isnan(f->def))
            s_store(cfg, f, f->def);
        return LISA_OK;
    }
    double d;
    switch (f->kind) {
    case S_INT:
        if (!json_is_integer(v))
            return trn_fail(err, LISA_INVALID,
                            "config.json: '%s' must be an integer", f->name);
        d = (double) json_integer_value(v);
        break;
    case S_REAL:
        if (!json_is_number(v))
            return trn_fail(err, LISA_INVALID,
                            "config.json: '%s' must be a number", f->name);
        d = json_number_value(v);
        break;
    case S_BOOL:
        if (!json_is_boolean(v))
            return trn_fail(err, LISA_INVALID,
                            "config.json: '%s' must be true or false", f->name);
        d = json_is_true(v) ? 1 : 0;
        break;
    default:
        d = 0;
    }
    if (!(d >= f->lo && d <= f->hi) || (f->kind == S_REAL && d <= 0))
        return trn_fail(err, LISA_INVALID,
                        "config.json: '%s' = %g is out of range [%g, %g]",
                        f->name, d, f->lo, f->hi);
    s_store(cfg, f, d);
    return LISA_OK;
}

/* The families: model_type, architecture, default max positions. */
static const struct {
    trn_family_t family;
    const char *model_type, *arch;
    int64_t max_positions;
} s_families[] = {
    {TRN_FAMILY_QWEN3, "qwen3", "Qwen3ForCausalLM", 32768},
    {TRN_FAMILY_LLAMA, "llama", "LlamaForCausalLM", 2048},
    {TRN_FAMILY_QWEN2, "qwen2", "Qwen2ForCausalLM", 32768},
};
#define S_NFAMILIES (sizeof s_families / sizeof s_families[0])

const char *
trn_family_model_type(trn_family_t f)
{
    return (size_t) f < S_NFAMILIES ? s_families[f].model_type : "?";
}

const char *
trn_family_architecture(trn_family_t f)
{
    return (size_t) f < S_NFAMILIES ? s_families[f].arch : "?";
}

/* The family from model_type, else architectures[0], else Qwen3. */
static lisa_rc_t
s_family(json_t *root, trn_family_t *out, trn_err_t *err)
{
    json_t *v = json_object_get(root, "model_type");
    json_t *arch = json_object_get(root, "architectures");
    const char *name = NULL;
    bool by_type = v != NULL && !json_is_null(v);
    if (by_type) {
        if (!json_is_string(v))
            return trn_fail(err, LISA_INVALID,
                            "config.json: model_type must be a string");
        name = json_string_value(v);
    } else if (json_is_array(arch) && json_array_size(arch) > 0) {
        name = json_string_value(json_array_get(arch, 0));
        if (!name)
            return trn_fail(err, LISA_INVALID,
                            "config.json: architectures must hold strings");
    } else {
        *out = TRN_FAMILY_QWEN3;
        return LISA_OK;
    }
    for (size_t i = 0; i < S_NFAMILIES; i++)
        if (strcmp(name, by_type ? s_families[i].model_type
                                 : s_families[i].arch) == 0) {
            *out = s_families[i].family;
            return LISA_OK;
        }
    return trn_fail(err, LISA_UNSUPPORTED,
                    "config.json: %s \"%.64s\" is not supported (qwen3, "
                    "llama, qwen2)",
                    by_type ? "model_type" : "architecture", name);
}

/* Refuses features the implementation does not compute. */
static lisa_rc_t
s_check_features(json_t *root, trn_family_t family, trn_err_t *err)
{
    json_t *v = json_object_get(root, "hidden_act");
    if (v && (!json_is_string(v) || strcmp(json_string_value(v), "silu")))
        return trn_fail(err, LISA_UNSUPPORTED,
                        "config.json: hidden_act must be \"silu\"");
    /* Qwen2's q/k/v biases are fixed by the family, not by this flag */
    if (family != TRN_FAMILY_QWEN2 &&
        json_is_true(json_object_get(root, "attention_bias")))
        return trn_fail(err, LISA_UNSUPPORTED,
                        "config.json: attention_bias=true is not supported");
    if (json_is_true(json_object_get(root, "mlp_bias")))
        return trn_fail(err, LISA_UNSUPPORTED,
                        "config.json: mlp_bias=true is not supported");
    if (json_is_true(json_object_get(root, "use_sliding_window")))
        return trn_fail(err, LISA_UNSUPPORTED,
                        "config.json: use_sliding_window=true is not "
                        "supported");
    v = json_object_get(root, "rope_scaling");
    json_t *rp = json_object_get(root, "rope_parameters");
    json_t *rt = NULL;
    if (json_is_object(v))
        rt = json_object_get(v, "rope_type") ? json_object_get(v, "rope_type")
                                             : json_object_get(v, "type");
    else if (v && !json_is_null(v))
        return trn_fail(err, LISA_INVALID,
                        "config.json: rope_scaling must be an object or null");
    if (!rt && json_is_object(rp))
        rt = json_object_get(rp, "rope_type");
    if (rt && (!json_is_string(rt) || strcmp(json_string_value(rt), "default")))
        return trn_fail(err, LISA_UNSUPPORTED,
                        "config.json: only rope_type \"default\" is "
                        "supported");
    return LISA_OK;
}

lisa_rc_t
trn_config_validate(const trn_config_t *c, trn_err_t *err)
{
    if (c->hidden_size < 1 || c->hidden_size > TRN_MAX_HIDDEN ||
        c->intermediate_size < 1 ||
        c->intermediate_size > 16 * (int64_t) TRN_MAX_HIDDEN ||
        c->num_hidden_layers < 1 || c->num_hidden_layers > TRN_MAX_LAYERS ||
        c->vocab_size < 1 || c->vocab_size > TRN_MAX_VOCAB ||
        c->max_position_embeddings < 1 ||
        c->max_position_embeddings > TRN_MAX_POSITIONS)
        return trn_fail(
            err, LISA_INVALID,
            "config: a size is out of range (hidden %lld, "
            "intermediate %lld, layers %lld, vocab %lld)",
            (long long) c->hidden_size, (long long) c->intermediate_size,
            (long long) c->num_hidden_layers, (long long) c->vocab_size);
    if (c->num_attention_heads < 1 || c->num_attention_heads > TRN_MAX_HEADS ||
        c->num_key_value_heads < 1 ||
        c->num_key_value_heads > c->num_attention_heads ||
        c->num_attention_heads % c->num_key_value_heads != 0)
        return trn_fail(err, LISA_INVALID,
                        "config: num_attention_heads (%lld) must be a "
                        "multiple of num_key_value_heads (%lld)",
                        (long long) c->num_attention_heads,
                        (long long) c->num_key_value_heads);
    if (c->head_dim < 2 || c->head_dim > TRN_MAX_HEAD_DIM ||
        c->head_dim % 2 != 0)
        return trn_fail(err, LISA_INVALID,
                        "config: head_dim (%lld) must be even and in [2, %d]",
                        (long long) c->head_dim, TRN_MAX_HEAD_DIM);
    if ((size_t) c->family >= S_NFAMILIES)
        return trn_fail(err, LISA_INVALID, "config: unknown family %d",
                        (int) c->family);
    if (!(c->rms_norm_eps > 0 && c->rms_norm_eps < 1) ||
        !(c->rope_theta >= 1 && c->rope_theta <= 1e12))
        return trn_fail(err, LISA_INVALID,
                        "config: rms_norm_eps %g or rope_theta %g out of "
                        "range",
                        c->rms_norm_eps, c->rope_theta);
    return LISA_OK;
}

lisa_rc_t
trn_config_parse(const char *json, size_t len, trn_config_t *out,
                 trn_err_t *err)
{
    lisa_rc_t rc = LISA_OK;
    trn_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    json_error_t jerr;
    if (len > TRN_MAX_CONFIG_LEN)
        return trn_fail(err, LISA_TOOLARGE,
                        "config.json: %zu bytes is too "
                        "large",
                        len);
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root || !json_is_object(root)) {
        rc = trn_fail(err, LISA_INVALID,
                      "config.json: not a JSON object (line %d: %s)", jerr.line,
                      root ? "wrong type" : jerr.text);
        goto out;
    }
    rc = s_family(root, &cfg.family, err);
    if (rc == LISA_OK)
        rc = s_check_features(root, cfg.family, err);
    if (rc != LISA_OK)
        goto out;
    for (size_t i = 0; i < S_NFIELDS; i++) {
        rc = s_read_field(root, &s_fields[i], &cfg, err);
        if (rc != LISA_OK)
            goto out;
    }
    if (!json_is_integer(json_object_get(root, "max_position_embeddings")))
        cfg.max_position_embeddings = s_families[cfg.family].max_positions;
    if (!json_object_get(root, "num_key_value_heads") ||
        json_is_null(json_object_get(root, "num_key_value_heads")))
        cfg.num_key_value_heads = cfg.num_attention_heads;
    if (!json_object_get(root, "head_dim") ||
        json_is_null(json_object_get(root, "head_dim"))) {
        if (cfg.hidden_size % cfg.num_attention_heads != 0) {
            rc = trn_fail(err, LISA_INVALID,
                          "config.json: no head_dim and hidden_size %lld is "
                          "not a multiple of num_attention_heads %lld",
                          (long long) cfg.hidden_size,
                          (long long) cfg.num_attention_heads);
            goto out;
        }
        cfg.head_dim = cfg.hidden_size / cfg.num_attention_heads;
    }
    rc = trn_config_validate(&cfg, err);
    if (rc != LISA_OK)
        goto out;
    *out = cfg;
out:
    json_decref(root);
    return rc;
}

lisa_rc_t
trn_config_load(const char *path, trn_config_t *out, trn_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return trn_fail(err, LISA_NOTFOUND, "%s: cannot open: %s", path,
                        strerror(errno));
    char *buf = lisa_malloc(TRN_MAX_CONFIG_LEN + 1);
    size_t n = fread(buf, 1, TRN_MAX_CONFIG_LEN + 1, f);
    fclose(f);
    lisa_rc_t rc;
    if (n > TRN_MAX_CONFIG_LEN)
        rc = trn_fail(err, LISA_TOOLARGE, "%s: larger than %u bytes", path,
                      TRN_MAX_CONFIG_LEN);
    else
        rc = trn_config_parse(buf, n, out, err);
    lisa_free(&buf);
    return rc;
}

size_t
trn_config_num_params(const trn_config_t *c)
{
    size_t h = (size_t) c->hidden_size, in = (size_t) c->intermediate_size;
    size_t q = (size_t) (c->num_attention_heads * c->head_dim);
    size_t kv = (size_t) (c->num_key_value_heads * c->head_dim);
    size_t hd = (size_t) c->head_dim, v = (size_t) c->vocab_size;
    size_t layer = 2 * h + q * h * 2 + kv * h * 2 + 3 * h * in;
    if (trn_config_qk_norm(c))
        layer += 2 * hd;
    if (trn_config_qkv_bias(c))
        layer += q + 2 * kv;
    size_t n = v * h + h + (size_t) c->num_hidden_layers * layer;
    if (!c->tie_word_embeddings)
        n += v * h;
    return n;
}
