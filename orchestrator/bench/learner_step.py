"""The learner alone at a real model's size, on this machine's GPU (or CPU): no engines, no Ray.

    python -m orchestrator.bench.learner_step --samples 64 [--bf16] [--lora] [--model DIR]

Builds the learner (`GRPOLearner`: TRL's loss, AdamW) on Qwen2.5-0.5B's architecture with random
weights (orchestrator/bench/model.py; `--model` for another folder), runs four optimizer steps on a
synthetic batch of `--samples` completions of realistic lengths (learner_memory.step_batch), and
prints one JSON line: each step's seconds, tokens per second after the first step, and the peak
`torch.cuda.max_memory_allocated` (GPU only). A second line times the learner's side of an
object-store weight sync (the weights cast to bfloat16 and packed into host buckets, as
`Publication` hands them out) against a device-to-device copy of the same bytes, the floor of any
sync on one GPU. With `--lora` both cover the adapter only, as a LoRA run's syncs do. With `--delta`,
three more steps each followed by the learner's side of a delta sync to bfloat16 engines
(workers/weights/delta.py): the share of elements and the bytes a patch sends, the time of
`DeltaEncoder.encode` (on a GPU the patch is computed there) and of its checksum, against the same
patch computed from the weights copied to host memory first.

This is how the learner's GPU figures in docs/deploy/gpu-sizing.md were measured on a machine that
has torch and CUDA but neither vLLM nor Ray.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from pathlib import Path

STEPS = 4  # the first also allocates AdamW's state and warms the kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=64, help="completions per step (a multiple of 8)")
    parser.add_argument("--bf16", action="store_true", help="learner.bf16: mixed-precision training (GPU only)")
    parser.add_argument("--lora", action="store_true", help="train a rank-16 LoRA adapter instead of every weight")
    parser.add_argument("--model", help="model folder (default: Qwen2.5-0.5B's architecture, random weights)")
    parser.add_argument("--learning-rate", type=float, default=1e-5, help="AdamW's learning rate")
    parser.add_argument("--delta", action="store_true", help="three more steps, each timing a delta sync's learner side")
    args = parser.parse_args()
    learner, batch = _learner(args)
    print(json.dumps(_steps(learner, batch, args)), flush=True)
    print(json.dumps(_sync(learner, adapter_only=args.lora)), flush=True)
    if args.delta and not args.lora:
        for figures in _delta_syncs(learner, batch):
            print(json.dumps(figures), flush=True)


def _learner(args: argparse.Namespace):
    import torch

    from orchestrator.bench.learner_memory import GENERATIONS, step_batch
    from orchestrator.bench.model import real_size_model
    from orchestrator.config.train import TrainConfig
    from workers.learner.grpo import GRPOLearner

    model = args.model or str(real_size_model())
    config = TrainConfig(
        model=model,
        tokenizer=model,
        prompts_per_step=args.samples // GENERATIONS,
        num_generations=GENERATIONS,
        max_completion_length=512,
        learning_rate=args.learning_rate,
        max_steps=STEPS,
        learner={"num_gpus": int(torch.cuda.is_available()), "bf16": args.bf16},
        lora={"r": 16, "lora_alpha": 32} if args.lora else None,
    )
    learner = GRPOLearner(config, model, model)
    return learner, step_batch(learner, args.samples, mean_length=100, max_length=512)


def _steps(learner, batch: dict, args: argparse.Namespace) -> dict:
    import torch

    from orchestrator.bench.model import parameter_count

    cuda = learner.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    seconds = []
    for _ in range(STEPS):
        began = time.perf_counter()
        metrics = learner.train_step(batch)
        if cuda:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - began)
    tokens = int(batch["prompt_mask"].sum() + batch["completion_mask"].sum())
    return {
        "what": "learner step",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "parameters": parameter_count(Path(learner.config.model)),
        "samples": args.samples,
        "tokens": tokens,
        "bf16": args.bf16,
        "lora": args.lora,
        "packed": learner.packed,
        "step_s": [round(s, 3) for s in seconds],
        "tokens_per_s_after_first": round(tokens * (STEPS - 1) / sum(seconds[1:]), 1),
        "peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 3) if cuda else None,
        "loss": metrics["loss"],
    }


def _sync(learner, adapter_only: bool) -> dict:
    import torch

    from workers.weights.buckets import DEFAULT_BUCKET_BYTES, BucketBuffer, fill, groups

    weights = list(learner.named_weights(adapter_only=adapter_only))
    nbytes = sum(tensor.numel() * 2 for _, tensor in weights)  # as bfloat16
    buffer, packs = BucketBuffer(), []
    for _ in range(3):
        began = time.perf_counter()
        for group in groups(weights, DEFAULT_BUCKET_BYTES, "bfloat16"):
            fill(group, "bfloat16", buffer)
        packs.append(time.perf_counter() - began)
    flat = torch.cat([tensor.detach().reshape(-1).to(torch.bfloat16) for _, tensor in weights])
    target, copies = torch.empty_like(flat), []
    for _ in range(10):
        _synchronize()
        began = time.perf_counter()
        target.copy_(flat)
        _synchronize()
        copies.append(time.perf_counter() - began)
    return {
        "what": "weight sync, learner side",
        "bf16_bytes": nbytes,
        "pack_to_host_s": round(min(packs), 4),
        "pack_to_host_gb_per_s": round(nbytes / min(packs) / 1e9, 2),
        "copy_on_device_s": round(min(copies), 5),
        "copy_on_device_gb_per_s": round(nbytes / min(copies) / 1e9, 1),
    }


def _delta_syncs(learner, batch: dict) -> Iterator[dict]:
    """After each of three more optimizer steps, the learner's side of a delta sync to bfloat16 engines:
    `DeltaEncoder.encode` on the learner's weights (on a GPU: the patch computed there), its checksum,
    and the same patch from the weights copied to host memory first (where there is no GPU twin)."""
    from workers.weights.delta import DeltaEncoder, full_checksum

    encoder, from_host = DeltaEncoder("bfloat16"), DeltaEncoder("bfloat16")
    encoder.anchor(learner.named_weights(), 0)
    from_host.anchor(((name, tensor.cpu()) for name, tensor in learner.named_weights()), 0)
    for version in range(1, 4):
        learner.train_step(batch)
        (manifest, wire), encode_s = _timed(encoder.encode, learner.named_weights(), version)
        _, checksum_s = _timed(full_checksum, encoder.weights, encoder.weights)
        (same, _), host_s = _timed(from_host.encode, ((n, t.cpu()) for n, t in learner.named_weights()), version)
        yield {
            "what": "delta weight sync, learner side",
            "version": version,
            "density": round(manifest.density, 5),
            "model_bytes": manifest.nbytes,
            "wire_bytes": sum(tensor.numel() * tensor.element_size() for _, tensor in wire),
            "same_patch_from_host": same == manifest,
            "encode_s": round(encode_s, 4),
            "of_which_checksum_s": round(checksum_s, 4),
            "encode_from_host_s": round(host_s, 4),
        }


def _timed(work, *args):
    """(what `work(*args)` returns, its seconds), the GPU's queue drained on both sides."""
    _synchronize()
    began = time.perf_counter()
    result = work(*args)
    _synchronize()
    return result, time.perf_counter() - began


def _synchronize() -> None:
    """Wait for the GPU's queued work, if there is a GPU."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
