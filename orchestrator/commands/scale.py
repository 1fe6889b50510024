"""`python -m orchestrator scale RUN_DIR --engines N`: resize a running run's rollout pool.

Writes the request to RUN_DIR/control.json (atomically); the run applies it at its next step. A
file rather than a network call: it works wherever the run folder is visible, needs no port, and
leaves a record of what was asked.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from orchestrator.errors import UserError


def run_scale(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir} is not a train run folder (no config.yaml)")
    if args.engines < 1:
        raise UserError(f"--engines must be at least 1, got {args.engines}")
    partial = run_dir / "control.json.partial"
    partial.write_text(json.dumps({"engines": args.engines}))
    partial.replace(run_dir / "control.json")
    print(f"asked {run_dir} for {args.engines} rollout engine(s); it applies this at its next step")
    return 0
