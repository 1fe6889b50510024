"""`train` with an LLM judge as the reward (real Ray, vLLM, TRL): configs/judges/yes-no.yaml, whose
reward function asks a frozen judge served by its own engine pool a yes/no question about every sample
and scores the probability of yes. The step line's judge figures and the Parquet's scores come from it."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.engines

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "judges" / "yes-no.yaml"
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
