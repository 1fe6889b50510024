"""The vLLM engine arguments a rollout engine starts with, from `rollout:` (no engine is started)."""

from pathlib import Path

import pytest

from orchestrator.contracts.rollout import RolloutConfig
from workers.rollout.engine import engine_args


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
