/*
 * trn_run_cfg tests: trainer.logger takes verl's list syntax (quoted or
 * not, with blanks, or one name), takes wandb as tensorboard, refuses a
 * logger lisa does not have with a message naming it and the supported
 * ones, and trn_run_cfg_resolve
 * refuses it too (so the trainer stops before loading a model); the
 * tensorboard folder defaults to <out>/tensorboard. The first test is the
 * usage example.
 */
#include "lisa/lisa_mem.h"
#include "trn_run_cfg.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

Test(trn_run_cfg, usage)
{
    trn_run_cfg_t c;
    memset(&c, 0, sizeof c);
    char *argv[] = {"train", "trainer.logger=['console','tensorboard']",
                    "--out", "runs/x"};
    char err[256];
    unsetenv("TENSORBOARD_DIR");
    cr_assert_eq(lisa_config_load(trn_run_cfg_table, trn_run_cfg_table_len, &c,
                                  4, argv, err, sizeof err),
                 LISA_OK, "%s", err);
    unsigned lg = 0;
    cr_assert_eq(trn_run_cfg_loggers(c.logger, &lg, err, sizeof err), LISA_OK,
                 "%s", err);
    cr_assert_eq(lg, TRN_LOGGER_CONSOLE | TRN_LOGGER_TENSORBOARD);
    char *d = trn_run_cfg_tensorboard_dir(&c);
    cr_assert_str_eq(d, "runs/x/tensorboard");
    lisa_free(&d);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
    /* the default is the console alone; a folder of one's own */
    char *def[] = {"train", "trainer.tensorboard_dir=/tmp/tb"};
    cr_assert_eq(lisa_config_load(trn_run_cfg_table, trn_run_cfg_table_len, &c,
                                  2, def, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_eq(trn_run_cfg_loggers(c.logger, &lg, err, sizeof err), LISA_OK);
    cr_assert_eq(lg, TRN_LOGGER_CONSOLE);
    d = trn_run_cfg_tensorboard_dir(&c);
    cr_assert_str_eq(d, "/tmp/tb");
    lisa_free(&d);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
}

Test(trn_run_cfg, logger_spellings)
{
    static const struct {
        const char *spec;
        unsigned want;
    } ok[] = {
        {"[console,tensorboard]", TRN_LOGGER_CONSOLE | TRN_LOGGER_TENSORBOARD},
        {"['tensorboard']", TRN_LOGGER_TENSORBOARD},
        {"[\"console\", \"tensorboard\"]",
         TRN_LOGGER_CONSOLE | TRN_LOGGER_TENSORBOARD},
        {" [ console , tensorboard ] ",
         TRN_LOGGER_CONSOLE | TRN_LOGGER_TENSORBOARD},
        {"tensorboard", TRN_LOGGER_TENSORBOARD},
        {"console,tensorboard", TRN_LOGGER_CONSOLE | TRN_LOGGER_TENSORBOARD},
        {"[]", 0},
        {"", 0},
    };
    char err[256];
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        unsigned lg = 99;
        cr_assert_eq(trn_run_cfg_loggers(ok[i].spec, &lg, err, sizeof err),
                     LISA_OK, "%s: %s", ok[i].spec, err);
        cr_assert_eq(lg, ok[i].want, "%s", ok[i].spec);
    }
    unsigned lg;
    /* the example's wandb: lisa's curves go to TensorBoard instead */
    cr_assert_eq(
        trn_run_cfg_loggers("['console','wandb']", &lg, err, sizeof err),
        LISA_OK, "%s", err);
    cr_assert_eq(lg, TRN_LOGGER_CONSOLE | TRN_LOGGER_TENSORBOARD);
    cr_assert_eq(
        trn_run_cfg_loggers("['console','swanlab']", &lg, err, sizeof err),
        LISA_INVALID);
    cr_assert(strstr(err, "trainer.logger") && strstr(err, "'swanlab'") &&
                  strstr(err, "console and tensorboard"),
              "%s", err);
    cr_assert_eq(trn_run_cfg_loggers("[console", &lg, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "trainer.logger"), "%s", err);
    cr_assert_eq(trn_run_cfg_loggers("tensorboards", &lg, err, sizeof err),
                 LISA_INVALID);
}

Test(trn_run_cfg, resolve_refuses_an_unknown_logger)
{
    trn_run_cfg_t c;
    memset(&c, 0, sizeof c);
    char *argv[] = {"train", "trainer.logger=[console,mlflow]"};
    char err[256];
    cr_assert_eq(lisa_config_load(trn_run_cfg_table, trn_run_cfg_table_len, &c,
                                  2, argv, err, sizeof err),
                 LISA_OK, "%s", err);
    trn_step_cfg_t s;
    trn_failed_t fp;
    bool de, bf;
    cr_assert_eq(trn_run_cfg_resolve(&c, &s, &fp, &de, &bf, err, sizeof err),
                 LISA_INVALID);
    cr_assert(strstr(err, "'mlflow'"), "%s", err);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
}

/* The Agent Lightning LLM-in-Sandbox example's verl_default_config as
 * OmegaConf dotlist arguments (its Python literals as they print). */
static char *s_example[] = {
    "train",
    "algorithm.adv_estimator=rloo",
    "algorithm.use_kl_in_reward=False",
    "data.train_batch_size=8",
    "data.max_prompt_length=65536",
    "data.max_response_length=65536",
    "data.truncation=error",
    "actor_rollout_ref.rollout.mode=async",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.n=8",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.multi_turn.format=hermes",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.7",
    "actor_rollout_ref.rollout.max_model_len=65536",
    "actor_rollout_ref.rollout.enforce_eager=True",
    "actor_rollout_ref.rollout.engine_kwargs.vllm.enable_auto_tool_choice="
    "True",
    "actor_rollout_ref.rollout.engine_kwargs.vllm.tool_call_parser=hermes",
    "actor_rollout_ref.rollout.temperature=1",
    "actor_rollout_ref.rollout.val_kwargs.temperature=0",
    "actor_rollout_ref.rollout.val_kwargs.do_sample=False",
    "actor_rollout_ref.rollout.enable_prefix_caching=True",
    "actor_rollout_ref.rollout.enable_chunked_prefill=False",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.entropy_coeff=0",
    "actor_rollout_ref.actor.clip_ratio_low=0.2",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "actor_rollout_ref.model.path=Qwen/Qwen3-4B-Instruct-2507",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "trainer.n_gpus_per_node=4",
    "trainer.val_before_train=False",
    "trainer.critic_warmup=0",
    "trainer.logger=['console','wandb']",
    "trainer.project_name=AgentLightning-k8s",
    "trainer.experiment_name=train_llm_in_sandbox_new_code",
    "trainer.nnodes=1",
    "trainer.test_freq=20",
    "trainer.save_freq=20",
    "trainer.total_epochs=15",
    "trainer.total_training_steps=1000",
    "agentlightning.agl_base_url=http://localhost:8080",
    "agentlightning.agl_key=dummy",
    "agentlightning.is_shuffle=False",
    "agentlightning.timeout_seconds=1500",
    "agentlightning.poll_timeout_seconds=1500",
    "agentlightning.reward_fillna_value=0.0",
    "agentlightning.cleanup_agent_jobs=False",
    "agentlightning.cleanup_namespace=default",
    "agentlightning.trace_aggregator.level=trajectory",
    "agentlightning.trace_aggregator.trajectory_max_prompt_length=8000",
    "agentlightning.trace_aggregator.trajectory_max_response_length=12000",
    "agentlightning.trace_aggregator.debug=False",
    "agentlightning.trace_aggregator.mismatch_log_dir=mismatch_cases",
    "agentlightning.k8s.job_template_path=job-template.yaml",
    "--out",
    "runs/x",
};

/* Loads argv, folds and resolves; LISA_OK or the first refusal. */
static lisa_rc_t
load(trn_run_cfg_t *c, int argc, char **argv, trn_step_cfg_t *s, char *err,
     size_t errlen)
{
    memset(c, 0, sizeof *c);
    lisa_rc_t rc = lisa_config_load(trn_run_cfg_table, trn_run_cfg_table_len, c,
                                    argc, argv, err, errlen);
    if (rc != LISA_OK)
        return rc;
    rc = trn_run_cfg_fold(c, err, errlen);
    trn_failed_t fp;
    bool de, bf;
    if (rc == LISA_OK)
        rc = trn_run_cfg_resolve(c, s, &fp, &de, &bf, err, errlen);
    return rc;
}

Test(trn_run_cfg, the_examples_verl_settings_are_honoured)
{
    trn_run_cfg_t c;
    trn_step_cfg_t s;
    char err[512];
    unsetenv("TENSORBOARD_DIR");
    int n = (int) (sizeof s_example / sizeof s_example[0]);
    cr_assert_eq(load(&c, n, s_example, &s, err, sizeof err), LISA_OK, "%s",
                 err);
    /* algorithm, batch, actor */
    cr_assert_eq(s.adv.kind, TRN_ADV_RLOO);
    cr_assert_eq(s.kl_reward_coef, 0.0);
    cr_assert_eq(c.batch_size, 8);
    cr_assert_eq(c.n, 8);
    cr_assert_eq(s.mini_groups, 0); /* 8 prompts of 8: one mini-batch */
    cr_assert_eq(s.ppo_epochs, 1);
    cr_assert_float_eq(s.optim.lr, 1e-6, 1e-18);
    cr_assert_float_eq(s.loss.clip_high, 0.28, 1e-12);
    cr_assert_eq(s.loss.agg, TRN_AGG_SEQ_MEAN_TOKEN_SUM);
    cr_assert_eq(s.loss.kl_coef, 0.0);
    cr_assert_eq(s.recompute, TRN_STEP_RECOMPUTE_ON);
    cr_assert(s.optim_offload); /* fsdp_config.*_offload=True */
    /* the engine: 0.7 of the memory, a 64k context, prefix caching */
    size_t bytes;
    double frac;
    cr_assert_eq(trn_run_cfg_kv_memory(&c, &bytes, &frac, err, sizeof err),
                 LISA_OK, "%s", err);
    cr_assert_float_eq(frac, 0.7, 1e-9);
    cr_assert_eq(c.max_len, 65536);
    cr_assert(c.prefix_cache);
    /* validation greedy, as upstream; the model path given, no --model */
    cr_assert_eq(c.val_temperature, 0.0);
    cr_assert_str_eq(c.model, "Qwen/Qwen3-4B-Instruct-2507");
    /* Agent Lightning: 1,500 s per rollout and per step's wait, failed
     * rollouts scored 0, no shuffle, the trajectory caps */
    cr_assert_eq(c.trajectory_timeout_ms, 1500000u);
    cr_assert_eq(c.step_timeout_ms, 1500000u);
    cr_assert_str_eq(c.failed_rollouts, "zero");
    cr_assert_eq(c.failed_score, 0.0);
    cr_assert_not(c.shuffle);
    size_t mp, mr, drop;
    char tr;
    trn_run_cfg_caps(&c, &mp, &mr, &drop, &tr);
    cr_assert_eq(drop, 8000); /* the smaller of 65536 (error) and 8000 */
    cr_assert_eq(mr, 12000);
    cr_assert_eq(mp, 0);
    /* trainer: frequencies, epochs, logger, names */
    cr_assert_eq(c.test_freq, 20);
    cr_assert_eq(c.save_freq, 20);
    cr_assert_eq(c.total_epochs, 15);
    cr_assert_eq(c.total_steps, 1000);
    cr_assert_eq(c.gpus_per_node, 4);
    unsigned lg;
    cr_assert_eq(trn_run_cfg_loggers(c.logger, &lg, err, sizeof err), LISA_OK);
    cr_assert(lg & TRN_LOGGER_TENSORBOARD);
    char *d = trn_run_cfg_tensorboard_dir(&c);
    cr_assert_str_eq(
        d,
        "runs/x/tensorboard/AgentLightning-k8s/train_llm_in_sandbox_new_code");
    lisa_free(&d);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
}

Test(trn_run_cfg, the_ppo_and_rollout_correction_keys)
{
    char *argv[] = {
        "train",
        "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_epochs=3",
        "algorithm.rollout_correction.rollout_is=sequence",
        "algorithm.rollout_correction.rollout_is_threshold=3.0",
        "algorithm.rollout_correction.rollout_rs=geometric",
        "algorithm.rollout_correction.rollout_rs_threshold=1.001",
        "algorithm.rollout_correction.rollout_rs_threshold_lower=null",
        "algorithm.rollout_correction.rollout_token_veto_threshold=1e-4",
        "algorithm.use_kl_in_reward=true",
        "algorithm.kl_penalty=low_var_kl",
        "algorithm.kl_ctrl.type=adaptive",
        "algorithm.kl_ctrl.kl_coef=0.02",
        "data.max_prompt_length=100",
        "data.truncation=left",
    };
    trn_run_cfg_t c;
    trn_step_cfg_t s;
    char err[512];
    int n = (int) (sizeof argv / sizeof argv[0]);
    cr_assert_eq(load(&c, n, argv, &s, err, sizeof err), LISA_OK, "%s", err);
    cr_assert_eq(s.mini_groups, 2);
    cr_assert_eq(s.ppo_epochs, 3);
    cr_assert_eq(s.is_level, TRN_IS_SEQUENCE);
    cr_assert_eq(s.is_threshold, 3.0);
    cr_assert_eq(s.rs_level, TRN_RS_GEOMETRIC);
    cr_assert_float_eq(s.rs_upper, 1.001, 1e-12);
    cr_assert_eq(s.rs_lower, 0.0); /* null: 1 / upper */
    cr_assert_float_eq(s.rs_veto, 1e-4, 1e-15);
    cr_assert_float_eq(s.kl_reward_coef, 0.02, 1e-15);
    cr_assert_eq(s.kl_reward_type, TRN_KL_K3);
    cr_assert(!s.bypass);
    size_t mp, mr, drop;
    char tr;
    trn_run_cfg_caps(&c, &mp, &mr, &drop, &tr);
    cr_assert_eq(mp, 100);
    cr_assert_eq(drop, 0);
    cr_assert_eq(tr, 'l');
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
    /* rollout_rs with no threshold of its own takes rollout_is_threshold */
    char *b[] = {"train", "algorithm.rollout_correction.rollout_rs=token",
                 "algorithm.rollout_correction.bypass_mode=true"};
    cr_assert_eq(load(&c, 3, b, &s, err, sizeof err), LISA_OK, "%s", err);
    cr_assert_eq(s.rs_level, TRN_RS_TOKEN);
    cr_assert_eq(s.rs_upper, 2.0);
    cr_assert(s.bypass);
    cr_assert_eq(s.is_threshold, 0.0); /* rollout_is null: no weights */
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
}

Test(trn_run_cfg, either_offload_key_offloads_the_optimizer_state)
{
    static const struct {
        const char *arg;
        bool on;
    } cases[] = {
        {"--out=runs/x", false}, /* neither key: resident */
        {"actor_rollout_ref.actor.fsdp_config.param_offload=True", true},
        {"actor_rollout_ref.actor.fsdp_config.optimizer_offload=true", true},
        {"actor_rollout_ref.actor.fsdp_config.optimizer_offload=False", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[] = {"train", (char *) cases[i].arg};
        trn_run_cfg_t c;
        trn_step_cfg_t s;
        char err[512] = "";
        cr_assert_eq(load(&c, 2, argv, &s, err, sizeof err), LISA_OK, "%s: %s",
                     cases[i].arg, err);
        cr_assert_eq(s.optim_offload, cases[i].on, "%s", cases[i].arg);
        lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
    }
}

Test(trn_run_cfg, keys_lisa_cannot_honour_are_refused_saying_what_it_does)
{
    static const struct {
        const char *arg, *says;
    } bad[] = {
        {"actor_rollout_ref.rollout.tensor_model_parallel_size=2",
         "n_gpus_per_node"},
        {"trainer.critic_warmup=5", "no critic"},
        {"actor_rollout_ref.rollout.multi_turn.format=gpt-oss", "hermes"},
        {"actor_rollout_ref.rollout.engine_kwargs.vllm.tool_call_parser="
         "mistral",
         "hermes"},
        {"agentlightning.trace_aggregator.level=transition",
         "whole trajectories"},
        {"algorithm.rollout_correction.loss_type=reinforce", "PPO-clip"},
        {"algorithm.rollout_correction.rollout_is_batch_normalize=true",
         "truncated weights"},
        {"algorithm.rollout_correction.rollout_is=bogus", "token"},
        {"algorithm.rollout_correction.rollout_is_threshold=0.5_2.0",
         "lower_upper"},
        {"algorithm.kl_penalty=full", "low_var_kl"},
        {"algorithm.kl_ctrl.type=pid", "adaptive"},
        {"data.truncation=cut", "middle"},
        {"actor_rollout_ref.actor.ppo_epochs=0", "ppo_epochs"},
        {"actor_rollout_ref.rollout.gpu_memory_utilization=1.5", "0 < f"},
        {"actor_rollout_ref.rollout.name=trtllm", "lisa's own engine"},
        {"trainer.logger=[console,swanlab]", "swanlab"},
        {"actor_rollout_ref.actor.fsdp_config.optimizer_offload=maybe",
         "true,false"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[] = {"train", (char *) bad[i].arg};
        trn_run_cfg_t c;
        trn_step_cfg_t s;
        char err[512] = "";
        cr_assert_eq(load(&c, 2, argv, &s, err, sizeof err), LISA_INVALID,
                     "%s was accepted", bad[i].arg);
        cr_assert(strstr(err, bad[i].says), "%s: %s", bad[i].arg, err);
        lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
    }
    /* a key that is nobody's stays an unknown setting */
    char *argv[] = {"train", "actor_rollout_ref.rollout.no_such_key=1"};
    trn_run_cfg_t c;
    trn_step_cfg_t s;
    char err[512] = "";
    cr_assert_eq(load(&c, 2, argv, &s, err, sizeof err), LISA_INVALID);
    cr_assert(strstr(err, "no_such_key"), "%s", err);
    lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
}

Test(trn_run_cfg, context_parallel_tokens_auto_a_count_or_never)
{
    static const struct {
        const char *arg;
        lisa_rc_t rc;
        bool autom;
        size_t tokens;
    } cases[] = {
        {"--out=runs/x", LISA_OK, true, 0}, /* the default: auto */
        {"trainer.context_parallel_tokens=AUTO", LISA_OK, true, 0},
        {"trainer.context_parallel_tokens=0", LISA_OK, false, 0},
        {"trainer.context_parallel_tokens=65536", LISA_OK, false, 65536},
        {"trainer.context_parallel_tokens=-1", LISA_INVALID, false, 0},
        {"trainer.context_parallel_tokens=64k", LISA_INVALID, false, 0},
        {"trainer.context_parallel_tokens=", LISA_INVALID, false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[] = {"train", (char *) cases[i].arg};
        trn_run_cfg_t c;
        trn_step_cfg_t s;
        char err[512] = "";
        lisa_rc_t rc = load(&c, 2, argv, &s, err, sizeof err);
        cr_assert_eq(rc, cases[i].rc, "%s: %s", cases[i].arg, err);
        if (rc == LISA_OK) {
            cr_assert_eq(s.cp_auto, cases[i].autom, "%s", cases[i].arg);
            cr_assert_eq(s.cp_tokens, cases[i].tokens, "%s", cases[i].arg);
        } else {
            cr_assert(strstr(err, "trainer.context_parallel_tokens"), "%s",
                      err);
        }
        lisa_config_free(trn_run_cfg_table, trn_run_cfg_table_len, &c);
    }
}
