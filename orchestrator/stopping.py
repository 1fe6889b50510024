"""Stopping a run from outside: Ctrl-C (SIGINT), and SIGTERM, which Kubernetes sends when a RayJob
is deleted or its pod evicted, and `timeout` and process managers send.

While steps run (`graceful`), the first of either finishes the step under way, saves a checkpoint
and stops the loop, which then says how to resume; a second one aborts at once. Before that (the
learner and the engines starting: nothing trained yet) either stops at once (`immediate`).

Ray's own SIGTERM handler, installed by `ray.init` in a driver that started the cluster, kills every
Ray process and exits on the spot: the driver's calls then fail in native code, with stack dumps,
and no checkpoint is written. These handlers replace it; the cluster still goes down with
`ray.shutdown()` when the driver ends, as at any other end.
"""

from __future__ import annotations

import contextlib
import os
import signal

from orchestrator.contracts.errors import Terminated

STARTING = "terminated (SIGTERM) before the run's first step; nothing was trained"
ENDING = "terminated (SIGTERM) after the run's last step, while shutting down; its checkpoints are complete"


def immediate(message: str = STARTING) -> None:
    """From now on SIGTERM raises `Terminated(message)` in the main thread (Ctrl-C raises
    KeyboardInterrupt as always)."""

    def on_sigterm(signum, frame):
        raise Terminated(message)

    signal.signal(signal.SIGTERM, on_sigterm)


class GracefulStop:
    """Installed around the step loop (`install`, then `restore`); `requested` names the signal that
    asked the loop to stop after its current step (None: none did)."""

    def __init__(self):
        self.requested: str | None = None
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def restore(self) -> None:
        """The steps are over: Ctrl-C's handler goes back, and SIGTERM stops the shutdown at once."""
        with contextlib.suppress(TypeError):  # a handler installed from C cannot be put back from Python
            signal.signal(signal.SIGINT, self._previous[signal.SIGINT])
        immediate(ENDING)

    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.requested is not None:  # asked twice: abort now
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            raise Terminated(f"terminated ({name}) while stopping; the last complete checkpoint is the one to resume from")
        self.requested = name
        again = "Ctrl-C" if signum == signal.SIGINT else name
        # os.write, not print: a handler that prints while the main thread prints would raise.
        os.write(1, f"\n{name}: finishing this step, then saving a checkpoint ({again} again to abort)\n".encode())
