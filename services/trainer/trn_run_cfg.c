/*
 * trn_run_cfg: lisa-trainer's settings table (see trn_run_cfg.h).
 */
#include "trn_run_cfg.h"

#include "lisa/lisa_log.h"
#include "lisa/lisa_mem.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
/* The noted keys read again when resolving (their index in noted[]). */
enum { S_NT_PARAM_OFFLOAD = 12, S_NT_OPTIM_OFFLOAD = 13 };
/* A verl key lisa accepts with a note (s_noted says which values). */
#define NT(i, nm)                                                              \
    {                                                                          \
        .name = nm, .env = NULL, .flag = NULL, .type = LISA_CFG_STRING,        \
        .def = NULL, .help = "verl's; accepted with a note (docs)",            \
        .offset = offsetof(trn_run_cfg_t, noted[i])                            \
    }

const lisa_config_entry_t trn_run_cfg_table[] = {
    EV(model, "trainer.model", "LISA_TRN_MODEL", "--model", STRING, NULL,
       "Hugging Face model directory"),
    EV(train_files, "data.train_files", "LISA_TRN_DATA", "--train-data", STRING,
       NULL, "verl train file (JSON array or JSONL)"),
    EV(val_files, "data.val_files", "LISA_TRN_VAL_DATA", "--val-data", STRING,
       NULL, "comma-separated validation files or directories"),
    EV(broker, "trainer.broker", "LISA_TRN_BROKER", "--broker", STRING,
       "tcp://127.0.0.1:7100", "broker RPC endpoint"),
    EV(curve_cert, "trainer.curve_cert", "LISA_TRN_CURVE_CERT", "--curve-cert",
       STRING, NULL, "this rank's secret CURVE certificate (empty: plain bus)"),
    EV(broker_cert, "trainer.broker_cert", "LISA_TRN_BROKER_CERT",
       "--broker-cert", STRING, NULL, "the broker's public CURVE certificate"),
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
    E(top_k, AR "rollout.top_k", NULL, INT64, "-1",
      "top-k sampling (-1 or 0: off)"),
    E(val_n, AR "rollout.val_kwargs.n", NULL, INT64, "1",
      "rollouts per validation prompt"),
    E(val_temperature, AR "rollout.val_kwargs.temperature", NULL, DOUBLE, "0.7",
      "validation temperature"),
    E(val_top_p, AR "rollout.val_kwargs.top_p", NULL, DOUBLE, "0.8",
      "validation top_p"),
    E(val_top_k, AR "rollout.val_kwargs.top_k", NULL, INT64, "-1",
      "validation top_k (-1 or 0: off)"),
    EV(prompts, "agent.prompts", "LISA_TRN_PROMPTS", NULL, STRING, NULL,
       "the agent's prompts: a config.yaml in llm-in-sandbox's benchmark "
       "layout, a folder of <data source>/config.yaml, or a set shipped "
       "with lisa (lisa); unset: the agent's built-in prompts"),
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
    E(cp_tokens, "trainer.context_parallel_tokens", NULL, STRING, "auto",
      "with several ranks, a trajectory longer than this trains on every "
      "rank at once, its positions split between them (context "
      "parallelism; auto: longer than one rank's memory takes, on the GPU; "
      "0: never; on the GPU the attention is divided by heads)"),
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
    E(batch_wait_ms, "engine.batch_wait", NULL, DURATION, "10ms",
      "a new request waits while callers answered lately have not all "
      "sent their next one and the last answer or request came less than "
      "this long ago, at most 4 times this long (agents answered together "
      "send their next prompts a few ms apart: then computed in one step, "
      "not over several); 0: never waits"),
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
    /* verl's keys and the example's (docs/trainer-service.md) */
    E(model_path, AR "model.path", NULL, STRING, NULL,
      "verl's model path: trainer.model when that is unset (a local Hugging "
      "Face directory)"),
    E(max_prompt_len, "data.max_prompt_length", NULL, INT64, "0",
      "cap on a trajectory's prompt, the tokens before its first sampled "
      "one (0: none; longer: data.truncation)"),
    E(max_response_len, "data.max_response_length", NULL, INT64, "0",
      "cap on a trajectory's response, from its first sampled token (0: "
      "none; longer: cut)"),
    E(truncation, "data.truncation", NULL, STRING, "error",
      "a prompt over data.max_prompt_length: error (the trajectory is left "
      "out of the update and counted), left, right or middle (cut)"),
    E(traj_max_prompt,
      "agentlightning.trace_aggregator.trajectory_max_prompt_length", NULL,
      INT64, "0",
      "Agent Lightning's prompt cap: a longer prompt drops the trajectory "
      "(0: none)"),
    E(traj_max_response,
      "agentlightning.trace_aggregator.trajectory_max_response_length", NULL,
      INT64, "0", "Agent Lightning's response cap: cut there (0: none)"),
    E(kl_in_reward, "algorithm.use_kl_in_reward", NULL, BOOL, "false",
      "subtract kl_ctrl.kl_coef x the trajectory's KL to the reference "
      "model from its score (loads the reference model)"),
    E(kl_penalty, "algorithm.kl_penalty", NULL, STRING, "kl",
      "the in-reward KL estimator: kl, abs, mse, low_var_kl"),
    E(kl_ctrl_type, "algorithm.kl_ctrl.type", NULL, STRING, "fixed",
      "in-reward KL coefficient: fixed or adaptive"),
    E(kl_ctrl_coef, "algorithm.kl_ctrl.kl_coef", NULL, DOUBLE, "0.001",
      "in-reward KL coefficient (adaptive: its start)"),
    E(kl_ctrl_horizon, "algorithm.kl_ctrl.horizon", NULL, INT64, "10000",
      "adaptive controller horizon (trajectories)"),
    E(kl_ctrl_target, "algorithm.kl_ctrl.target_kl", NULL, DOUBLE, "0.1",
      "adaptive controller target KL"),
    E(ppo_mini_batch, AR "actor.ppo_mini_batch_size", NULL, INT64, "0",
      "prompts per mini-batch, each with its rollout.n rollouts, one "
      "optimizer step each (0: the whole batch)"),
    E(ppo_epochs, AR "actor.ppo_epochs", NULL, INT64, "1",
      "passes over the batch's mini-batches"),
    E(rollout_is, "algorithm.rollout_correction.rollout_is", NULL, STRING,
      "null",
      "truncated importance weights trainer / engine: null, token, "
      "sequence"),
    E(is_threshold, "algorithm.rollout_correction.rollout_is_threshold", NULL,
      STRING, "2.0", "upper bound of the IS weights"),
    E(is_batch_normalize,
      "algorithm.rollout_correction.rollout_is_batch_normalize", NULL, BOOL,
      "false", "weights scaled to mean 1 (not in lisa: false only)"),
    E(rollout_rs, "algorithm.rollout_correction.rollout_rs", NULL, STRING,
      "null", "rejection sampling: null, token, sequence, geometric"),
    E(rs_threshold, "algorithm.rollout_correction.rollout_rs_threshold", NULL,
      STRING, "null",
      "upper ratio bound of rejection sampling (null: rollout_is_threshold)"),
    E(rs_lower, "algorithm.rollout_correction.rollout_rs_threshold_lower", NULL,
      STRING, "null", "lower ratio bound (null: 1 / upper)"),
    E(token_veto, "algorithm.rollout_correction.rollout_token_veto_threshold",
      NULL, STRING, "null",
      "a token ratio below it rejects its sequence (null: off)"),
    E(bypass_mode, "algorithm.rollout_correction.bypass_mode", NULL, BOOL,
      "false", "old log-probs = the engine's (no recomputation)"),
    E(rc_loss_type, "algorithm.rollout_correction.loss_type", NULL, STRING,
      "ppo_clip", "the loss in bypass mode: ppo_clip"),
    E(gpu_mem_util, AR "rollout.gpu_memory_utilization", NULL, DOUBLE, "0",
      "verl's: engine.kv_memory as this fraction (0: unset)"),
    E(max_model_len, AR "rollout.max_model_len", NULL, INT64, "0",
      "verl's: engine.max_len (0: unset)"),
    E(v_prefix_cache, AR "rollout.enable_prefix_caching", NULL, STRING, NULL,
      "verl's: engine.enable_prefix_caching"),
    E(val_do_sample, AR "rollout.val_kwargs.do_sample", NULL, STRING, NULL,
      "verl's: false validates greedily (temperature 0), true samples at "
      "val_kwargs.temperature (unset: sample)"),
    E(project_name, "trainer.project_name", NULL, STRING, NULL,
      "project name: the tensorboard folder is <dir>/<project>/<experiment>"),
    E(val_only, "trainer.val_only", NULL, BOOL, "false",
      "validate the model (or trainer.resume's checkpoint) and exit"),
    E(failed_score, "trainer.failed_rollout_score", NULL, DOUBLE, "0",
      "the score of a failed rollout under failed_rollouts=zero"),
    E(agl_timeout_s, "agentlightning.timeout_seconds", NULL, DOUBLE, "0",
      "Agent Lightning's rollout timeout: rollout.trajectory_timeout (0: "
      "unset)"),
    E(agl_rollout_timeout_s, "agentlightning.rollout_timeout_seconds", NULL,
      DOUBLE, "0", "the same, its other name"),
    E(agl_poll_timeout_s, "agentlightning.poll_timeout_seconds", NULL, DOUBLE,
      "0",
      "Agent Lightning's wait for a step's rollouts: "
      "trainer.step_timeout (0: unset)"),
    E(agl_fillna, "agentlightning.reward_fillna_value", NULL, STRING, NULL,
      "failed rollouts train with this score (trainer.failed_rollouts=zero)"),
    E(agl_shuffle, "agentlightning.is_shuffle", NULL, STRING, NULL,
      "Agent Lightning's: data.shuffle"),
    NT(0, "actor_rollout_ref.rollout.mode"),
    NT(1, "actor_rollout_ref.rollout.name"),
    NT(2, "actor_rollout_ref.rollout.tensor_model_parallel_size"),
    NT(3, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"),
    NT(4, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"),
    NT(5, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"),
    NT(6, "actor_rollout_ref.rollout.multi_turn.format"),
    NT(7, "actor_rollout_ref.rollout.enforce_eager"),
    NT(8, "actor_rollout_ref.rollout.enable_chunked_prefill"),
    NT(9,
       "actor_rollout_ref.rollout.engine_kwargs.vllm.enable_auto_tool_choice"),
    NT(10, "actor_rollout_ref.rollout.engine_kwargs.vllm.tool_call_parser"),
    NT(11, "actor_rollout_ref.rollout.calculate_log_probs"),
    NT(S_NT_PARAM_OFFLOAD, "actor_rollout_ref.actor.fsdp_config.param_offload"),
    NT(S_NT_OPTIM_OFFLOAD,
       "actor_rollout_ref.actor.fsdp_config.optimizer_offload"),
    NT(14, "actor_rollout_ref.ref.fsdp_config.param_offload"),
    NT(15, "actor_rollout_ref.model.use_remove_padding"),
    NT(16, "trainer.critic_warmup"),
    NT(17, "agentlightning.agl_base_url"),
    NT(18, "agentlightning.agl_key"),
    NT(19, "agentlightning.cleanup_agent_jobs"),
    NT(20, "agentlightning.cleanup_namespace"),
    NT(21, "agentlightning.k8s.job_template_path"),
    NT(22, "agentlightning.trace_aggregator.level"),
    NT(23, "agentlightning.trace_aggregator.debug"),
    NT(24, "agentlightning.trace_aggregator.mismatch_log_dir"),
};
const size_t trn_run_cfg_table_len =
    sizeof trn_run_cfg_table / sizeof trn_run_cfg_table[0];

/* The keys accepted with a note, in NT order: values lisa honours
 * (comma-separated, case-insensitive; NULL any) and what it does. */
static const struct {
    const char *name, *allowed, *note;
} s_noted[TRN_RUN_CFG_NOTED] = {
    {"actor_rollout_ref.rollout.mode", "async,sync",
     "lisa's engine is an HTTP server inside the trainer that the agents call "
     "through the gateway, as verl's async mode; sync and async run the same "
     "way"},
    {"actor_rollout_ref.rollout.name", "vllm,sglang,hf",
     "generation runs in lisa's own engine inside the trainer (the engine.* "
     "settings)"},
    {"actor_rollout_ref.rollout.tensor_model_parallel_size", "1",
     "lisa's engine holds the whole model on each rank's device; more GPUs are "
     "more ranks (trainer.n_gpus_per_node), each an engine"},
    {"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", NULL,
     "log-prob forwards are packed by tokens "
     "(actor.ppo_max_token_len_per_gpu), not by sequences"},
    {"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", NULL,
     "the reference model's forwards are packed by tokens "
     "(actor.ppo_max_token_len_per_gpu)"},
    {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", NULL,
     "micro-batches are packed by tokens (actor.ppo_max_token_len_per_gpu); "
     "the gradient is the mini-batch's either way"},
    {"actor_rollout_ref.rollout.multi_turn.format", "hermes",
     "the gateway renders and parses Qwen's hermes tool calls"},
    {"actor_rollout_ref.rollout.enforce_eager", NULL,
     "lisa's CUDA engine records its decode steps as CUDA graphs (one per "
     "batch size) whatever this says; the memory they take is small"},
    {"actor_rollout_ref.rollout.enable_chunked_prefill", NULL,
     "always on: a prompt longer than engine.max_step_tokens is prefilled in "
     "chunks"},
    {"actor_rollout_ref.rollout.engine_kwargs.vllm.enable_auto_tool_choice",
     "true", "the gateway always parses tool calls"},
    {"actor_rollout_ref.rollout.engine_kwargs.vllm.tool_call_parser", "hermes",
     "the gateway parses hermes tool calls"},
    {"actor_rollout_ref.rollout.calculate_log_probs", NULL,
     "the engine always returns the sampled tokens' log-probs"},
    {"actor_rollout_ref.actor.fsdp_config.param_offload", "true,false",
     "true: on one GPU the fp32 master weights and AdamW moments live in "
     "page-locked host memory and stream through the device for each update "
     "(the bf16 weights and the gradient stay; as optimizer_offload); with "
     "data parallel the moments are sharded across ranks instead. Either "
     "way the training state is off the device while rollouts run"},
    {"actor_rollout_ref.actor.fsdp_config.optimizer_offload", "true,false",
     "true: on one GPU the fp32 master weights and AdamW moments live in "
     "page-locked host memory and stream through the device for each update; "
     "with data parallel the moments are sharded across ranks instead"},
    {"actor_rollout_ref.ref.fsdp_config.param_offload", NULL,
     "the reference model (loaded only for a KL term) lives with the training "
     "state"},
    {"actor_rollout_ref.model.use_remove_padding", NULL,
     "sequences are always packed without padding"},
    {"trainer.critic_warmup", "0",
     "lisa trains no critic (grpo and rloo need none)"},
    {"agentlightning.agl_base_url", NULL,
     "the trainer reaches rollouts through the broker (trainer.broker); agents "
     "reach the model through lisa-gateway"},
    {"agentlightning.agl_key", NULL,
     "agents authenticate with per-attempt tokens the broker signs; the "
     "trainer needs no key"},
    {"agentlightning.cleanup_agent_jobs", NULL,
     "sandboxes belong to lisa-controller (its backend settings), which "
     "removes them when attempts end"},
    {"agentlightning.cleanup_namespace", NULL,
     "the sandboxes' namespace is lisa-controller's setting"},
    {"agentlightning.k8s.job_template_path", NULL,
     "the sandbox Job is lisa-controller's (its k8s backend), not the "
     "trainer's"},
    {"agentlightning.trace_aggregator.level", "trajectory",
     "the trainer rebuilds whole trajectories from the spans; a break in token "
     "continuity starts a new sequence"},
    {"agentlightning.trace_aggregator.debug", NULL,
     "continuity breaks are logged in the trainer's log"},
    {"agentlightning.trace_aggregator.mismatch_log_dir", NULL,
     "continuity breaks are logged in the trainer's log"},
};

static const struct {
    const char *name;
    unsigned bit;
} s_loggers[] = {{"console", TRN_LOGGER_CONSOLE},
                 {"tensorboard", TRN_LOGGER_TENSORBOARD},
                 /* lisa has no wandb: its curves go to TensorBoard */
                 {"wandb", TRN_LOGGER_TENSORBOARD}};

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
                     "console and tensorboard; wandb means tensorboard)",
                     (int) (n > 64 ? 64 : n), a);
            return LISA_INVALID;
        }
        p = q ? q + 1 : end;
    }
    return LISA_OK;
}

