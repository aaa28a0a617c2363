/*
 * trn_run_cfg: lisa-trainer's settings table (see trn_run_cfg.h).
 */
#include "trn_run_cfg.h"

#include "lisa/lisa_mem.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define E(field, nm, fl, ty, df, hl)                                           \
    {                                                                          \
        .name = nm, .env = NULL, .flag = fl, .type = LISA_CFG_##ty, .def = df, \
        .help = hl, .offset = offsetof(trn_run_cfg_t, field)                   \
    }
/* E with an environment variable (containers configure through these). */
#define EV(field, nm, ev, fl, ty, df, hl)                                      \
    {                                                                          \
        .name = nm, .env = ev, .flag = fl, .type = LISA_CFG_##ty, .def = df,   \
        .help = hl, .offset = offsetof(trn_run_cfg_t, field)                   \
    }
#define AR "actor_rollout_ref."

const lisa_config_entry_t trn_run_cfg_table[] = {
    EV(model, "trainer.model", "LISA_TRN_MODEL", "--model", STRING, NULL,
       "Hugging Face model directory"),
    EV(train_files, "data.train_files", "LISA_TRN_DATA", "--train-data", STRING,
       NULL, "verl train file (JSON array or JSONL)"),
    EV(val_files, "data.val_files", "LISA_TRN_VAL_DATA", "--val-data", STRING,
       NULL, "comma-separated validation files or directories"),
    EV(broker, "trainer.broker", "LISA_TRN_BROKER", "--broker", STRING,
       "tcp://127.0.0.1:7100", "broker RPC endpoint"),
    EV(listen, "engine.listen", "LISA_TRN_LISTEN", "--engine-listen", STRING,
       "127.0.0.1:0",
       "HOST:PORT of the generation endpoint (port 0: ephemeral)"),
    EV(engine_url, "engine.url", "LISA_TRN_ADVERTISE", "--engine-url", STRING,
       NULL, "URL advertised to the broker (default http://<listen>)"),
    EV(engine_id, "engine.id", "LISA_TRN_ENGINE_ID", "--engine-id", STRING,
       NULL, "engine id in the broker registry (default trainer-<pid>)"),
    EV(out_dir, "trainer.default_local_dir", "LISA_TRN_OUT", "--out", STRING,
       "runs/lisa", "output directory: metrics.jsonl, global_step_N/"),
    EV(backend, "trainer.backend", "LISA_TRN_BACKEND", "--backend", STRING,
       "cpu", "compute backend: cpu or cuda"),
    EV(resume, "trainer.resume", "LISA_TRN_RESUME", "--resume", STRING, NULL,
       "a global_step_N directory to resume from"),
    EV(run_id, "trainer.experiment_name", "LISA_TRN_RUN_ID", "--run-id", STRING,
       NULL, "broker run id (default lisa-<unix time>)"),
    EV(threads, "trainer.threads", "LISA_TRN_THREADS", "--threads", INT64, "2",
       "CPU worker threads"),
    E(log_level, "trainer.log_level", "--log-level", STRING, "info",
      "log level"),
    E(logger, "trainer.logger", NULL, STRING, "console",
      "step loggers besides metrics.jsonl, verl's list: console (step "
      "lines in the log), tensorboard (event files), e.g. "
      "[console,tensorboard]"),
    EV(tensorboard_dir, "trainer.tensorboard_dir", "TENSORBOARD_DIR", NULL,
       STRING, NULL,
       "folder of the tensorboard logger's event files (default "
       "<trainer.default_local_dir>/tensorboard)"),
    EV(batch_size, "data.train_batch_size", "LISA_TRN_BATCH", NULL, INT64, "8",
       "prompts per step"),
    E(shuffle, "data.shuffle", NULL, BOOL, "true", "shuffle each epoch"),
    E(seed, "data.seed", NULL, UINT64, "1", "shuffle seed"),
    EV(total_epochs, "trainer.total_epochs", "LISA_TRN_EPOCHS", NULL, INT64,
       "1", "passes over the train set"),
    EV(total_steps, "trainer.total_training_steps", "LISA_TRN_STEPS", NULL,
       INT64, "0", "stop after this many steps (0: epochs decide)"),
    E(save_freq, "trainer.save_freq", NULL, INT64, "10",
      "checkpoint every N steps (0: only at the end)"),
    E(test_freq, "trainer.test_freq", NULL, INT64, "10",
      "validate every N steps (0: never)"),
    E(val_before_train, "trainer.val_before_train", NULL, BOOL, "false",
      "validate before the first step"),
    E(step_timeout_ms, "trainer.step_timeout", NULL, DURATION, "30m",
      "deadline for one step's rollouts"),
    E(rpc_timeout_ms, "trainer.rpc_timeout", NULL, DURATION, "10s",
      "broker silence that counts as gone"),
    E(failed_rollouts, "trainer.failed_rollouts", NULL, STRING, "drop_group",
      "failed rollouts: drop_group, mask or zero"),
    E(equal_groups, "trainer.equal_reward_groups", NULL, STRING, "keep",
      "groups whose rewards are all equal: keep or drop"),
    E(overlong, "trainer.overlong_rollouts", NULL, STRING, "keep",
      "rollouts that ended at the turn or context limit: keep, or mask "
      "(no loss on their tokens; their reward still counts in the group)"),
    E(max_attempts, "trainer.max_attempts", NULL, INT64, "0",
      "broker retry bound per rollout (0: broker default)"),
    E(save_dtype, "trainer.save_dtype", NULL, STRING, "f32",
      "checkpoint weights: f32 or bf16"),
    EV(n, AR "rollout.n", "LISA_TRN_GROUP", NULL, INT64, "8",
       "rollouts per prompt"),
    E(temperature, AR "rollout.temperature", NULL, DOUBLE, "1.0",
      "sampling temperature"),
    E(top_p, AR "rollout.top_p", NULL, DOUBLE, "1.0", "nucleus sampling"),
    E(val_n, AR "rollout.val_kwargs.n", NULL, INT64, "1",
      "rollouts per validation prompt"),
    E(val_temperature, AR "rollout.val_kwargs.temperature", NULL, DOUBLE, "0.7",
      "validation temperature"),
    E(val_top_p, AR "rollout.val_kwargs.top_p", NULL, DOUBLE, "0.8",
      "validation top_p"),
    E(max_turns, AR "rollout.max_turns", NULL, INT64, "100",
      "agent turns per rollout"),
    E(max_context, AR "rollout.max_context_tokens", NULL, INT64, "0",
      "trajectory token budget (0: broker default)"),
    E(max_tokens_per_call, AR "rollout.max_tokens_per_call", NULL, INT64, "0",
      "tokens per completion (0: broker default)"),
    E(trajectory_timeout_ms, AR "rollout.trajectory_timeout", NULL, DURATION,
      "0", "wall clock per rollout (0: broker default)"),
    E(lr, AR "actor.optim.lr", NULL, DOUBLE, "1e-6", "AdamW learning rate"),
    E(lr_warmup_steps, AR "actor.optim.lr_warmup_steps", NULL, INT64, "-1",
      "linear lr warmup over this many updates (-1: from the ratio)"),
    E(lr_warmup_ratio, AR "actor.optim.lr_warmup_steps_ratio", NULL, DOUBLE,
      "0", "warmup as a share of the training steps"),
    E(adam_eps, AR "actor.optim.eps", NULL, DOUBLE, "1e-8",
      "AdamW epsilon (added to the root of the second moment)"),
    E(weight_decay, AR "actor.optim.weight_decay", NULL, DOUBLE, "0.01",
      "AdamW weight decay"),
    E(grad_clip, AR "actor.grad_clip", NULL, DOUBLE, "1.0",
      "global gradient norm clip"),
    E(clip_low, AR "actor.clip_ratio_low", NULL, DOUBLE, "0.2", "PPO clip low"),
    E(clip_high, AR "actor.clip_ratio_high", NULL, DOUBLE, "0.2",
      "PPO clip high"),
    E(clip_c, AR "actor.clip_ratio_c", NULL, DOUBLE, "3.0", "dual clip"),
    E(loss_agg, AR "actor.loss_agg_mode", NULL, STRING, "token-mean",
      "loss aggregation"),
    E(use_kl, AR "actor.use_kl_loss", NULL, BOOL, "false",
      "KL loss to the initial model"),
    E(kl_coef, AR "actor.kl_loss_coef", NULL, DOUBLE, "0.001",
      "KL loss coefficient"),
    E(kl_type, AR "actor.kl_loss_type", NULL, STRING, "low_var_kl",
      "KL estimator"),
    E(entropy_coef, AR "actor.entropy_coeff", NULL, DOUBLE, "0",
      "entropy bonus coefficient"),
    E(micro_tokens, AR "actor.ppo_max_token_len_per_gpu", NULL, INT64, "4096",
      "tokens per micro-batch"),
    E(recompute, "actor_rollout_ref.model.enable_gradient_checkpointing", NULL,
      STRING, "auto",
      "layer recomputation on the GPU: auto (keep activations when they "
      "fit), true, false"),
    E(adv_estimator, "algorithm.adv_estimator", NULL, STRING, "grpo",
      "advantage estimator: grpo or rloo"),
    E(norm_adv, "algorithm.norm_adv_by_std_in_grpo", NULL, BOOL, "true",
      "divide GRPO advantages by the group std"),
    E(max_seqs, "engine.max_seqs", NULL, INT64, "256",
      "sequences generating at once (beyond: they queue)"),
    E(max_batch, "engine.max_batch", NULL, INT64, "0",
      "older name of engine.max_seqs (0: unset)"),
    E(max_len, "engine.max_len", NULL, INT64, "0",
      "context of a request, prompt + completion (0: the model's "
      "max_position_embeddings)"),
    E(block_size, "engine.block_size", NULL, INT64, "32",
      "positions a KV-cache block (a power of two)"),
    E(max_step_tokens, "engine.max_step_tokens", NULL, INT64, "4096",
      "new tokens an engine step computes (longer prompts are prefilled "
      "in chunks)"),
    E(kv_memory, "engine.kv_memory", NULL, STRING, "0.9",
      "memory for the KV cache: a fraction of what is free after the "
      "weights and step buffers (0.9), or bytes (40GiB)"),
    E(prefix_cache, "engine.enable_prefix_caching", NULL, BOOL, "true",
      "reuse cached blocks of earlier requests' prefixes"),
    E(queue_max, "engine.queue_max", NULL, INT64, "1024",
      "requests waiting to be admitted (beyond: 429)"),
    E(queue_timeout_ms, "engine.queue_timeout", NULL, DURATION, "10m",
      "most time a request waits to be admitted (then 503)"),
    E(register_ttl_ms, "engine.register_ttl", NULL, DURATION, "10s",
      "broker registration TTL"),
    /* deployment: containers give a port and a host name to advertise */
    EV(engine_port, "engine.port", "LISA_TRN_PORT", NULL, INT64, "0",
       "listen on 0.0.0.0:PORT (0: use engine.listen)"),
    EV(advertise_host, "engine.advertise_host", "LISA_TRN_ADVERTISE_HOST", NULL,
       STRING, NULL,
       "host name advertised as http://HOST:PORT when engine.url is unset"),
    /* data parallel (docs/trainer-service.md): `gpus_per_node` > 1 makes
     * this process launch the node's other ranks itself; ranks launched
     * by something else (one per pod) give world_size, rank, bootstrap */
    EV(world, "trainer.world_size", "LISA_TRN_WORLD", NULL, INT64, "1",
       "ranks in the run (ranks launched one by one, e.g. indexed pods)"),
    EV(rank, "trainer.rank", "LISA_TRN_RANK", NULL, INT64, "0",
       "this process's rank (ranks launched one by one)"),
    EV(node_rank, "trainer.node_rank", "LISA_TRN_NODE_RANK", NULL, INT64, "0",
       "this node's index (multi-node launch)"),
    EV(nodes, "trainer.nnodes", "LISA_TRN_NODES", NULL, INT64, "1",
       "nodes in the run"),
    EV(gpus_per_node, "trainer.n_gpus_per_node", "LISA_TRN_GPUS_PER_NODE",
       "--gpus", INT64, "1",
       "ranks this process launches on its node (one per GPU)"),
    EV(bootstrap, "trainer.bootstrap", "LISA_TRN_BOOTSTRAP", NULL, STRING, NULL,
       "rank 0's bootstrap endpoint tcp://HOST:PORT (rank 0 binds its port "
       "on every interface; one-node launches default to a loopback port)"),
    EV(rank_timeout_ms, "trainer.rank_timeout", "LISA_TRN_RANK_TIMEOUT", NULL,
       DURATION, "10m",
       "deadline of the ranks' bootstrap and of each answer and collective"),
};
const size_t trn_run_cfg_table_len =
    sizeof trn_run_cfg_table / sizeof trn_run_cfg_table[0];

