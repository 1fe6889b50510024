"""Async mode (`max_staleness: 1`): the next step's generation runs while this step trains.

One background thread owns the pool while it generates, so pool changes (scaling requests,
replacements) never race with a running generation. `groups_ahead` says how far the prompt stream
has run ahead of what was trained on, so a checkpoint records the position a resume starts from.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable


class Prefetcher:
    def __init__(self, generate: Callable[[list], object]):
        """`generate(requests)` runs on the background thread and returns the step's batch."""
        self._generate = generate
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="generate")
        self._next: concurrent.futures.Future | None = None
        self._groups = 0

    def submit(self, requests: list) -> None:
        self._groups = len(requests)
        self._next = self._executor.submit(self._generate, requests)

    def call(self, fn, *args):
        """`fn(*args)` on the generation thread, after whatever it is doing; waits for the result."""
        return self._executor.submit(fn, *args).result()

    def take(self):
        """The batch submitted last (waits for it); nothing is ahead until the next `submit`."""
        future, self._next = self._next, None
        return future.result()

    def discard(self) -> None:
        """Drop the batch being generated ahead, once it is done (its prompts are taken again)."""
        if self._next is not None:
            self.take()

    @property
    def running(self) -> bool:
        return self._next is not None

    @property
    def groups_ahead(self) -> int:
        return self._groups if self._next is not None else 0

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)  # a background generation finishes before the pool stops