/* A name fit for one path component: '/' and leading dots become '_'. */
static void
s_component(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src && *src ? src : "run");
    for (char *p = dst; *p; p++)
        if (*p == '/' || *p == '\\' || (p == dst && *p == '.'))
            *p = '_';
}

char *
trn_run_cfg_tensorboard_dir(const trn_run_cfg_t *c)
{
    char base[4096];
    if (c->tensorboard_dir && *c->tensorboard_dir)
        snprintf(base, sizeof base, "%s", c->tensorboard_dir);
    else
        snprintf(base, sizeof base, "%s/tensorboard", c->out_dir);
    if (!(c->project_name && *c->project_name))
        return lisa_strdup(base);
    char proj[256], exp_[256];
    s_component(proj, sizeof proj, c->project_name);
    s_component(exp_, sizeof exp_, c->run_id);
    size_t n = strlen(base) + strlen(proj) + strlen(exp_) + 3;
    char *d = lisa_malloc(n);
    snprintf(d, n, "%s/%s/%s", base, proj, exp_);
    return d;
}

/* "null", "none", "~" or empty: an unset optional value (verl's null). */
static bool
s_null(const char *v)
{
    return !v || !*v || strcasecmp(v, "null") == 0 ||
           strcasecmp(v, "none") == 0 || strcmp(v, "~") == 0;
}

