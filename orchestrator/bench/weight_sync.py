"""Weight sync against a plain memory copy of the same bytes (`python -m orchestrator bench --only sync`).

The learner and the pool start as in `train` (each engine takes the learner's weights as it is
admitted); then `pool.sync_weights` pushes the weights to every engine a few times, exactly as the
step loop does after each training step, and each sync is timed from the learner's packing to the
last engine's verified checksum. With `lora` (a `lora:` section) the run trains an adapter, and
each sync sends only the adapter, as a LoRA run's steps do.
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
