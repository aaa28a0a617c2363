/*
 * trn_ckpt / trn_backend tests: a checkpoint directory loads back with
 * trn_model_load (same weights), the optimizer state and trainer state
 * round-trip, a truncated or mismatched optimizer file is refused, and
 * the settings table parses verl-style overrides. The first test is the
 * usage example.
 */
#include "trn_backend.h"
#include "trn_ckpt.h"
#include "trn_run_cfg.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char s_dir[128], s_out[160];

static void
s_setup(void)
{
    trn_config_t c = {.hidden_size = 16,
                      .intermediate_size = 32,
                      .num_hidden_layers = 1,
                      .num_attention_heads = 2,
                      .num_key_value_heads = 1,
                      .head_dim = 8,
                      .vocab_size = 32,
                      .max_position_embeddings = 64,
                      .rms_norm_eps = 1e-6,
                      .rope_theta = 10000,
                      .tie_word_embeddings = false};
    snprintf(s_dir, sizeof s_dir, "/tmp/trn_ckpt_test.XXXXXX");
    cr_assert(mkdtemp(s_dir));
    trn_model_t *m = trn_model_new_random(&c, 3, 0.2f, 1);
    trn_err_t err;
    cr_assert_eq(trn_model_save(m, s_dir, TRN_SAVE_F32, &err), LISA_OK);
    trn_model_destroy(&m);
    char p[256];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", s_dir);
    FILE *f = fopen(p, "w");
    fputs("{}", f);
    fclose(f);
    snprintf(s_out, sizeof s_out, "%s/out", s_dir);
    cr_assert_eq(mkdir(s_out, 0755), 0);
}