/* An optional number: 0 when null; LISA_INVALID when not a number. */
static lisa_rc_t
s_opt_double(const char *v, double *out)
{
    *out = 0;
    if (s_null(v))
        return LISA_OK;
    char *end = NULL;
    double d = strtod(v, &end);
    if (!end || *end || !isfinite(d) || d < 0)
        return LISA_INVALID;
    *out = d;
    return LISA_OK;
}

/* trainer.context_parallel_tokens: "auto" or a count of tokens (0:
 * never). */
static lisa_rc_t
s_cp_tokens(const char *v, trn_step_cfg_t *s)
{
    s->cp_auto = v && strcasecmp(v, "auto") == 0;
    s->cp_tokens = 0;
    if (s->cp_auto)
        return LISA_OK;
    char *end = NULL;
    errno = 0;
    long long n = v && *v ? strtoll(v, &end, 10) : -1;
    if (n < 0 || errno || !end || *end)
        return LISA_INVALID;
    s->cp_tokens = (size_t) n;
    return LISA_OK;
}

/* Is `v` one of the comma-separated `allowed` (case-insensitive)? */
static bool
s_allowed(const char *allowed, const char *v)
{
    if (!allowed)
        return true;
    size_t n = strlen(v);
    for (const char *p = allowed; *p;) {
        const char *q = strchr(p, ',');
        size_t k = q ? (size_t) (q - p) : strlen(p);
        if (k == n && strncasecmp(p, v, n) == 0)
            return true;
        p = q ? q + 1 : p + k;
    }
    return false;
}

