"""`train` with an LLM judge as the reward (real Ray, vLLM, TRL): configs/judges/yes-no.yaml, whose
reward function asks a frozen judge served by its own engine pool a yes/no question about every sample
and scores the probability of yes. The step line's judge figures and the Parquet's scores come from it."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

# Slow (a whole `train` run on this 2-core machine); in the default suite judges/test_judge_pool.py covers the judge pool (answers, choices, a deadline, an engine killed mid-call) on real engines.
pytestmark = [pytest.mark.engines, pytest.mark.slow]

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "judges" / "yes-no.yaml"
REWARDS = Path(__file__).resolve().parent / "judge_rewards.py"
STEPS = 3


def test_a_run_is_rewarded_by_a_judge_pool(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", "--config", str(CONFIG), f"max_steps={STEPS}", f"output_dir={run}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    for m in metrics:  # every sample of every step asked the judge once, in one call
        assert m["judges/checker/prompts"] == 64 and m["judges/checker/completion_tokens"] == 64
        assert m["judges/checker/calls"] == 1 and m["reward_errors"] == 0 and m["judges/checker/engines"] == 1
    table = pq.read_table(run / "rollouts")
    (column,) = [name for name in table.column_names if name.endswith("judged.py:judge_says_yes")]
    scores = table.column(column).to_pylist()
    assert len(scores) == STEPS * 64 and all(0.0 < score < 1.0 for score in scores)  # probabilities of " yes"
    assert len({round(score, 6) for score in scores}) > 8  # the judge read each sample: not one constant
    assert table.column("reward").to_pylist() == pytest.approx(scores)
    assert not any(math.isnan(score) for score in scores)


def test_a_judge_engine_killed_mid_run_loses_no_score(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "killed"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator",
            "train",
            "--config",
            str(CONFIG),
            "max_steps=4",
            f"output_dir={run}",
            f"reward_funcs=[{REWARDS}:judge_says_yes_after_a_kill]",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, "JUDGE_KILL_MARKER": str(marker)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert marker.is_file(), "the reward function never killed the judge's engine"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["judges/checker/engine_restarts"] for m in metrics] == [0, 0, 1, 1]  # killed in step 3, replaced
    assert all(m["reward_errors"] == 0 and m["judges/checker/prompts"] == 64 for m in metrics)
    table = pq.read_table(run / "rollouts")
    assert table.num_rows == 4 * 64 and all(0.0 < reward < 1.0 for reward in table.column("reward").to_pylist())
