"""How long the rollout pool was busy generating, read from the step loop while the generation
thread may still be inside `generate` (async mode): the step's `time/pool_busy` is what the
clock gained during the step, and `time/pool_busy / time/step` the engines' busy share of it."""

from __future__ import annotations

import contextlib
import threading
import time


class BusyClock:
    def __init__(self, clock=time.perf_counter):
        self._clock = clock
        self._lock = threading.Lock()
        self._done = 0.0  # seconds of the blocks that have ended
        self._since: float | None = None  # start of the block running now

    @contextlib.contextmanager
    def busy(self):
        """Counts the time inside the block (blocks do not nest: one thread generates)."""
        with self._lock:
            self._since = self._clock()
        try:
            yield
        finally:
            with self._lock:
                self._done += self._clock() - self._since
                self._since = None

    def seconds(self) -> float:
        """Busy seconds so far, the block running now counted up to now."""
        with self._lock:
            return self._done + (0.0 if self._since is None else self._clock() - self._since)