/* The keys accepted with a note: a value lisa honours, logged. */
static lisa_rc_t
s_notes(const trn_run_cfg_t *c, char *err, size_t errlen)
{
    for (size_t i = 0; i < TRN_RUN_CFG_NOTED; i++) {
        const char *v = c->noted[i];
        if (!v)
            continue;
        if (!s_allowed(s_noted[i].allowed, v)) {
            snprintf(err, errlen, "%s=%s is not supported: %s (accepted: %s)",
                     s_noted[i].name, v, s_noted[i].note, s_noted[i].allowed);
            return LISA_INVALID;
        }
        lisa_log_info("settings: %s=%s accepted: %s", s_noted[i].name, v,
                      s_noted[i].note);
    }
    return LISA_OK;
}

/* A boolean a verl key gave as text ("True", "false", ...). */
static lisa_rc_t
s_text_bool(const char *key, const char *v, bool *out, char *err, size_t errlen)
{
    if (lisa_config_parse_bool(v, out) == LISA_OK)
        return LISA_OK;
    snprintf(err, errlen, "bad value for %s: %s (true or false)", key, v);
    return LISA_INVALID;
}

static void
s_set_str(char **dst, const char *v)
{
    lisa_free(dst);
    *dst = lisa_strdup(v);
}

/* The verl keys that set a lisa setting of another name. */
static lisa_rc_t
s_fold_engine(trn_run_cfg_t *c, char *err, size_t errlen)
{
    if (c->model_path && *c->model_path) {
        if (!c->model || !*c->model)
            s_set_str(&c->model, c->model_path);
        else if (strcmp(c->model, c->model_path) != 0)
            lisa_log_info("settings: actor_rollout_ref.model.path=%s: the "
                          "model is trainer.model (--model) %s",
                          c->model_path, c->model);
    }
    if (c->gpu_mem_util != 0) {
        if (!(c->gpu_mem_util > 0 && c->gpu_mem_util <= 1)) {
            snprintf(err, errlen,
                     "bad value for actor_rollout_ref.rollout."
                     "gpu_memory_utilization: %g (0 < f <= 1)",
                     c->gpu_mem_util);
            return LISA_INVALID;
        }
        char buf[64];
        snprintf(buf, sizeof buf, "%.6f", c->gpu_mem_util);
        s_set_str(&c->kv_memory, buf);
        lisa_log_info("settings: rollout.gpu_memory_utilization=%g: "
                      "engine.kv_memory=%s (the KV cache takes that share of "
                      "the memory free after the weights and step buffers)",
                      c->gpu_mem_util, buf);
    }
    if (c->max_model_len < 0) {
        snprintf(err, errlen, "bad value for rollout.max_model_len (>= 0)");
        return LISA_INVALID;
    }
    if (c->max_model_len > 0) {
        c->max_len = c->max_model_len;
        lisa_log_info("settings: rollout.max_model_len=%lld: engine.max_len",
                      (long long) c->max_model_len);
    }
    if (c->v_prefix_cache &&
        s_text_bool(AR "rollout.enable_prefix_caching", c->v_prefix_cache,
                    &c->prefix_cache, err, errlen) != LISA_OK)
        return LISA_INVALID;
    if (c->val_do_sample) {
        bool sample = true;
        if (s_text_bool(AR "rollout.val_kwargs.do_sample", c->val_do_sample,
                        &sample, err, errlen) != LISA_OK)
            return LISA_INVALID;
        if (!sample) {
            c->val_temperature = 0;
            lisa_log_info("settings: val_kwargs.do_sample=false: validation "
                          "is greedy (temperature 0)");
        }
    }
    return LISA_OK;
}

