"""The end of a run does not wait for an engine that never found a node (a replacement after a node
was lost, when no other rollout node has room): it is cancelled, not asked to shut down."""

import time

import pytest

from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.rollout.engine_group import EngineGroup
from orchestrator.rollout.launcher import ActorLauncher


class NoNodeLauncher(ActorLauncher):
    """Engine actors that ask for a resource no node has, so they wait for a node forever."""

    def launch(self, engine_id, model, tokenizer_ref, config, device, seed, options):
        options = {**options, "resources": {"gone": 1}}
        return super().launch(engine_id, model, tokenizer_ref, config, device, seed, options)


def test_shutdown_cancels_an_engine_still_waiting_for_a_node(learner_tokenizer, ray_session):
    import ray

    engines = EngineGroup(ray_session, None, learner_tokenizer, RolloutConfig(), launcher=NoNodeLauncher())
    engine_id = engines.add_engine()
    waiting = engines.starting[engine_id].ready
    started = time.monotonic()
    engines.shutdown()
    assert time.monotonic() - started < 5
    assert not engines.starting and not engines.actors
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(waiting, timeout=30)
