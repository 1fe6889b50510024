"""`train` with a reward model named in reward_funcs, as a TRL user names one (real Ray, vLLM, TRL):
the built reward model prefers short samples (orchestrator/builtin/tiny_reward_model.py), and the run
learns to answer shorter; every sample's recorded score is that model's reward for its text."""

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from orchestrator.builtin.tiny_reward_model import expected_reward, short_preferring_reward_model

# Slow (a whole `train` run on this 2-core machine); in the default suite rewards/test_reward_models.py covers reward models scored by their workers in a step.
pytestmark = [pytest.mark.engines, pytest.mark.slow]

STEPS = 6


def test_a_run_learns_what_its_reward_model_prefers(tmp_path):
    rm = short_preferring_reward_model()
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", f"reward_funcs=[{rm}]", f"max_steps={STEPS}", f"output_dir={run}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rewards = [m["rewards/model/mean"] for m in metrics]
    lengths = [m["completion_length/mean"] for m in metrics]
    # Measured: -0.192 -> -0.119 by step 5, completions of 5.7 -> 1.1 tokens.
    assert rewards[-1] > rewards[0] + 0.04 and lengths[-1] < lengths[0] - 2, (rewards, lengths)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(rm)
    rows = pq.read_table(run / "rollouts" / "step-000001.parquet").to_pylist()
    texts = [row["prompt"] + row["completion"] for row in rows]
    expected = [expected_reward(len(tokenizer(text, add_special_tokens=False)["input_ids"]) - 1) for text in texts]
    assert [row["rewards/model"] for row in rows] == pytest.approx(expected, abs=1e-4)
    assert [row["reward"] for row in rows] == pytest.approx(expected, abs=1e-4)