/* Agent Lightning's keys that set lisa's. */
static lisa_rc_t
s_fold_agl(trn_run_cfg_t *c, char *err, size_t errlen)
{
    double to = c->agl_rollout_timeout_s > 0 ? c->agl_rollout_timeout_s
                                             : c->agl_timeout_s;
    if (c->agl_timeout_s < 0 || c->agl_rollout_timeout_s < 0 ||
        c->agl_poll_timeout_s < 0 || to > 1e9 || c->agl_poll_timeout_s > 1e9) {
        snprintf(err, errlen, "bad value for agentlightning.*timeout_seconds");
        return LISA_INVALID;
    }
    if (to > 0)
        c->trajectory_timeout_ms = (uint64_t) (to * 1000.0);
    if (c->agl_poll_timeout_s > 0)
        c->step_timeout_ms = (uint64_t) (c->agl_poll_timeout_s * 1000.0);
    if (c->agl_fillna) {
        char *end = NULL;
        double v = strtod(c->agl_fillna, &end);
        if (!end || *end || !isfinite(v)) {
            snprintf(err, errlen,
                     "bad value for agentlightning.reward_fillna_value: %s",
                     c->agl_fillna);
            return LISA_INVALID;
        }
        s_set_str(&c->failed_rollouts, "zero");
        c->failed_score = v;
        lisa_log_info("settings: reward_fillna_value=%g: failed rollouts "
                      "train with that score (trainer.failed_rollouts=zero)",
                      v);
    }
    if (c->agl_shuffle &&
        s_text_bool("agentlightning.is_shuffle", c->agl_shuffle, &c->shuffle,
                    err, errlen) != LISA_OK)
        return LISA_INVALID;
    return LISA_OK;
}

