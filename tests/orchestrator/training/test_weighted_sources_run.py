"""Weighted prompt sources in whole `train` runs: 20 steps at 0.75 / 0.25 draw exactly that mix, the
metrics say so per source, and a run stopped at step 10 and resumed draws the prompts (and, on one
machine, the rewards) of the uninterrupted run."""

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from orchestrator.builtin import search_task

# Slow (three `train` runs, about four minutes on this 2-core machine); the default suite covers the draw,
# its resume and the joined rows in tests/orchestrator/data/test_stream.py.
pytestmark = [pytest.mark.engines, pytest.mark.slow]

STEPS = 20
ARGS = ["prompts_per_step=8", "num_generations=4", "max_completion_length=12", "learning_rate=2e-3", "plot_steps=100"]


def _train(folder, run, *args):
    config = folder / "mix.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "train", "--config", str(config), *ARGS, *args, f"output_dir={run}"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def _drawn(run) -> list[list[tuple]]:
    columns = ["group_id", "prompt_index", "prompt"]
    return [
        sorted(set(map(tuple, pq.read_table(path, columns=columns).to_pandas().values.tolist())))
        for path in sorted((run / "rollouts").glob("*.parquet"))
    ]


def test_two_sources_are_drawn_at_their_ratio_and_a_resume_continues_the_same_draw(tmp_path):
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        "".join(json.dumps({"prompt": r["prompt"], "kind": "question"}) + "\n" for r in search_task.records()[:20])
    )
    (tmp_path / "mix.yaml").write_text(
        "prompts:\n  - {source: builtin:search, ratio: 0.75, name: search}\n  - {source: questions.jsonl, ratio: 0.25, name: questions}\n"
        "reward_funcs: [builtin:search_call]\nseed: 3\nrollout: {engines: 1}\n"
    )
    _train(tmp_path, tmp_path / "whole", f"max_steps={STEPS}")
    lines = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    drawn = sum(line["sources/questions/samples"] for line in lines) / sum(line["samples"] for line in lines)
    print(
        f"\nquestions' share over {STEPS} steps: {drawn:.4f}; per step {[line['sources/questions/ratio_samples'] for line in lines]}"
    )
    assert abs(drawn - 0.25) <= 0.03 and all(line["sources/search/reward"] is not None for line in lines)
    assert all(line["sources/questions/samples"] + line["sources/search/samples"] == line["samples"] for line in lines)

    _train(tmp_path, tmp_path / "resumed", "max_steps=10")
    _train(tmp_path, tmp_path / "resumed", f"max_steps={STEPS}", "--resume", str(tmp_path / "resumed"))
    assert _drawn(tmp_path / "resumed") == _drawn(tmp_path / "whole")
    resumed = [json.loads(line)["reward_mean"] for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert resumed == [line["reward_mean"] for line in lines]


def test_in_async_mode_a_source_of_longer_completions_keeps_its_share_of_what_is_trained(tmp_path):
    (tmp_path / "mix.yaml").write_text(
        "prompts:\n  - {source: builtin:search, ratio: 0.75, name: short, max_completion_length: 2}\n"
        "  - {source: builtin:search, ratio: 0.25, name: long}\n"
        "reward_funcs: [builtin:search_call]\nmax_completion_length: 24\ntemperature: 1.5\nmax_staleness: 2\n"
        "rollout: {engines: 1}\n"
    )
    _train(tmp_path, tmp_path / "async", f"max_steps={STEPS}")
    lines = [json.loads(line) for line in (tmp_path / "async" / "metrics.jsonl").read_text().splitlines()]
    shares = [line["sources/long/ratio_samples"] for line in lines]
    tokens = [line["sources/long/ratio_tokens"] for line in lines]
    longer = [(t / 0.25) / ((1 - t) / 0.75) for t in tokens]  # a long sample's length over a short one's, per step
    print(
        f"\nlong's share of the trained samples per step: {shares}\nits samples' length over short's: {min(longer):.2f}x or more"
    )
    assert all(abs(share - 0.25) <= 0.05 for share in shares) and min(longer) >= 2.5
    assert max(line["staleness/max"] for line in lines) >= 1  # batches were generated ahead