static void
s_teardown(void)
{
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s_dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(trn_ckpt, .init = s_setup, .fini = s_teardown);

/* One optimizer step on a tiny batch so weights and moments move. */
static void
s_train(trn_backend_t *b)
{
    int32_t tok[6] = {1, 2, 3, 4, 5, 6};
    uint8_t mask[6] = {0, 1, 1, 0, 1, 1};
    float lp[6] = {0, 0, -3, -3, -3, -3};
    size_t off[3] = {0, 3, 6};
    int64_t grp[2] = {0, 0};
    double score[2] = {1, 0};
    trn_rollouts_t r = {.n_seqs = 2,
                        .seq_offsets = off,
                        .tokens = tok,
                        .mask = mask,
                        .rollout_logp = lp,
                        .group = grp,
                        .score = score};
    trn_step_cfg_t cfg = trn_step_defaults();
    cfg.optim.lr = 1e-2;
    trn_step_out_t o;
    trn_err_t err;
    cr_assert_eq(b->ops->train_step(b, &cfg, &r, &o, &err), LISA_OK, "%s",
                 err.msg);
    cr_assert_gt(o.grad_norm, 0);
}

Test(trn_ckpt, usage)
{
    trn_err_t err;
    trn_backend_t *b = trn_backend_new("cpu", s_dir, 1, false, &err);
    cr_assert(b, "%s", err.msg);
    s_train(b);
    trn_ckpt_state_t st = {.global_step = 7,
                           .policy_version = 9,
                           .data_seed = 5,
                           .batch_size = 8,
                           .n_train = 100};
    snprintf(st.run_id, sizeof st.run_id, "run-x");
    char dir[512];
    cr_assert_eq(trn_ckpt_save(b, s_out, &st, false, dir, sizeof dir, &err),
                 LISA_OK, "%s", err.msg);
    cr_assert(strstr(dir, "global_step_7"));
    /* a Hugging Face directory: trn_model_load opens it */
    trn_model_t *m = NULL;
    cr_assert_eq(trn_model_load(dir, 1, &m, &err), LISA_OK, "%s", err.msg);
    char p[600];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(p, "r");
    cr_assert(f, "tokenizer files travel with the checkpoint");
    fclose(f);
    /* resume: same weights, optimizer state and trainer state */
    trn_backend_t *b2 = trn_backend_new("cpu", dir, 1, false, &err);
    cr_assert(b2);
    trn_ckpt_state_t back;
    cr_assert_eq(trn_ckpt_load(b2, dir, &back, &err), LISA_OK, "%s", err.msg);
    cr_assert_eq(back.global_step, 7);
    cr_assert_eq(back.policy_version, 9);
    cr_assert_str_eq(back.run_id, "run-x");
    cr_assert_eq(back.data_seed, 5);
    cr_assert_eq(back.n_train, 100);
    /* the next step from the checkpoint equals the next step in place */
    s_train(b);
    s_train(b2);
    char d1[512], d2[512];
    st.global_step = 8;
    cr_assert_eq(trn_ckpt_save(b, s_out, &st, false, d1, sizeof d1, &err),
                 LISA_OK);
    char out2[200];
    snprintf(out2, sizeof out2, "%s/out2", s_dir);
    cr_assert_eq(mkdir(out2, 0755), 0);
    cr_assert_eq(trn_ckpt_save(b2, out2, &st, false, d2, sizeof d2, &err),
                 LISA_OK);
    trn_model_t *x = NULL, *y = NULL;
    cr_assert_eq(trn_model_load(d1, 1, &x, &err), LISA_OK);
    cr_assert_eq(trn_model_load(d2, 1, &y, &err), LISA_OK);
    size_t n = trn_model_num_params(x);
    cr_assert_eq(
        memcmp(trn_model_params(x), trn_model_params(y), n * sizeof(float)), 0);
    cr_assert_neq(
        memcmp(trn_model_params(x), trn_model_params(m), n * sizeof(float)), 0);
    trn_model_destroy(&x);
    trn_model_destroy(&y);
    trn_model_destroy(&m);
    trn_backend_destroy(&b2);
    trn_backend_destroy(&b);
    cr_assert_null(b);
}

Test(trn_ckpt, bad_optimizer_files_are_refused)
{
    float m[4] = {1, 2, 3, 4}, v[4] = {5, 6, 7, 8}, m2[4], v2[4];
    char p[256];
    snprintf(p, sizeof p, "%s/opt.bin", s_dir);
    trn_err_t err;
    uint64_t step = 0;
    cr_assert_eq(trn_optim_state_save(p, 3, m, v, 4, &err), LISA_OK);
    cr_assert_eq(trn_optim_state_load(p, &step, m2, v2, 4, &err), LISA_OK);
    cr_assert_eq(step, 3);
    cr_assert_eq(memcmp(m, m2, sizeof m), 0);
    cr_assert_eq(memcmp(v, v2, sizeof v), 0);
    cr_assert_eq(trn_optim_state_load(p, &step, m2, v2, 5, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "parameter count"), "%s", err.msg);
    cr_assert_eq(truncate(p, 30), 0);
    cr_assert_eq(trn_optim_state_load(p, &step, m2, v2, 4, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "truncated"), "%s", err.msg);
    FILE *f = fopen(p, "w");
    fputs("garbage!garbage!garbage!", f);
    fclose(f);
    cr_assert_eq(trn_optim_state_load(p, &step, m2, v2, 4, &err), LISA_INVALID);
    cr_assert(strstr(err.msg, "not an optimizer state"), "%s", err.msg);
    snprintf(p, sizeof p, "%s/none.bin", s_dir);
    cr_assert_eq(trn_optim_state_load(p, &step, m2, v2, 4, &err),
                 LISA_NOTFOUND);
    trn_backend_t *b = trn_backend_new("cuda-nope", s_dir, 1, false, &err);
    cr_assert_null(b);
    cr_assert(strstr(err.msg, "not built"), "%s", err.msg);
}

Test(trn_ckpt, settings_take_verl_style_overrides)
{
    trn_run_cfg_t c;
    memset(&c, 0, sizeof c);
    char *argv[] = {"train",
                    "--model",
                    "m",
                    "data.train_batch_size=3",
                    "actor_rollout_ref.rollout.n=5",
                    "actor_rollout_ref.actor.optim.lr=2e-6",
                    "algorithm.adv_estimator=rloo",
                    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
                    "actor_rollout_ref.actor.clip_ratio_high=0.28",
                    "trainer.failed_rollouts=mask",
                    "trainer.step_timeout=90s"};
    char err[256];
    cr_assert_eq(lisa_config_load(trn_run_cfg_table, trn_run_cfg_table_len, &c,
                                  11, argv, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_eq(c.batch_size, 3);
    cr_assert_eq(c.n, 5);
    cr_assert_eq(c.step_timeout_ms, 90000);
    trn_step_cfg_t s;
    trn_failed_t fp;
    bool de, bf;
    cr_assert_eq(trn_run_cfg_resolve(&c, &s, &fp, &de, &bf, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_float_eq(s.optim.lr, 2e-6, 1e-18);
    cr_assert_eq(s.adv.kind, TRN_ADV_RLOO);
    cr_assert_eq(s.loss.agg, TRN_AGG_SEQ_MEAN_TOKEN_SUM);
    cr_assert_float_eq(s.loss.clip_high, 0.28, 1e-12);
    cr_assert_eq(fp, TRN_FAILED_MASK);
    cr_assert(!de && !bf);
    cr_assert_float_eq(s.optim.eps, 1e-8, 1e-20);
    cr_assert_eq(c.lr_warmup_steps, -1);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
    /* warmup and AdamW epsilon: taken, and refused out of range */
    char *opt[] = {"train", "actor_rollout_ref.actor.optim.eps=1e-5",
                   "actor_rollout_ref.actor.optim.lr_warmup_steps=5"};
    cr_assert_eq(lisa_config_load(trn_run_cfg_table, trn_run_cfg_table_len, &c,
                                  3, opt, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_eq(trn_run_cfg_resolve(&c, &s, &fp, &de, &bf, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_float_eq(s.optim.eps, 1e-5, 1e-18);
    cr_assert_eq(c.lr_warmup_steps, 5);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
    const char *out_of_range[][2] = {
        {"actor_rollout_ref.actor.optim.eps=0", "optim.eps"},
        {"actor_rollout_ref.actor.optim.lr_warmup_steps=-2", "lr_warmup"},
        {"actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=1.5",
         "lr_warmup_steps_ratio"}};
    for (size_t i = 0; i < 3; i++) {
        char *av[] = {"train", (char *) out_of_range[i][0]};
        cr_assert_eq(lisa_config_load(trn_run_cfg_table, trn_run_cfg_table_len,
                                      &c, 2, av, err, sizeof err),
                     LISA_OK, "%s", err);
        cr_assert_eq(
            trn_run_cfg_resolve(&c, &s, &fp, &de, &bf, err, sizeof err),
            LISA_INVALID, "%s", out_of_range[i][0]);
        cr_assert(strstr(err, out_of_range[i][1]), "%s", err);
        lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
    }
    char *bad[] = {"train", "algorithm.adv_estimator=ppo"};
    cr_assert_eq(lisa_config_load(trn_run_cfg_table, trn_run_cfg_table_len, &c,
                                  2, bad, err, sizeof err),
                 LISA_OK);
    cr_assert_eq(trn_run_cfg_resolve(&c, &s, &fp, &de, &bf, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "algorithm.adv_estimator"), "%s", err);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
    char *unknown[] = {"train", "trainer.no_such_key=1"};
    cr_assert_eq(lisa_config_load(trn_run_cfg_table, trn_run_cfg_table_len, &c,
                                  2, unknown, err, sizeof err),
                 LISA_INVALID);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
}
