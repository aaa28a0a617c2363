/*
 * trn_model_config tests: real Qwen3 config.json shapes parse to the right
 * numbers, defaults follow transformers' Qwen3Config, and missing or
 * inconsistent fields give an error naming the problem. The first test is
 * the usage example.
 */
#include "trn_model.h"

#include <criterion/criterion.h>
#include <string.h>

/* Qwen3-4B-Instruct-2507's config.json (numbers as published). */
static const char *QWEN3_4B_2507 =
    "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,"
    "\"attention_dropout\":0.0,\"bos_token_id\":151643,\"eos_token_id\":"
    "151645,\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":2560,"
    "\"initializer_range\":0.02,\"intermediate_size\":9728,"
    "\"max_position_embeddings\":262144,\"max_window_layers\":36,"
    "\"model_type\":\"qwen3\",\"num_attention_heads\":32,"
    "\"num_hidden_layers\":36,\"num_key_value_heads\":8,\"rms_norm_eps\":"
    "1e-06,\"rope_scaling\":null,\"rope_theta\":5000000,\"sliding_window\":"
    "null,\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\","
    "\"transformers_version\":\"4.51.0\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";

Test(trn_model_config, usage)
{
    trn_config_t c;
    trn_err_t err;
    cr_assert_eq(
        trn_config_parse(QWEN3_4B_2507, strlen(QWEN3_4B_2507), &c, &err),
        LISA_OK, "%s", err.msg);
    cr_assert_eq(c.hidden_size, 2560);
    cr_assert_eq(c.num_attention_heads * c.head_dim, 4096); /* != hidden */
    cr_assert_eq(c.num_key_value_heads, 8);
    cr_assert_eq(c.max_position_embeddings, 262144);
    cr_assert_float_eq(c.rope_theta, 5e6, 1e-6);
    cr_assert(c.tie_word_embeddings);
    /* 4.02B parameters, as the published 8.04 GB bf16 checkpoint says */
    size_t n = trn_config_num_params(&c);
    cr_assert(n > 4020000000u && n < 4025000000u, "%zu", n);
}

static lisa_rc_t
parse(const char *s, trn_config_t *c, trn_err_t *err)
{
    return trn_config_parse(s, strlen(s), c, err);
}

/* SmolLM2-135M-Instruct's config.json (Llama, tied; numbers as
 * published). */
static const char *SMOLLM2_135M =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,"
    "\"attention_dropout\":0.0,\"bos_token_id\":1,\"eos_token_id\":2,"
    "\"hidden_act\":\"silu\",\"hidden_size\":576,\"initializer_range\":"
    "0.041666666666666664,\"intermediate_size\":1536,"
    "\"max_position_embeddings\":8192,\"mlp_bias\":false,\"model_type\":"
    "\"llama\",\"num_attention_heads\":9,\"num_hidden_layers\":30,"
    "\"num_key_value_heads\":3,\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,"
    "\"rope_scaling\":null,\"rope_theta\":100000,\"tie_word_embeddings\":"
    "true,\"torch_dtype\":\"bfloat16\",\"use_cache\":true,\"vocab_size\":"
    "49152}";

/* Qwen2.5-0.5B-Instruct's config.json (Qwen2: q/k/v biases). */
static const char *QWEN25_05B =
    "{\"architectures\":[\"Qwen2ForCausalLM\"],\"attention_dropout\":0.0,"
    "\"bos_token_id\":151643,\"eos_token_id\":151645,\"hidden_act\":"
    "\"silu\",\"hidden_size\":896,\"initializer_range\":0.02,"
    "\"intermediate_size\":4864,\"max_position_embeddings\":32768,"
    "\"max_window_layers\":21,\"model_type\":\"qwen2\","
    "\"num_attention_heads\":14,\"num_hidden_layers\":24,"
    "\"num_key_value_heads\":2,\"rms_norm_eps\":1e-06,\"rope_theta\":"
    "1000000.0,\"sliding_window\":32768,\"tie_word_embeddings\":true,"
    "\"torch_dtype\":\"bfloat16\",\"use_cache\":true,"
    "\"use_sliding_window\":false,\"vocab_size\":151936}";

