"""Async mode's per-sample bound: which groups are over it, and how their new samples take their place."""

import threading

import numpy as np
import pytest

from orchestrator.rollout.samples import StepSamples
from orchestrator.training import staleness


def _samples(group_ids, versions, tag=0):
    rows = len(group_ids)
    samples = StepSamples.from_tokens([[1]] * rows, [[tag, i] for i in range(rows)], [[0.0, 0.0]] * rows)
    samples.group_id = np.asarray(group_ids, dtype=np.int64)
    samples.sample_index = np.asarray([list(group_ids[:i]).count(g) for i, g in enumerate(group_ids)], dtype=np.int32)
    samples.policy_version = np.asarray(versions, dtype=np.int64)
    return samples


def test_a_group_with_one_sample_over_the_bound_is_stale():
    samples = _samples([10, 10, 11, 11, 12, 12], [5, 5, 2, 5, 6, 6])
    assert staleness.stale_groups(samples, learner_version=6, max_staleness=4) == []
    assert staleness.stale_groups(samples, learner_version=7, max_staleness=4) == [11]
    assert staleness.stale_groups(samples, learner_version=10, max_staleness=4) == [10, 11]
    figures = staleness.figures(samples, learner_version=7)
    assert figures["staleness/max"] == 5 and figures["staleness/mean"] == pytest.approx(7 - 29 / 6)


def test_renewed_groups_take_the_place_of_the_stale_ones_in_stream_order():
    samples = _samples([10, 10, 11, 11, 12, 12], [5, 5, 2, 2, 6, 6])
    fresh = _samples([11, 11], [7, 7], tag=99)
    merged = staleness.replace_groups(samples, fresh)
    assert merged.group_id.tolist() == [10, 10, 11, 11, 12, 12]
    assert merged.sample_index.tolist() == [0, 1, 0, 1, 0, 1]
    assert merged.policy_version.tolist() == [5, 5, 7, 7, 6, 6]
    assert [ids[0] for ids in merged.completion_ids.tolist()] == [0, 0, 99, 99, 0, 0]


class _Scores:
    def __init__(self, rows):
        self.rows = rows

    def scores(self):
        return {"reward": np.ones(self.rows), "reward_errors": 1}


def test_the_loop_generates_stale_groups_again_on_its_generation_thread(tmp_path):
    from orchestrator.config.train import TrainConfig
    from orchestrator.launch import Components
    from orchestrator.learner.weights import PolicyWeights
    from orchestrator.rollout.samples import Ragged
    from orchestrator.training.loop import GRPORun
    from orchestrator.training.requests import PromptSet, build_requests
    from orchestrator.training.run_dir import RunDir

    config = TrainConfig(prompts_per_step=3, num_generations=2, max_staleness=2, output_dir=str(tmp_path / "run"))
    run_dir = RunDir.create(config.output_dir)
    parts = Components(learner=None, pool=None, weights=PolicyWeights(None, None, version=6), tokenizer=None)
    run = GRPORun(config, PromptSet(["a", "b", "c"], Ragged.of([[1], [2], [3]], np.int32)), run_dir, parts)
    requests = build_requests(run.stream.take(3), run.data, 2, run.sampling)
    samples = _samples([0, 0, 1, 1, 2, 2], [4, 4, 3, 4, 5, 5])  # group 1 started on policy 3: over the bound
    samples.set_scores({"reward": np.zeros(6)})
    generated = []

    def generate(again):
        generated.append(([request.group_id for request in again], threading.current_thread().name))
        fresh = _samples([request.group_id for request in again for _ in range(2)], [6] * 2 * len(again), tag=9)
        return fresh, _Scores(len(fresh))

    run._generate = generate
    try:
        renewed, count, errors = run._renew_stale(7, requests, samples)
    finally:
        run._prefetch.shutdown()
    assert generated == [([1], "generate")] and (count, errors) == (1, 1)
    assert renewed.policy_version.tolist() == [4, 4, 6, 6, 5, 5]
    assert renewed.reward.tolist() == [0, 0, 1, 1, 0, 0]
    assert staleness.figures(renewed, learner_version=6)["staleness/max"] == 2


def test_token_staleness_and_the_share_of_samples_an_update_landed_in():
    from orchestrator.rollout.samples import Ragged

    samples = _samples([10, 10, 11, 11], [5, 5, 4, 6])
    samples.output_versions = Ragged.of([[5, 5], [5, 6], [4, -1], [6, 6]], np.int64)  # -1: a tool's observation
    figures = staleness.figures(samples, learner_version=6)
    assert (figures["staleness/token_min"], figures["staleness/token_max"]) == (0, 2)
    assert figures["staleness/token_mean"] == pytest.approx((1 + 1 + 1 + 0 + 2 + 0 + 0) / 7)
    assert figures["staleness/samples_spanning_updates"] == 0.25
    # the bound holds on each sample's oldest token
    assert staleness.stale_groups(samples, learner_version=6, max_staleness=1) == [11]
