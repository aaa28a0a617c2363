/*
 * trn_sft tests: the marking of sampled tokens against the chat template's
 * own rendering (byte tokenizer), the NLL step learning a conversation,
 * greedy first-turn reproduction, and refused inputs.
 */
#include "lisa/lisa_chat.h"
#include "lisa/lisa_mem.h"
#include "trn_sft.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKDIR LISA_SOURCE_DIR "/tests/fixtures/byte-tokenizer"

static const char s_conv[] =
    "{\"messages\":["
    "{\"role\":\"system\",\"content\":\"Use tools.\"},"
    "{\"role\":\"user\",\"content\":\"Compute 3*4.\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\","
    "\"type\":\"function\",\"function\":{\"name\":\"execute_bash\","
    "\"arguments\":{\"command\":\"echo $((3*4))\"}}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"name\":\"execute_bash\","
    "\"content\":\"12\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c2\","
    "\"type\":\"function\",\"function\":{\"name\":\"submit\","
    "\"arguments\":{}}}]}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"submit\","
    "\"description\":\"Finish.\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{}}}}]}";

static const char s_turn1[] =
    "<tool_call>\n{\"name\": \"execute_bash\", \"arguments\": {\"command\": "
    "\"echo $((3*4))\"}}\n</tool_call><|im_end|>";
static const char s_turn2[] =
    "<tool_call>\n{\"name\": \"submit\", \"arguments\": {}}\n</tool_call>"
    "<|im_end|>";

static char *
s_decode(lisa_tokenizer_t *tok, const int32_t *ids, size_t n)
{
    char *text = NULL;
    cr_assert_eq(lisa_tokenizer_decode(tok, ids, n, 0, &text, NULL), LISA_OK);
    return text;
}

/* The text of the run of marked (m = 1) or unmarked tokens number k. */
static char *
s_run(lisa_tokenizer_t *tok, const trn_sft_seq_t *s, uint8_t m, int k)
{
    size_t i = 0;
    for (int r = 0; i < s->n; r++) {
        while (i < s->n && s->mask[i] != m)
            i++;
        size_t a = i;
        while (i < s->n && s->mask[i] == m)
            i++;
        if (r == k)
            return s_decode(tok, s->ids + a, i - a);
    }
    return NULL;
}

/* A tiny random model's shape over the test tokenizer's 265 ids. */
static trn_config_t
s_tiny_cfg(int layers)
{
    return (trn_config_t){.hidden_size = 32,
                          .intermediate_size = 64,
                          .num_hidden_layers = layers,
                          .num_attention_heads = 2,
                          .num_key_value_heads = 1,
                          .head_dim = 16,
                          .vocab_size = 265,
                          .max_position_embeddings = 1024,
                          .rms_norm_eps = 1e-6,
                          .rope_theta = 10000,
                          .tie_word_embeddings = true};
}

Test(trn_sft, usage_encode_and_mark)
{
    lisa_tokenizer_t *tok = lisa_tokenizer_new_from_dir(TOKDIR);
    cr_assert_not_null(tok);
    json_t *conv = json_loads(s_conv, 0, NULL);
    trn_sft_seq_t s;
    trn_err_t err;
    cr_assert_eq(trn_sft_encode(tok, conv, &s, &err), LISA_OK, "%s", err.msg);
    /* The sampled tokens are exactly the two assistant turns. */
    char *t1 = s_run(tok, &s, 1, 0), *t2 = s_run(tok, &s, 1, 1);
    cr_assert_str_eq(t1, s_turn1);
    cr_assert_str_eq(t2, s_turn2);
    cr_assert_null(s_run(tok, &s, 1, 2));
    /* The prompt is the template's rendering of the first two messages
     * with the generation prompt, token for token. */
    json_t *head = json_array();
    json_t *msgs = json_object_get(conv, "messages");
    json_array_append(head, json_array_get(msgs, 0));
    json_array_append(head, json_array_get(msgs, 1));
    lisa_chat_opts_t o = lisa_chat_opts_default();
    char *want = NULL;
    cr_assert_eq(lisa_chat_render(head, json_object_get(conv, "tools"), &o,
                                  &want, NULL, NULL),
                 LISA_OK);
    char *prompt = s_decode(tok, s.ids, s.prompt_len);
    cr_assert_str_eq(prompt, want);
    /* Between the turns: the tool response, as a user turn. */
    char *mid = s_run(tok, &s, 0, 1);
    cr_assert_str_eq(mid, "\n<|im_start|>user\n<tool_response>\n12\n"
                          "</tool_response><|im_end|>\n<|im_start|>"
                          "assistant\n");
    /* Special tokens are single ids. */
    cr_assert_eq(s.ids[s.prompt_len - 11], /* <|im_start|>assistant\n */
                 lisa_tokenizer_im_start_id(tok));
    free(t1);
    free(t2);
    free(prompt);
    free(mid);
    lisa_free(&want);
    json_decref(head);
    json_decref(conv);
    trn_sft_seq_clear(&s);
    trn_sft_seq_clear(&s);
    lisa_tokenizer_destroy(&tok);
}

