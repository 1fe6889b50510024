"""Connect to Ray: the cluster in RAY_ADDRESS if one is set, else a local one-node cluster."""

from __future__ import annotations

import os


def init_ray(num_cpus: float | None = None) -> None:
    """Start or join Ray once per process. Locally, reserve at least `num_cpus` logical CPUs.

    Rollout engines and the learner reserve CPUs for scheduling; on a 2-core laptop they must
    still all fit, so the local cluster advertises as many logical CPUs as the run asks for.
    """
    import ray

    if ray.is_initialized():
        return
    env = {"VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "ERROR"), "TOKENIZERS_PARALLELISM": "false"}
    if os.environ.get("RAY_ADDRESS"):
        ray.init(runtime_env={"env_vars": env}, log_to_driver=True)
        return
    cpus = max(float(os.cpu_count() or 1), num_cpus or 0.0)
    ray.init(num_cpus=cpus, include_dashboard=False, runtime_env={"env_vars": env}, log_to_driver=True)


def cluster_has_gpus() -> bool:
    import ray

    return ray.cluster_resources().get("GPU", 0) > 0
