"""A real model's size on this node (`python -m orchestrator bench --only real-size`): Qwen2.5-0.5B's
architecture at full size (494M parameters, random weights built locally: orchestrator/bench/model.py)
trains a few steps of 2 prompts x 4 samples x 16 tokens (`rollout.max_model_len` 512,
`learner.micro_batch_size` 4) while the node's memory is sampled (orchestrator/bench/node_memory.py).
Twice: with the engines' CPU default (float32 weights, as the learner's) and with bfloat16 engines,
as on GPUs (the weights then travel as bfloat16), each in a fresh process: a process that ran Ray
keeps the object store's pages mapped after Ray shuts down. Prints, for each, the node's peak with
what held it, each component's own peak, and the weight sync's time.

    python -m orchestrator.bench.real_size --model DIR --steps 3 --engine-dtype bfloat16 --out F   # one run
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
ENGINE_DTYPES = ("auto", "bfloat16")  # rollout.dtype: auto is float32 on CPU
RUN_TIMEOUT_S = 1800  # one run takes about 3 minutes on 2 cores


def measure(model: Path, steps: int, engine_dtype: str) -> dict:
    """One run in a fresh process (its step lines print as it goes)."""
    with tempfile.TemporaryDirectory(prefix="bench-real-size-") as scratch:
        out = Path(scratch) / "result.json"
        command = [sys.executable, "-m", "orchestrator.bench.real_size", "--model", str(model), "--steps", str(steps)]
        child = subprocess.Popen(command + ["--engine-dtype", engine_dtype, "--out", str(out)])
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
                f"the real-size run with rollout.dtype {engine_dtype} did not end within {RUN_TIMEOUT_S}s"
            ) from None
        if returncode != 0 or not out.is_file():
            raise RuntimeError(f"the real-size run with rollout.dtype {engine_dtype} failed (exit code {returncode})")
        return json.loads(out.read_text())


def _run_here(model: Path, steps: int, engine_dtype: str) -> dict:
    from orchestrator.bench import training

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
        )
    return {
        "model": str(model),
        "rollout.dtype": engine_dtype,
        "steps": steps,
        "memory": memory.report(),
        "sync_bytes": run["sync_bytes"],
        "sync_s": run["sync_s"],
        "sync_gb_per_s": run["sync_bytes"] / run["sync_s"] / 1e9,
        "step_s": run["step_s"],
        "time/learner_step": run["time/learner_step"],
    }


def table(result: dict) -> str:
    memory = result["memory"]
    engines = "float32 engines (rollout.dtype auto)" if result["rollout.dtype"] == "auto" else "bfloat16 engines"
    lines = [f"{engines}:", "| component | at the node's peak, GB | its own peak, GB |", "|---|---|---|"]
    for name in node_memory.COMPONENTS:
        lines.append(f"| {name} | {memory['at_peak_gb'][name]:.2f} | {memory['own_peak_gb'][name]:.2f} |")
    lines.append(f"| **node** (before the run: {memory['baseline_gb']:.2f}) | **{memory['node_gb']:.2f}** | |")
    lines.append(
        f"weight sync: {result['sync_bytes'] / 1e9:.2f} GB in {result['sync_s']:.2f} s = {result['sync_gb_per_s']:.2f} GB/s; "
        f"step {result['step_s']:.1f} s (learner {result['time/learner_step']:.1f} s)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="One real-size run; writes its figures as JSON to --out.")
    parser.add_argument("--model", required=True, help="model folder (with its tokenizer)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--engine-dtype", choices=ENGINE_DTYPES, default="auto", help="rollout.dtype")
    parser.add_argument("--out", required=True, help="where the JSON goes")
    args = parser.parse_args()
    Path(args.out).write_text(json.dumps(_run_here(Path(args.model), args.steps, args.engine_dtype)))
