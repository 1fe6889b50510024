"""Why a vLLM engine failed to start, or died while serving, in one line.

When vLLM's engine process (or one of its workers) fails, it logs the traceback of what went wrong
and the engine raises `EngineDeadError: EngineCore encountered an issue. See stack trace (above) for
the root cause.` (or `Engine core initialization failed. See root cause above`): the error the driver
gets says nothing. Those processes write to the engine actor's stdout and stderr, which they inherit
and which Ray keeps in files on the node. So the actor notes where those files end before the engine
starts (and again after each exchange of groups that went well), and on a failure the first exception
line written after that, the root cause (`RuntimeError: Unsupported CPU attention configuration:
head_dim=16 ...`, `ValueError: To serve at least one request with the model's max seq len ...`,
`RuntimeError: CPU Generator does not use offset`), goes into the actor's error.
"""

from __future__ import annotations

import os
import re
import sys

# `SomeError: message`, alone or after a log prefix ("(Worker pid=1) ERROR 11-24 05:08:28 [file.py:1063] ").
_EXCEPTION_LINE = re.compile(r"(?:^|\] )((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): (\S.*)$")
# Lines that only point at the root cause above them.
_POINTERS = ("stack trace (above)", "See root cause above", "check the stack trace above", "Worker failed with error")
READ_LIMIT = 4 << 20  # bytes of log read after the start began


class EngineStartError(RuntimeError):
    """vLLM's engine failed while starting; the message is the root cause its processes logged."""


def explained_death(error: BaseException, offsets: dict[int, int], proc: str = "/proc/self/fd") -> BaseException:
    """The error to raise for `error`, which a serving engine's call failed with: for vLLM's
    `EngineDeadError` whose processes logged a root cause after `offsets`, an `EngineDiedError` that says
    it (the pool still replaces the engine: orchestrator/contracts/engine_death.py); else `error` itself."""
    from orchestrator.contracts.engine_death import VLLM_ENGINE_ERRORS, EngineDiedError

    vllm_errors = sys.modules.get(VLLM_ENGINE_ERRORS)  # loaded wherever an engine runs
    if vllm_errors is None or not isinstance(error, vllm_errors.EngineDeadError):
        return error
    if (cause := root_cause(offsets, proc)) is None:
        return error
    return EngineDiedError(f"vLLM's engine process died: {cause}")


def log_offsets() -> dict[int, int]:
    """Where this process's stdout and stderr files end now (vLLM logs to stdout, Python's tracebacks
    go to stderr); a stream that is not a file (a terminal) is left out."""
    offsets = {}
    for fd in (1, 2):
        try:
            if os.path.isfile(f"/proc/self/fd/{fd}"):
                offsets[fd] = os.fstat(fd).st_size
        except OSError:
            continue
    return offsets


def root_cause(offsets: dict[int, int], proc: str = "/proc/self/fd") -> str | None:
    """The first exception line written to stdout, else stderr, after `offsets` (`log_offsets`) that is
    not a mere pointer to another one, as `Type: message`; None if there is none."""
    for fd, since in sorted(offsets.items()):
        try:
            with open(f"{proc}/{fd}", "rb") as log:
                log.seek(since)
                text = log.read(READ_LIMIT).decode("utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            match = _EXCEPTION_LINE.search(line.rstrip())
            if match and not any(pointer in match.group(2) for pointer in _POINTERS):
                return f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2)[:300]}"
    return None
