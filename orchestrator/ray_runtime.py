"""Connect to Ray: the cluster in RAY_ADDRESS if one is set, else a local one-node cluster."""

from __future__ import annotations

import os
import threading

from orchestrator import stopping

LOCAL_HEADROOM_CPUS = 8
# Ray frees the objects nobody references in batches, once a second by default. A weight sync puts a
# bucket (64 MB) in the store every ~0.1 s, so a second's worth of freed buckets waited, and the store
# took fresh pages for new ones: measured here, 20 buckets of 64 MB streamed two at a time left 0.66 GB
# of shared memory touched per sync, growing with each (1.9 GB after three), against 0.13 GB in all at
# 20 ms; pages the store has touched stay with it (and count against a pod's memory limit on
# Kubernetes, where /dev/shm is memory). The raylet reads it from its environment at start: set here
# for the local cluster (a value already set wins), and in deploy/Dockerfile for the pods.
FREE_OBJECTS_PERIOD = ("RAY_free_objects_period_milliseconds", "20")
# Since Ray 2.60 an actor that asks for no GPU sees every GPU of its node (Ray no longer sets
# CUDA_VISIBLE_DEVICES to "" for it), so a CPU-side actor that touches CUDA (a reward model, vLLM's
# platform detection) would land on GPU 0, beside an engine. This restores the empty list for them.
GPU_HIDING = ("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "1")


def init_ray(num_cpus: float | None = None, num_gpus: float | None = None) -> None:
    """Start or join Ray once per process. Locally, advertise at least `num_cpus` logical CPUs.

    Rollout engines and the learner reserve CPUs for scheduling; on a 2-core laptop they must
    still all fit, so the local cluster advertises what the run asks for plus room for engines
    added later (replacements, `orchestrator scale`). Logical CPUs only gate scheduling.
    `num_gpus` (local only): the GPUs the local cluster advertises (None: those it detects; 0 keeps a
    GPU machine's runs on the CPU, as the CPU test suite does).
    """
    import ray

    if ray.is_initialized():
        return
    try:
        _init(ray, num_cpus, num_gpus)
    finally:
        if threading.current_thread() is threading.main_thread():
            stopping.immediate()  # instead of Ray's SIGTERM handler (stopping.py says why)


def _init(ray, num_cpus: float | None, num_gpus: float | None) -> None:
    env = {"VLLM_LOGGING_LEVEL": os.environ.get("VLLM_LOGGING_LEVEL", "ERROR"), "TOKENIZERS_PARALLELISM": "false"}
    env[GPU_HIDING[0]] = GPU_HIDING[1]
    if os.environ.get("RAY_ADDRESS"):
        ray.init(runtime_env={"env_vars": env}, log_to_driver=True)
        return
    cpus = max(float(os.cpu_count() or 1), num_cpus or 0.0) + LOCAL_HEADROOM_CPUS
    os.environ.setdefault(*FREE_OBJECTS_PERIOD)  # the local raylet inherits this process's environment
    # address="local": always a fresh one-node cluster, never one that another program started here
    ray.init(
        address="local",
        num_cpus=cpus,
        num_gpus=num_gpus,
        include_dashboard=False,
        runtime_env={"env_vars": env},
        log_to_driver=True,
    )


def cluster_gpus() -> float:
    import ray

    return ray.cluster_resources().get("GPU", 0)
