"""A real model's size on this node (`python -m orchestrator bench --only real-size`): Qwen2.5-0.5B's
architecture at full size (494M parameters, random weights built locally: orchestrator/bench/model.py)
trains a few steps of 2 prompts x 4 samples x 16 tokens (`rollout.max_model_len` 512,
`learner.micro_batch_size` 4, TRL's learning rate 1e-6; rewarded by `even_tokens`, so that every
step changes the weights) while the node's memory is sampled (orchestrator/bench/node_memory.py).
Three times: with the engines' CPU default (float32 weights, as the learner's), with bfloat16
engines, as on GPUs (the weights then travel as bfloat16), and with bfloat16 engines synced by
patches (`weight_sync.delta: on`: after the engines' first weights, only the elements that changed
travel), each in a fresh process: a process that ran Ray keeps the object store's pages mapped after
Ray shuts down. Prints, for each, the node's peak with what held it, each component's own peak, and
the weight sync's bytes and time after the first step, against a memory copy of the model the
engines hold.

    python -m orchestrator.bench.real_size --model DIR --steps 3 --engine-dtype bfloat16 --delta on --out F   # one run
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from orchestrator.bench import node_memory

PROMPTS, GENERATIONS, TOKENS, MAX_MODEL_LEN, MICRO_BATCH = 2, 4, 16, 512, 4
VARIANTS = (("auto", "off"), ("bfloat16", "off"), ("bfloat16", "on"))  # rollout.dtype (auto: float32 on CPU), weight_sync.delta
LEARNING_RATE = 1e-6  # TRL's GRPO default: the share of bfloat16 weights a step changes depends on it
RUN_TIMEOUT_S = 1800  # one run takes about 3 minutes on 2 cores


def measure(model: Path, steps: int, engine_dtype: str, delta: str = "off") -> dict:
    """One run in a fresh process (its step lines print as it goes)."""
    with tempfile.TemporaryDirectory(prefix="bench-real-size-") as scratch:
        out = Path(scratch) / "result.json"
        command = [sys.executable, "-m", "orchestrator.bench.real_size", "--model", str(model), "--steps", str(steps)]
        child = subprocess.Popen(command + ["--engine-dtype", engine_dtype, "--delta", delta, "--out", str(out)])
        try:
            returncode = child.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.terminate()  # the run stops as on SIGTERM, its Ray cluster with it
            try:
                child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
            raise RuntimeError(
                f"the real-size run with rollout.dtype {engine_dtype}, delta {delta} did not end within {RUN_TIMEOUT_S}s"
            ) from None
        if returncode != 0 or not out.is_file():
            raise RuntimeError(
                f"the real-size run with rollout.dtype {engine_dtype}, delta {delta} failed (exit code {returncode})"
            )
        return json.loads(out.read_text())


def _run_here(model: Path, steps: int, engine_dtype: str, delta: str) -> dict:
    from orchestrator.bench import training
    from orchestrator.bench.weight_sync import memcpy_gbps

    with tempfile.TemporaryDirectory(prefix="bench-real-size-") as scratch, node_memory.NodeMemory() as memory:
        run = training.ours(
            model,
            steps,
            PROMPTS,
            GENERATIONS,
            TOKENS,
            seed=0,
            out_dir=Path(scratch) / "run",
            learner={"micro_batch_size": MICRO_BATCH},
            rollout={"max_model_len": MAX_MODEL_LEN, "dtype": engine_dtype},
            settings={
                "weight_sync": {"delta": delta},
                "reward_funcs": ["orchestrator.bench.real_size:even_tokens"],
                "learning_rate": LEARNING_RATE,
            },
        )
    model_bytes = run["sync_model_bytes"]
    return {
        "model": str(model),
        "rollout.dtype": engine_dtype,
        "weight_sync.delta": delta,
        "model_bytes": model_bytes,  # the weights as the engines hold them
        "memcpy_gb_per_s": memcpy_gbps(model_bytes),
        "steps": steps,
        "memory": memory.report(),
        "sync_bytes": run["sync_bytes"],
        "sync_s": run["sync_s"],
        "sync_gb_per_s": run["sync_bytes"] / run["sync_s"] / 1e9,
        "sync_model_gb_per_s": model_bytes / run["sync_s"] / 1e9,  # the model's size over the time to sync it
        "sync_density": run.get("weight_sync/density", 1.0),
        "step_s": run["step_s"],
        "time/learner_step": run["time/learner_step"],
    }


def even_tokens(prompts: list[str], completions: list[str], completion_ids: list[list[int]], **kwargs) -> list[float]:
    """The share of a completion's token ids that are even: the random model's samples differ in it, so
    every step has advantages, gradients and weights that change (the task's own reward is 0 for all)."""
    return [sum(1 - token % 2 for token in ids) / max(1, len(ids)) for ids in completion_ids]


def table(result: dict) -> str:
    memory = result["memory"]
    engines = "float32 engines (rollout.dtype auto)" if result["rollout.dtype"] == "auto" else "bfloat16 engines"
    if result.get("weight_sync.delta") == "on":
        engines += ", weight_sync.delta on"
    lines = [f"{engines}:", "| component | at the node's peak, GB | its own peak, GB |", "|---|---|---|"]
    for name in node_memory.COMPONENTS:
        lines.append(f"| {name} | {memory['at_peak_gb'][name]:.2f} | {memory['own_peak_gb'][name]:.2f} |")
    lines.append(f"| **node** (before the run: {memory['baseline_gb']:.2f}) | **{memory['node_gb']:.2f}** | |")
    lines.append(f"{sync_line(result)}; step {result['step_s']:.1f} s (learner {result['time/learner_step']:.1f} s)")
    return "\n".join(lines)


def sync_line(result: dict) -> str:
    """A step's weight sync: bytes sent, time, the model's size over that time, against a memory copy of it."""
    model_gbps, memcpy = result["sync_model_gb_per_s"], result["memcpy_gb_per_s"]
    return (
        f"weight sync: {result['sync_bytes'] / 1e6:,.1f} MB sent (density {result['sync_density']:.4f}) in "
        f"{result['sync_s']:.3f} s: the model's {result['model_bytes'] / 1e9:.2f} GB at {model_gbps:.2f} GB/s, "
        f"{model_gbps / memcpy:.0%} of a memory copy ({memcpy:.1f} GB/s)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="One real-size run; writes its figures as JSON to --out.")
    parser.add_argument("--model", required=True, help="model folder (with its tokenizer)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--engine-dtype", choices=("auto", "bfloat16"), default="auto", help="rollout.dtype")
    parser.add_argument("--delta", choices=("on", "off"), default="off", help="weight_sync.delta")
    parser.add_argument("--out", required=True, help="where the JSON goes")
    args = parser.parse_args()
    Path(args.out).write_text(json.dumps(_run_here(Path(args.model), args.steps, args.engine_dtype, args.delta)))
