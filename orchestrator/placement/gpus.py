"""How many GPUs the learner gets, decided once the cluster is known.

`learner.num_gpus: null` (the default) means one GPU when the cluster has GPUs and none otherwise,
so the same config (the embedded default included) trains on a laptop and on a GPU machine. The
device of the weight sync follows the cluster (NCCL when it has GPUs), and NCCL sends from the
learner's GPU: an explicit `num_gpus: 0` on a GPU cluster is refused instead of failing at the first
sync. On one node (local placement) the GPUs the run needs are counted before anything starts: NCCL
cannot put two ranks (the learner and an engine) on the same GPU, so the learner cannot share one.
"""

from __future__ import annotations

from orchestrator.config.train import TrainConfig
from orchestrator.contracts.errors import UserError


def learner_gpus(config: TrainConfig, cluster_gpus: float, local: bool) -> int:
    """The learner's GPU count for a cluster with `cluster_gpus` GPUs; `local`: one node, no labels."""
    configured = config.learner.num_gpus
    if configured is None:
        gpus = 1 if cluster_gpus > 0 else 0
    elif configured == 0 and cluster_gpus > 0:
        raise UserError(
            f"learner.num_gpus is 0 but the cluster has {cluster_gpus:g} GPUs: weights reach GPU engines over "
            "NCCL from the learner's GPU, so the learner needs one; set learner.num_gpus to 1 or to null "
            "(one GPU whenever the cluster has GPUs)"
        )
    else:
        gpus = configured
    rollout = config.rollout
    engine_gpus = rollout.reserved_gpus() if cluster_gpus > 0 else 0
    judge_gpus = sum(judge.pool.reserved_gpus() for judge in config.judges.values()) if cluster_gpus > 0 else 0
    learner_total = gpus * config.learner.workers
    # Across nodes the autoscaler may still add GPU nodes; on one node what is there is all there is.
    if local and learner_total + engine_gpus + judge_gpus > cluster_gpus:
        judges = f" plus the judges' engines ({judge_gpus}: judges.<name>.pool.engines)" if judge_gpus else ""
        raise UserError(
            f"this machine has {cluster_gpus:g} GPUs but the run needs {learner_total + engine_gpus + judge_gpus}: "
            f"{'rollout.autoscale.max_engines' if rollout.autoscale else 'rollout.engines'} ({rollout.most_engines()}) x "
            f"rollout.tensor_parallel_size ({rollout.tensor_parallel_size}) for "
            f"the engines plus learner.num_gpus ({gpus}) x learner.workers ({config.learner.workers}){judges}; the "
            "learner cannot share an engine's GPU (NCCL needs one GPU per rank), so lower rollout.engines or use a "
            "machine with more GPUs"
        )
    return gpus


def check_torch_build(cluster_gpus: float, torch_version: str, torch_cuda: str | None, where: str) -> None:
    """Refuse a GPU cluster driven from a CPU build of torch: the learner would train on the CPU and the
    NCCL weight sync die at its first call. `make train` then `make train DEVICE=gpu` leaves exactly
    this: pip keeps the CPU torch the first install put in the venv."""
    if cluster_gpus > 0 and torch_cuda is None:
        raise UserError(
            f"the Ray cluster has {cluster_gpus:g} GPUs but torch {torch_version} in {where} is a CPU build: install "
            "the CUDA build in a venv of its own, e.g. `make train DEVICE=gpu VENV=.venv-gpu` (see docs/getting-started/install.md, GPU machine)"
        )


def with_learner_gpus(config: TrainConfig, local: bool) -> TrainConfig:
    """`config` with `learner.num_gpus` decided for the Ray cluster this process is connected to."""
    import ray

    gpus = learner_gpus(config, ray.cluster_resources().get("GPU", 0), local)
    return config.model_copy(update={"learner": config.learner.model_copy(update={"num_gpus": gpus})})
