"""`python -m orchestrator report RUN_DIR`: a run's figures as a Markdown table (for READMEs and notes).

Every figure comes from the run's metrics.jsonl, so a table in the docs is regenerated, never typed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from orchestrator import machine
from orchestrator.contracts.errors import UserError
from orchestrator.training.plots import PHASES as STEP_PHASES

PHASES = (*STEP_PHASES, "time/step")


def run_report(args: argparse.Namespace) -> int:
    from orchestrator.training.metrics import read_metrics

    path = Path(args.run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise UserError(f"{path} does not exist (expected the output_dir of a train run)")
    print(report(read_metrics(path)))
    return 0


def report(metrics: list[dict]) -> str:
    steady = metrics[1:] or metrics  # step 1 pays for first-request set-up
    window = max(1, len(metrics) // 5)
    first, last = metrics[:window], metrics[-window:]
    lines = [
        f"| steps | reward, first {window} steps | reward, last {window} steps | samples/step | steady samples/s |",
        "|---|---|---|---|---|",
        f"| {len(metrics)} | {np.mean([m['reward_mean'] for m in first]):.3f} | "
        f"{np.mean([m['reward_mean'] for m in last]):.3f} | {metrics[-1]['samples']} | "
        f"{np.mean([m['samples_per_s'] for m in steady]):.1f} |",
        "",
        "| phase (steady state, mean s/step) | " + " | ".join(p.removeprefix("time/") for p in PHASES) + " |",
        "|---|" + "---|" * len(PHASES),
        "| | " + " | ".join(f"{np.mean([m[p] for m in steady]):.3f}" for p in PHASES) + " |",
        "",
        f"{_sampling_line(metrics)}; machine: {machine.describe()}",
    ]
    if "dynamic_sampling/rounds" in metrics[0]:
        lines += ["", _filling_line(metrics)]
    if "staleness/regenerated_groups" in metrics[0]:
        lines += ["", _staleness_line(metrics)]
    if "tools/calls" in metrics[0]:
        lines += ["", _tool_line(metrics, steady)]
    if "agent/errors" in metrics[0]:
        lines += ["", _agent_line(metrics)]
    evaluated = [m for m in metrics if "eval/reward_mean" in m]
    if evaluated:
        lines += ["", *_eval_table(evaluated)]
    return "\n".join(lines)


def _sampling_line(metrics: list[dict]) -> str:
    """Engines vs learner over the run: the log-prob gap, the KL estimate and the correction's ratios
    (over the steps that logged them: a step with no loss token has no ratio)."""

    def values(name: str) -> list[float]:
        return [m[name] for m in metrics if m.get(name) is not None]

    gap = values("sampling/sampling_logp_difference/mean")
    if not gap:
        return "engines vs learner: not logged"
    line = (
        f"engines vs learner: log-prob gap mean {np.mean(gap):.1e}, "
        f"max {max(values('sampling/sampling_logp_difference/max')):.1e}; "
        f"`sampling/kl` mean {np.mean(values('sampling/kl')):.1e}"
    )
    ratios = values("sampling/importance_sampling_ratio/mean")
    if ratios:
        line += (
            f"; importance-sampling ratio min {min(values('sampling/importance_sampling_ratio/min')):.3f}, "
            f"mean {np.mean(ratios):.4f}, max {max(values('sampling/importance_sampling_ratio/max')):.3f}"
        )
    else:
        line += "; no importance-sampling correction"
    return line


def _filling_line(metrics: list[dict]) -> str:
    generated = sum(m["dynamic_sampling/groups_generated"] for m in metrics)
    return (
        f"dynamic sampling: {generated} groups generated, {sum(m['dynamic_sampling/groups_filtered'] for m in metrics)} "
        f"dropped for equal rewards, {sum(m['dynamic_sampling/groups_surplus'] for m in metrics)} surplus; "
        f"{sum(m['dynamic_sampling/rounds'] for m in metrics)} extra rounds; "
        f"{sum(m['dynamic_sampling/short_steps'] for m in metrics)} steps short of prompts_per_step"
    )


def _staleness_line(metrics: list[dict]) -> str:
    """Async mode: how far behind the learner the trained samples were."""
    return (
        f"async: staleness max {max(m['staleness/max'] for m in metrics)}, "
        f"mean {np.mean([m['staleness/mean'] for m in metrics]):.2f} policy versions; "
        f"{sum(m['staleness/regenerated_groups'] for m in metrics)} groups generated again for max_staleness"
    )


def _eval_table(evaluated: list[dict]) -> list[str]:
    """Held-out evaluation rounds (training/evaluation.py), one row each."""
    passes = sorted({key for m in evaluated for key in m if key.startswith("eval/pass@")}, key=lambda k: int(k.split("@")[1]))
    lines = [
        "| eval after step | reward | "
        + " | ".join(p.removeprefix("eval/") for p in passes)
        + " | completion length | samples |",
        "|---|---|" + "---|" * len(passes) + "---|---|",
    ]
    for m in evaluated:
        cells = " | ".join(f"{m[p]:.3f}" for p in passes)
        lines.append(
            f"| {m['step']} | {m['eval/reward_mean']:.3f} | {cells} | {m['eval/completion_length']:.1f} | {m['eval/samples']} |"
        )
    return lines


def _agent_line(metrics: list[dict]) -> str:
    return (
        f"agent: model calls per session {metrics[0]['agent/calls_mean']:.2f} (step {metrics[0]['step']}) -> "
        f"{metrics[-1]['agent/calls_mean']:.2f} "
        f"(step {metrics[-1]['step']}); {sum(m['agent/errors'] for m in metrics)} failed sessions, "
        f"{sum(m['agent/prefix_mismatches'] for m in metrics)} calls that rewrote the history"
    )


def _tool_line(metrics: list[dict], steady: list[dict]) -> str:
    calls = sum(m["tools/calls"] for m in metrics)
    return (
        f"tools: {calls} calls ({np.mean([m['tools/calls'] for m in metrics]):.1f}/step), "
        f"{sum(m['tools/errors'] for m in metrics)} errors, {sum(m['tools/timeouts'] for m in metrics)} timeouts, "
        f"mean latency {np.mean([m['tools/latency_mean_s'] for m in steady]) * 1e3:.0f} ms (steady); "
        f"turns per sample {metrics[0]['turns/mean']:.2f} (step 1) -> {metrics[-1]['turns/mean']:.2f} (step {metrics[-1]['step']})"
    )
