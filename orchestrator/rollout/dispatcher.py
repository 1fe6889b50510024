"""Which engine gets the next group: the least loaded one, measured in samples in flight.

A plain class, so its policy is unit-tested without Ray and measurable at hundreds of engines.
Each engine holds at most `capacity` samples (the pool's: those it generates plus those queued
on it); more groups wait on the driver, so a slow engine hoards no more than its own queue, which
the pool takes back at the end of a batch.

The engines are kept in a heap ordered by (load, groups assigned, engine id), so a pick costs
O(log engines) rather than a scan of every engine per group. Entries are never updated in place:
a change pushes a fresh entry, and entries that no longer match an engine's state are dropped when
they reach the top (or all at once when they outnumber the live ones).
"""

from __future__ import annotations

import heapq


class LeastLoadedDispatcher:
    def __init__(self, engine_ids: list[int], capacity: int):
        self.capacity = capacity
        self.load = {engine_id: 0 for engine_id in engine_ids}
        self.assigned = {engine_id: 0 for engine_id in engine_ids}
        self._heap: list[tuple[int, int, int]] = []
        self._rebuild()

    def pick(self, cost: int, avoid: set[int] | None = None) -> int | None:
        """The engine for a group of `cost` samples, or None if every engine is full.

        An idle engine always accepts, so a group larger than `capacity` still runs. Ties go to
        the engine that was given the fewest groups so far, which spreads a small batch evenly.
        Only the least loaded engine needs checking: if it cannot take the group, none can. With
        engines to `avoid` (rare: poison.py), the others are scanned instead.
        """
        if avoid:
            others = [(load, self.assigned[e], e) for e, load in self.load.items() if e not in avoid]
            load, _, engine_id = min(others, default=(None, None, None))
            return engine_id if load is not None and (load == 0 or load + cost <= self.capacity) else None
        heap = self._heap
        while heap:
            load, assigned, engine_id = heap[0]
            if self.load.get(engine_id) != load or self.assigned[engine_id] != assigned:
                heapq.heappop(heap)  # stale: the engine changed since, or is gone
                continue
            return engine_id if load == 0 or load + cost <= self.capacity else None
        return None

    def started(self, engine_id: int, cost: int) -> None:
        self.load[engine_id] += cost
        self.assigned[engine_id] += 1
        self._push(engine_id)

    def add(self, engine_id: int) -> None:
        self.load.setdefault(engine_id, 0)
        self.assigned.setdefault(engine_id, 0)
        self._push(engine_id)

    def remove(self, engine_id: int) -> None:
        """A dead or drained engine takes no more groups; its pending finishes are ignored."""
        self.load.pop(engine_id, None)
        self.assigned.pop(engine_id, None)

    def finished(self, engine_id: int, cost: int) -> None:
        if engine_id not in self.load:
            return
        self.load[engine_id] -= cost
        if self.load[engine_id] < 0:
            raise RuntimeError(f"engine {engine_id} finished more samples than it was given")
        self._push(engine_id)

    def _push(self, engine_id: int) -> None:
        if len(self._heap) > 4 * len(self.load) + 64:
            self._rebuild()
        else:
            heapq.heappush(self._heap, (self.load[engine_id], self.assigned[engine_id], engine_id))

    def _rebuild(self) -> None:
        self._heap = [(load, self.assigned[engine_id], engine_id) for engine_id, load in self.load.items()]
        heapq.heapify(self._heap)
