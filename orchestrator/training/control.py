"""Requests to a running `train` from outside: RUN_DIR/control.json, written by `scale`.

A file rather than a network call: it works wherever the run folder is visible, needs no port, and
leaves a record of what was asked. The writer replaces the file atomically; the run reads it
between steps and acts on each new version once. A request left from before a resume is history,
not a new request.
"""

from __future__ import annotations

import json
from pathlib import Path

CONTROL_FILE = "control.json"


def write_request(run_dir: Path, engines: int) -> None:
    partial = run_dir / (CONTROL_FILE + ".partial")
    partial.write_text(json.dumps({"engines": engines}))
    partial.replace(run_dir / CONTROL_FILE)


class ControlFile:
    def __init__(self, path: Path):
        self.path = path
        self._seen = self._version()  # whatever is there now was asked before this run started

    def _version(self) -> int | None:
        return self.path.stat().st_mtime_ns if self.path.is_file() else None

    def poll(self) -> dict | None:
        """The request, if the file changed since the last poll; else None."""
        version = self._version()
        if version is None or version == self._seen:
            return None
        self._seen = version
        return json.loads(self.path.read_text())
