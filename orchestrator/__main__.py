"""Command line: `python -m orchestrator {generate,train,report,scale,export,bench,simulate,config} ...`.

Only argparse is imported here, so `--help` and usage errors answer at once; each command imports
Ray, vLLM and torch when it runs.
"""

from __future__ import annotations

import argparse
import sys


def _generate_parser(commands) -> None:
    p = commands.add_parser(
        "generate",
        help="batch generation through the rollout pool (like vLLM's offline batch mode)",
        description="Generate num_generations completions for every prompt of a file with a pool of vLLM "
        "engines, and write them as a Parquet rollout table. With no --model, the built-in tiny model "
        "(and its tokenizer with <search>) is used; with no --prompts, built-in task prompts.",
    )
    p.add_argument("--model", help="model folder or hub name (default: the built-in tiny model)")
    p.add_argument("--tokenizer", help="canonical tokenizer folder shipped to every engine (default: the model's)")
    p.add_argument("--prompts", help='prompt file: .jsonl or .parquet with a "prompt" column (default: 32 built-in prompts)')
    p.add_argument("--out", default="out/generate.parquet", help="output Parquet file (default: %(default)s)")
    p.add_argument("--num-generations", type=int, default=1, help="samples per prompt (default: %(default)s)")
    p.add_argument("--engines", type=int, default=1, help="number of vLLM engines (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=64, help="completion budget in tokens (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=1.0, help="(default: %(default)s)")
    p.add_argument("--top-p", type=float, default=1.0, help="(default: %(default)s)")
    p.add_argument("--top-k", type=int, default=-1, help="-1 keeps all tokens (default: %(default)s)")
    p.add_argument("--seed", type=int, default=None, help="group g is sampled with seed+g: results do not depend on the engine")
    p.add_argument("--stop", action="append", default=[], metavar="STR", help="stop string (repeatable)")
    p.add_argument("--stop-token-ids", type=int, nargs="+", default=[], metavar="ID", help="stop token ids")
    p.add_argument(
        "--include-stop-str-in-output",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the stop string / stop token at the end of the completion (default: on)",
    )
    p.add_argument("--ignore-eos", action="store_true", help="do not stop at EOS (benchmarks only)")
    p.add_argument(
        "--skip-special-tokens",
        action="store_true",
        help="drop special tokens from completion text (off by default: <search> stays visible and can stop)",
    )


def _train_parser(commands) -> None:
    p = commands.add_parser(
        "train",
        help="a GRPO run: rollout pool + learner + weight sync",
        description="Run GRPO. With no --config, the embedded default: the built-in tiny model learns to make "
        "one well-formed <search> call and stop. Overrides are key=value or --key value (values parsed "
        "as YAML, dotted keys for sections), e.g. max_steps=5 rollout.engines=2 --learning_rate 1e-3.",
        epilog="Every config key with its type, default and meaning: python -m orchestrator config (also "
        "docs/reference/config.md); every default as YAML: python -m orchestrator config --defaults.",
    )
    p.add_argument("--config", help="YAML run config (default: the embedded default)")
    p.add_argument("--resume", metavar="OUTPUT_DIR", help="continue a run from its last checkpoint (overrides still apply)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="overrides; --key value works too")


def _report_parser(commands) -> None:
    p = commands.add_parser("report", help="a run's figures as Markdown", description="Summarise a train run's metrics.jsonl.")
    p.add_argument("run_dir", help="the output_dir of a train run")


def _export_parser(commands) -> None:
    p = commands.add_parser(
        "export",
        help="a LoRA checkpoint merged into its base model",
        description="Merge a LoRA run's checkpoint (PEFT's adapter folder) into its base model and save a plain "
        "transformers model folder, with the run's tokenizer.",
    )
    p.add_argument("checkpoint", help="a checkpoint folder of a LoRA run (RUN_DIR/checkpoints/step-N)")
    p.add_argument("--out", required=True, help="the folder to write (must not exist)")
    p.add_argument("--base-model", help="the base model (default: the one adapter_config.json names)")


def _scale_parser(commands) -> None:
    p = commands.add_parser(
        "scale",
        help="grow or shrink a running train run's rollout pool",
        description="Ask a running train run to use N rollout engines from its next step on: new engines get the "
        "canonical tokenizer and the current weights before they serve; removed engines stop at once and hand their "
        "groups, cut short, to the others to continue (rollout.continuation).",
    )
    p.add_argument("run_dir", help="the output_dir of the running train run")
    p.add_argument("--engines", type=int, required=True, help="the number of rollout engines wanted")


def _bench_parser(commands) -> None:
    p = commands.add_parser(
        "bench",
        help="throughput beside raw vLLM, HF generate and TRL's GRPOTrainer",
        description="Measure generation (raw vLLM vs our pool vs HF generate), training (ours vs TRL GRPOTrainer "
        "alone), weight sync (vs memory copy) and orchestration overhead on the same model and work.",
    )
    p.add_argument("--model", help="model folder (default: a ~20M-parameter Llama built here)")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (default: %(default)s)")
    p.add_argument("--num-generations", type=int, default=8, help="(default: %(default)s)")
    p.add_argument(
        "--max-tokens", type=int, default=128, help="fixed case: tokens per completion, EOS ignored (default: %(default)s)"
    )
    p.add_argument("--realistic-max-tokens", type=int, default=512, help="realistic case: completion cap (default: %(default)s)")
    p.add_argument("--mean-length", type=int, default=100, help="realistic case: mean completion length (default: %(default)s)")
    p.add_argument("--case", choices=["fixed", "realistic", "both"], default="both", help="(default: %(default)s)")
    p.add_argument("--steps", type=int, default=5, help="training steps per trainer (default: %(default)s)")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed generation runs of raw vLLM and of the pool after an untimed one, the median reported (default: %(default)s)",
    )
    p.add_argument("--engines", type=int, default=1, help="engines in our pool (default: %(default)s)")
    p.add_argument(
        "--only",
        choices=["sync", "learner-memory", "correction", "generation", "real-size", "agent", "kv-cache", "progress-reports"],
        help="measure one part alone (generation: raw vLLM against our pool, --repeats times each, both cases, a few "
        "minutes; sync: weight sync vs memcpy, of the whole model and of a LoRA adapter, a few minutes; learner-memory: the "
        "learner's peak memory for steps of --samples samples at --max-tokens-per-micro-batch, completions as in the "
        "realistic case, with a small and a 152k-token vocabulary: about 25 minutes on an idle 2-core machine; "
        "correction: the learner's step time without and with the engine correction, and with an old log-probs "
        "pass, on 64 samples of the realistic case: about two minutes; real-size: Qwen2.5-0.5B's architecture at full "
        "size, random weights, trains --steps steps while the node's memory is sampled: its peak by component and the "
        "weight sync's speed, several minutes and most of a 24 GB machine; agent: the lookup task as the engine's tool "
        "loop and as an agent through the gateway, --steps steps each, on the lookup model and on one of the bench "
        "model's size (pre-trained once, about 10 minutes), samples/s side by side, then about 5 minutes; kv-cache: "
        "async runs of --steps steps whose weight updates land mid-completion, with rollout.kv_cache_after_update "
        "recompute and keep: step time, samples spanning an update, token staleness and the engines-vs-learner "
        "log-prob gap side by side; progress-reports: one engine's tokens/s with its outputs read once at the end and "
        "every token (what reporting each sample's tokens every 64, 256 or 1024 tokens needs), and what such reports "
        "would save and send at 1024 engines)",
    )
    p.add_argument(
        "--samples", default="64,256,1024", help="learner-memory: samples per step, comma-separated (default: %(default)s)"
    )
    p.add_argument(
        "--max-tokens-per-micro-batch",
        type=int,
        default=4096,
        help="learner-memory: learner.max_tokens_per_micro_batch (default: %(default)s, under the smallest step's "
        "tokens, so that every step's micro-batches are full ones)",
    )
    p.add_argument("--syncs", type=int, default=5, help="weight syncs timed with --only sync (default: %(default)s)")
    p.add_argument("--out", default="bench.json", help="JSON results (default: %(default)s)")


def _simulate_parser(commands) -> None:
    p = commands.add_parser(
        "simulate",
        help="the driver at scale: the real pool against simulated engines",
        description="Run the real rollout pool, batch assembly and reward pipeline against simulated engines "
        "(a token-timing model, no model weights) and compare the rate with the engine-bound ideal. Prints "
        "progress and a table; writes JSON.",
    )
    p.add_argument("--engines", type=int, default=256, help="simulated engines (default: %(default)s)")
    p.add_argument("--prompts", type=int, default=100_000, help="prompts, one group each (default: %(default)s)")
    p.add_argument("--num-generations", type=int, default=8, help="(default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=256, help="completion cap in tokens (default: %(default)s)")
    p.add_argument("--capacity", type=int, default=64, help="samples in flight per engine (default: %(default)s)")
    p.add_argument("--mean-tokens", type=float, default=64.0, help="mean completion length before the cap (default: %(default)s)")
    p.add_argument("--step-ms", type=float, default=30.0, help="decode step with one sample running (default: %(default)s)")
    p.add_argument(
        "--step-per-sample-ms", type=float, default=0.25, help="extra step time per running sample (default: %(default)s)"
    )
    p.add_argument("--prefill-per-token-ms", type=float, default=0.02, help="(default: %(default)s)")
    p.add_argument("--hosts", type=int, default=1, help="Ray actors hosting the simulated engines (default: %(default)s)")
    p.add_argument("--out", default="simulate.json", help="JSON results (default: %(default)s)")
    p.add_argument(
        "--autoscale",
        action="store_true",
        help="instead: the autoscaling policy on a load whose completions double mid-run, in virtual time, "
        "against a fixed pool of --start-engines (orchestrator/bench/autoscaling.py); no Ray",
    )
    p.add_argument(
        "--preemption",
        action="store_true",
        help="instead: nodes drained with 30 s of notice while long-tailed completions (mean 4000 tokens, cut at "
        "16384) generate, at 256 and 1024 engines, with and without continuation of unfinished samples: engine time "
        "spent on tokens generated again and the step time, in virtual time (orchestrator/bench/preemption.py); no Ray",
    )
    p.add_argument("--drains-per-node-hour", type=float, default=0.05, help="--preemption: the drain rate (default: %(default)s)")
    p.add_argument("--steps", type=int, default=10, help="--preemption: steps per run (default: %(default)s)")
    p.add_argument("--start-engines", type=int, default=1, help="--autoscale: engines at the start (default: %(default)s)")
    p.add_argument("--max-engines", type=int, default=8, help="--autoscale: autoscale.max_engines (default: %(default)s)")


def _config_parser(commands) -> None:
    p = commands.add_parser(
        "config",
        help="the config and CLI references, generated from the code",
        description="Print every train config key (section, type, default, description, TRL's name) as Markdown. "
        "The same text is docs/reference/config.md.",
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument("--defaults", action="store_true", help="print every key with its default as YAML instead")
    what.add_argument("--cli", action="store_true", help="print every command's --help as Markdown instead")
    what.add_argument(
        "--write", metavar="DIR", help="write config.md, defaults.yaml and cli.md into DIR (docs/reference in this repository)"
    )


def build_parser() -> argparse.ArgumentParser:
    return build_parsers()[0]


def build_parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser, and each command's by name (for the CLI reference, cli_reference.py)."""
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator",
        description="Ray-distributed GRPO: a pool of vLLM rollout engines and a TRL learner.",
    )
    level = parser.add_mutually_exclusive_group()
    level.add_argument("-q", "--quiet", action="store_true", help="print warnings and errors only (no step lines)")
    level.add_argument("-v", "--verbose", action="store_true", help="print debug lines too")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _generate_parser(commands)
    _train_parser(commands)
    _report_parser(commands)
    _scale_parser(commands)
    _export_parser(commands)
    _bench_parser(commands)
    _simulate_parser(commands)
    _config_parser(commands)
    return parser, dict(commands.choices)


def _train_overrides(argv: list[str]) -> list[str]:
    """Everything after `train` except --config and --resume, in the order given."""
    overrides, skip = [], False
    for token in argv[argv.index("train") + 1 :]:
        if skip:
            skip = False
        elif token in ("--config", "--resume"):
            skip = True
        elif not token.startswith(("--config=", "--resume=")):
            overrides.append(token)
    return overrides


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command != "train":
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "train":
        args.overrides = _train_overrides(argv)
    import importlib
    import logging

    from orchestrator.contracts.errors import RunError, Terminated, UserError
    from orchestrator.log import log, setup

    setup(logging.WARNING if args.quiet else logging.DEBUG if args.verbose else logging.INFO)
    try:
        module = importlib.import_module(f"orchestrator.commands.{args.command}")  # heavy imports start here
        return getattr(module, f"run_{args.command}")(args)
    except UserError as error:
        log.error(error)
        return 2
    except Terminated as error:
        log.error(error)
        return 143
    except RunError as error:
        log.error(error)
        return 1
    except KeyboardInterrupt:
        log.error("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