Test(trn_model_config, llama_and_qwen2_families)
{
    trn_config_t c;
    trn_err_t err;
    cr_assert_eq(trn_config_parse(SMOLLM2_135M, strlen(SMOLLM2_135M), &c, &err),
                 LISA_OK, "%s", err.msg);
    cr_assert_eq(c.family, TRN_FAMILY_LLAMA);
    cr_assert_not(trn_config_qk_norm(&c));
    cr_assert_not(trn_config_qkv_bias(&c));
    cr_assert_eq(c.head_dim, 64);
    cr_assert_eq(c.num_key_value_heads, 3);
    cr_assert_float_eq(c.rms_norm_eps, 1e-5, 1e-12);
    cr_assert(c.tie_word_embeddings);
    /* 134.5M parameters, as published */
    cr_assert_eq(trn_config_num_params(&c), 134515008u);
    cr_assert_eq(trn_config_parse(QWEN25_05B, strlen(QWEN25_05B), &c, &err),
                 LISA_OK, "%s", err.msg);
    cr_assert_eq(c.family, TRN_FAMILY_QWEN2);
    cr_assert(trn_config_qkv_bias(&c));
    cr_assert_not(trn_config_qk_norm(&c));
    /* 0.49B (494,032,768) as published */
    cr_assert_eq(trn_config_num_params(&c), 494032768u);
    /* the architecture alone picks the family; Llama's default context */
    cr_assert_eq(parse("{\"architectures\":[\"LlamaForCausalLM\"],"
                       "\"hidden_size\":64,\"intermediate_size\":128,"
                       "\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                       "\"vocab_size\":512}",
                       &c, NULL),
                 LISA_OK);
    cr_assert_eq(c.family, TRN_FAMILY_LLAMA);
    cr_assert_eq(c.max_position_embeddings, 2048);
    cr_assert_str_eq(trn_family_model_type(c.family), "llama");
    cr_assert_str_eq(trn_family_architecture(TRN_FAMILY_QWEN2),
                     "Qwen2ForCausalLM");
    /* no model_type, no architectures: Qwen3 as before */
    cr_assert_eq(parse("{\"hidden_size\":64,\"intermediate_size\":128,"
                       "\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                       "\"vocab_size\":512}",
                       &c, NULL),
                 LISA_OK);
    cr_assert_eq(c.family, TRN_FAMILY_QWEN3);
    cr_assert(trn_config_qk_norm(&c));
}

#define BASE                                                                   \
    "\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"    \
    "\"num_attention_heads\":4,\"vocab_size\":512"

Test(trn_model_config, defaults_follow_transformers)
{
    trn_config_t c;
    cr_assert_eq(parse("{" BASE "}", &c, NULL), LISA_OK);
    cr_assert_eq(c.num_key_value_heads, 4);
    cr_assert_eq(c.head_dim, 16);
    cr_assert_eq(c.max_position_embeddings, 32768);
    cr_assert_float_eq(c.rms_norm_eps, 1e-6, 1e-15);
    cr_assert_float_eq(c.rope_theta, 10000.0, 1e-9);
    cr_assert_not(c.tie_word_embeddings);
    /* transformers 5 spells theta inside rope_parameters */
    cr_assert_eq(parse("{" BASE ",\"rope_parameters\":{\"rope_type\":"
                       "\"default\",\"rope_theta\":1000000.0}}",
                       &c, NULL),
                 LISA_OK);
    cr_assert_float_eq(c.rope_theta, 1e6, 1e-6);
}

