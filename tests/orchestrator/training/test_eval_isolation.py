"""Evaluation leaves training alone: the chat demo with greedy evaluation after every other step
trains on exactly the samples it trains on without evaluation (real Ray, vLLM, TRL; two runs)."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = [pytest.mark.engines, pytest.mark.slow]

SHIPPED = Path(__file__).parents[3] / "configs" / "chat" / "arithmetic.yaml"
STEPS = 5


def _train(out: Path, *overrides: str) -> list[dict]:
    command = [
        sys.executable,
        "-m",
        "orchestrator",
        "train",
        "--config",
        str(SHIPPED),
        f"output_dir={out}",
        f"max_steps={STEPS}",
        "report_to=[]",
    ]
    proc = subprocess.run([*command, *overrides], capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_training_samples_are_the_same_with_and_without_evaluation(tmp_path):
    with_eval = _train(tmp_path / "eval", "eval_steps=2", "eval_temperature=0", "eval_num_generations=1")
    without = _train(tmp_path / "plain", "eval_prompts=null")
    assert [m["step"] for m in with_eval if "eval/reward_mean" in m] == [2, 4, 5]
    assert [m["reward_mean"] for m in with_eval] == [m["reward_mean"] for m in without]
    for step in range(1, STEPS + 1):
        name = f"rollouts/step-{step:06d}.parquet"
        assert pq.read_table(tmp_path / "eval" / name).column("completion_ids") == pq.read_table(
            tmp_path / "plain" / name
        ).column("completion_ids")
    assert all(m["eval/samples"] == 20 for m in with_eval if "eval/samples" in m)  # greedy: one per held-out prompt
