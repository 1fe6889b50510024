"""`bench --only kv-cache`: async runs whose weight updates land mid-completion, once with each
`rollout.kv_cache_after_update` (recompute, keep), side by side: the step time, the share of samples
an update landed in (their tokens span two versions), the tokens' staleness, and the gap between the
engines' log-probs and the learner's (`sampling/sampling_logp_difference/mean`).

The runs are `train` at `max_staleness: 1` on the bench model with every completion `max_tokens`
long (EOS ignored), so the next batch is still generating when the learner's update lands. The
reward (`vowel_share`) differs between any two such completions, so every update changes the
weights, at a learning rate that makes the change show."""

from __future__ import annotations

from pathlib import Path

import numpy as np

VALUES = ("recompute", "keep")
SETTINGS = {"reward_funcs": ["orchestrator.bench.kv_cache:vowel_share"], "learning_rate": 1e-3}


def vowel_share(completions: list[str], **kwargs) -> list[float]:
    """The share of a completion's letters that are vowels: a reward that tells any two texts apart."""
    letters = [[c for c in text.lower() if c.isalpha()] for text in completions]
    return [sum(c in "aeiou" for c in chars) / len(chars) if chars else 0.0 for chars in letters]


def measure(model: Path, steps: int, prompts: int, n: int, max_tokens: int, out_dir: Path) -> dict:
    from orchestrator.bench.training import ASYNC, ours

    settings = {**ASYNC, **SETTINGS}

    result = {}
    for value in VALUES:
        run = out_dir / value
        figures = ours(model, steps, prompts, n, max_tokens, 0, run, rollout={"kv_cache_after_update": value}, settings=settings)
        result[value] = {**figures, **_spanning(run)}
    return result


def _spanning(run: Path) -> dict:
    """From the run's Parquet rollouts: samples whose sampled tokens span two or more versions."""
    import pyarrow.parquet as pq

    spans = []
    for file in sorted((run / "rollouts").glob("step-*.parquet")):
        for versions in pq.read_table(file, columns=["output_versions"]).column(0).to_pylist():
            spans.append(len({version for version in versions if version >= 0}))
    spans = np.asarray(spans)
    return {"samples": int(spans.size), "spanning_samples": int((spans > 1).sum())}


def table(result: dict) -> str:
    rows = [
        ("step time (s)", lambda r: f"{r['step_s']:.2f}"),
        ("samples spanning an update", lambda r: f"{r['spanning_samples']} of {r['samples']}"),
        ("token staleness, mean", lambda r: f"{r['staleness/token_mean']:.2f}"),
        ("engines vs learner log-prob gap, mean", lambda r: f"{r['sampling/sampling_logp_difference/mean']:.2e}"),
    ]
    lines = ["| | " + " | ".join(VALUES) + " |", "|---|" + "---|" * len(VALUES)]
    lines += [f"| {name} | " + " | ".join(show(result[value]) for value in VALUES) + " |" for name, show in rows]
    return "\n".join(lines)
