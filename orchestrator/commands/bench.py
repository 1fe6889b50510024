"""`python -m orchestrator bench`: figures for the Performance section, printed as a table and saved
as JSON. Defaults finish in a few minutes on a 2-core CPU with a ~20M-parameter model built here.

Two cases, each measured the same way: `fixed` (every sample exactly `--max-tokens` long, EOS
ignored: HF generate's best case) and `realistic` (samples end at EOS, mean about `--mean-length`,
at most `--realistic-max-tokens`: where continuous batching counts). Generation: raw vLLM vs our
pool (same engine count) vs HF generate. Training: our loop vs TRL's GRPOTrainer alone. Weight
sync vs a plain memory copy of the same bytes. Orchestration overhead:
the share of step time outside generate, reward, train and sync. `--only sync` measures weight
sync alone, of the whole model and of a LoRA run's adapter (r=16 on every linear layer) on the
same model, then a step's whole-model sync beside its patch (`weight_sync.delta`, in two short `train`
runs of bfloat16 engines; about 12 minutes in all), and replaces only the sync figures of an existing
`--out` file.
`--only learner-memory` measures the learner's peak memory as the step grows at a fixed
`learner.max_tokens_per_micro_batch`, with a small and a 152k-token vocabulary
(orchestrator/bench/learner_memory.py). `--only correction` times the learner's step without and
with the engine correction (orchestrator/bench/correction.py). `--only real-size` trains Qwen2.5-0.5B's
architecture at full size and prints the node's memory peak by component and the sync's speed
(orchestrator/bench/real_size.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

from orchestrator.bench.model import parameter_count
from orchestrator.contracts.errors import UserError
from orchestrator.machine import describe as describe_machine


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    model: Path
    max_tokens: int
    ignore_eos: bool  # True: every sample is exactly max_tokens long; False: samples end at EOS


def run_bench(args: argparse.Namespace) -> int:
    from orchestrator.bench import weight_sync
    from orchestrator.bench.model import bench_model

    if args.only == "learner-memory":
        return _learner_memory(args)
    if args.only == "correction":
        return _correction(args)
    if args.only == "real-size":
        return _real_size(args)
    if args.only == "agent":
        return _agent(args)
    if args.only == "kv-cache":
        return _kv_cache(args)
    if args.only == "progress-reports":
        return _progress_reports(args)
    model = Path(args.model) if args.model else bench_model()
    cases = [Case("fixed", model, args.max_tokens, ignore_eos=True)]
    if not args.model:  # the stop-at-EOS variant of the built-in model
        cases.append(Case("realistic", bench_model(mean_length=args.mean_length), args.realistic_max_tokens, ignore_eos=False))
    cases = [case for case in cases if args.case in ("both", case.name)]
    result = {
        "machine": describe_machine(),
        "model": str(model),
        "parameters": parameter_count(model),
        "prompts": args.prompts,
        "num_generations": args.num_generations,
    }
    print(
        f"bench on {result['machine']}; model {result['parameters'] / 1e6:.1f}M parameters; "
        f"{args.prompts} prompts x {args.num_generations} generations",
        flush=True,
    )
    if args.only == "sync":
        work = (model, args.engines, args.syncs, args.prompts, args.num_generations, args.max_tokens)
        result["sync"] = weight_sync.measure(*work, seed=0)
        result["sync_lora"] = weight_sync.measure(*work, seed=0, lora={"r": 16})  # a LoRA run's step: the adapter
        with tempfile.TemporaryDirectory() as runs:  # a step's change in each sync: dense against delta
            result["sync_delta"] = weight_sync.dense_and_delta(*work[:2], args.syncs + 1, *work[3:], Path(runs))
        print(_table(result))
        _save(args.out, result)
        return 0
    if args.only == "generation":
        result["generation"] = {case.name: _measure(case, args) for case in cases}
        print(_generation_table(result["generation"]))
        _save(args.out, result)
        return 0
    result["cases"] = {case.name: _measure(case, args) for case in cases}
    train = next(iter(result["cases"].values()))["train"]
    result["sync"] = {
        "bytes": train["sync_bytes"],
        "seconds": train["sync_s"],
        "gb_per_s": train["sync_bytes"] / train["sync_s"] / 1e9,
        "memcpy_gb_per_s": weight_sync.memcpy_gbps(train["sync_bytes"]),
    }
    print(_table(result))
    _save(args.out, result)
    return 0


def _save(out: str, result: dict) -> None:
    """Write `result` into the JSON file `out`, keeping the entries of other measurements there
    (a full run does not redo `--only learner-memory`, `--only` runs redo one part, and `--case`
    one case)."""
    path = Path(out)
    saved = json.loads(path.read_text()) if path.is_file() else {}
    for key in ("cases", "generation"):  # one case measured again replaces that case only
        if key in saved and key in result:
            result = {**result, key: {**saved[key], **result[key]}}
    path.write_text(json.dumps({**saved, **result}, indent=2))
    print(f"saved {out}")


def _measure(case: Case, args: argparse.Namespace) -> dict:
    """Generation (raw vLLM, our pool, HF generate) and training (ours, TRL alone) on one case."""
    from transformers import AutoTokenizer

    from orchestrator.bench import generation, training
    from orchestrator.builtin import search_task

    tokenizer = AutoTokenizer.from_pretrained(case.model)
    prompts = search_task.prompts(args.prompts, seed=0)
    prompt_ids = [tokenizer(p)["input_ids"] for p in prompts]
    n, tokens, eos = args.num_generations, case.max_tokens, case.ignore_eos
    label = f"[{case.name}: {'exactly' if eos else 'EOS, at most'} {tokens} tokens]"
    r = {"max_tokens": tokens, "ignore_eos": eos, "model": str(case.model)}
    repeats = args.repeats
    r["raw_vllm"] = generation.raw_vllm(case.model, prompt_ids, n, tokens, seed=0, ignore_eos=eos, repeats=repeats)
    r["mean_completion_tokens"] = r["raw_vllm"]["tokens"] / (len(prompt_ids) * n)
    print(
        f"{label} raw vLLM: {r['raw_vllm']['tokens_per_s']:.0f} tok/s, median of {_rates(r['raw_vllm'])} "
        f"({r['mean_completion_tokens']:.0f} tokens/sample)",
        flush=True,
    )
    r["pool"] = generation.pool(
        case.model, tokenizer, prompts, prompt_ids, n, tokens, seed=0, engines=args.engines, ignore_eos=eos, repeats=repeats
    )
    print(f"{label} our pool: {r['pool']['tokens_per_s']:.0f} tok/s, median of {_rates(r['pool'])}", flush=True)
    if args.only == "generation":
        return r
    r["hf_generate"] = generation.hf_generate(case.model, prompt_ids, n, tokens, seed=0, ignore_eos=eos)
    print(f"{label} HF generate: {r['hf_generate']['tokens_per_s']:.0f} tok/s", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        for key, learner, settings in (
            ("train", None, None),
            ("train_async", None, training.ASYNC),
            ("train_padded", training.PADDED_LEARNER, None),
        ):
            run = training.ours(
                case.model, args.steps, args.prompts, n, tokens, 0, Path(scratch) / key, eos, learner, settings=settings
            )
            r[key] = run
            print(
                f"{label} our train ({learner or settings or 'defaults'}): {run['samples_per_s']:.1f} samples/s, learner "
                f"{run['time/learner_step']:.2f} s/step, pad {100 * run['learner/pad_fraction']:.0f}%, busy: engines "
                f"{100 * run['busy/engines']:.0f}% learner {100 * run['busy/learner']:.0f}%",
                flush=True,
            )
        r["trl"] = training.trl(case.model, args.steps, args.prompts, n, tokens, 0, Path(scratch) / "trl", ignore_eos=eos)
        print(f"{label} TRL GRPOTrainer: {r['trl']['samples_per_s']:.1f} samples/s", flush=True)
    return r


def _generation_table(cases: dict) -> str:
    lines = ["| case | raw vLLM, tok/s (runs) | our pool, tok/s (runs) | pool / raw vLLM (medians) |", "|---|---|---|---|"]
    for name, case in cases.items():
        raw, pool = case["raw_vllm"], case["pool"]
        lines.append(
            f"| {name} | {raw['tokens_per_s']:.0f} ({_rates(raw)}) | {pool['tokens_per_s']:.0f} ({_rates(pool)}) "
            f"| {pool['tokens_per_s'] / raw['tokens_per_s']:.2f}x |"
        )
    return "\n".join(lines)


def _rates(figures: dict) -> str:
    return ", ".join(f"{rate:.0f}" for rate in figures["runs_tokens_per_s"])


def _learner_memory(args: argparse.Namespace) -> int:
    """Two models: a 3.6M-parameter Llama with the tiny tokenizer's 512 rows, and a small Qwen2 with
    Qwen2.5's 151,936-row vocabulary (tied embeddings), so that a 1024-sample step still finishes in a
    few minutes on 2 cores. Replaces only the learner_memory entry of an existing `--out` file."""
    from orchestrator.bench import learner_memory
    from orchestrator.bench.model import bench_model, wide_vocab_model

    models = [Path(args.model)] if args.model else [bench_model(hidden=256, layers=4), wide_vocab_model(hidden=64)]
    sizes = [int(size) for size in args.samples.split(",")]
    bad = [size for size in sizes if size % learner_memory.GENERATIONS or size <= 0]
    if bad:
        raise UserError(f"--samples: {bad[0]} is not a positive multiple of {learner_memory.GENERATIONS} (the group size)")
    machine = describe_machine()
    results = []
    for model in models:
        print(
            f"learner memory on {machine}; model {parameter_count(model) / 1e6:.1f}M parameters; completions of "
            f"mean {args.mean_length} tokens, at most {args.realistic_max_tokens}; one process per row",
            flush=True,
        )
        result = learner_memory.measure(
            model, sizes, args.max_tokens_per_micro_batch, args.mean_length, args.realistic_max_tokens
        )
        result["machine"] = machine
        print(learner_memory.table(result))
        print(
            f"vocabulary {result['vocab_size']}: largest step / smallest step at max_tokens_per_micro_batch "
            f"{args.max_tokens_per_micro_batch}: {result['largest_vs_smallest']:.2f}x (target <= 1.3x)"
        )
        results.append(result)
    _save(args.out, {"learner_memory": results})
    return 0


def _correction(args: argparse.Namespace) -> int:
    """The learner's step without and with the engine correction (orchestrator/bench/correction.py), on
    the realistic case's model and lengths. Replaces only the correction entry of an existing `--out` file."""
    from orchestrator.bench import correction
    from orchestrator.bench.model import bench_model

    model = Path(args.model) if args.model else bench_model(mean_length=args.mean_length)
    machine = describe_machine()
    print(f"correction on {machine}; model {parameter_count(model) / 1e6:.1f}M parameters; 64 samples", flush=True)
    result = correction.measure(model, 64, args.mean_length, args.realistic_max_tokens)
    result["machine"] = machine
    print(correction.table(result))
    _save(args.out, {"correction": result})
    return 0


