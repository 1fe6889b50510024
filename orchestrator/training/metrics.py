"""Per-step metrics: computed from the step's rollout table, written to metrics.jsonl, printed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa


def rollout_metrics(table: pa.Table, eos_token_id: int | None, tools: bool = False) -> dict[str, float]:
    """Reward, length and how-it-ended statistics of one step's samples; with `tools`, tool-call
    statistics too (on every step, zeros included, so every line of metrics.jsonl has the keys)."""
    rewards = np.asarray(table.column("reward").to_pylist(), dtype=np.float64)
    completions = table.column("completion_ids").to_pylist()
    observed = table.column("observation_mask").to_pylist()
    lengths = np.asarray([len(c) - sum(m) for c, m in zip(completions, observed)], dtype=np.float64)  # model tokens
    finish = table.column("finish_reason").to_pylist()
    stop_reason = table.column("stop_reason").to_pylist()
    at_eos = [
        f == "stop" and s is None and bool(c) and c[-1] == eos_token_id for f, s, c in zip(finish, stop_reason, completions)
    ]
    at_stop = [f == "stop" and s is not None for f, s in zip(finish, stop_reason)]
    truncated = [f == "length" for f in finish]
    metrics = {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "samples": int(table.num_rows),
        "completion_tokens": int(lengths.sum()),
        "completion_length/mean": float(lengths.mean()),
        "completion_length/min": float(lengths.min()),
        "completion_length/max": float(lengths.max()),
        "ended/eos": float(np.mean(at_eos)),
        "ended/stop": float(np.mean(at_stop)),
        "ended/truncated": float(np.mean(truncated)),
    }
    if tools:
        metrics.update(tool_metrics(table, observed))
    for name in table.column_names:
        if name.startswith("rewards/"):
            metrics[f"{name}/mean"] = float(np.mean(table.column(name).to_pylist()))
    return metrics


def tool_metrics(table: pa.Table, observed: list[list[int]]) -> dict[str, float]:
    """How multi-turn samples went: turns, tool calls by outcome, tool latency, observation tokens."""
    calls = [call for sample in table.column("tool_calls").to_pylist() for call in sample]
    latencies = [call["latency_s"] for call in calls]
    return {
        "turns/mean": float(np.mean(table.column("turns").to_pylist())),
        "tools/calls": len(calls),
        "tools/errors": sum(call["status"] == "error" for call in calls),
        "tools/timeouts": sum(call["status"] == "timeout" for call in calls),
        "tools/latency_mean_s": float(np.mean(latencies)) if latencies else 0.0,
        "observation_tokens/mean": float(np.mean([sum(m) for m in observed])),
    }


class MetricsLog:
    """Appends one JSON object per step to metrics.jsonl (flushed, so a crash loses nothing)."""

    def __init__(self, path: Path):
        self.path = path
        self._file = path.open("a", encoding="utf-8")

    def write(self, metrics: dict) -> None:
        self._file.write(json.dumps(metrics, sort_keys=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def progress_line(metrics: dict, max_steps: int) -> str:
    m = metrics
    return (
        f"step {m['step']:>4}/{max_steps} | reward {m['reward_mean']:.3f} ± {m['reward_std']:.3f} | "
        f"{m['samples_per_s']:.1f} samples/s | gen {m['time/generate']:.2f}s reward {m['time/reward']:.2f}s "
        f"train {m['time/train']:.2f}s sync {m['time/sync']:.2f}s | len {m['completion_length/mean']:.1f} | "
        f"lp-diff {m['rollout/logprob_abs_diff']:.1e} | v{m['policy_version']}"
    )
