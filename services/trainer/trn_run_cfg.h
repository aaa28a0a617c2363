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

typedef struct {
    char *model, *train_files, *val_files, *broker, *listen, *engine_url,
        *engine_id, *out_dir, *backend, *resume, *run_id;
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
    int64_t val_n;
    double val_temperature, val_top_p;
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
    char *recompute;
    char *adv_estimator;
    bool norm_adv;
    int64_t max_seqs, max_batch, max_len, queue_max;
    int64_t block_size, max_step_tokens;
    char *kv_memory;
    bool prefix_cache;
    uint64_t register_ttl_ms, queue_timeout_ms;
    uint64_t rpc_timeout_ms;
    char *log_level;
    char *logger, *tensorboard_dir;
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
 * LISA_INVALID with a reason naming the unknown logger and the supported
 * ones. */
lisa_rc_t trn_run_cfg_loggers(const char *spec, unsigned *out, char *err,
                              size_t errlen) LISA_NODISCARD;

/* The tensorboard logger's folder: trainer.tensorboard_dir, else
 * <out_dir>/tensorboard (caller frees with lisa_free). */
char *trn_run_cfg_tensorboard_dir(const trn_run_cfg_t *c);

/* Parses the enum-valued settings (trainer.logger too) and fills the step
 * configuration. LISA_INVALID with a reason naming the setting. */
lisa_rc_t trn_run_cfg_resolve(const trn_run_cfg_t *c, trn_step_cfg_t *step,
                              trn_failed_t *failed, bool *drop_equal,
                              bool *bf16, char *err,
                              size_t errlen) LISA_NODISCARD;

/* engine.kv_memory as bytes (a size) or a fraction of free memory (a
 * number with a point); the other is 0. LISA_INVALID with a reason. */
lisa_rc_t trn_run_cfg_kv_memory(const trn_run_cfg_t *c, size_t *bytes,
                                double *fraction, char *err,
                                size_t errlen) LISA_NODISCARD;

#endif