static const struct {
    const char *name;
    unsigned bit;
} s_loggers[] = {{"console", TRN_LOGGER_CONSOLE},
                 {"tensorboard", TRN_LOGGER_TENSORBOARD}};

lisa_rc_t
trn_run_cfg_loggers(const char *spec, unsigned *out, char *err, size_t errlen)
{
    *out = 0;
    const char *p = spec ? spec : "";
    const char *end = p + strlen(p);
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (p < end && *p == '[') { /* verl's list syntax */
        if (end[-1] != ']') {
            snprintf(err, errlen,
                     "bad value for trainer.logger: %s (a list "
                     "is [console,tensorboard])",
                     spec);
            return LISA_INVALID;
        }
        p++;
        end--;
    }
    while (p < end) {
        const char *q = memchr(p, ',', (size_t) (end - p));
        const char *e = q ? q : end;
        const char *a = p, *z = e;
        while (a < z && strchr(" \t'\"", *a))
            a++;
        while (z > a && strchr(" \t'\"", z[-1]))
            z--;
        size_t n = (size_t) (z - a);
        bool found = false;
        for (size_t i = 0; i < sizeof s_loggers / sizeof s_loggers[0]; i++)
            if (n == strlen(s_loggers[i].name) &&
                strncmp(a, s_loggers[i].name, n) == 0) {
                *out |= s_loggers[i].bit;
                found = true;
            }
        if (!found && n > 0) {
            snprintf(err, errlen,
                     "trainer.logger: unknown logger '%.*s' (lisa supports "
                     "console and tensorboard)",
                     (int) (n > 64 ? 64 : n), a);
            return LISA_INVALID;
        }
        p = q ? q + 1 : end;
    }
    return LISA_OK;
}

