"""An engine that vLLM cannot start says why in the pool's one-line error: the root cause its engine
process logged (here, an attention head size vLLM's CPU backend does not support), not vLLM's
`EngineDeadError: ... See stack trace (above)`."""

import pytest

from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.launch import start_pool
from orchestrator.rollout.fleet import EngineFailedError
from tests.random_llama import save_random_llama

pytestmark = pytest.mark.engines


def test_an_engine_that_cannot_start_names_the_root_cause(tmp_path, learner_tokenizer, ray_session):
    model = tmp_path / "head-dim-16"
    save_random_llama(model, learner_tokenizer, hidden=64, heads=4, layers=1, context=256)  # heads of 16
    with pytest.raises(EngineFailedError) as failed:
        start_pool(ray_session, str(model), learner_tokenizer, RolloutConfig(engines=1))
    message = str(failed.value)
    assert (
        "engine 0 failed to start: EngineStartError: RuntimeError: Unsupported CPU attention configuration: head_dim=16"
        in message
    )
    assert "\n" not in message
