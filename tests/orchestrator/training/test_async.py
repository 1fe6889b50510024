"""Async mode: later steps generate while the learner trains this one, with a staleness bound."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.orchestrator.training.short_run import ARGS

pytestmark = pytest.mark.engines

STEPS = 25


def test_staleness_bound_holds_on_every_token_and_reward_rises(tmp_path):
    """With the KV cache kept across updates (recompute, the default, is what every other engine test runs)."""
    run = tmp_path / "run"
    keep = "rollout.kv_cache_after_update=keep"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", "max_staleness=1", keep, f"max_steps={STEPS}", f"output_dir={run}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pq.read_table(run / "rollouts")
    assert table.num_rows == STEPS * 64
    steps = np.asarray(table.column("step"))
    versions = np.asarray(table.column("policy_version"))
    trained_at = steps - 1  # the learner's policy version when step s trains
    assert (trained_at - versions).max() <= 1, "a sample older than max_staleness was trained on"
    assert (trained_at - versions).max() == 1, "async mode never overlapped generation with training"
    tokens = table.column("output_versions").to_pylist()
    sampled = [[version for version in row if version >= 0] for row in tokens]
    assert [min(row) for row in sampled] == versions.tolist()  # a sample is as old as its oldest token
    assert all(row == sorted(row) and step - 1 - row[0] <= 1 for row, step in zip(sampled, steps))
    rewards = [json.loads(line)["reward_mean"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.05


def _train(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", *args], capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _stream(run) -> list[tuple]:
    table = pq.read_table(run / "rollouts").to_pandas()
    return sorted(zip(table["step"], table["group_id"], table["prompt_index"], table["sample_index"], strict=True))


FOUR_AHEAD_STEPS = 8


@pytest.fixture(scope="module")
def four_ahead(tmp_path_factory):
    """A run whose generation may run four versions ahead, checkpointed every 3 steps: (folder, output)."""
    run = tmp_path_factory.mktemp("four-ahead") / "run"
    # Four passes over each batch (num_iterations) make training slower than generating the tiny
    # batches, so that generation runs ahead (here up to the bound; max 4, mean 2.5 versions behind).
    args = [*ARGS, "max_staleness=4", "num_iterations=4", f"max_steps={FOUR_AHEAD_STEPS}", "save_steps=3"]
    return run, _train(*args, f"output_dir={run}")


@pytest.mark.slow  # a second async run; the bound per sample at max_staleness 1 is the test above
def test_four_versions_ahead_keeps_the_bound_per_sample(four_ahead):
    run, proc = four_ahead
    table = pq.read_table(run / "rollouts")
    behind = np.asarray(table.column("step")) - 1 - np.asarray(table.column("policy_version"))
    assert behind.max() <= 4, "a sample older than max_staleness was trained on"
    print(f"most versions behind: {behind.max()}, mean {behind.mean():.2f}")
    assert behind.max() >= 2, "generation never ran more than one step ahead"
    assert " lag " in proc.stdout


@pytest.mark.slow  # a second run; the exact resume of a synchronous run is test_resume.py's
def test_a_resume_four_versions_ahead_trains_the_same_prompts(four_ahead, tmp_path):
    """Resume from the step-6 checkpoint: the batches generated ahead of it are generated again, from
    the same stream position, so every step trains the same prompts as the run itself."""
    run, _ = four_ahead
    again = tmp_path / "again"
    shutil.copytree(run, again)
    shutil.rmtree(again / "checkpoints" / f"step-{FOUR_AHEAD_STEPS:06d}")
    resumed = _train("--resume", str(again))
    assert "from step-000006" in resumed.stdout
    assert _stream(again) == _stream(run)
    table = pq.read_table(again / "rollouts")
    behind = np.asarray(table.column("step")) - 1 - np.asarray(table.column("policy_version"))
    assert behind.max() <= 4
