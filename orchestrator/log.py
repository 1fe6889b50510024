"""The driver's one logger. Step lines and progress (INFO) go to stdout, as a run's record of itself;
warnings and errors go to stderr, each line starting with its level (`warning: ...`, `error: ...`),
so `2>errors.txt` keeps them apart. `python -m orchestrator --quiet ...` shows warnings and errors
only; `--verbose` adds DEBUG lines. The libraries' own loggers (vLLM, Ray, transformers) are theirs.

    from orchestrator.log import log
    log.warning("engine %d is wedged: %s; replacing it", engine_id, why)
"""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("orchestrator")


class _Line(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        return message if record.levelno < logging.WARNING else f"{record.levelname.lower()}: {message}"


class _Current(logging.StreamHandler):
    """Writes to whatever sys.stdout or sys.stderr is when a record comes (a test's capture, say)."""

    def __init__(self, name: str):
        super().__init__()
        self._stream_name = name

    @property
    def stream(self):
        return getattr(sys, self._stream_name)

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler sets it once; the current one is read instead
        pass


def setup(level: int = logging.INFO) -> None:
    """Send `log`'s records at `level` and above to stdout (below WARNING) and stderr (the rest)."""
    out, err = _Current("stdout"), _Current("stderr")
    out.addFilter(lambda record: record.levelno < logging.WARNING)
    err.setLevel(logging.WARNING)
    log.handlers.clear()
    for handler in (out, err):
        handler.setFormatter(_Line())
        log.addHandler(handler)
    log.setLevel(level)
    log.propagate = False


setup()  # the defaults, for the library's users too (the bench, notebooks); the CLI sets its level