lisa_rc_t
trn_run_cfg_fold(trn_run_cfg_t *c, char *err, size_t errlen)
{
    if (s_fold_engine(c, err, errlen) != LISA_OK ||
        s_fold_agl(c, err, errlen) != LISA_OK)
        return LISA_INVALID;
    if (c->logger && strstr(c->logger, "wandb"))
        lisa_log_info("settings: trainer.logger %s: lisa has no wandb; its "
                      "curves go to TensorBoard event files",
                      c->logger);
    if (c->ppo_mini_batch > c->batch_size) {
        lisa_log_info("settings: ppo_mini_batch_size %lld > "
                      "data.train_batch_size %lld: one mini-batch, the whole "
                      "batch",
                      (long long) c->ppo_mini_batch, (long long) c->batch_size);
        c->ppo_mini_batch = 0;
    }
    return s_notes(c, err, errlen);
}

void
trn_run_cfg_caps(const trn_run_cfg_t *c, size_t *max_prompt,
                 size_t *max_response, size_t *drop_prompt_over, char *trunc)
{
    *max_prompt = c->max_prompt_len > 0 ? (size_t) c->max_prompt_len : 0;
    size_t r = c->max_response_len > 0 ? (size_t) c->max_response_len : 0;
    size_t tr = c->traj_max_response > 0 ? (size_t) c->traj_max_response : 0;
    *max_response = r && tr ? (r < tr ? r : tr) : (r ? r : tr);
    bool error = !c->truncation || strcmp(c->truncation, "error") == 0;
    size_t tp = c->traj_max_prompt > 0 ? (size_t) c->traj_max_prompt : 0;
    /* dropped above the smallest dropping cap; cut above max_prompt */
    size_t drop = error ? *max_prompt : 0;
    if (tp && (!drop || tp < drop))
        drop = tp;
    *drop_prompt_over = drop;
    *trunc = error ? 'e' : c->truncation[0];
    if (error)
        *max_prompt = 0;
}