Test(trn_model_config, bad_configs_are_refused_clearly)
{
    static const struct {
        const char *json;
        lisa_rc_t rc;
        const char *why;
    } cases[] = {
        {"{\"hidden_size\":64}", LISA_INVALID,
         "missing required field 'intermediate_size'"},
        {"not json", LISA_INVALID, "not a JSON object"},
        {"[1]", LISA_INVALID, "not a JSON object"},
        {"{" BASE ",\"num_key_value_heads\":3}", LISA_INVALID,
         "multiple of num_key_value_heads"},
        {"{" BASE ",\"head_dim\":15}", LISA_INVALID, "head_dim (15)"},
        {"{\"hidden_size\":60,\"intermediate_size\":128,"
         "\"num_hidden_layers\":2,\"num_attention_heads\":8,"
         "\"vocab_size\":5}",
         LISA_INVALID, "no head_dim"},
        {"{" BASE ",\"hidden_size\":64}", LISA_INVALID, "not a JSON"},
        {"{\"hidden_size\":\"64\",\"intermediate_size\":128,"
         "\"num_hidden_layers\":2,\"num_attention_heads\":4,"
         "\"vocab_size\":512}",
         LISA_INVALID, "'hidden_size' must be an integer"},
        {"{" BASE ",\"rms_norm_eps\":0}", LISA_INVALID, "rms_norm_eps"},
        {"{" BASE ",\"tie_word_embeddings\":1}", LISA_INVALID, "true or false"},
        {"{\"hidden_size\":64,\"intermediate_size\":128,"
         "\"num_hidden_layers\":2,\"num_attention_heads\":4,"
         "\"vocab_size\":0}",
         LISA_INVALID, "'vocab_size' = 0"},
        {"{\"hidden_size\":64,\"intermediate_size\":128,"
         "\"num_hidden_layers\":100000,\"num_attention_heads\":4,"
         "\"vocab_size\":5}",
         LISA_INVALID, "'num_hidden_layers' = 100000"},
        {"{" BASE ",\"model_type\":\"mistral\"}", LISA_UNSUPPORTED,
         "model_type \"mistral\""},
        {"{" BASE ",\"architectures\":[\"GPT2LMHeadModel\"]}", LISA_UNSUPPORTED,
         "architecture \"GPT2LMHeadModel\""},
        {"{" BASE ",\"model_type\":7}", LISA_INVALID, "must be a string"},
        {"{" BASE ",\"model_type\":\"llama\",\"attention_bias\":true}",
         LISA_UNSUPPORTED, "attention_bias"},
        {"{" BASE ",\"model_type\":\"llama\",\"mlp_bias\":true}",
         LISA_UNSUPPORTED, "mlp_bias"},
        {"{" BASE ",\"model_type\":\"llama\",\"rope_scaling\":{\"rope_type\":"
         "\"llama3\",\"factor\":8}}",
         LISA_UNSUPPORTED, "rope_type"},
        {"{" BASE ",\"attention_bias\":true}", LISA_UNSUPPORTED,
         "attention_bias"},
        {"{" BASE ",\"use_sliding_window\":true}", LISA_UNSUPPORTED, "sliding"},
        {"{" BASE ",\"hidden_act\":\"gelu\"}", LISA_UNSUPPORTED, "silu"},
        {"{" BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}",
         LISA_UNSUPPORTED, "rope_type"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        trn_config_t c;
        trn_err_t err = {{0}};
        lisa_rc_t rc = parse(cases[i].json, &c, &err);
        cr_assert_eq(rc, cases[i].rc, "case %zu: rc %d", i, rc);
        cr_assert(strstr(err.msg, cases[i].why), "case %zu: '%s' lacks '%s'", i,
                  err.msg, cases[i].why);
    }
    /* yarn via rope_scaling with a "type" key, and null is fine */
    trn_config_t c;
    cr_assert_eq(parse("{" BASE ",\"rope_scaling\":null}", &c, NULL), LISA_OK);
    trn_err_t err;
    cr_assert_eq(trn_config_load("/nonexistent/config.json", &c, &err),
                 LISA_NOTFOUND);
    cr_assert(strstr(err.msg, "cannot open"));
}
