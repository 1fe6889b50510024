"""`python -m orchestrator simulate`: the driver at hundreds of engines, on simulated engines.

Runs the real rollout pool (dispatch, Ray calls, engine handling), batch assembly and reward
pipeline against simulated engines with a token-timing model (see orchestrator/bench/simulation.py),
prints progress while it runs and a table at the end, and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from orchestrator.contracts.errors import UserError


def run_simulate(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from orchestrator.bench.simulated_engine import TokenTiming
    from orchestrator.config.base import explain

    if args.autoscale:
        return _simulate_autoscaling(args)
    if args.preemption:
        return _simulate_preemption(args)
    for name in ("engines", "prompts", "num_generations", "max_tokens", "capacity", "hosts"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    try:
        timing = TokenTiming(
            step_base_s=args.step_ms / 1e3,
            step_per_sample_s=args.step_per_sample_ms / 1e3,
            prefill_per_token_s=args.prefill_per_token_ms / 1e3,
            mean_completion_tokens=args.mean_tokens,
        )
    except ValidationError as error:
        raise explain(error, TokenTiming) from None

    from orchestrator.bench import simulation

    result = simulation.run(args.engines, args.prompts, args.num_generations, args.max_tokens, args.capacity, timing, args.hosts)
    print(simulation.table(result))
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"saved {args.out}")
    return 0


def _simulate_autoscaling(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from orchestrator.bench.autoscaling import Load, report
    from orchestrator.config.base import explain
    from orchestrator.contracts.rollout import AutoscaleSettings

    if not 1 <= args.start_engines <= args.max_engines:
        raise UserError(f"--start-engines must be between 1 and --max-engines ({args.max_engines}), got {args.start_engines}")
    try:
        settings = AutoscaleSettings(min_engines=1, max_engines=args.max_engines)
    except ValidationError as error:
        raise explain(error, AutoscaleSettings) from None
    print(report(Load(), settings, args.start_engines))
    return 0


def _simulate_preemption(args: argparse.Namespace) -> int:
    from orchestrator.bench import preemption
    from orchestrator.machine import describe as describe_machine

    if args.drains_per_node_hour <= 0 or args.steps < 1:
        raise UserError("--drains-per-node-hour must be positive and --steps at least 1")
    rows = []
    for engines in (256, 1024):
        fleet = preemption.Fleet(engines=engines, drains_per_node_hour=args.drains_per_node_hour, steps=args.steps)
        print(f"{engines} engines ...", flush=True)
        rows.append((engines, preemption.run(fleet, continuation=False), preemption.run(fleet, continuation=True)))
    print(f"preemption drains, in virtual time; computed on {describe_machine()}")
    print(preemption.table(rows, fleet))
    Path(args.out).write_text(json.dumps([{"engines": e, "without": a, "with": b} for e, a, b in rows], indent=2))
    print(f"saved {args.out}")
    return 0
