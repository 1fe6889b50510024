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
