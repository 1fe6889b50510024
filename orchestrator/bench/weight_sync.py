"""Weight sync against a plain memory copy of the same bytes (`python -m orchestrator bench --only sync`).

The learner and the pool start as in `train` (each engine takes the learner's weights as it is
admitted); then `pool.sync_weights` pushes the weights to every engine a few times, exactly as the
step loop does after each training step, and each sync is timed from the learner's packing to the
last engine's verified checksum. With `lora` (a `lora:` section) the run trains an adapter, and
each sync sends only the adapter, as a LoRA run's steps do. `dense_and_delta` runs two short `train`
runs instead, so that each sync carries a step's change: the whole model against its patches.
"""

from __future__ import annotations

import time
from pathlib import Path


def measure(
    model: Path, engines: int, syncs: int, prompts_per_step: int, n: int, max_tokens: int, seed: int, lora: dict | None = None
) -> dict:
    from orchestrator.config.train import TrainConfig
    from orchestrator.launch import canonical_tokenizer, start_training

    config = TrainConfig(
        model=str(model),
        tokenizer=str(model),
        prompts_per_step=prompts_per_step,
        num_generations=n,
        max_completion_length=max_tokens,
        seed=seed,
        rollout={"engines": engines},
        lora=lora,
    )
    parts = start_training(config, str(model), canonical_tokenizer(config, str(model)))
    try:
        reports = []
        for _ in range(syncs):
            parts.weights.version += 1
            reports.append(parts.pool.sync_weights(parts.weights))
    finally:
        parts.shutdown()
    seconds = [report.seconds for report in reports]
    nbytes = reports[-1].bytes
    mean = sum(seconds) / len(seconds)
    return {
        "bytes": nbytes,
        "engines": engines,
        "seconds": mean,
        "seconds_each": seconds,
        "gb_per_s": nbytes / mean / 1e9,
        "memcpy_gb_per_s": memcpy_gbps(nbytes),
        **({"lora_r": config.lora.r} if lora is not None else {}),
    }


def dense_and_delta(model: Path, engines: int, steps: int, prompts_per_step: int, n: int, max_tokens: int, out_dir: Path) -> dict:
    """Whole-model and delta sync side by side: two short `train` runs of bfloat16 engines at TRL's
    learning rate (1e-6), `weight_sync.delta` off and on, so that every sync carries one optimizer
    step's change. Means per sync after the first (the delta run's anchor): its bytes, its seconds and,
    for the delta run, the share of the model's elements sent."""
    from orchestrator.bench import training

    runs = {}
    for delta in ("off", "on"):
        figures = training.ours(
            model,
            steps,
            prompts_per_step,
            n,
            max_tokens,
            seed=0,
            out_dir=out_dir / f"delta-{delta}",
            rollout={"engines": engines, "dtype": "bfloat16"},
            settings={"weight_sync": {"delta": delta}, "learning_rate": 1e-6},
        )
        runs[delta] = {
            "bytes": figures["sync_bytes_mean"],
            "model_bytes": figures["sync_model_bytes"],
            "seconds": figures["sync_s"],
            "density": figures.get("weight_sync/density", 1.0),
        }
    return {"dense": runs["off"], "delta": runs["on"], "steps": steps, "engines": engines}


def memcpy_gbps(nbytes: int, repeats: int = 20) -> float:
    """The best of `repeats` copies into memory already mapped: on a shared machine the best one is
    the copy that nothing else slowed down."""
    import torch

    source = torch.ones(nbytes, dtype=torch.uint8)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9