Test(trn_sft, steps_learn_a_conversation)
{
    lisa_tokenizer_t *tok = lisa_tokenizer_new_from_dir(TOKDIR);
    json_t *conv = json_loads(s_conv, 0, NULL);
    json_object_del(conv, "tools"); /* a short prompt keeps the test fast */
    trn_sft_seq_t s;
    trn_err_t err;
    cr_assert_eq(trn_sft_encode(tok, conv, &s, &err), LISA_OK);
    trn_config_t cfg = s_tiny_cfg(1);
    trn_model_t *m = trn_model_new_random(&cfg, 3, 0.02f, 1);
    cr_assert_not_null(m);
    trn_adamw_t *opt = trn_adamw_new(trn_model_num_params(m));
    trn_sft_cfg_t c = trn_sft_defaults();
    c.optim.lr = 2e-2;
    trn_sft_out_t first = {0}, last = {0};
    bool match = true;
    cr_assert_eq(trn_sft_first_turn_match(m, &s, 0.0f, NULL, &match, &err),
                 LISA_OK);
    cr_assert(!match, "a random model reproduced the turn");
    for (int i = 0; i < 80; i++) {
        cr_assert_eq(trn_sft_step(m, opt, &c, &s, 1, &last, &err), LISA_OK,
                     "%s", err.msg);
        if (i == 0)
            first = last;
    }
    /* One id per byte, and one per special token (<tool_call>,
     * </tool_call>, <|im_end|>: 33 bytes, 3 ids, in each turn). */
    double want = (double) (strlen(s_turn1) + strlen(s_turn2) - 2 * 30);
    cr_assert_eq(first.tokens, want, "marked tokens %f", first.tokens);
    cr_assert_gt(first.loss, 4.0, "first loss %f", first.loss);
    cr_assert_lt(last.loss, 0.05, "last loss %f", last.loss);
    cr_assert_eq(trn_sft_first_turn_match(m, &s, 0.0f, NULL, &match, &err),
                 LISA_OK);
    cr_assert(match, "the trained model does not reproduce the turn");
    trn_adamw_destroy(&opt);
    trn_model_destroy(&m);
    json_decref(conv);
    trn_sft_seq_clear(&s);
    lisa_tokenizer_destroy(&tok);
}

Test(trn_sft, refuses_bad_conversations)
{
    lisa_tokenizer_t *tok = lisa_tokenizer_new_from_dir(TOKDIR);
    static const char *const bad[] = {
        "{}",
        "{\"messages\":{}}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"\\u00ff\\ud800\"},"
        "{\"role\":\"assistant\",\"content\":\"x\"}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *c = json_loads(bad[i], JSON_ALLOW_NUL, NULL);
        trn_sft_seq_t s;
        trn_err_t err;
        if (!c)
            continue; /* jansson refuses the lone surrogate itself */
        cr_assert_eq(trn_sft_encode(tok, c, &s, &err), LISA_INVALID, "case %zu",
                     i);
        cr_assert_null(s.ids);
        json_decref(c);
    }
    /* An empty batch and a batch without marked tokens are refused. */
    trn_config_t cfg = {.hidden_size = 32,
                        .intermediate_size = 64,
                        .num_hidden_layers = 1,
                        .num_attention_heads = 2,
                        .num_key_value_heads = 1,
                        .head_dim = 16,
                        .vocab_size = 265,
                        .max_position_embeddings = 64,
                        .rms_norm_eps = 1e-6,
                        .rope_theta = 10000,
                        .tie_word_embeddings = true};
    trn_model_t *m = trn_model_new_random(&cfg, 3, 0.02f, 1);
    trn_adamw_t *opt = trn_adamw_new(trn_model_num_params(m));
    trn_sft_cfg_t c = trn_sft_defaults();
    trn_sft_out_t out;
    trn_err_t err;
    cr_assert_eq(trn_sft_step(m, opt, &c, NULL, 0, &out, &err), LISA_INVALID);
    int32_t ids[4] = {1, 2, 3, 4};
    uint8_t mask[4] = {0};
    trn_sft_seq_t s = {.ids = ids, .mask = mask, .n = 4, .prompt_len = 4};
    cr_assert_eq(trn_sft_step(m, opt, &c, &s, 1, &out, &err), LISA_INVALID);
    cr_assert_eq(trn_adamw_steps(opt), 0);
    trn_adamw_destroy(&opt);
    trn_model_destroy(&m);
    lisa_tokenizer_destroy(&tok);
}

