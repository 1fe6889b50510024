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
