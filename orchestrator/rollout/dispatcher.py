"""Which engine gets the next group: the least loaded one, measured in samples in flight.

A plain class, so its policy is unit-tested without Ray and measurable at hundreds of engines.
Each engine holds at most `capacity` samples; more groups wait on the driver, so a slow engine
never hoards a queue that faster engines could drain.
"""

from __future__ import annotations


class LeastLoadedDispatcher:
    def __init__(self, engine_ids: list[int], capacity: int):
        self.capacity = capacity
        self.load = {engine_id: 0 for engine_id in engine_ids}
        self.assigned = {engine_id: 0 for engine_id in engine_ids}

    def pick(self, cost: int) -> int | None:
        """The engine for a group of `cost` samples, or None if every engine is full.

        An idle engine always accepts, so a group larger than `capacity` still runs. Ties go to
        the engine that was given the fewest groups so far, which spreads a small batch evenly.
        """
        open_engines = [e for e, load in self.load.items() if load == 0 or load + cost <= self.capacity]
        if not open_engines:
            return None
        return min(open_engines, key=lambda e: (self.load[e], self.assigned[e], e))

    def started(self, engine_id: int, cost: int) -> None:
        self.load[engine_id] += cost
        self.assigned[engine_id] += 1

    def add(self, engine_id: int) -> None:
        self.load.setdefault(engine_id, 0)
        self.assigned.setdefault(engine_id, 0)

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
