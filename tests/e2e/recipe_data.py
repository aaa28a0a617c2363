"""Helpers of the recipe tests: the example's verl settings as its launcher
passes them, and a tiny data tree in upstream's layout made from the toy
task (a folder per set holding train_verl.json / test_verl.json)."""
import json
import os

SRC = os.environ["LISA_SOURCE_DIR"]

# Agent Lightning examples/llm-in-sandbox verl_default_config(), every
# leaf as an OmegaConf dotlist argument (Python literals as they print).
EXAMPLE = [
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
    "actor_rollout_ref.rollout.engine_kwargs.vllm.enable_auto_tool_choice=True",
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
]


def upstream_tree(root, n_train=16, val_sets=("math_mini", "biomed_mini"),
                  n_val=3):
    """root/instruct_pretrain/train_verl.json and root/<set>/test_verl.json
    per validation set, each set its own data_source; returns the
    --train-data-dir and --val-data-dir arguments."""
    toy = os.path.join(SRC, "examples", "toy", "data")
    train = json.load(open(os.path.join(toy, "train.json")))[:n_train]
    val = json.load(open(os.path.join(toy, "val.json")))
    tdir = os.path.join(root, "instruct_pretrain")
    os.makedirs(tdir)
    json.dump(train, open(os.path.join(tdir, "train_verl.json"), "w"))
    vdirs = []
    for k, name in enumerate(val_sets):
        d = os.path.join(root, name)
        os.makedirs(d)
        recs = [dict(r, data_source=name)
                for r in val[k * n_val:(k + 1) * n_val]]
        json.dump(recs, open(os.path.join(d, "test_verl.json"), "w"))
        vdirs.append(d)
    return tdir, ",".join(vdirs)
