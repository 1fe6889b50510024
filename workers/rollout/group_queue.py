"""An engine's side of batched dispatch: the groups the driver handed it, started as room frees, and
their results handed back several at a time.

The driver (orchestrator/rollout/pool.py) sends an engine several groups in one call and collects its
finished groups in one call, so its Ray calls do not grow with the groups (at a thousand engines a
call per group costs more driver CPU than the engines leave it). For that to cost the engines nothing,
an engine holds more groups than it runs: up to `capacity` samples generate at once, and the groups
queued behind them start the moment a running group ends, not a driver round trip later.

`collect` waits for finished groups and returns them together: as soon as nothing else is held, or
the queue is down to `refill_at` samples while the driver has more work (so the driver's next groups
arrive before the engine runs dry), and otherwise `linger_s` after the first one finished. A plain asyncio class: the vLLM actor and the simulated
engines run the same one, and its tests need no Ray.

At the end of a batch the driver takes back the queued groups (`withdraw`) and sends them to the
engines that have room, so no engine is left with a queue while another idles. An engine that stops
serving mid-batch gives back its queue and stops its running groups too (`hand_back`): they come back
at once with what they generated so far, to continue on other engines (continuation.py).

Each driver call of `generate` is a batch with its own number. Groups of an older batch (one the
driver gave up on: an error, an interrupted step) are cancelled when a new batch arrives, so they
neither hold room nor come back mixed into the new batch's results.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Awaitable, Callable

from orchestrator.contracts.groups import GroupRequest, GroupResult


@dataclasses.dataclass(frozen=True)
class Collected:
    results: list[GroupResult]
    held: int  # groups the engine still holds (queued or running) after handing these back


class GroupQueue:
    def __init__(
        self,
        run: Callable[[GroupRequest], Awaitable[GroupResult]],
        capacity: int,
        stop_running: Callable[[], Awaitable[None]] | None = None,
    ):
        """`run(request)` generates one group; at most `capacity` samples run at once (an idle engine
        always starts the next group, however large). `stop_running()` makes the running groups return at
        once with what they have (`hand_back`; None: they finish)."""
        self._run = run
        self._stop_running = stop_running
        self.capacity = capacity
        self._batch: int | None = None
        self._queued: collections.deque[GroupRequest] = collections.deque()
        self._running: dict[asyncio.Task, int] = {}  # task -> its group's samples
        self._samples = 0  # samples of the running groups
        self._done: list[GroupResult] = []
        self._failure: BaseException | None = None
        self._eager = False  # the driver has taken the queue back: hand results back as they come
        self._changed = asyncio.Event()

    @property
    def held(self) -> int:
        return len(self._queued) + len(self._running)

    def submit(self, batch: int, requests: list[GroupRequest]) -> None:
        """Queue `requests` of driver batch `batch` (a new batch drops whatever an older one left; a
        late call of an older batch is ignored)."""
        if self._follow(batch):
            self._queued.extend(requests)
            self._start()

    def withdraw(self, batch: int) -> list[GroupRequest]:
        """Give back the queued groups that have not started (the driver sends them to engines with room
        at the end of a batch), and from now on hand results back as they come."""
        if not self._follow(batch):
            return []
        taken = list(self._queued)
        self._queued.clear()
        self._eager = True
        self._changed.set()
        return taken

    async def hand_back(self, batch: int) -> list[GroupRequest]:
        """The engine stops serving (a drain, a scale-down): give back the queued groups, as `withdraw`, and
        stop the running ones, which come back through `collect` with their samples so far."""
        taken = self.withdraw(batch)
        if batch == self._batch and self._running and self._stop_running is not None:
            await self._stop_running()
        return taken

    async def collect(self, batch: int, linger_s: float, refill_at: int | None) -> Collected:
        """Wait for finished groups and return them all (see the module docstring for when). `refill_at`:
        the driver has groups waiting that it would send here once no more than this many samples are
        queued (None: it has none). Raises the first group's failure."""
        loop = asyncio.get_running_loop()
        deadline = None
        while batch == self._batch:
            if self._failure is not None:
                raise self._failure
            if self._done:
                if not self.held or (self._eager and not self._queued) or self._refill(refill_at):
                    break
                deadline = deadline or loop.time() + linger_s
                if loop.time() >= deadline:
                    break
            elif not self.held:
                break
            self._changed.clear()
            timeout = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                pass
        if batch != self._batch:  # a newer batch replaced this one meanwhile: nothing here is its
            return Collected([], 0)
        done, self._done = self._done, []
        return Collected(done, self.held)

    def _refill(self, refill_at: int | None) -> bool:
        return refill_at is not None and sum(request.num_generations for request in self._queued) <= refill_at

    def _start(self) -> None:
        while self._queued and (not self._running or self._samples + self._queued[0].num_generations <= self.capacity):
            request = self._queued.popleft()
            task = asyncio.ensure_future(self._run(request))
            self._running[task] = request.num_generations
            self._samples += request.num_generations
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task) -> None:
        if task not in self._running:  # of a dropped batch
            return
        self._samples -= self._running.pop(task)
        if task.cancelled():
            self._failure = self._failure or asyncio.CancelledError("a group was cancelled on the engine")
        elif task.exception() is not None:
            self._failure = self._failure or task.exception()
        else:
            self._done.append(task.result())
        self._start()
        self._changed.set()

    def _follow(self, batch: int) -> bool:
        """Move to `batch` if it is newer; False for a call of an older one."""
        if self._batch is not None and batch < self._batch:
            return False
        if batch != self._batch:
            self._drop_batch(batch)
        return True

    def _drop_batch(self, batch: int) -> None:
        for task in self._running:
            task.cancel()
        self._running.clear()
        self._queued.clear()
        self._samples = 0
        self._done = []
        self._failure = None
        self._eager = False
        self._batch = batch
        self._changed.set()  # a collect of the old batch returns
