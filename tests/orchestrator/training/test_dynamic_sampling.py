"""Dynamic sampling (DAPO): only groups whose rewards differ are trained on, each step has
prompts_per_step of them, dropped groups are in the Parquet as `filtered`, and a resume is exact."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from orchestrator.config.base import ConfigError
from orchestrator.config.loading import load_config
from orchestrator.config.train import TrainConfig
from orchestrator.rollout.samples import StepSamples
from orchestrator.training import dynamic_sampling
from tests.orchestrator.training.short_run import ARGS


def test_groups_with_equal_rewards_are_not_informative():
    rewards = np.array([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.0, 0.0])
    groups = np.array([7, 7, 3, 3, 9, 9, 3, 3])  # group 3 twice over, apart: still one group
    assert dynamic_sampling.informative(rewards, groups).tolist() == [False, False, True, True, False, False, True, True]
    # the first informative groups in record order, as many as the step needs
    rewards = np.array([0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    groups = np.array([1, 1, 2, 2, 3, 3, 4, 4])
    assert dynamic_sampling.trained(rewards, groups, 2).tolist() == [True, True, False, False, True, True, False, False]


def test_extra_rounds_ask_for_the_missing_groups_at_the_rate_seen():
    assert dynamic_sampling.extra_groups(missing=2, kept=2, generated=4, prompts_per_step=4) == 4
    assert dynamic_sampling.extra_groups(missing=1, kept=3, generated=4, prompts_per_step=4) == 2
    assert dynamic_sampling.extra_groups(missing=4, kept=0, generated=4, prompts_per_step=4) == 4
    assert dynamic_sampling.extra_groups(missing=3, kept=1, generated=8, prompts_per_step=4) == 4  # at most a step


class _Scored:
    def __init__(self, rewards):
        self._rewards = rewards

    def scores(self):
        return {"reward": self._rewards, "reward_errors": 0}


def _groups(first: int, rewards: list[list[float]]):
    """Groups `first`, `first + 1`, ... of two samples, scored `rewards` (one pair per group)."""
    count = len(rewards)
    samples = StepSamples.from_tokens([[1]] * 2 * count, [[2]] * 2 * count, [[-0.1]] * 2 * count)
    samples.group_id = np.repeat(np.arange(first, first + count), 2)
    return samples, _Scored([value for pair in rewards for value in pair])


def test_rounds_fill_the_step_and_a_short_one_is_topped_up_for_every_rank():
    stream = iter([[[0, 1], [1, 1], [0, 0], [1, 0]], [[0, 1], [1, 0]]])  # what the next rounds score
    asked = []

    def generate(count):
        asked.append(count)
        rewards = next(stream)[:count]
        return _groups(100 * len(asked), rewards)

    first, scored = _groups(0, [[1, 1], [0, 1], [0, 0], [1, 1]])  # one informative group of 4
    first.set_scores(scored.scores())
    filled = dynamic_sampling.fill(first, 0, generate, prompts_per_step=4, max_rounds=3)
    assert asked == [4, 3]  # 3 missing at 1 in 4 seen (at most a step's worth), then 1 missing at 3 in 8
    trained = dict.fromkeys(filled.samples.group_id[~filled.samples.filtered].tolist())
    assert list(trained) == [1, 100, 103, 200]  # the first four informative groups, in stream order
    assert filled.figures == {
        "dynamic_sampling/rounds": 2,
        "dynamic_sampling/groups_generated": 10,
        "dynamic_sampling/groups_filtered": 5,  # 0, 2, 3, 101, 102
        "dynamic_sampling/groups_surplus": 1,  # 201
        "dynamic_sampling/short_steps": 0,
    }

    # Nothing informative at all, two learner ranks: the first two groups, so each rank has one.
    flat, scored = _groups(0, [[1, 1], [0, 0]])
    flat.set_scores(scored.scores())
    filled = dynamic_sampling.fill(flat, 0, lambda count: _groups(50, [[1, 1]] * count), 2, max_rounds=1, at_least=2)
    assert np.unique(filled.samples.group_id[~filled.samples.filtered]).tolist() == [0, 1]
    assert filled.figures["dynamic_sampling/short_steps"] == 1 and filled.informative == 0


def test_dynamic_sampling_with_a_batch_generated_ahead_is_refused(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("dynamic_sampling: true\nmax_staleness: 1\n")
    with pytest.raises(ConfigError, match="set max_staleness: 0 or dynamic_sampling: false"):
        load_config(TrainConfig, path, [])


def _train(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", *args], capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


FILLED_STEPS = 4


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A dynamic-sampling run where half the groups get equal rewards, checkpointed every 2 steps."""
    run = tmp_path_factory.mktemp("filled") / "run"
    flat = Path(__file__).with_name("flat_rewards.py")
    args = [*ARGS, "dynamic_sampling=true", f"max_steps={FILLED_STEPS}", "save_steps=2", f"reward_funcs=['{flat}:half_flat']"]
    _train(*args, f"output_dir={run}")
    return run


def _metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.engines
@pytest.mark.slow  # the rounds' arithmetic is this file's unit tests above
def test_every_trained_group_differs_and_every_step_is_full(filled):
    table = pq.read_table(filled / "rollouts").to_pandas()
    metrics = _metrics(filled)
    trained = table[~table["filtered"]]
    spread = trained.groupby(["step", "group_id"])["reward"].agg(lambda r: r.max() - r.min())
    assert (spread > 0).all()
    assert (trained.groupby("step")["group_id"].nunique() == 2).all()  # prompts_per_step on every step
    assert table["filtered"].any(), "no group was dropped: the run did not exercise dynamic sampling"
    assert trained["advantage"].notna().all() and table[table["filtered"]]["advantage"].isna().all()
    assert sum(m["dynamic_sampling/rounds"] for m in metrics) > 0
    assert all(m["dynamic_sampling/short_steps"] == 0 for m in metrics)


@pytest.mark.engines
@pytest.mark.slow  # a second run; the exact resume of a plain run is test_resume.py's
def test_a_resume_with_dynamic_sampling_is_exact(filled, tmp_path):
    """Resume from the step-2 checkpoint: the same prompts, samples and rewards as the run itself."""
    again = tmp_path / "again"
    shutil.copytree(filled, again)
    shutil.rmtree(again / "checkpoints" / f"step-{FILLED_STEPS:06d}")
    resumed = _train("--resume", str(again))
    assert "from step-000002" in resumed.stdout
    columns = ["step", "group_id", "prompt_index", "completion_ids", "reward", "filtered"]
    table = pq.read_table(filled / "rollouts").to_pandas()
    resumed_table = pq.read_table(again / "rollouts").to_pandas()
    assert resumed_table[columns].astype(str).equals(table[columns].astype(str))
    assert [m["reward_mean"] for m in _metrics(again)] == [m["reward_mean"] for m in _metrics(filled)]
