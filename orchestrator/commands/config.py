"""`python -m orchestrator config [--defaults | --cli | --write DIR]`: the references generated from the code.

With no option, every config key as Markdown tables (docs/reference/config.md); `--defaults`, every key
with its default as YAML (docs/reference/defaults.yaml); `--cli`, every command's --help as Markdown
(docs/reference/cli.md); `--write DIR`, the three files into DIR.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.cli_reference import cli_markdown
from orchestrator.config.reference import config_markdown, defaults_yaml

REFERENCE_FILES = {"config.md": config_markdown, "defaults.yaml": defaults_yaml, "cli.md": cli_markdown}


def run_config(args: argparse.Namespace) -> int:
    if args.write:
        for name, make in REFERENCE_FILES.items():
            path = Path(args.write) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(make(), encoding="utf-8")
            print(f"wrote {path}")
        return 0
    make = defaults_yaml if args.defaults else cli_markdown if args.cli else config_markdown
    print(make(), end="")
    return 0
