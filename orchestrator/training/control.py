"""Requests to a running `train` from outside: RUN_DIR/control.json, written by `scale`.

A file rather than a network call: it works wherever the run folder is visible, needs no port, and
leaves a record of what was asked. The writer replaces the file atomically; the run reads it
between steps and acts on each new version once. A request left from before a resume is history,
not a new request.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.log import log

CONTROL_FILE = "control.json"


def write_request(run_dir: Path, engines: int) -> None:
    partial = run_dir / (CONTROL_FILE + ".partial")
    partial.write_text(json.dumps({"engines": engines}))
    partial.replace(run_dir / CONTROL_FILE)


# What one request may ask for when the run does not autoscale (autoscaling runs hold requests within
# rollout.autoscale's bounds): far more engines than any cluster here holds, so a typo such as 100000
# cannot make the run ask Ray for that many.
MAX_ENGINES = 1024


class ControlFile:
    def __init__(self, path: Path):
        self.path = path
        self._seen = self._version()  # whatever is there now was asked before this run started

    def _version(self) -> int | None:
        return self.path.stat().st_mtime_ns if self.path.is_file() else None

    def poll(self) -> dict | None:
        """The request, if the file changed since the last poll and holds one; else None. A file that is
        not a request (half written by hand, not JSON, an engine count that is not a positive integer) is
        warned about and ignored: the run goes on as it was. `engines` is held to `MAX_ENGINES`."""
        version = self._version()
        if version is None or version == self._seen:
            return None
        self._seen = version
        try:
            request = json.loads(self.path.read_text())
        except (OSError, ValueError) as error:
            return _ignored(self.path, f"it is not JSON ({error})")
        engines = request.get("engines") if isinstance(request, dict) else None
        if type(engines) is not int or engines < 1:
            return _ignored(self.path, f'expected {{"engines": N}} with N a whole number of at least 1, got {request!r:.200}')
        if engines > MAX_ENGINES:
            log.warning(f"{self.path}: {engines} engines is more than a run asks for at once; using {MAX_ENGINES}")
        return {**request, "engines": min(engines, MAX_ENGINES)}


def _ignored(path: Path, why: str) -> None:
    log.warning(f"{path}: {why}; ignored (write requests with `python -m orchestrator scale RUN_DIR --engines N`)")
    return None
