"""`python -m orchestrator scale RUN_DIR --engines N`: resize a running run's rollout pool.

Writes the request to RUN_DIR/control.json (training/control.py); the run applies it at its next step.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.contracts.errors import UserError


def run_scale(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir} is not a train run folder (no config.yaml)")
    if args.engines < 1:
        raise UserError(f"--engines must be at least 1, got {args.engines}")
    from orchestrator.training.control import write_request

    write_request(run_dir, args.engines)
    print(f"asked {run_dir} for {args.engines} rollout engine(s); it applies this at its next step")
    return 0
