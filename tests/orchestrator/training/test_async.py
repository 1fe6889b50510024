"""Async mode: step t+1 generates while the learner trains step t, with a staleness bound."""

import json
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.engines

STEPS = 25


def test_staleness_bound_holds_on_every_sample_and_reward_rises(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", "max_staleness=1", f"max_steps={STEPS}", f"output_dir={run}"],
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
    rewards = [json.loads(line)["reward_mean"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert np.mean(rewards[-5:]) > np.mean(rewards[:5]) + 0.05
