"""The learner's peak memory as the step grows (`python -m orchestrator bench --only learner-memory`).

With `learner.max_tokens_per_micro_batch` set, a step of 1024 samples should need about the memory of a
step of 64: only one micro-batch's activations exist at a time, and TRL's fused LM head computes its
log-probs in vocabulary chunks, so not even one micro-batch's whole logits exist. Each step size is
measured in its own fresh process (peaks never mix, and the allocator starts clean): it builds the
learner (`GRPOLearner`, TRL's loss, AdamW) and runs two optimizer steps on a synthetic batch of the
bench prompts with completions of realistic lengths (geometric, mean `mean_length`, at most
`max_length`, seeded). On CPU the figure is the process's peak RSS (`ru_maxrss`: imports, weights,
optimizer state and the steps together); on a GPU it is `torch.cuda.max_memory_allocated`. The
same sizes up to `WHOLE_STEP_UP_TO` samples also run without a token budget, to show what it saves.
Beside each row: what the fp32 logits of its largest micro-batch would take, were they computed whole.

    python -m orchestrator.bench.learner_memory --samples 256 --max-tokens-per-micro-batch 8192 --model DIR   # one size
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

WHOLE_STEP_UP_TO = 256  # a 1024-sample step in one pass would need several GB here
GENERATIONS = 8  # samples per prompt; step sizes are multiples of it


def measure(model: Path, sizes: list[int], budget: int, mean_length: int, max_length: int) -> dict:
    """One fresh process per (size, budget); returns the rows and the acceptance ratio."""
    runs = [(size, budget) for size in sizes] + [(size, None) for size in sizes if size <= WHOLE_STEP_UP_TO]
    rows = []
    for size, tokens in runs:
        row = _child(model, size, tokens, mean_length, max_length)
        rows.append(row)
        print(
            f"learner memory: {size} samples, max_tokens_per_micro_batch {tokens}: peak {row['peak_mb']:.0f} MB, "
            f"{row['micro_batches']:.0f} micro-batch(es) (step {row['step_s']:.1f}s)",
            flush=True,
        )
    split = [row for row in rows if row["max_tokens_per_micro_batch"] == budget]
    base = split[0]["peak_mb"]
    for row in rows:
        row["vs_smallest_split_step"] = row["peak_mb"] / base
    return {
        "model": str(model),
        "vocab_size": split[0]["vocab_size"],
        "max_tokens_per_micro_batch": budget,
        "mean_length": mean_length,
        "max_length": max_length,
        "device": split[0]["device"],
        "rows": rows,
        "largest_vs_smallest": split[-1]["peak_mb"] / base,
    }


def table(result: dict) -> str:
    kind = "peak RSS" if result["device"] == "cpu" else "max_memory_allocated"
    lines = [
        f"| samples per step | tokens | max_tokens_per_micro_batch | micro-batches | {kind} | of which the steps | "
        f"vs {result['rows'][0]['samples']} samples | whole fp32 logits of the largest micro-batch | s/step |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['samples']} | {row['tokens']} | {row['max_tokens_per_micro_batch'] or 'null (whole step)'} | "
            f"{row['micro_batches']:.0f} | {row['peak_mb']:.0f} MB | {row['step_mb']:.0f} MB | "
            f"{row['vs_smallest_split_step']:.2f}x | {row['whole_logits_mb']:.0f} MB | {row['step_s']:.1f} |"
        )
    return "\n".join(lines)


def _child(model: Path, samples: int, budget: int | None, mean_length: int, max_length: int) -> dict:
    command = [sys.executable, "-m", "orchestrator.bench.learner_memory", "--model", str(model), "--samples", str(samples)]
    command += ["--mean-length", str(mean_length), "--max-length", str(max_length)]
    if budget is not None:
        command += ["--max-tokens-per-micro-batch", str(budget)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"learner memory run for {samples} samples failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def step_batch(learner, samples: int, mean_length: int, max_length: int, seed: int = 0) -> dict:
    import numpy as np

    from orchestrator.builtin import search_task
    from orchestrator.rollout.samples import StepSamples
    from orchestrator.training.advantages import group_advantages
    from orchestrator.training.batch import learner_batch

    tokenizer = learner.tokenizer
    rng = np.random.default_rng(seed)
    prompts = [tokenizer(p)["input_ids"] for p in search_task.prompts(samples // GENERATIONS, seed=seed)]
    prompt_ids = [prompt for prompt in prompts for _ in range(GENERATIONS)]
    lengths = np.minimum(rng.geometric(1.0 / mean_length, size=samples), max_length)
    completions = [rng.integers(3, len(tokenizer), size=length).tolist() for length in lengths]
    uniform = -float(np.log(len(tokenizer)))  # behaviour logprobs of a model that knows nothing yet
    step = StepSamples.from_tokens(prompt_ids, completions, [[uniform] * len(c) for c in completions])
    advantages = group_advantages(rng.random(samples), np.arange(samples) // GENERATIONS)
    return learner_batch(step, advantages, tokenizer.pad_token_id)


def _run_one(model: str, samples: int, budget: int | None, mean_length: int, max_length: int) -> dict:
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
        max_completion_length=max_length,
        learning_rate=1e-5,
        max_steps=2,
        learner={"max_tokens_per_micro_batch": budget, "num_gpus": 1 if cuda else 0},
    )
    learner = GRPOLearner(config, model, model)
    batch = step_batch(learner, samples, mean_length, max_length)
    if cuda:
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        before = _current_rss()
    start = time.perf_counter()
    for _ in range(2):  # the first step also allocates AdamW's state
        metrics = learner.train_step(batch)
    step_s = (time.perf_counter() - start) / 2
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    vocab = learner.trainer.accelerator.unwrap_model(learner.model).get_output_embeddings().weight.shape[0]
    tokens = int(batch["prompt_mask"].sum() + batch["completion_mask"].sum())
    longest = int((batch["prompt_mask"].sum(axis=1) + batch["completion_mask"].sum(axis=1)).max())
    largest = tokens if budget is None else min(tokens, max(budget, longest))  # a micro-batch's tokens, at most
    return {
        "samples": samples,
        "tokens": tokens,
        "max_tokens_per_micro_batch": budget,
        "micro_batches": metrics["learner/micro_batches"],
        "vocab_size": vocab,
        "device": "cuda" if cuda else "cpu",
        "peak_mb": peak / 2**20,
        "step_mb": max(0, peak - before) / 2**20,
        "whole_logits_mb": largest * vocab * 4 / 2**20,
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
    parser.add_argument("--max-tokens-per-micro-batch", type=int, help="omit for the whole step in one pass")
    parser.add_argument("--mean-length", type=int, default=100, help="mean completion length")
    parser.add_argument("--max-length", type=int, default=512, help="longest completion")
    args = parser.parse_args()
    print(json.dumps(_run_one(args.model, args.samples, args.max_tokens_per_micro_batch, args.mean_length, args.max_length)))
