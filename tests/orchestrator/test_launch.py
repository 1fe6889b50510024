"""What `train` says at start-up about the run's precision: engines that sample in another dtype than
the learner trains in, with the importance-sampling correction off, are named once (with it on, the
ratio metrics show the mismatch, and it is corrected). And how an async run shares one CPU node's cores."""

import pytest

from orchestrator.config.train import TrainConfig
from orchestrator.launch import dtype_warning


def test_uncorrected_bf16_engines_beside_a_float32_learner_are_named_once():
    warning = dtype_warning("cuda", "auto", learner_bf16=False, corrected=False)
    assert "bfloat16 (vLLM's 'auto' on GPU) while the learner trains in float32" in warning
    assert "vllm_importance_sampling_correction: true" in warning and "rollout.dtype: float32" in warning
    assert dtype_warning("cuda", "float16", False, corrected=False).startswith("the engines sample in float16")
    assert "while the learner trains in bfloat16" in dtype_warning("cuda", "float16", True, corrected=False)
    assert "bfloat16 while" in dtype_warning("cpu", "bfloat16", False, corrected=False)


def test_matching_precisions_and_corrected_runs_say_nothing():
    assert dtype_warning("cpu", "auto", learner_bf16=False, corrected=False) is None  # float32 engines on CPU
    assert dtype_warning("cuda", "float32", learner_bf16=False, corrected=False) is None
    assert dtype_warning("cuda", "auto", learner_bf16=True, corrected=False) is None
    assert dtype_warning("cuda", "auto", learner_bf16=False, corrected=True) is None


@pytest.mark.parametrize(
    ("overrides", "one_node", "expected"),
    [
        ({"max_staleness": 1}, True, 1),  # async on this 2-core node: one core each
        ({}, True, 0),  # synchronous: engines and learner take turns on every core
        ({"max_staleness": 1}, False, 0),  # other nodes: nothing to share
        ({"max_staleness": 1, "learner": {"torch_threads": 2}}, True, 0),  # the user's choice stands
        ({"max_staleness": 1, "rollout": {"cpu_threads_bind": "0,1"}}, True, 0),
    ],
)
def test_async_engines_and_learner_on_one_cpu_node_split_its_cores(monkeypatch, overrides, one_node, expected):
    """Threads of both sides spread over the same cores contend; split, each side keeps its own."""
    from orchestrator import launch

    monkeypatch.setattr(launch, "one_cpu_node", lambda cluster: one_node)
    monkeypatch.setattr(launch.os, "sched_getaffinity", lambda pid: {0, 1})
    assert launch.async_learner_cores(TrainConfig(**overrides), cluster=None) == expected


@pytest.mark.parametrize(
    ("backend", "device", "named"),
    [("nccl", "cpu", "NCCL needs GPUs, and this cluster has none"), ("gloo", "cuda", "GPU engines receive over NCCL")],
)
def test_a_weight_sync_backend_the_engines_cannot_receive_is_refused_before_anything_starts(backend, device, named):
    from orchestrator.config.train import TrainConfig
    from orchestrator.contracts.errors import UserError
    from orchestrator.launch import check_weight_sync

    config = TrainConfig(weight_sync={"backend": backend})
    with pytest.raises(UserError, match=rf"weight_sync.backend: {backend} cannot run on this cluster \({named}\)"):
        check_weight_sync(config, device)
    for fits in ("auto", "object_store", {"cpu": "gloo", "cuda": "nccl"}[device]):
        check_weight_sync(TrainConfig(weight_sync={"backend": fits}), device)
