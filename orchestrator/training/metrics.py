"""Per-step metrics: computed from the step's samples (rollout/samples.py), written to metrics.jsonl, printed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from orchestrator.data.sources import Sources
from orchestrator.rollout.samples import StepSamples


def rollout_metrics(samples: StepSamples, eos_token_id: int | None, tools: bool = False, agent: bool = False) -> dict[str, float]:
    """Reward, length and how-it-ended statistics of one step's samples (their rewards set); with
    `tools`, tool-call statistics too, with `agent` agent-session ones (on every step, zeros included,
    so every line of metrics.jsonl has the keys)."""
    sessions = samples.sessions()  # a split agent session's segments share its reward: counted once
    rewards = samples.reward[sessions]
    lengths = samples.model_tokens()  # a tool's observation tokens are not the model's
    stopped = samples.finish_reason == "stop"
    by_stop = np.fromiter((reason is not None for reason in samples.stop_reason), dtype=bool, count=len(samples))
    last = samples.completion_ids.last(empty=-1)
    at_eos = stopped & ~by_stop & (samples.completion_ids.lengths > 0) & (last == (-1 if eos_token_id is None else eos_token_id))
    metrics = {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()),
        "samples": len(samples),
        "completion_tokens": int(lengths.sum()),
        "completion_length/mean": float(lengths.mean()),
        "completion_length/min": float(lengths.min()),
        "completion_length/max": float(lengths.max()),
        "ended/eos": float(np.mean(at_eos)),
        "ended/stop": float(np.mean(stopped & by_stop)),
        "ended/truncated": float(np.mean(samples.finish_reason == "length")),
    }
    if tools:
        metrics.update(tool_metrics(samples))
    if agent:
        metrics.update(agent_metrics(samples))
    for name, values in samples.rewards.items():  # NaN: the function did not apply to that sample (it returned None)
        applied = values[sessions & ~np.isnan(values)]
        metrics[f"{name}/mean"] = float(applied.mean()) if applied.size else None
    return metrics


def source_metrics(samples: StepSamples, sources: Sources) -> dict[str, float]:
    """Weighted sources: each source's share of the step's samples and of their tokens (prime-rl's
    ratio_samples and ratio_tokens), its samples and its mean reward (None when it had no sample)."""
    source = sources.of_rows[samples.prompt_index]
    sessions = samples.sessions()
    lengths = samples.model_tokens()
    metrics = {}
    for index, name in enumerate(sources.names):
        mine = (source == index) & sessions
        metrics[f"sources/{name}/samples"] = int(mine.sum())
        metrics[f"sources/{name}/ratio_samples"] = float(mine.sum() / max(1, sessions.sum()))
        metrics[f"sources/{name}/ratio_tokens"] = float(lengths[mine].sum() / max(1, lengths[sessions].sum()))
        metrics[f"sources/{name}/reward"] = float(samples.reward[mine].mean()) if mine.any() else None
    return metrics


def tool_metrics(samples: StepSamples) -> dict[str, float]:
    """How multi-turn samples went: turns, tool calls by outcome, tool latency, observation tokens."""
    calls = [call for sample_calls in samples.tool_calls for call in sample_calls]
    latencies = [call.latency_s for call in calls]
    return {
        "turns/mean": float(np.mean(samples.turns)),
        "tools/calls": len(calls),
        "tools/errors": sum(call.status == "error" for call in calls),
        "tools/timeouts": sum(call.status == "timeout" for call in calls),
        "tools/latency_mean_s": float(np.mean(latencies)) if latencies else 0.0,
        "observation_tokens/mean": float(np.mean(samples.completion_ids.lengths - samples.model_tokens())),
    }


def agent_metrics(samples: StepSamples) -> dict[str, float]:
    """How agent sessions went: model calls per session, failed sessions, calls that rewrote the history (a
    split session's rows each carry the session's error and count)."""
    sessions = samples.sessions()
    return {
        "agent/sessions": int(sessions.sum()),
        "agent/calls_mean": float(samples.turns.sum() / sessions.sum()),
        "agent/errors": int(sum(error is not None for error in samples.agent_error[sessions])),
        "agent/prefix_mismatches": int(samples.prefix_mismatches[sessions].sum()),
        "context_tokens/mean": float(np.mean(samples.completion_ids.lengths - samples.model_tokens())),
    }


class MetricsLog:
    """Appends one JSON object per step to metrics.jsonl, unbuffered: a crash loses nothing, and a write
    that fails (a full disk) fails once, leaving nothing for `close` to retry."""

    def __init__(self, path: Path):
        self.path = path
        self._file = path.open("ab", buffering=0)

    def write(self, metrics: dict) -> None:
        line = memoryview((json.dumps(metrics, sort_keys=True) + "\n").encode())
        while line:  # an unbuffered write may take part of it; the next try raises if the disk is full
            line = line[self._file.write(line) :]

    def close(self) -> None:
        self._file.close()


def read_metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def progress_line(metrics: dict, max_steps: int) -> str:
    m = metrics
    return (
        f"step {m['step']:>4}/{max_steps} | reward {m['reward_mean']:.3f} ± {m['reward_std']:.3f} | "
        f"{m['samples_per_s']:.1f} samples/s | gen {m['time/generate']:.2f}s reward {m['time/reward']:.2f}s "
        f"train {m['time/train']:.2f}s sync {m['time/sync']:.2f}s{_synced(m)} | len {m['completion_length/mean']:.1f} | "
        f"{_learner_figures(m)}{_policy_figures(m)}{_filling(m)} | v{m['policy_version']}{_lag(m)}{_scaled(m)}"
    )


def _scaled(m: dict) -> str:
    """Engines drained for their node (the warning before the line says which and the deadline), and
    autoscaling: the pool's new size and why, on the steps that resized it."""
    drained = (
        f" | drained {m['rollout/engines_drained']} engine(s) of a draining node" if m.get("rollout/engines_drained") else ""
    )
    drained += _reworked(m)
    if not m.get("autoscale/decision"):
        return drained
    return f"{drained} | engines -> {m['autoscale/target']}: {m['autoscale/reason']}"


