"""After the learner is declared stuck in a weight sync (`LearnerSyncTimeout`), the engines that were
still in that sync are replaced at once: on the NCCL path they wait in the dead learner's broadcast
forever, and syncing them again would only time out a second time. Stand-ins for the pool and the
learner; the loop's own restart code runs."""

import numpy as np
import pytest

from orchestrator.config.train import TrainConfig
from orchestrator.launch import Components
from orchestrator.learner.weights import PolicyWeights
from orchestrator.rollout.samples import Ragged
from orchestrator.training.loop import GRPORun
from orchestrator.training.metrics import MetricsLog
from orchestrator.training.requests import PromptSet
from orchestrator.training.run_dir import RunDir
from workers.weights.transport import LearnerSyncTimeout, SyncReport


class _Pool:
    def __init__(self):
        self.calls = []

    def drop(self, dead, replace_now=True):
        self.calls.append(("drop", sorted(dead), replace_now))

    def sync_weights(self, weights, replace_now=True):
        self.calls.append(("sync", weights.version))
        return SyncReport(weights.version, "c0ffee", 0, 0.0)


class _Learner:
    def __init__(self):
        self.restarted_from = []

    def restart(self, checkpoint):
        self.restarted_from.append(checkpoint)


class _Transport:
    def __init__(self):
        self.replaced = 0

    def learner_replaced(self):
        self.replaced += 1


def _run(tmp_path, **settings):
    pool, learner, transport = _Pool(), _Learner(), _Transport()
    weights = PolicyWeights(learner, transport, version=3)
    config = TrainConfig(prompts_per_step=2, num_generations=2, max_steps=4, output_dir=str(tmp_path / "run"), **settings)
    run_dir = RunDir.create(config.output_dir)
    run_dir.prepare(config.model_dump(mode="json"))
    parts = Components(learner=learner, pool=pool, weights=weights, tokenizer=None)
    run = GRPORun(config, PromptSet(["a", "b"], Ragged.of([[1], [2]], np.int32)), run_dir, parts)
    run._log = MetricsLog(run_dir.metrics)
    return run, pool, learner, transport


class _Fleet:
    def __init__(self, engine_ids):
        from orchestrator.contracts.rollout import RolloutConfig

        self.config = RolloutConfig()
        self.actors = {engine_id: f"actor {engine_id}" for engine_id in engine_ids}
        self.died = []

    def engine_died(self, engine_id, error):
        self.died.append(engine_id)
        del self.actors[engine_id]


class _StuckWeights:
    def __init__(self, stuck):
        self.stuck = stuck
        self.synced = []

    def sync(self, engines):
        self.synced.append(sorted(engines))
        raise LearnerSyncTimeout("NCCL weight sync to version 4 did not finish: the learner is stuck", engines=self.stuck)


def test_engines_stuck_in_a_timed_out_sync_are_replaced_before_the_next_sync(tmp_path):
    from orchestrator.rollout.pool import RolloutPool

    fleet = _Fleet([1, 2, 3])
    stuck = {1: TimeoutError("engine 1: NCCL weight sync to version 4 did not finish"), 3: TimeoutError("engine 3")}
    with pytest.raises(LearnerSyncTimeout):
        RolloutPool(fleet).sync_weights(_StuckWeights(stuck))
    assert fleet.died == [1, 3] and list(fleet.actors) == [2]  # the restarted learner's first sync reaches engine 2 alone

    run, pool, learner, transport = _run(tmp_path)
    assert run._restart_learner(LearnerSyncTimeout("the learner is stuck", engines=stuck), step=4) == 0
    assert pool.calls == [("sync", 0)]  # no checkpoint yet: from the initial model, the engines left synced
    assert learner.restarted_from == [None] and transport.replaced == 1 and run.weights.version == 0


def test_a_learner_that_died_otherwise_leaves_the_engines_to_the_sync(tmp_path):
    from orchestrator.contracts.errors import LearnerDiedError

    run, pool, _, _ = _run(tmp_path)
    run._restart_learner(LearnerDiedError("the learner died while training (out of memory)"), step=2)
    assert pool.calls == [("sync", 0)]


def test_in_async_mode_the_batches_generated_ahead_are_dropped_and_the_stream_rewound(tmp_path):
    """max_staleness 2: the batches ahead hold prompts the restarted learner has not trained on, from
    the dead one's weights; they are dropped (the one generating is waited for), and the stream goes back
    to the position of the checkpoint the learner restarts from."""
    import threading

    from orchestrator.contracts.errors import LearnerDiedError
    from orchestrator.training.run_dir import ResumeState

    run, pool, learner, _ = _run(tmp_path, max_staleness=2)
    generating, release, generated = threading.Event(), threading.Event(), []

    def generate(requests):
        generating.set()
        release.wait(timeout=10)
        generated.append([request.group_id for request in requests])
        return "batch"

    run._prefetch._generate = generate
    try:
        run.stream.position = 6  # three steps of two prompts taken, the last two generated ahead
        run._prefetch.submit(run._requests())
        run._prefetch.submit(run._requests())
        generating.wait(timeout=10)
        checkpoint = run.run_dir.write_checkpoint(2, lambda folder: None, ResumeState(2, 4, 2))
        run.run_dir.latest_checkpoint = lambda: (checkpoint, ResumeState(2, 4, 2))  # its files are not a model's
        threading.Timer(0.2, release.set).start()
        assert run._restart_learner(LearnerDiedError("the learner died while training"), step=3) == 2
    finally:
        run._prefetch.shutdown()
    assert generated == [[6, 7]], "a batch waiting behind the one generating was generated for nothing"
    assert not run._prefetch.running and run.stream.position == 4 and run.weights.version == 2
    assert learner.restarted_from == [str(checkpoint)] and pool.calls == [("sync", 2)]
