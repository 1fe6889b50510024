"""`python -m orchestrator bench`: figures for the Performance section, printed as a table and saved
as JSON. Defaults finish in a few minutes on a 2-core CPU with a ~20M-parameter model built here.

Generation: raw vLLM vs our pool (same engine count) vs HF generate. Training: our loop vs TRL's
GRPOTrainer alone. Weight sync vs a plain memory copy of the same bytes. Orchestration overhead:
the share of step time outside generate, reward, train and sync. `--only sync` measures weight
sync alone (about two minutes) and replaces only the sync figures of an existing `--out` file.
`--only learner-memory` measures the learner's peak memory as the step grows at a fixed
`learner.micro_batch_size` (orchestrator/bench/learner_memory.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
from pathlib import Path

from orchestrator.bench.model import parameter_count
from orchestrator.errors import UserError


def run_bench(args: argparse.Namespace) -> int:
    from transformers import AutoTokenizer

    from orchestrator.bench import generation, training, weight_sync
    from orchestrator.bench.model import bench_model
    from orchestrator.builtin import search_task

    if args.only == "learner-memory":
        return _learner_memory(args)
    model = Path(args.model) if args.model else bench_model()
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = search_task.prompts(args.prompts, seed=0)
    prompt_ids = [tokenizer(p)["input_ids"] for p in prompts]
    n, tokens = args.num_generations, args.max_tokens
    result = {
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}",
        "model": str(model), "parameters": parameter_count(model),
        "work": f"{args.prompts} prompts x {n} generations x {tokens} tokens",
    }
    print(f"bench on {result['machine']}; model {result['parameters'] / 1e6:.1f}M parameters; {result['work']}", flush=True)
    if args.only == "sync":
        result["sync"] = weight_sync.measure(model, args.engines, args.syncs, args.prompts, n, tokens, seed=0)
        print(_table(result))
        out = Path(args.out)
        saved = json.loads(out.read_text()) if out.is_file() else {}
        out.write_text(json.dumps({**saved, **result}, indent=2))
        print(f"saved {args.out}")
        return 0
    result["raw_vllm"] = generation.raw_vllm(model, prompt_ids, n, tokens, seed=0)
    print(f"raw vLLM: {result['raw_vllm']['tokens_per_s']:.0f} tok/s", flush=True)
    result["pool"] = generation.pool(model, tokenizer, prompts, prompt_ids, n, tokens, seed=0, engines=args.engines)
    print(f"our pool: {result['pool']['tokens_per_s']:.0f} tok/s", flush=True)
    result["hf_generate"] = generation.hf_generate(model, prompt_ids, n, tokens, seed=0)
    print(f"HF generate: {result['hf_generate']['tokens_per_s']:.0f} tok/s", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        result["train"] = training.ours(model, args.steps, args.prompts, n, tokens, 0, Path(scratch) / "ours")
        print(f"our train: {result['train']['samples_per_s']:.1f} samples/s", flush=True)
        result["trl"] = training.trl(model, args.steps, args.prompts, n, tokens, 0, Path(scratch) / "trl")
        print(f"TRL GRPOTrainer: {result['trl']['samples_per_s']:.1f} samples/s", flush=True)
    sync = result["train"]
    result["sync"] = {"bytes": sync["sync_bytes"], "seconds": sync["sync_s"], "gb_per_s": sync["sync_bytes"] / sync["sync_s"] / 1e9,
                      "memcpy_gb_per_s": weight_sync.memcpy_gbps(sync["sync_bytes"])}
    print(_table(result))
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"saved {args.out}")
    return 0


def _learner_memory(args: argparse.Namespace) -> int:
    """A smaller Llama than the throughput bench's (4M parameters): a 1024-sample step must finish in a
    minute on 2 cores. Replaces only the learner_memory entry of an existing `--out` file."""
    from orchestrator.bench import learner_memory
    from orchestrator.bench.model import bench_model

    model = Path(args.model) if args.model else bench_model(hidden=256, layers=4)
    sizes = [int(size) for size in args.samples.split(",")]
    bad = [size for size in sizes if size % learner_memory.GENERATIONS or size <= 0]
    if bad:
        raise UserError(f"--samples: {bad[0]} is not a positive multiple of {learner_memory.GENERATIONS} (the group size)")
    machine = f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores, Python {platform.python_version()}"
    print(f"learner memory on {machine}; model {parameter_count(model) / 1e6:.1f}M parameters; "
          f"completions of {args.completion_tokens} tokens; one process per row", flush=True)
    result = learner_memory.measure(model, sizes, args.micro_batch_size, args.completion_tokens)
    result["machine"] = machine
    print(learner_memory.table(result))
    print(f"largest step / smallest step at micro_batch_size {args.micro_batch_size}: {result['largest_vs_smallest']:.2f}x (target <= 1.3x)")
    out = Path(args.out)
    saved = json.loads(out.read_text()) if out.is_file() else {}
    out.write_text(json.dumps({**saved, "learner_memory": result}, indent=2))
    print(f"saved {args.out}")
    return 0


def _table(r: dict) -> str:
    sync = r["sync"]
    rows = [] if "train" not in r else _throughput_rows(r)
    rows.append(
        ("weight sync", f"{sync['bytes'] / 1e6:.1f} MB in {sync['seconds']:.3f}s = {sync['gb_per_s']:.2f} GB/s",
         f"{sync['gb_per_s'] / sync['memcpy_gb_per_s']:.2f}x memcpy ({sync['memcpy_gb_per_s']:.1f} GB/s)")
    )
    width = max(len(a) for a, _, _ in rows)
    lines = [f"| {'what':<{width}} | figure | ratio |", f"|{'-' * (width + 2)}|---|---|"]
    lines += [f"| {a:<{width}} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def _throughput_rows(r: dict) -> list[tuple[str, str, str]]:
    raw, pool, hf, ours, trl = r["raw_vllm"], r["pool"], r["hf_generate"], r["train"], r["trl"]
    return [
        ("generation: raw vLLM (1 process)", f"{raw['tokens_per_s']:.0f} tok/s", ""),
        ("generation: our pool", f"{pool['tokens_per_s']:.0f} tok/s", f"{pool['tokens_per_s'] / raw['tokens_per_s']:.2f}x raw vLLM"),
        ("generation: HF generate", f"{hf['tokens_per_s']:.0f} tok/s", f"{hf['tokens_per_s'] / raw['tokens_per_s']:.2f}x raw vLLM"),
        ("train: ours (steady state)", f"{ours['samples_per_s']:.1f} samples/s", f"{ours['samples_per_s'] / trl['samples_per_s']:.2f}x TRL"),
        ("train: TRL GRPOTrainer alone", f"{trl['samples_per_s']:.1f} samples/s", ""),
        ("train: ours, s/step (gen/reward/train/sync)", f"{ours['step_s']:.2f}",
         " / ".join(f"{ours[p]:.2f}" for p in ("time/generate", "time/reward", "time/train", "time/sync"))),
        ("orchestration overhead", f"{ours['overhead_share'] * 100:.1f}% of step time", ""),
    ]