def _reworked(m: dict) -> str:
    """Samples continued on another engine after theirs stopped serving, and samples generated again."""
    line = (
        f" | continued {m['rollout/samples_continued']} sample(s), {m['rollout/tokens_continued']} tokens"
        if m.get("rollout/samples_continued")
        else ""
    )
    again = {key.split("/")[-1]: m[key] for key in m if key.startswith("rollout/samples_regenerated/") and m[key]}
    return line + (" | regenerated " + ", ".join(f"{n} sample(s) ({why})" for why, n in again.items()) if again else "")


def _synced(m: dict) -> str:
    """The bytes the step's weight sync sent to each engine: the model's, or in a LoRA run the adapter's."""
    if "weight_sync/bytes" not in m:
        return ""
    size = m["weight_sync/bytes"]
    return f" ({size / 1e6:.2f} MB)" if size < 1e9 else f" ({size / 1e9:.2f} GB)"


def _lag(m: dict) -> str:
    """Async mode: how many versions the step's oldest sample is behind the learner, and the groups
    generated again for being over max_staleness."""
    if "staleness/regenerated_groups" not in m:
        return ""
    renewed = m["staleness/regenerated_groups"]
    return f" lag {m['staleness/max']}" + (f" (renewed {renewed} groups)" if renewed else "")


def _filling(m: dict) -> str:
    """Dynamic sampling: groups generated for the step, dropped for equal rewards, extra rounds."""
    if "dynamic_sampling/rounds" not in m:
        return ""
    return (
        f" | groups {m['dynamic_sampling/groups_generated']} dropped {m['dynamic_sampling/groups_filtered']} "
        f"(+{m['dynamic_sampling/rounds']} rounds)"
    )


def _policy_figures(m: dict) -> str:
    """Engines vs learner (mean log-prob gap, mean importance ratio) and the share of tokens whose
    ratio to the old policy TRL's loss clipped (non-zero from a step's second update on)."""
    figures = f"lp-diff {m['sampling/sampling_logp_difference/mean']:.1e}"
    if "sampling/importance_sampling_ratio/mean" in m:
        figures += f" is {m['sampling/importance_sampling_ratio/mean']:.3f}"
    for name in ("clip_ratio/region_mean", "cispo_clip_ratio"):
        if name in m:
            figures += f" clip {100 * m[name]:.1f}%"
    return figures


def _learner_figures(m: dict) -> str:
    """The learner's throughput, micro-batches and padding (and, with several ranks, their imbalance)."""
    if "learner/tokens_per_s" not in m:
        return ""
    ranks = f" ranks {m['learner/rank_imbalance']:.2f}x" if m.get("learner/rank_imbalance", 1.0) != 1.0 else ""
    # The old log-probs' own pass runs only for several updates per round (num_iterations, steps_per_generation).
    old = f"{m['time/old_logps']:.2f}s" if "time/old_logps" in m else "skipped"
    return (
        f"learner {m['learner/tokens_per_s']:.0f} tok/s mb {m['learner/micro_batches']:.0f} "
        f"pad {100 * m['learner/pad_fraction']:.0f}%{ranks} old-lp pass {old} | "
    )
