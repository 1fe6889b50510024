"""Async mode (`max_staleness: N`, N >= 1): up to N steps' batches are generated ahead while the
learner trains.

One background thread owns the pool and works through what it is given in order, so pool changes
(scaling requests, replacements) never race with a running generation. Batches are generated one
after the other, in stream order; `call` (an evaluation, a group generated again) goes before the
batches still waiting, after the one generating. `groups_ahead` says how far the prompt stream has
run ahead of what was trained on, so a checkpoint records the position a resume starts from.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from collections.abc import Callable


class Prefetcher:
    def __init__(self, generate: Callable[[list], object]):
        """`generate(requests)` runs on the background thread and returns the step's batch."""
        self._generate = generate
        self._jobs: collections.deque = collections.deque()  # (future, fn, args), not started yet
        self._ahead: collections.deque = collections.deque()  # (future, requests) of each batch, oldest first
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="generate", daemon=True)
        self._thread.start()

    def submit(self, requests: list) -> None:
        """Generate the batch of `requests` after those submitted before."""
        self._ahead.append((self._put(self._generate, (requests,), first=False), requests))

    def call(self, fn, *args):
        """`fn(*args)` on the generation thread, after the batch it is generating and before those still
        waiting; waits for the result."""
        return self._put(fn, args, first=True).result()

    def take(self) -> tuple[list, object]:
        """(requests, batch) of the oldest batch submitted (waits for it)."""
        future, requests = self._ahead.popleft()
        return requests, future.result()

    def discard(self) -> None:
        """Drop every batch ahead (their prompts are taken again): those waiting are not generated, the
        one generating is waited for (its error, if any, is raised)."""
        futures = [future for future, _ in self._ahead]
        self._ahead.clear()
        started = [future for future in futures if not future.cancel()]
        errors = [error for error in (future.exception() for future in started) if error is not None]
        if errors:
            raise errors[0]

    @property
    def running(self) -> bool:
        """Whether a batch is ahead, so the generation thread may be inside the pool."""
        return bool(self._ahead)

    @property
    def batches_ahead(self) -> int:
        return len(self._ahead)

    @property
    def groups_ahead(self) -> int:
        return sum(len(requests) for _, requests in self._ahead)

    def shutdown(self) -> None:
        """Stop: batches not started are dropped, the one generating finishes before the pool stops."""
        with self._wake:
            self._closed = True
            for future, _, _ in self._jobs:
                future.cancel()
            self._wake.notify()
        self._thread.join()

    def _put(self, fn, args, first: bool) -> concurrent.futures.Future:
        future = concurrent.futures.Future()
        with self._wake:
            if self._closed:
                raise RuntimeError("the generation thread has stopped")
            (self._jobs.appendleft if first else self._jobs.append)((future, fn, args))
            self._wake.notify()
        return future

    def _work(self) -> None:
        while True:
            with self._wake:
                while not self._jobs and not self._closed:
                    self._wake.wait()
                if self._closed and not self._jobs:
                    return
                future, fn, args = self._jobs.popleft()
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while waiting
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # noqa: BLE001 - handed to whoever waits on it
                future.set_exception(error)
