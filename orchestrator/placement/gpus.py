"""How many GPUs the learner gets, decided once the cluster is known.

`learner.num_gpus: null` (the default) means one GPU when the run is on GPUs (`device`: auto is
whether the cluster has GPUs) and none otherwise, so the same config (the embedded default
included) trains on a laptop and on a GPU machine; an explicit `num_gpus: 0` in a run on GPUs is
refused instead of failing at the first sync. On one node (local placement) the GPUs the run needs are counted before anything starts: in
`vllm_mode: server` NCCL cannot put two ranks (the learner and an engine) on the same GPU, so the
learner cannot share one; `vllm_mode: colocate` puts an engine on each learner worker's GPU
(colocation.py), and `vllm_mode: null` picks it on one node whose GPUs server mode does not fit.
"""

from __future__ import annotations

from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import UserError


def learner_gpus(config: TrainConfig, cluster_gpus: float, local: bool) -> int:
    """The learner's GPU count for a cluster with `cluster_gpus` GPUs; `local`: one node, no labels.
    `config.vllm_mode` is decided (`decide_vllm_mode`)."""
    configured = config.learner.num_gpus
    if configured is None:
        gpus = 1 if cluster_gpus > 0 else 0
    elif configured == 0 and cluster_gpus > 0:
        have = "GPU nodes still to join" if cluster_gpus == float("inf") else f"{cluster_gpus:g} GPUs"
        raise UserError(
            f"learner.num_gpus is 0 but the cluster has {have}: a run on GPUs trains on a GPU (and sends its weights "
            "from it); set learner.num_gpus to 1 or to null (one GPU whenever the run is on GPUs), or device: cpu"
        )
    else:
        gpus = configured
    needed = gpus_needed(config, gpus, cluster_gpus)
    # Across nodes the autoscaler may still add GPU nodes; on one node what is there is all there is.
    if local and needed > cluster_gpus:
        raise UserError(f"this machine has {cluster_gpus:g} GPUs but the run needs {needed}: {_what_needs(config, gpus)}")
    return gpus


def gpus_needed(config: TrainConfig, learner_gpus: int, cluster_gpus: float) -> int:
    """The GPUs the run takes: the learner's, the engines' unless they share the learner's (colocate),
    and the judges' engines'."""
    if cluster_gpus <= 0:
        return learner_gpus * config.learner.workers
    engines = 0 if config.vllm_mode == "colocate" else config.rollout.reserved_gpus()
    judges = sum(judge.pool.reserved_gpus() for judge in config.judges.values())
    return learner_gpus * config.learner.workers + engines + judges


def _what_needs(config: TrainConfig, gpus: int) -> str:
    rollout, learner = config.rollout, config.learner
    judge_gpus = sum(judge.pool.reserved_gpus() for judge in config.judges.values())
    judges = f" plus the judges' engines ({judge_gpus}: judges.<name>.pool.engines)" if judge_gpus else ""
    if config.vllm_mode == "colocate":
        return f"learner.num_gpus ({gpus}) x learner.workers ({learner.workers}), each shared with an engine{judges}"
    return (
        f"{'rollout.autoscale.max_engines' if rollout.autoscale else 'rollout.engines'} ({rollout.most_engines()}) x "
        f"rollout.tensor_parallel_size ({rollout.tensor_parallel_size}) for the engines plus learner.num_gpus ({gpus}) x "
        f"learner.workers ({learner.workers}){judges}; the learner cannot share an engine's GPU in vllm_mode: server "
        f"(NCCL needs one GPU per rank): {_colocate_advice(config)}lower rollout.engines or use a machine with more GPUs"
    )


def _colocate_advice(config: TrainConfig) -> str:
    """What to say of vllm_mode: colocate to a server-mode run that does not fit."""
    colocated = _colocated(config)
    if isinstance(colocated, TrainConfig):
        return "set vllm_mode: colocate (each learner worker's GPU holds an engine too), "
    return f"vllm_mode: colocate does not fit this config either ({colocated}); "


def _colocated(config: TrainConfig) -> TrainConfig | str:
    """`config` in vllm_mode colocate, or why it cannot be (the validator's words)."""
    from pydantic import ValidationError

    try:
        return TrainConfig.model_validate({**config.model_dump(), "vllm_mode": "colocate"})
    except ValidationError as error:
        return error.errors()[0]["msg"].removeprefix("Value error, ")


def decide_vllm_mode(config: TrainConfig, cluster_gpus: float, local: bool) -> TrainConfig:
    """`config` with `vllm_mode` decided: as set, or (null) colocate where server mode does not fit one
    node's GPUs and colocation can run the config, else server. CPU clusters: as set (it is unused)."""
    if config.vllm_mode is not None or cluster_gpus <= 0:
        return config
    server = config.model_copy(update={"vllm_mode": "server"})
    learner = config.learner.num_gpus if config.learner.num_gpus is not None else 1
    if not local or gpus_needed(server, learner, cluster_gpus) <= cluster_gpus:
        return server
    colocated = _colocated(config)  # or why not (several engines per learner worker, nccl...): server's refusal says it
    return colocated if isinstance(colocated, TrainConfig) else server


def check_torch_build(cluster_gpus: float, torch_version: str, torch_cuda: str | None, where: str) -> None:
    """Refuse a GPU cluster driven from a CPU build of torch: the learner would train on the CPU and the
    NCCL weight sync die at its first call. `make train` then `make train DEVICE=gpu` leaves exactly
    this: pip keeps the CPU torch the first install put in the venv."""
    if cluster_gpus > 0 and torch_cuda is None:
        raise UserError(
            f"the Ray cluster has {cluster_gpus:g} GPUs but torch {torch_version} in {where} is a CPU build: install "
            "the CUDA build in a venv of its own, e.g. `make train DEVICE=gpu VENV=.venv-gpu` (see docs/getting-started/install.md, GPU machine)"
        )


def with_learner_gpus(config: TrainConfig, local: bool, device: str = "cuda") -> TrainConfig:
    """`config` with `vllm_mode` and `learner.num_gpus` decided for the Ray cluster this process is connected to,
    on `device`: cpu counts no GPU; cuda on a cluster of several nodes counts GPUs still to join (`device: cuda`)."""
    import ray

    cluster_gpus = ray.cluster_resources().get("GPU", 0) if device == "cuda" else 0
    if device == "cuda" and cluster_gpus == 0:
        if local:
            raise UserError("device is cuda but Ray sees no GPU on this machine: set device: auto or cpu, or check the driver")
        cluster_gpus = float("inf")  # GPU nodes still to join: the placement deadline decides
    config = decide_vllm_mode(config, cluster_gpus, local)
    gpus = learner_gpus(config, cluster_gpus, local)
    return config.model_copy(update={"learner": config.learner.model_copy(update={"num_gpus": gpus})})
