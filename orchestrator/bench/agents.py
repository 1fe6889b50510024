"""The lookup task two ways, side by side: the engine's own text-tag tool loop (configs/tools/lookup.yaml)
and the same task as an agent through the engines' OpenAI-compatible gateway (configs/agents/lookup.yaml).
Each is a `train` run of its shipped config in a process of its own, for the same number of steps; the
figures are its steady steps' (step 1 pays for first-request set-up)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
WAYS = {"tool loop": CONFIGS / "tools" / "lookup.yaml", "agent": CONFIGS / "agents" / "lookup.yaml"}


def measure(steps: int, out_dir: Path) -> dict:
    """{way: figures} for both ways, and the agent's samples/s as a share of the tool loop's."""
    figures = {way: _run(config, steps, out_dir / way.replace(" ", "-")) for way, config in WAYS.items()}
    figures["agent_vs_tool_loop"] = figures["agent"]["samples_per_s"] / figures["tool loop"]["samples_per_s"]
    return figures


def _run(config: Path, steps: int, out: Path) -> dict:
    if not config.is_file():
        raise FileNotFoundError(f"{config}: bench --only agent runs the repository's shipped configs; run it from a checkout")
    command = [sys.executable, "-m", "orchestrator", "-q", "train", "--config", str(config), f"max_steps={steps}"]
    subprocess.run([*command, f"output_dir={out}", "plot_steps=1000000", "save_steps=0"], check=True)
    steady = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][1:]
    return {
        "samples_per_s": float(np.sum([m["samples"] for m in steady]) / np.sum([m["time/step"] for m in steady])),
        "generate_s": float(np.mean([m["time/generate"] for m in steady])),
        "model_tokens_per_sample": float(np.mean([m["completion_length/mean"] for m in steady])),
        "reward_mean": float(np.mean([m["reward_mean"] for m in steady])),
        "steps": len(steady),
    }


def table(result: dict) -> str:
    rows = ["| way | samples/s | generation s/step | model tokens/sample | reward |", "|---|---|---|---|---|"]
    for way in WAYS:
        r = result[way]
        rows.append(
            f"| {way} | {r['samples_per_s']:.1f} | {r['generate_s']:.2f} | {r['model_tokens_per_sample']:.1f} | {r['reward_mean']:.3f} |"
        )
    rows.append(f"\nagent through the gateway: {result['agent_vs_tool_loop']:.2f}x the tool loop's samples/s")
    return "\n".join(rows)
