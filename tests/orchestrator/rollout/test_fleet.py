"""The engine fleet's edge cases, on real Ray. Admitting an engine when its first weight load goes
wrong: an engine that fails it is dropped and the pool goes on; a dead or stuck learner is not blamed
on the engine but reaches the caller, who restarts the learner, and a successor engine starts so the
pool keeps its size (simulated engines). The end of a run
does not wait for an engine that never found a node (a replacement after a node was lost, when no
other rollout node has room): it is cancelled, not asked to shut down. An engine taken out of service
closes in the background, and is killed once closed or out of time."""

import time

import pytest

from orchestrator.bench.simulated_engine import TokenTiming
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.rollout.fleet import EngineFleet
from orchestrator.rollout.launcher import ActorLauncher
from orchestrator.rollout.lifecycle import Engine, Life

FAST = TokenTiming(step_base_s=0.002, step_per_sample_s=0.0, prefill_per_token_s=0.0, mean_completion_tokens=8)


@pytest.fixture
def simulated(tiny, ray_session):
    """(pool, requests) on 2 simulated engines; the launcher is closed after the test."""
    from orchestrator.bench import simulation
    from orchestrator.bench.simulated_engines import SimulatedLauncher
    from orchestrator.rollout.pool import RolloutPool

    tokenizer, requests, _ = simulation.workload(prompts=8, num_generations=2, max_tokens=16)
    launcher = SimulatedLauncher(FAST)
    config = RolloutConfig(engines=2, max_inflight_samples=4, num_cpus_per_engine=0)
    pool = RolloutPool(EngineFleet(ray_session, "simulated", tokenizer, config, launcher=launcher))
    yield pool, requests
    pool.shutdown()
    launcher.close()


def test_an_engine_that_fails_its_first_load_is_dropped_and_the_pool_goes_on(simulated, capsys):
    from workers.weights.transport import WeightSyncError

    pool, requests = simulated
    pool.start()
    failure = WeightSyncError("engine 2 did not load policy version 3")
    pool.engines.on_engine_ready = lambda engine_id, actor: _raise(failure)
    pool.engines.resize(3)
    assert pool.engines.admit_ready(block=True) == []  # what `generate` does before it dispatches
    results = pool.generate(requests)
    assert sorted(r.group_id for r in results) == list(range(8)) and sorted(pool.engines.actors) == [0, 1]
    assert pool.engines.records.problems() == []
    warning = "engine 2 could not load the current weights: WeightSyncError: engine 2 did not load policy version 3"
    assert warning in capsys.readouterr().err


@pytest.mark.parametrize("fault", ["stuck", "dead"])
def test_a_learner_stuck_or_dead_while_a_new_engine_loads_reaches_the_caller(simulated, fault):
    from orchestrator.contracts.errors import LearnerDiedError
    from workers.weights.transport import LearnerSyncTimeout

    pool, _ = simulated
    pool.start()
    if fault == "stuck":
        error = LearnerSyncTimeout("publishing weights did not finish", engines={})
    else:
        error = LearnerDiedError("the learner died while publishing weights")
    pool.engines.on_engine_ready = lambda engine_id, actor: _raise(error)
    pool.engines.resize(3)
    with pytest.raises(LearnerDiedError, match=str(error)):
        pool.engines.admit_ready(block=True)  # what `generate` does before it dispatches
    assert 2 not in pool.engines.actors and sorted(pool.engines.actors) == [0, 1]
    # The engine was not at fault: a successor starts, to load the restarted learner's weights.
    assert list(pool.engines.starting) == [3] and pool.engines.restarts == 0
    pool.engines.on_engine_ready = None
    assert pool.engines.admit_ready(block=True) == [3] and sorted(pool.engines.actors) == [0, 1, 3]
    assert pool.engines.records.problems() == []


def _raise(error):
    raise error


class NoNodeLauncher(ActorLauncher):
    """Engine actors that ask for a resource no node has, so they wait for a node forever."""

    def launch(self, engine_id, model, tokenizer_ref, config, device, seed, options):
        options = {**options, "resources": {"gone": 1}}
        return super().launch(engine_id, model, tokenizer_ref, config, device, seed, options)


def test_shutdown_cancels_an_engine_still_waiting_for_a_node(learner_tokenizer, ray_session):
    import ray

    engines = EngineFleet(ray_session, None, learner_tokenizer, RolloutConfig(), launcher=NoNodeLauncher())
    engine_id = engines.add_engine()
    waiting = engines.starting[engine_id].waiting
    started = time.monotonic()
    engines.shutdown()
    assert time.monotonic() - started < 5
    assert not engines.starting and not engines.actors
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(waiting, timeout=30)


def test_a_drained_engine_closes_while_the_pool_goes_on_and_is_killed_once_closed_or_out_of_time(learner_tokenizer, ray_session):
    """Closing a vLLM engine takes seconds; a shrink or drain must not stop the pool's dispatch for them."""
    import ray

    engines = EngineFleet(ray_session, None, learner_tokenizer, RolloutConfig(), launcher=ActorLauncher())
    actor = ray.remote(ClosesWhenTold).options(num_cpus=0, max_concurrency=2)
    closing, hung = actor.remote(), actor.remote()
    for engine_id, handle in ((0, closing), (1, hung)):
        _draining(engines, engine_id, handle)
    engines.stop_drained(busy=set())  # neither has closed yet
    assert not engines.actors and not engines.draining and sorted(engines.stopping) == [0, 1]
    engines.finish_stops(timeout_s=0.0)
    assert sorted(engines.stopping) == [0, 1]
    closing.tell.remote()
    ray.get(engines.stopping[0].waiting, timeout=30)
    engines.finish_stops(timeout_s=0.0)
    assert sorted(engines.stopping) == [1]
    engines.stopping[1].deadline = time.monotonic()  # its time to close is up
    engines.finish_stops(timeout_s=0.0)
    assert not engines.stopping
    last = actor.remote()  # still closing when the pool shuts down: shut down with it
    _draining(engines, 2, last)
    engines.stop_drained(busy=set())
    last.tell.remote()
    engines.shutdown()
    assert not engines.stopping and not engines.actors and engines.records.problems() == []
    for stopped in (closing, hung, last):
        assert _dead_within(stopped, 30.0)


def _draining(fleet: EngineFleet, engine_id: int, actor) -> None:
    """`actor` as a serving engine drained by a shrink (without starting vLLM)."""
    fleet.records.add(Engine(engine_id, actor, waiting="started", deadline=time.monotonic()))
    fleet.records.move(engine_id, Life.SERVING)
    fleet.records.move(engine_id, Life.DRAINING)


def _dead_within(actor, timeout_s: float) -> bool:
    """Whether the actor's calls fail (it is dead) within `timeout_s`. `ray.kill` only asks for the kill: a call
    sent just after it may still be served (one was, on a loaded machine)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.tell.remote(), timeout=timeout_s)
        except ray.exceptions.RayActorError:
            return True
        time.sleep(0.1)
    return False


class ClosesWhenTold:
    """An engine whose `shutdown` returns only once told to."""

    def __init__(self):
        self.told = False

    def shutdown(self) -> None:
        while not self.told:
            time.sleep(0.05)

    def tell(self) -> None:
        self.told = True
