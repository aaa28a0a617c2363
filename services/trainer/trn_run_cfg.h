/*
 * trn_run_cfg: the settings of lisa-trainer as one lisa_config table
 * (names follow verl's / the recipe launcher's where they exist, so
 * `actor_rollout_ref.actor.optim.lr=1e-6` works as a positional override),
 * and their translation into the step configuration.
 * docs/trainer-service.md lists them.
 */
#ifndef TRN_RUN_CFG_H
#define TRN_RUN_CFG_H

#include "lisa/lisa_config.h"
#include "trn_step.h"

#include <stdbool.h>
#include <stdint.h>

/* How many keys are accepted with a note (trn_run_cfg_notes). */
#define TRN_RUN_CFG_NOTED 25

typedef struct {
    char *model, *train_files, *val_files, *broker, *listen, *engine_url,
        *engine_id, *out_dir, *backend, *resume, *run_id;
    char *curve_cert, *broker_cert; /* CURVE: own secret, broker's public */
    int64_t threads;
    int64_t engine_port;
    char *advertise_host;
    int64_t world, rank, node_rank, nodes, gpus_per_node;
    char *bootstrap;
    uint64_t rank_timeout_ms;
    int64_t batch_size;
    bool shuffle;
    uint64_t seed;
    int64_t total_epochs, total_steps, save_freq, test_freq;
    bool val_before_train;
    uint64_t step_timeout_ms;
    char *failed_rollouts, *equal_groups, *save_dtype, *overlong;
    int64_t max_attempts;
    int64_t n;
    double temperature, top_p;
    int64_t top_k;
    int64_t val_n;
    double val_temperature, val_top_p;
    int64_t val_top_k;
    char *prompts; /* agent.prompts: a prompt set (trn_prompts) */
    int64_t max_turns, max_context, max_tokens_per_call;
    uint64_t trajectory_timeout_ms;
    double lr, weight_decay, grad_clip, clip_low, clip_high, clip_c;
    int64_t lr_warmup_steps;
    double lr_warmup_ratio, adam_eps;
    char *loss_agg;
    bool use_kl;
    double kl_coef;
    char *kl_type;
    double entropy_coef;
    int64_t micro_tokens;
    char *cp_tokens;
    char *recompute;
    char *adv_estimator;
    bool norm_adv;
    int64_t max_seqs, max_batch, max_len, queue_max;
    int64_t block_size, max_step_tokens;
    char *kv_memory;
    bool prefix_cache;
    uint64_t register_ttl_ms, queue_timeout_ms, batch_wait_ms;
    uint64_t rpc_timeout_ms;
    char *log_level;
    char *logger, *tensorboard_dir;
    /* verl's keys and the example's (docs/trainer-service.md, "verl's
     * keys"): honoured here, or folded into lisa's by trn_run_cfg_fold */
    char *model_path;
    int64_t max_prompt_len, max_response_len;
    char *truncation;
    int64_t traj_max_prompt, traj_max_response;
    bool kl_in_reward;
    char *kl_penalty, *kl_ctrl_type;
    double kl_ctrl_coef, kl_ctrl_target;
    int64_t kl_ctrl_horizon;
    int64_t ppo_mini_batch, ppo_epochs;
    char *rollout_is, *is_threshold, *rollout_rs, *rs_threshold, *rs_lower,
        *token_veto, *rc_loss_type;
    bool is_batch_normalize, bypass_mode;
    double gpu_mem_util;
    int64_t max_model_len;
    char *v_prefix_cache, *val_do_sample;
    char *project_name;
    bool val_only;
    double failed_score;
    double agl_timeout_s, agl_rollout_timeout_s, agl_poll_timeout_s;
    char *agl_fillna, *agl_shuffle;
    char *noted[TRN_RUN_CFG_NOTED]; /* keys accepted with a note */
} trn_run_cfg_t;

/* The table (and its length). */
extern const lisa_config_entry_t trn_run_cfg_table[];
extern const size_t trn_run_cfg_table_len;

/* The failed-rollout policies. */
typedef enum {
    TRN_FAILED_DROP_GROUP = 0,
    TRN_FAILED_MASK = 1,
    TRN_FAILED_ZERO = 2
} trn_failed_t;

/* The loggers of trainer.logger (bits). */
#define TRN_LOGGER_CONSOLE     0x1u
#define TRN_LOGGER_TENSORBOARD 0x2u

/* Parses trainer.logger, verl's list of loggers: "['console','tensorboard']",
 * "[console,tensorboard]", "console,tensorboard", one name, or "[]" (none).
 * wandb, which lisa does not have, means tensorboard (trn_run_cfg_fold
 * logs the note). LISA_INVALID with a reason naming the unknown logger and the
 * supported ones. */
lisa_rc_t trn_run_cfg_loggers(const char *spec, unsigned *out, char *err,
                              size_t errlen) LISA_NODISCARD;

/* The tensorboard logger's folder: trainer.tensorboard_dir, else
 * <out_dir>/tensorboard, with /<project_name>/<experiment_name> under it
 * when trainer.project_name is set (verl's layout; run_id stands in for
 * an unset experiment name) (caller frees with lisa_free). */
char *trn_run_cfg_tensorboard_dir(const trn_run_cfg_t *c);

/* Parses the enum-valued settings (trainer.logger too) and fills the step
 * configuration. LISA_INVALID with a reason naming the setting. */
lisa_rc_t trn_run_cfg_resolve(const trn_run_cfg_t *c, trn_step_cfg_t *step,
                              trn_failed_t *failed, bool *drop_equal,
                              bool *bf16, char *err,
                              size_t errlen) LISA_NODISCARD;

/* Folds verl's and Agent Lightning's keys into lisa's settings (the verl
 * key, when given, wins): actor_rollout_ref.model.path -> trainer.model
 * (when unset), rollout.gpu_memory_utilization -> engine.kv_memory (a
 * fraction), rollout.max_model_len -> engine.max_len,
 * rollout.enable_prefix_caching -> engine.enable_prefix_caching,
 * val_kwargs.do_sample=false -> validation temperature 0 (greedy),
 * agentlightning.{rollout_,}timeout_seconds -> rollout.trajectory_timeout,
 * poll_timeout_seconds -> trainer.step_timeout, reward_fillna_value ->
 * trainer.failed_rollouts=zero with that score, is_shuffle ->
 * data.shuffle; then checks the keys accepted with a note against the
 * values lisa can honour and logs each note. LISA_INVALID with a reason
 * that says what lisa does instead. Call once, after loading. */
lisa_rc_t trn_run_cfg_fold(trn_run_cfg_t *c, char *err,
                           size_t errlen) LISA_NODISCARD;

/* The trajectory length caps: prompt (tokens before the first sampled
 * one) and response (the rest), 0 none; *drop_prompt: a longer prompt
 * drops the trajectory (data.truncation=error, Agent Lightning's cap),
 * else it is cut as data.truncation says (*trunc: 'l'eft, 'r'ight,
 * 'm'iddle). */
void trn_run_cfg_caps(const trn_run_cfg_t *c, size_t *max_prompt,
                      size_t *max_response, size_t *drop_prompt_over,
                      char *trunc);

/* engine.kv_memory as bytes (a size) or a fraction of free memory (a
 * number with a point); the other is 0. LISA_INVALID with a reason. */
lisa_rc_t trn_run_cfg_kv_memory(const trn_run_cfg_t *c, size_t *bytes,
                                double *fraction, char *err,
                                size_t errlen) LISA_NODISCARD;

#endif
