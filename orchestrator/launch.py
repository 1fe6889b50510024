"""Start what a command runs on: Ray, placement and the device once, then the actor groups.

    cluster = connect(num_cpus)           # Ray (local or RAY_ADDRESS), node placement, cpu or cuda
    pool = start_pool(cluster, ...)       # an EngineFleet of vLLM engines behind a RolloutPool
    parts = start_training(config, ...)   # the learner group, the reward models, the pool on its weights, the policy weights

`generate`, `train`, `bench` and `simulate` all come through here, so Ray is initialised in one
place, with one rule for how many CPUs a local cluster advertises.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import TYPE_CHECKING

from orchestrator.contracts.errors import UserError
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.judges import pools as judge_pools
from orchestrator.learner.group import LearnerGroup
from orchestrator.learner.weights import PolicyWeights
from orchestrator.log import log
from orchestrator.placement.colocation import Colocation, learner_within_its_share
from orchestrator.placement.placement import one_node
from orchestrator.rewards import models as reward_models
from orchestrator.rewards.models import RewardModelServers
from orchestrator.rollout.fleet import EngineFleet, one_cpu_node
from orchestrator.rollout.launcher import EngineLauncher
from orchestrator.rollout.pool import RolloutPool

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from orchestrator.config.train import TrainConfig
    from orchestrator.placement.placement import Placement


@dataclasses.dataclass(frozen=True)
class Cluster:
    placement: Placement  # which nodes and resources each role's actors ask for
    device: str  # "cuda" or "cpu": the run's `device`, or for auto whether the cluster has GPUs


def connect(num_cpus: float, num_gpus: float | None = None, device: str = "auto") -> Cluster:
    """Join or start Ray (a local cluster advertises at least `num_cpus`, and `num_gpus` GPUs when given;
    none for `device` cpu), and read where actors go. `device` (a run's `device`): auto is cuda when the
    cluster has GPUs now."""
    from orchestrator.placement.placement import detect
    from orchestrator.ray_runtime import cluster_gpus, init_ray

    init_ray(num_cpus=num_cpus, num_gpus=0 if device == "cpu" else num_gpus)
    if device == "auto":
        device = "cuda" if cluster_gpus() else "cpu"
    return Cluster(placement=detect(), device=device)


def rollout_cpus(config: RolloutConfig) -> float:
    return config.reserved_cpus()


def start_pool(
    cluster: Cluster,
    model: str | None,
    tokenizer,
    config: RolloutConfig,
    seed: int = 0,
    engine_files=None,
    launcher: EngineLauncher | None = None,
    sized_for: tuple[dict, int, int] | None = None,
    on_engine_ready=None,
    learner_cores: int = 0,
    colocation: Colocation | None = None,
) -> RolloutPool:
    """A started pool. `sized_for` = (model config.json, samples in flight, tokens per sample) sizes
    each engine's context and, on CPU, its KV cache (`EngineFleet.size_for`); `on_engine_ready(engine_id,
    actor)` runs before an engine serves; `learner_cores`: cores of a one-node CPU cluster left to the learner;
    `colocation`: the GPUs the engines share with the learner workers (vllm_mode colocate)."""
    engines = EngineFleet(
        cluster,
        model,
        tokenizer,
        config,
        seed=seed,
        engine_files=engine_files,
        launcher=launcher,
        learner_cores=learner_cores,
        colocation=colocation,
    )
    if sized_for is not None:
        engines.size_for(*sized_for)
    engines.on_engine_ready = on_engine_ready
    return RolloutPool(engines).start()


@dataclasses.dataclass
class Components:
    """What a training run drives; built by `start_training`."""

    learner: LearnerGroup
    pool: RolloutPool
    weights: PolicyWeights  # the policy version the engines serve, and how it reaches them
    tokenizer: PreTrainedTokenizerBase  # the canonical tokenizer, loaded on the driver
    reward_models: RewardModelServers | None = None  # the workers serving reward_funcs' models, if it names any
    judges: judge_pools.JudgePools | None = None  # the judges' routers and engine pools, if the run names any
    colocation: Colocation | None = None  # vllm_mode colocate: the GPUs the learner workers share with the engines

    def shutdown(self) -> None:
        self.pool.shutdown()
        self.learner.shutdown()
        if self.reward_models is not None:
            self.reward_models.shutdown()
        if self.judges is not None:
            self.judges.shutdown()
        if self.colocation is not None:
            self.colocation.remove()


def async_learner_cores(config, cluster) -> int:
    """Async mode on a one-node CPU cluster: generation and training run at the same time on the node's
    cores, and threads of both spread over all of them contend (measured on 2 cores: the learner's step
    took 1.9x as long, and the run was slower than the synchronous one). The learner then gets the node's
    last half (its torch threads) and the engines the rest. 0: not that case, or the user set
    `learner.torch_threads` or `rollout.cpu_threads_bind`."""
    cores = len(os.sched_getaffinity(0))
    chosen = config.learner.torch_threads is not None or config.rollout.cpu_threads_bind is not None
    if config.max_staleness == 0 or chosen or cores < 2 or config.learner.workers > 1 or not one_cpu_node(cluster):
        return 0
    return cores // 2


def start_training(
    config,
    model: str,
    tokenizer,
    resume_from: str | None = None,
    policy_version: int = 0,
    max_prompt_tokens: int | None = None,
) -> Components:
    """Start the learner and the pool on the canonical `tokenizer` (the object preflight built: added
    tokens, chat template, pad fallback; `canonical_tokenizer` builds it for callers without one): one
    bundle of its files goes to the learner and to every engine. Engines start with placeholder weights
    and the learner's config.json, and serve only after the learner's weights (`policy_version`) are
    loaded into them, so no node but the learner's needs the model files. `max_prompt_tokens`: the
    longest prompt (preflight's `longest_prompt`); the engines' context is sized for it plus
    `max_completion_length`, so a caller that leaves it out (and has no `max_prompt_length`) gets
    completions cut short by the prompt's length."""
    from orchestrator.contracts.tokenizer import bundle_tokenizer
    from orchestrator.placement.gpus import with_learner_gpus

    rollout = config.rollout
    reward_model_cpus = config.reward_models.num_cpus * config.reward_models.workers if reward_models.models(config) else 0
    # +1: reward tasks
    scoring_cpus = reward_model_cpus + judge_pools.judge_cpus(config) + 1
    cluster = connect(
        rollout_cpus(rollout) + config.learner.num_cpus * config.learner.workers + scoring_cpus, device=config.device
    )
    _check_local_torch(cluster)
    check_weight_sync(config, cluster.device)
    config = with_learner_gpus(config, cluster.placement.mode == "local", cluster.device)  # learner.num_gpus null -> 0 or 1
    learner_cores = async_learner_cores(config, cluster)
    if learner_cores:
        config = config.model_copy(update={"learner": config.learner.model_copy(update={"torch_threads": learner_cores})})
    bundle = bundle_tokenizer(tokenizer)
    colocation = None
    if config.vllm_mode == "colocate" and cluster.device == "cuda":  # placement/colocation.py
        config = learner_within_its_share(config)
        colocation = Colocation.reserve(cluster.placement, config, rollout.startup_timeout_s)
    try:
        learner = LearnerGroup.start(cluster, config, model, bundle, resume_from, rollout.startup_timeout_s, colocation)
    except BaseException:
        if colocation is not None:
            colocation.remove()
        raise
    scorers = judges = None
    try:
        scorers = reward_models.RewardModelServers.start(config, rollout.startup_timeout_s)
        contexts = judge_pools.check(config, max_prompt_tokens or config.max_prompt_length or 0)
        judges = judge_pools.JudgePools.start(config, cluster, contexts)
        started = (config, cluster, tokenizer, bundle, learner, learner_cores, colocation)
        components = _start_engines(*started, policy_version, max_prompt_tokens)
    except BaseException:  # nothing started is left running: the driver may go on (tests, bench) or stop
        learner.shutdown()
        for started in (scorers, judges):
            if started is not None:
                started.shutdown()
        if colocation is not None:
            colocation.remove()
        raise
    return dataclasses.replace(components, reward_models=scorers, judges=judges)


def _start_engines(
    config,
    cluster,
    tokenizer,
    bundle,
    learner,
    learner_cores: int,
    colocation: Colocation | None,
    policy_version: int,
    max_prompt_tokens: int | None,
) -> Components:
    """The pool on the learner's weights (the second half of `start_training`)."""
    rollout = config.rollout
    engine_files = _engine_files(bundle, learner, lora=config.lora is not None)
    warning = dtype_warning(cluster.device, rollout.dtype, config.learner.bf16, config.vllm_importance_sampling_correction)
    if warning:
        log.warning(warning)
    # Through the object store each engine loads the weights as it is admitted; on the collective path
    # (NCCL, gloo) one group spans every engine, so they are all admitted first and synced together.
    transport = _transport(config, cluster.device, colocated=colocation is not None, one_node=one_node())
    together = transport.collective
    weights = PolicyWeights(learner, transport, policy_version, first_sync_together=together, adapter=config.lora is not None)
    longest_prompt = max_prompt_tokens or config.max_prompt_length or 0
    model_config = json.loads(engine_files.files["config.json"])
    sized_for = (model_config, config.samples_per_step, _tokens_per_sample(config, longest_prompt, model_config))
    pool = start_pool(
        cluster,
        None,
        tokenizer,
        rollout,
        config.seed,
        engine_files,
        sized_for=sized_for,
        on_engine_ready=weights.load_into,
        learner_cores=learner_cores,
        colocation=colocation,
    )
    if together:
        try:
            pool.sync_weights(weights)  # engines it finds dead are replaced, and load the weights as they are admitted
        except BaseException:
            pool.shutdown()
            raise
    return Components(learner=learner, pool=pool, weights=weights, tokenizer=tokenizer, colocation=colocation)


def _check_local_torch(cluster) -> None:
    """On a local GPU cluster this machine's torch is the learner's: it must be a CUDA build."""
    if cluster.device != "cuda" or cluster.placement.mode != "local":
        return
    import sys

    import torch

    from orchestrator.placement.gpus import check_torch_build
    from orchestrator.ray_runtime import cluster_gpus

    check_torch_build(cluster_gpus(), torch.__version__, torch.version.cuda, sys.prefix)


def _engine_files(bundle, learner: LearnerGroup, lora: bool):
    """What every engine starts from: the canonical tokenizer's files and the learner's config.json (and
    in a LoRA run the adapter's config: engines start with LoRA on and serve the adapter the learner sends)."""
    from orchestrator.contracts.tokenizer import TokenizerBundle
    from workers.weights.adapters import ADAPTER_CONFIG

    files = {**bundle.files, "config.json": learner.model_config()}
    if lora:
        files[ADAPTER_CONFIG] = json.dumps(learner.adapter_config()).encode()
    return TokenizerBundle(files)


def check_weight_sync(config, device: str) -> None:
    """Refuse a collective backend the engines on `device` cannot receive: their vLLM holds the receiver of
    the device's (NCCL on GPU, gloo on CPU: workers/rollout/engine.py), and NCCL needs GPUs."""
    backend = config.weight_sync.backend
    if backend != {"cuda": "gloo", "cpu": "nccl"}[device]:
        return
    why = "GPU engines receive over NCCL" if device == "cuda" else "NCCL needs GPUs, and this cluster has none"
    fits = "nccl" if device == "cuda" else "gloo"
    raise UserError(
        f"weight_sync.backend: {backend} cannot run on this cluster ({why}): set weight_sync.backend to auto, {fits} "
        "or object_store"
    )


def _tokens_per_sample(config: TrainConfig, longest_prompt: int, model_config: dict) -> int:
    """The context an engine is sized for: the longest prompt and the completion budget; with an agent, whose
    messages add context the run cannot foresee (tool results, its own turns), or with environments, whose
    `reset` may lengthen a prompt, the model's whole context (`rollout.max_model_len` bounds it)."""
    declared = config.rollout.max_model_len or model_config.get("text_config", model_config).get("max_position_embeddings")
    if (config.agent is not None or config.environment_factory is not None) and declared:
        return declared
    return longest_prompt + config.max_completion_length


def _transport(config, device: str, colocated: bool = False, one_node: bool = True):
    """How the learner's weights reach the engines on `device` (workers/weights/factory.py). Colocated,
    `auto` is the object store: NCCL cannot put the learner and an engine on one GPU. `one_node`: the
    cluster is one machine (weight_sync.delta: auto sends whole models there)."""
    from workers.weights.factory import chosen_backend, make_transport

    backend = "object_store" if colocated and config.weight_sync.backend == "auto" else config.weight_sync.backend
    dtype, lora = config.rollout.weight_dtype(device), config.lora is not None
    taken = chosen_backend(device, backend, lora)
    delta = config.weight_sync.delta_on(dtype, config.learner.bf16, lora, one_node, taken)
    return make_transport(
        device,
        config.weight_sync.timeout_s,
        config.weight_sync.bucket_mb << 20,
        config.rollout.tensor_parallel_size,
        lora=lora,
        dtype=dtype,
        backend=backend,
        anchor_every=config.weight_sync.anchor_every if delta else None,
    )


def dtype_warning(device: str, engine_dtype: str, learner_bf16: bool, corrected: bool) -> str | None:
    """What to tell a user whose engines sample in another precision than the learner trains in, with
    the importance-sampling correction off (on, the ratio metrics show the mismatch and it is
    corrected). vLLM's 'auto' is bfloat16 on a GPU (what it picks for a float32 or bfloat16
    checkpoint) and float32 on CPU (workers/rollout/engine.py)."""
    learner = "bfloat16" if learner_bf16 else "float32"
    auto = "bfloat16" if device == "cuda" else "float32"
    engines = auto if engine_dtype == "auto" else engine_dtype
    if corrected or engines == learner:
        return None
    named = f"{engines} (vLLM's 'auto' on GPU)" if engine_dtype == "auto" else engines
    return (
        f"the engines sample in {named} while the learner trains in {learner}, and vllm_importance_sampling_correction "
        "is false: their samples are trained on as if the learner had drawn them (the gap shows in "
        f"sampling/sampling_logp_difference/mean); set vllm_importance_sampling_correction: true, or rollout.dtype: "
        f"{learner} for matching log-probs"
    )


def canonical_tokenizer(config, name: str):
    """The run's canonical tokenizer from a tokenizer folder or name, as preflight builds it: added tokens,
    the chat template (a file is read), the pad fallback (workers/learner/model_setup.py)."""
    from orchestrator.data.conversations import read_chat_template
    from workers.learner.model_setup import load_tokenizer

    return load_tokenizer(name, config.added_tokens, chat_template=read_chat_template(config.chat_template))