def _agent(args: argparse.Namespace) -> int:
    """The lookup task as the engine's tool loop and as an agent through the gateway (orchestrator/bench/
    agents.py). Replaces only the agent entry of an existing `--out` file."""
    import tempfile

    from orchestrator.bench import agents

    machine = describe_machine()
    print(
        f"agent on {machine}; the lookup task, 8 prompts x 8 samples, {args.steps} steps each way, on the lookup "
        "model and on one of the bench model's size (pre-trained on the task the first time, about 10 minutes)",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as folder:
        result = {**agents.measure(args.steps, Path(folder)), "machine": machine}
    print(agents.table(result))
    _save(args.out, {"agent": result})
    return 0


def _kv_cache(args: argparse.Namespace) -> int:
    """Async runs with weight updates landing mid-completion, keeping or recomputing the KV cache
    (orchestrator/bench/kv_cache.py). Replaces only the kv_cache entry of an existing `--out` file."""
    from orchestrator.bench import kv_cache
    from orchestrator.bench.model import bench_model

    machine = describe_machine()
    model = Path(args.model) if args.model else bench_model()
    print(
        f"kv-cache on {machine}; async (max_staleness 1), {args.prompts} prompts x {args.num_generations} samples of "
        f"{args.max_tokens} tokens, {args.steps} steps with each rollout.kv_cache_after_update",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench-kv-cache-") as folder:
        work = (model, args.steps, args.prompts, args.num_generations, args.max_tokens, Path(folder))
        result = {**kv_cache.measure(*work), "machine": machine}
    print(kv_cache.table(result))
    _save(args.out, {"kv_cache": result})
    return 0


def _progress_reports(args: argparse.Namespace) -> int:
    """What engines reporting each sample's tokens every N tokens would cost and save
    (orchestrator/bench/progress_reports.py). Replaces only the progress_reports entry of an existing `--out` file."""
    from orchestrator.bench import progress_reports
    from orchestrator.bench.model import bench_model

    machine = describe_machine()
    model = Path(args.model) if args.model else bench_model()
    print(
        f"progress-reports on {machine}; one engine, {args.prompts} groups x {args.num_generations} samples of {args.max_tokens} tokens",
        flush=True,
    )
    result = {"engine": progress_reports.measure(model, args.prompts, args.num_generations, args.max_tokens), "machine": machine}
    result["fleet"] = progress_reports.fleet_figures()
    print(progress_reports.table(result["engine"], result["fleet"]))
    _save(args.out, {"progress_reports": result})
    return 0


def _real_size(args: argparse.Namespace) -> int:
    """Qwen2.5-0.5B's architecture at full size (orchestrator/bench/real_size.py). Replaces only the
    real_size entry of an existing `--out` file."""
    from orchestrator.bench import real_size
    from orchestrator.bench.model import real_size_model

    model = Path(args.model) if args.model else real_size_model()
    machine = describe_machine()
    print(f"real size on {machine}; model {parameter_count(model) / 1e6:.1f}M parameters; {args.steps} steps", flush=True)
    results = []
    for dtype, delta in real_size.VARIANTS:
        result = {**real_size.measure(model, args.steps, dtype, delta), "machine": machine}
        print(real_size.table(result), flush=True)
        results.append(result)
    for result in results:
        print(real_size.table(result))
    _save(args.out, {"real_size": results})
    return 0


def _table(r: dict) -> str:
    sync = r["sync"]
    rows = _throughput_rows(r) if "cases" in r else []
    rows.append(
        (
            "weight sync",
            f"{sync['bytes'] / 1e6:.1f} MB in {sync['seconds']:.3f}s = {sync['gb_per_s']:.2f} GB/s",
            f"{sync['gb_per_s'] / sync['memcpy_gb_per_s']:.2f}x memcpy ({sync['memcpy_gb_per_s']:.1f} GB/s)",
        )
    )
    if "sync_lora" in r:
        lora = r["sync_lora"]
        rows.append(
            (
                f"weight sync, LoRA r={lora['lora_r']} adapter",
                f"{lora['bytes'] / 1e6:.2f} MB in {lora['seconds']:.3f}s",
                f"{sync['seconds'] / lora['seconds']:.1f}x faster than the whole model, "
                f"{sync['bytes'] / lora['bytes']:.0f}x fewer bytes",
            )
        )
    rows += _delta_rows(r["sync_delta"]) if "sync_delta" in r else []
    width = max(len(a) for a, _, _ in rows)
    lines = [f"| {'what':<{width}} | figure | ratio |", f"|{'-' * (width + 2)}|---|---|"]
    lines += [f"| {a:<{width}} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines)


def _learner_rows(name: str, case: dict) -> list[tuple[str, str, str]]:
    """The learner's s/step (token-budget micro-batches, packed) against the whole step padded, when that case ran."""
    ours = case["train"]

    def row(what: str, run: dict) -> tuple[str, str, str]:
        figures = (
            f"{run['time/learner_step']:.2f} s/step, {run['learner/micro_batches']:.0f} micro-batch(es), "
            f"pad {100 * run['learner/pad_fraction']:.0f}%"
        )
        return (f"{name}: learner, {what}", figures, f"{run['time/learner_step'] / ours['time/learner_step']:.2f}x ours")

    rows = [row("ours (token budget, packed)", ours)]
    if "train_padded" in case:
        rows.append(row("whole step padded", case["train_padded"]))
    return rows


def _busy(run: dict) -> str:
    return f"busy: engines {100 * run['busy/engines']:.0f}%, learner {100 * run['busy/learner']:.0f}%"


def _delta_rows(runs: dict) -> list[tuple[str, str, str]]:
    """A step's whole-model sync beside its patch, bfloat16 engines."""
    dense, delta = runs["dense"], runs["delta"]
    return [
        (
            "weight sync after a step, whole model",
            f"{dense['bytes'] / 1e6:.1f} MB in {dense['seconds']:.3f}s",
            "bfloat16 engines",
        ),
        (
            "weight sync after a step, delta",
            f"{delta['bytes'] / 1e6:.2f} MB in {delta['seconds']:.3f}s, {delta['density']:.2%} of the elements",
            f"{dense['bytes'] / max(1, delta['bytes']):.0f}x fewer bytes, {dense['seconds'] / delta['seconds']:.2f}x the speed",
        ),
    ]


def _async_rows(name: str, case: dict) -> list[tuple[str, str, str]]:
    """Async mode beside the synchronous one, with both busy shares: the overlap of generation and training."""
    if "train_async" not in case:
        return []
    ours, run, trl = case["train"], case["train_async"], case["trl"]
    return [
        (f"{name}: train, ours, synchronous", _busy(ours), ""),
        (
            f"{name}: train, ours, async (max_staleness 1)",
            f"{run['samples_per_s']:.2f} samples/s; {_busy(run)}",
            f"{run['samples_per_s'] / trl['samples_per_s']:.2f}x TRL, {run['samples_per_s'] / ours['samples_per_s']:.2f}x synchronous",
        ),
    ]


def _throughput_rows(r: dict) -> list[tuple[str, str, str]]:
    rows = []
    for name, case in r["cases"].items():
        raw, pool, hf, ours, trl = case["raw_vllm"], case["pool"], case["hf_generate"], case["train"], case["trl"]
        work = f"{'exactly' if case['ignore_eos'] else 'EOS, max'} {case['max_tokens']} tokens, mean {case['mean_completion_tokens']:.0f}"
        rows += [
            (f"{name}: work", work, ""),
            (f"{name}: generation, raw vLLM (1 process)", f"{raw['tokens_per_s']:.0f} tok/s", ""),
            (
                f"{name}: generation, our pool",
                f"{pool['tokens_per_s']:.0f} tok/s",
                f"{pool['tokens_per_s'] / raw['tokens_per_s']:.2f}x raw vLLM",
            ),
            (
                f"{name}: generation, HF generate",
                f"{hf['tokens_per_s']:.0f} tok/s",
                f"{hf['tokens_per_s'] / raw['tokens_per_s']:.2f}x raw vLLM",
            ),
            (
                f"{name}: train, ours (steady state)",
                f"{ours['samples_per_s']:.2f} samples/s",
                f"{ours['samples_per_s'] / trl['samples_per_s']:.2f}x TRL",
            ),
            *_async_rows(name, case),
            (f"{name}: train, TRL GRPOTrainer alone", f"{trl['samples_per_s']:.2f} samples/s", ""),
            (
                f"{name}: ours, s/step (gen/reward/train/sync)",
                f"{ours['step_s']:.2f}",
                " / ".join(f"{ours[p]:.2f}" for p in ("time/generate", "time/reward", "time/train", "time/sync")),
            ),
            (f"{name}: orchestration overhead", f"{ours['overhead_share'] * 100:.1f}% of step time", ""),
        ]
        rows += _learner_rows(name, case)
    return rows
