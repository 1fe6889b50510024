"""The learner's peak memory as the step grows (`python -m orchestrator bench --only learner-memory`).

With `learner.micro_batch_size` set, a step of 1024 samples should need about the memory of a step
of 64: only one micro-batch's activations and logits exist at a time. Each step size is measured in
its own fresh process (peaks never mix, and the allocator starts clean): it builds the learner
(`GRPOLearner`, TRL's loss, AdamW) and runs two optimizer steps on a synthetic batch of the bench
prompts with completions of a fixed length. On CPU the figure is the process's peak RSS
(`ru_maxrss`: imports, weights, optimizer state and the step together); on a GPU it is
`torch.cuda.max_memory_allocated`. The same sizes up to `WHOLE_STEP_UP_TO` samples also run without
micro-batches, to show what they save.

    python -m orchestrator.bench.learner_memory --samples 256 --micro-batch-size 16 --model DIR   # one size
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

WHOLE_STEP_UP_TO = 256  # a 1024-sample step without micro-batches would need several GB here
GENERATIONS = 8  # samples per prompt; step sizes are multiples of it


def measure(model: Path, sizes: list[int], micro_batch_size: int, completion_tokens: int) -> dict:
    """One fresh process per (size, micro_batch_size); returns the rows and the acceptance ratio."""
    runs = [(size, micro_batch_size) for size in sizes]
    runs += [(size, None) for size in sizes if size <= WHOLE_STEP_UP_TO]
    rows = []
    for size, micro in runs:
        row = _child(model, size, micro, completion_tokens)
        rows.append(row)
        print(
            f"learner memory: {size} samples, micro_batch_size {micro}: peak {row['peak_mb']:.0f} MB (step {row['step_s']:.1f}s)",
            flush=True,
        )
    split = [row for row in rows if row["micro_batch_size"] == micro_batch_size]
    base = split[0]["peak_mb"]
    for row in rows:
        row["vs_smallest_split_step"] = row["peak_mb"] / base
    return {
        "model": str(model),
        "micro_batch_size": micro_batch_size,
        "completion_tokens": completion_tokens,
        "device": split[0]["device"],
        "rows": rows,
        "largest_vs_smallest": split[-1]["peak_mb"] / base,
    }


def table(result: dict) -> str:
    kind = "peak RSS" if result["device"] == "cpu" else "max_memory_allocated"
    lines = [
        f"| samples per step | micro_batch_size | {kind} | of which the steps | vs {result['rows'][0]['samples']} samples | s/step |",
        "|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['samples']} | {row['micro_batch_size'] or 'null (whole step)'} | {row['peak_mb']:.0f} MB | "
            f"{row['step_mb']:.0f} MB | {row['vs_smallest_split_step']:.2f}x | {row['step_s']:.1f} |"
        )
    return "\n".join(lines)


def _child(model: Path, samples: int, micro_batch_size: int | None, completion_tokens: int) -> dict:
    command = [
        sys.executable,
        "-m",
        "orchestrator.bench.learner_memory",
        "--model",
        str(model),
        "--samples",
        str(samples),
        "--completion-tokens",
        str(completion_tokens),
    ]
    if micro_batch_size is not None:
        command += ["--micro-batch-size", str(micro_batch_size)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"learner memory run for {samples} samples failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _batch(learner, samples: int, completion_tokens: int, seed: int = 0) -> dict:
    import numpy as np

    from orchestrator.builtin import search_task
    from orchestrator.rollout.samples import StepSamples
    from orchestrator.training.advantages import group_advantages
    from orchestrator.training.batch import learner_batch

    tokenizer = learner.tokenizer
    rng = np.random.default_rng(seed)
    prompts = [tokenizer(p)["input_ids"] for p in search_task.prompts(samples // GENERATIONS, seed=seed)]
    prompt_ids = [prompt for prompt in prompts for _ in range(GENERATIONS)]
    completions = rng.integers(3, len(tokenizer), size=(samples, completion_tokens)).tolist()
    uniform = -float(np.log(len(tokenizer)))  # behaviour logprobs of a model that knows nothing yet
    step = StepSamples.from_tokens(prompt_ids, completions, [[uniform] * completion_tokens] * samples)
    advantages = group_advantages(rng.random(samples), np.arange(samples) // GENERATIONS)
    return learner_batch(step, advantages, tokenizer.pad_token_id)


def _run_one(model: str, samples: int, micro_batch_size: int | None, completion_tokens: int) -> dict:
    """In this process: build the learner, run two steps, report the peaks."""
    import resource
    import time

    import torch

    from orchestrator.config.train import TrainConfig
    from workers.learner.grpo import GRPOLearner

    cuda = torch.cuda.is_available()
    config = TrainConfig(
        model=model,
        tokenizer=model,
        prompts_per_step=samples // GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=completion_tokens,
        learning_rate=1e-5,
        max_steps=2,
        learner={"micro_batch_size": micro_batch_size, "num_gpus": 1 if cuda else 0},
    )
    learner = GRPOLearner(config, model, model)
    batch = _batch(learner, samples, completion_tokens)
    if cuda:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        before = _current_rss()
    start = time.perf_counter()
    for _ in range(2):  # the first step also allocates AdamW's state
        learner.train_step(batch)
    step_s = (time.perf_counter() - start) / 2
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "samples": samples,
        "micro_batch_size": micro_batch_size,
        "device": "cuda" if cuda else "cpu",
        "peak_mb": peak / 2**20,
        "step_mb": max(0, peak - before) / 2**20,
        "step_s": step_s,
    }


def _current_rss() -> int:
    import os

    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="One learner-memory measurement; prints one JSON line.")
    parser.add_argument("--model", required=True, help="model folder (with its tokenizer)")
    parser.add_argument("--samples", type=int, required=True, help=f"samples per step (a multiple of {GENERATIONS})")
    parser.add_argument("--micro-batch-size", type=int, help="omit for the whole step in one pass")
    parser.add_argument("--completion-tokens", type=int, default=64)
    args = parser.parse_args()
    print(json.dumps(_run_one(args.model, args.samples, args.micro_batch_size, args.completion_tokens)))