/* A tokenizer directory whose tokenizer_config.json carries `tmpl` (the
 * byte tokenizer's vocabulary); the caller removes it. */
static char *
s_dir_with_template(const char *tmpl)
{
    char *dir = lisa_strdup("/tmp/trn_sft_test.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *in = fopen(TOKDIR "/tokenizer.json", "rb");
    FILE *out = fopen(path, "wb");
    cr_assert(in && out);
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        cr_assert_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    fclose(out);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    json_t *cfg = json_pack("{s:s,s:s}", "chat_template", tmpl, "eos_token",
                            "<|im_end|>");
    cr_assert_eq(json_dump_file(cfg, path, 0), 0);
    json_decref(cfg);
    return dir;
}

static void
s_rm_dir(char **dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", *dir);
    remove(path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", *dir);
    remove(path);
    remove(*dir);
    lisa_free(dir);
}

/* The model's own template: SmolLM2's ChatML renders the prompt (its
 * default system turn), the marked turns are the same; an unknown
 * template is refused. */
Test(trn_sft, follows_the_models_template)
{
    char *dir = s_dir_with_template(
        "{% for message in messages %}{% if loop.first and "
        "messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are "
        "a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] "
        "+ '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
        "{% endif %}");
    lisa_tokenizer_t *tok = lisa_tokenizer_new_from_dir(dir);
    cr_assert_not_null(tok);
    json_t *conv = json_loads(s_conv, 0, NULL);
    json_array_remove(json_object_get(conv, "messages"), 0); /* no system */
    trn_sft_seq_t s;
    trn_err_t err;
    cr_assert_eq(trn_sft_encode(tok, conv, &s, &err), LISA_OK, "%s", err.msg);
    char *t1 = s_run(tok, &s, 1, 0), *t2 = s_run(tok, &s, 1, 1);
    cr_assert_str_eq(t1, s_turn1);
    cr_assert_str_eq(t2, s_turn2);
    json_t *head = json_array();
    json_array_append(head,
                      json_array_get(json_object_get(conv, "messages"), 0));
    lisa_chat_opts_t o = lisa_chat_opts_default();
    o.tmpl = LISA_CHAT_SMOLLM2;
    char *want = NULL;
    cr_assert_eq(lisa_chat_render(head, json_object_get(conv, "tools"), &o,
                                  &want, NULL, NULL),
                 LISA_OK);
    char *prompt = s_decode(tok, s.ids, s.prompt_len);
    cr_assert_str_eq(prompt, want);
    cr_assert_not_null(strstr(prompt, "named SmolLM, trained by Hugging "
                                      "Face\n\n# Tools"));
    free(t1);
    free(t2);
    free(prompt);
    lisa_free(&want);
    json_decref(head);
    trn_sft_seq_clear(&s);
    lisa_tokenizer_destroy(&tok);
    s_rm_dir(&dir);

    dir = s_dir_with_template("{{ '<|start_header_id|>' }}");
    tok = lisa_tokenizer_new_from_dir(dir);
    cr_assert_not_null(tok);
    cr_assert_eq(trn_sft_encode(tok, conv, &s, &err), LISA_INVALID);
    cr_assert_not_null(strstr(err.msg, "unknown chat template"), "%s", err.msg);
    lisa_tokenizer_destroy(&tok);
    s_rm_dir(&dir);
    json_decref(conv);
}

/* Two conversations as rollouts (trn_sft_batch_make) trained by the PPO
 * step with trn_sft_step_cfg: advantage exactly 1, ratio 1, so the
 * gradient is the mean NLL's of trn_sft_step, element by element (no
 * clipping, so a scaled gradient would show), and so are the loss the
 * log-probs give and the weights after one update. */
Test(trn_sft, ppo_step_of_a_batch_is_the_nll_step)
{
    lisa_tokenizer_t *tok = lisa_tokenizer_new_from_dir(TOKDIR);
    json_t *conv = json_loads(s_conv, 0, NULL);
    json_object_del(conv, "tools");
    trn_sft_seq_t s[2];
    trn_err_t err;
    cr_assert_eq(trn_sft_encode(tok, conv, &s[0], &err), LISA_OK);
    json_array_remove(json_object_get(conv, "messages"), 0); /* no system */
    cr_assert_eq(trn_sft_encode(tok, conv, &s[1], &err), LISA_OK);
    trn_config_t cfg = s_tiny_cfg(2);
    trn_model_t *a = trn_model_new_random(&cfg, 5, 0.02f, 1);
    trn_model_t *b = trn_model_new_random(&cfg, 5, 0.02f, 1);
    size_t np = trn_model_num_params(a);
    trn_adamw_t *oa = trn_adamw_new(np), *ob = trn_adamw_new(np);
    trn_sft_cfg_t c = trn_sft_defaults();
    c.optim.lr = 1e-2;
    c.grad_clip = 0;
    trn_step_cfg_t sc = trn_sft_step_cfg(&c);
    /* the advantage of a group of one under this configuration */
    double one = 1.0, adv = 0;
    int64_t g = 7;
    cr_assert_eq(trn_advantage(&sc.adv, &one, &g, 1, &adv, &err), LISA_OK);
    cr_assert_eq(adv, 1.0, "advantage %.17g", adv);
    trn_sft_batch_t sb;
    cr_assert_eq(trn_sft_batch_make(s, 2, &sb, &err), LISA_OK, "%s", err.msg);
    cr_assert_eq(sb.r.n_seqs, 2);
    cr_assert_eq(sb.offs[2], s[0].n + s[1].n);
    cr_assert_null(sb.r.old_logp);
    cr_assert_eq(sb.score[0], 1.0);
    cr_assert_neq(sb.group[0], sb.group[1]);
    /* the log-probs' NLL is the one trn_sft_step reports */
    float *logp = lisa_calloc(sb.offs[2], sizeof *logp);
    cr_assert_eq(trn_step_logprobs(b, &sc, &sb.r, logp, &err), LISA_OK, "%s",
                 err.msg);
    trn_sft_out_t nll;
    trn_sft_batch_nll(&sb, logp, &nll);
    trn_sft_out_t so;
    cr_assert_eq(trn_sft_step(a, oa, &c, s, 2, &so, &err), LISA_OK);
    trn_step_out_t st;
    cr_assert_eq(trn_step_run(b, NULL, ob, &sc, &sb.r, &st, &err), LISA_OK,
                 "%s", err.msg);
    cr_assert(!st.skipped);
    cr_assert_eq(nll.tokens, so.tokens);
    cr_assert_float_eq(nll.loss, so.loss, 1e-5 * so.loss, "%f %f", nll.loss,
                       so.loss);
    cr_assert_float_eq(nll.accuracy, so.accuracy, 1e-12);
    cr_assert_float_eq(st.grad_norm, so.grad_norm, 1e-5 * so.grad_norm, "%f %f",
                       st.grad_norm, so.grad_norm);
    const float *ga = trn_model_grads(a), *gb = trn_model_grads(b);
    const float *pa = trn_model_params(a), *pb = trn_model_params(b);
    double gmax = 0, gdiff = 0, pdiff = 0;
    for (size_t i = 0; i < np; i++) {
        gmax = fmax(gmax, fabs((double) ga[i]));
        gdiff = fmax(gdiff, fabs((double) ga[i] - (double) gb[i]));
        pdiff = fmax(pdiff, fabs((double) pa[i] - (double) pb[i]));
    }
    cr_assert_gt(gmax, 1e-4, "no gradient");
    cr_assert_lt(gdiff, 1e-5 * gmax, "gradients differ by %g (max %g)", gdiff,
                 gmax);
    cr_assert_lt(pdiff, 1e-6, "weights differ by %g", pdiff);
    /* a batch without marked tokens is refused */
    trn_sft_batch_clear(&sb);
    uint8_t none[4] = {0, 0, 0, 0};
    int32_t ids[4] = {1, 2, 3, 4};
    trn_sft_seq_t e = {.ids = ids, .mask = none, .n = 4, .prompt_len = 4};
    cr_assert_eq(trn_sft_batch_make(&e, 1, &sb, &err), LISA_INVALID);
    cr_assert_eq(trn_sft_batch_make(s, 0, &sb, &err), LISA_INVALID);
    trn_sft_batch_clear(&sb);
    lisa_free(&logp);
    trn_adamw_destroy(&oa);
    trn_adamw_destroy(&ob);
    trn_model_destroy(&a);
    trn_model_destroy(&b);
    trn_sft_seq_clear(&s[0]);
    trn_sft_seq_clear(&s[1]);
    json_decref(conv);
    lisa_tokenizer_destroy(&tok);
}