/* The PPO update's, rollout correction's and in-reward KL's settings;
 * *bad names a bad one. */
static void
s_resolve_verl(const trn_run_cfg_t *c, trn_step_cfg_t *s, const char **bad)
{
    if (c->ppo_mini_batch < 0)
        *bad = "actor_rollout_ref.actor.ppo_mini_batch_size (>= 0)";
    if (c->ppo_epochs < 1)
        *bad = "actor_rollout_ref.actor.ppo_epochs (>= 1)";
    s->mini_groups = c->ppo_mini_batch > 0 && c->ppo_mini_batch < c->batch_size
                         ? (size_t) c->ppo_mini_batch
                         : 0;
    s->ppo_epochs = c->ppo_epochs > 0 ? (size_t) c->ppo_epochs : 1;
    s->bypass = c->bypass_mode;
    double thr = 0;
    if (s_opt_double(c->is_threshold, &thr) != LISA_OK)
        *bad = "algorithm.rollout_correction.rollout_is_threshold (a number; "
               "lisa has no lower_upper pair)";
    if (s_null(c->rollout_is))
        s->is_threshold = 0;
    else if (strcmp(c->rollout_is, "token") == 0 ||
             strcmp(c->rollout_is, "sequence") == 0) {
        s->is_level = c->rollout_is[0] == 't' ? TRN_IS_TOKEN : TRN_IS_SEQUENCE;
        s->is_threshold = thr > 0 ? thr : 2.0;
    } else
        *bad = "algorithm.rollout_correction.rollout_is (null, token, "
               "sequence)";
    if (c->is_batch_normalize)
        *bad = "algorithm.rollout_correction.rollout_is_batch_normalize (lisa "
               "uses the truncated weights as they are: false)";
    static const struct {
        const char *n;
        trn_rs_level_t l;
    } rs[] = {{"token", TRN_RS_TOKEN},
              {"sequence", TRN_RS_SEQUENCE},
              {"geometric", TRN_RS_GEOMETRIC}};
    s->rs_level = TRN_RS_OFF;
    bool rs_ok = s_null(c->rollout_rs);
    for (size_t i = 0; i < sizeof rs / sizeof rs[0] && !rs_ok; i++)
        if (strcmp(c->rollout_rs, rs[i].n) == 0) {
            s->rs_level = rs[i].l;
            rs_ok = true;
        }
    if (!rs_ok)
        *bad = "algorithm.rollout_correction.rollout_rs (null, token, "
               "sequence, geometric)";
    if (s_opt_double(c->rs_threshold, &s->rs_upper) != LISA_OK ||
        s_opt_double(c->rs_lower, &s->rs_lower) != LISA_OK ||
        s_opt_double(c->token_veto, &s->rs_veto) != LISA_OK)
        *bad = "algorithm.rollout_correction.rollout_rs_threshold / "
               "_lower / rollout_token_veto_threshold (numbers or null)";
    if (s->rs_level != TRN_RS_OFF && s->rs_upper == 0)
        s->rs_upper = thr > 0 ? thr : 2.0;
    if (strcmp(c->rc_loss_type, "ppo_clip") != 0)
        *bad = "algorithm.rollout_correction.loss_type (lisa's loss is "
               "PPO-clip: ppo_clip)";
    bool adaptive = false;
    if (trn_kl_parse(c->kl_penalty, &s->kl_reward_type) != LISA_OK)
        *bad = "algorithm.kl_penalty (kl, abs, mse, low_var_kl)";
    if (trn_kl_ctrl_parse(c->kl_ctrl_type, &adaptive) != LISA_OK)
        *bad = "algorithm.kl_ctrl.type (fixed or adaptive)";
    if (!(c->kl_ctrl_coef >= 0) || !(c->kl_ctrl_target > 0) ||
        c->kl_ctrl_horizon < 1)
        *bad = "algorithm.kl_ctrl.kl_coef (>= 0) / target_kl (> 0) / "
               "horizon (>= 1)";
    s->kl_reward_coef = c->kl_in_reward ? c->kl_ctrl_coef : 0;
    if (strcmp(c->truncation, "error") != 0 &&
        strcmp(c->truncation, "left") != 0 &&
        strcmp(c->truncation, "right") != 0 &&
        strcmp(c->truncation, "middle") != 0)
        *bad = "data.truncation (error, left, right, middle)";
    if (c->max_prompt_len < 0 || c->max_response_len < 0 ||
        c->traj_max_prompt < 0 || c->traj_max_response < 0)
        *bad = "data.max_prompt_length / max_response_length / trajectory "
               "caps (>= 0)";
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
    if (s_cp_tokens(c->cp_tokens, s) != LISA_OK)
        bad = "trainer.context_parallel_tokens";
    if (strcasecmp(c->recompute, "auto") == 0)
        s->recompute = TRN_STEP_RECOMPUTE_AUTO;
    else if (strcasecmp(c->recompute, "true") == 0)
        s->recompute = TRN_STEP_RECOMPUTE_ON;
    else if (strcasecmp(c->recompute, "false") == 0)
        s->recompute = TRN_STEP_RECOMPUTE_OFF;
    else
        bad = "actor_rollout_ref.model.enable_gradient_checkpointing";
    /* verl's offload keys: either one offloads the optimizer state */
    s->optim_offload = false;
    static const int offload_keys[] = {S_NT_PARAM_OFFLOAD, S_NT_OPTIM_OFFLOAD};
    for (size_t i = 0; i < 2; i++) {
        const char *v = c->noted[offload_keys[i]];
        bool on = false;
        if (v && lisa_config_parse_bool(v, &on) == LISA_OK)
            s->optim_offload = s->optim_offload || on;
    }
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
    if (!(c->top_p > 0 && c->top_p <= 1) ||
        !(c->val_top_p > 0 && c->val_top_p <= 1))
        bad = "actor_rollout_ref.rollout.top_p / val_kwargs.top_p (0 < p <= 1)";
    if (!(c->val_temperature >= 0 && c->val_temperature <= 100))
        bad = "actor_rollout_ref.rollout.val_kwargs.temperature (0..100)";
    if (c->top_k < -1 || c->val_top_k < -1 || c->top_k > INT32_MAX ||
        c->val_top_k > INT32_MAX)
        bad = "actor_rollout_ref.rollout.top_k / val_kwargs.top_k (>= -1)";
    if (!(c->adam_eps > 0 && c->adam_eps < 1))
        bad = "actor_rollout_ref.actor.optim.eps (0 < eps < 1)";
    if (c->lr_warmup_steps < -1)
        bad = "actor_rollout_ref.actor.optim.lr_warmup_steps (>= -1)";
    if (!(c->lr_warmup_ratio >= 0 && c->lr_warmup_ratio <= 1))
        bad = "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio (0..1)";
    s_resolve_verl(c, s, &bad);
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
