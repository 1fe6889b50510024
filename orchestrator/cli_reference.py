"""The CLI reference: every command's `--help`, as Markdown (`python -m orchestrator config --cli`).

The text is what a terminal of COLUMNS columns shows, so docs/reference/cli.md does not depend on the
terminal that wrote it (argparse's layout may still change between Python versions).
"""

from __future__ import annotations

import argparse
import contextlib
import os

from orchestrator.config.reference import REGENERATE

COLUMNS = 100


def cli_markdown() -> str:
    from orchestrator.__main__ import build_parsers

    with _columns(COLUMNS):
        parser, commands = build_parsers()  # argparse reads COLUMNS when it formats, and when it names the commands
        parts = [
            "# CLI reference",
            "",
            f"<!-- Generated from the code by `{REGENERATE}`; do not edit. -->",
            "",
            f"Every command's `--help` (here at a terminal width of {COLUMNS} columns). How `train` reads its "
            "config: [config reference](config.md).",
            "",
            *_block("python -m orchestrator", parser),
        ]
        for name, command in commands.items():
            parts += _block(name, command)
    return "\n".join(parts)


def _block(title: str, parser: argparse.ArgumentParser) -> list[str]:
    return [f"## {title}", "", "```text", parser.format_help().rstrip(), "```", ""]


@contextlib.contextmanager
def _columns(width: int):
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
