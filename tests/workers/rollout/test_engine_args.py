"""The vLLM engine arguments a rollout engine starts with, from `rollout:` (no engine is started)."""

from pathlib import Path

import pytest

from orchestrator.contracts.rollout import RolloutConfig
from workers.rollout.engine import engine_args, engine_environment, warm_up_params


@pytest.mark.parametrize(
    ("setting", "device", "eager"),
    [(None, "cpu", True), (None, "cuda", False), (False, "cpu", False), (True, "cuda", True)],
)
def test_enforce_eager_is_vllms_own_unless_set(setting, device, eager):
    """Eager on CPU by default (compiling costs each engine start more than it saves in a short run),
    vLLM's compiled default on GPU; `rollout.enforce_eager` overrides either."""
    args = engine_args("model", Path("tokenizer"), RolloutConfig(enforce_eager=setting), device, seed=0)
    assert args.enforce_eager is eager


@pytest.mark.parametrize(("device", "chunked"), [("cpu", False), ("cuda", None)])
def test_cpu_engines_never_prefill_in_chunks(device, chunked):
    """vLLM 0.32 rewinds a seeded request's generator after a chunked prefill, which kills a CPU engine
    (tests/orchestrator/rollout/test_pool.py shows it on real engines); on GPU vLLM decides."""
    args = engine_args("model", Path("tokenizer"), RolloutConfig(), device, seed=0)
    assert args.enable_chunked_prefill is chunked


@pytest.mark.parametrize(
    ("rollout", "device", "environment"),
    [
        ({"dtype": "float32"}, "cuda", {"TRITON_F32_DEFAULT": "ieee"}),  # float32 attention, not TF32
        ({}, "cuda", {}),  # 'auto': vLLM's bf16 on a GPU, where TF32 is not the precision that matters
        ({"dtype": "bfloat16", "vllm_v1_runner": True}, "cuda", {"VLLM_USE_V2_MODEL_RUNNER": "0"}),
        ({"cpu_threads_bind": "0-1", "dtype": "float32"}, "cpu", {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}),
        ({"vllm_v1_runner": True}, "cpu", {}),  # the CPU backend runs V1 anyway
    ],
)
def test_the_engine_process_starts_with_the_environment_its_device_and_dtype_need(rollout, device, environment):
    """A CUDA float32 engine's Triton attention runs its dots in TF32 unless told otherwise: the engines'
    log-probs would drift ~1e-4 from a float32 learner's (CPU engines: ~3e-7)."""
    assert engine_environment(RolloutConfig(**rollout), device) == environment


def test_the_warm_up_samples_as_a_group_does():
    """A warm-up of one unseeded sample without log-probs left the first real group to compile the sampler's
    seeded, log-prob and top-p/top-k paths (on CUDA: Triton kernels) under the health check's clock."""
    plain, masked = warm_up_params()
    for params in (plain, masked):
        assert params.n == 2 and params.seed is not None and params.logprobs == 0 and params.max_tokens == 2
    assert (plain.top_p, plain.top_k) == (1.0, -1) and (masked.top_p, masked.top_k) == (0.9, 8)