char *
trn_run_cfg_tensorboard_dir(const trn_run_cfg_t *c)
{
    if (c->tensorboard_dir && *c->tensorboard_dir)
        return lisa_strdup(c->tensorboard_dir);
    size_t n = strlen(c->out_dir) + sizeof "/tensorboard";
    char *d = lisa_malloc(n);
    snprintf(d, n, "%s/tensorboard", c->out_dir);
    return d;
}

lisa_rc_t
trn_run_cfg_resolve(const trn_run_cfg_t *c, trn_step_cfg_t *s,
                    trn_failed_t *failed, bool *drop_equal, bool *bf16,
                    char *err, size_t errlen)
{
    *s = trn_step_defaults();
    const char *bad = NULL;
    if (trn_adv_kind_parse(c->adv_estimator, &s->adv.kind) != LISA_OK)
        bad = "algorithm.adv_estimator";
    s->adv.norm_by_std = c->norm_adv;
    s->optim.lr = c->lr;
    s->optim.weight_decay = c->weight_decay;
    s->optim.eps = c->adam_eps;
    s->grad_clip = c->grad_clip;
    s->loss.clip_low = c->clip_low;
    s->loss.clip_high = c->clip_high;
    s->loss.clip_c = c->clip_c;
    if (trn_agg_parse(c->loss_agg, &s->loss.agg) != LISA_OK)
        bad = "actor_rollout_ref.actor.loss_agg_mode";
    s->loss.kl_coef = c->use_kl ? c->kl_coef : 0.0;
    if (trn_kl_parse(c->kl_type, &s->loss.kl_type) != LISA_OK)
        bad = "actor_rollout_ref.actor.kl_loss_type";
    s->loss.entropy_coef = c->entropy_coef;
    s->temperature = (float) c->temperature;
    if (c->micro_tokens < 1)
        bad = "actor_rollout_ref.actor.ppo_max_token_len_per_gpu";
    s->micro_tokens = (size_t) c->micro_tokens;
    if (strcmp(c->recompute, "auto") == 0)
        s->recompute = TRN_STEP_RECOMPUTE_AUTO;
    else if (strcmp(c->recompute, "true") == 0)
        s->recompute = TRN_STEP_RECOMPUTE_ON;
    else if (strcmp(c->recompute, "false") == 0)
        s->recompute = TRN_STEP_RECOMPUTE_OFF;
    else
        bad = "actor_rollout_ref.model.enable_gradient_checkpointing";
    if (strcmp(c->failed_rollouts, "drop_group") == 0)
        *failed = TRN_FAILED_DROP_GROUP;
    else if (strcmp(c->failed_rollouts, "mask") == 0)
        *failed = TRN_FAILED_MASK;
    else if (strcmp(c->failed_rollouts, "zero") == 0)
        *failed = TRN_FAILED_ZERO;
    else
        bad = "trainer.failed_rollouts";
    if (strcmp(c->equal_groups, "keep") == 0)
        *drop_equal = false;
    else if (strcmp(c->equal_groups, "drop") == 0)
        *drop_equal = true;
    else
        bad = "trainer.equal_reward_groups";
    if (strcmp(c->overlong, "keep") != 0 && strcmp(c->overlong, "mask") != 0)
        bad = "trainer.overlong_rollouts";
    if (strcmp(c->save_dtype, "f32") == 0)
        *bf16 = false;
    else if (strcmp(c->save_dtype, "bf16") == 0)
        *bf16 = true;
    else
        bad = "trainer.save_dtype";
    if (c->batch_size < 1 || c->n < 1 || c->val_n < 1)
        bad = "data.train_batch_size / rollout.n / val_kwargs.n (>= 1)";
    if (!(c->temperature > 0))
        bad = "actor_rollout_ref.rollout.temperature (> 0 for training)";
    if (!(c->adam_eps > 0 && c->adam_eps < 1))
        bad = "actor_rollout_ref.actor.optim.eps (0 < eps < 1)";
    if (c->lr_warmup_steps < -1)
        bad = "actor_rollout_ref.actor.optim.lr_warmup_steps (>= -1)";
    if (!(c->lr_warmup_ratio >= 0 && c->lr_warmup_ratio <= 1))
        bad = "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio (0..1)";
    if (bad) {
        snprintf(err, errlen, "bad value for %s", bad);
        return LISA_INVALID;
    }
    unsigned loggers;
    return trn_run_cfg_loggers(c->logger, &loggers, err, errlen);
}

lisa_rc_t
trn_run_cfg_kv_memory(const trn_run_cfg_t *c, size_t *bytes, double *fraction,
                      char *err, size_t errlen)
{
    const char *s = c->kv_memory && *c->kv_memory ? c->kv_memory : "0.9";
    char *end = NULL;
    double f = strtod(s, &end);
    *bytes = 0;
    *fraction = 0;
    if (end && *end == '\0' && strchr(s, '.')) {
        if (!(f > 0.0 && f <= 1.0)) {
            snprintf(err, errlen,
                     "engine.kv_memory %s: a fraction must be in (0, 1]", s);
            return LISA_INVALID;
        }
        *fraction = f;
        return LISA_OK;
    }
    uint64_t b = 0;
    if (lisa_config_parse_size(s, &b) != LISA_OK || b == 0) {
        snprintf(err, errlen,
                 "engine.kv_memory %s: give a fraction of free memory (0.9) "
                 "or a size (40GiB)",
                 s);
        return LISA_INVALID;
    }
    *bytes = (size_t) b;
    return LISA_OK;
}
