"""Score groups while the others still generate, several groups per reward task.

A reward task per group would start scoring the moment a group is back, but each Ray task costs
milliseconds of scheduling and a worker process's time whatever it scores, and on a small machine
it takes that time from the engines: at hundreds of groups per second the tasks fall behind
generation, and on a small step the overlap saves less than the tasks cost. Here a task starts
once `min_samples` samples wait (`reward_batch_samples`), and at most `max_tasks` run at once;
groups that come back meanwhile wait on the driver and go together in the next task. Whatever
still waits when generation ends is scored then. So a step smaller than `min_samples` is scored
in one task at the end, and a large one overlaps generation with tasks that grow instead of
multiplying.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from orchestrator.contracts.groups import GroupRequest, GroupResult


class RewardBatches:
    def __init__(
        self, submit: Callable[[list[GroupRequest], list[GroupResult]], object], max_tasks: int = 2, min_samples: int = 1
    ):
        """`submit(requests, results)` starts one reward task over those groups (rows in that
        order, each group's samples together) and returns its ObjectRef."""
        self._submit = submit
        self.max_tasks = max_tasks
        self.min_samples = min_samples
        self._waiting: list[tuple[GroupRequest, GroupResult]] = []
        self._waiting_samples = 0
        self._running = 0  # tasks not finished yet (each lowers it when done, from Ray's thread)
        self._lock = threading.Lock()
        self._tasks: list[tuple[object, list[tuple[int, int]]]] = []  # (ref, [(group id, rows)])

    def add(self, request: GroupRequest, result: GroupResult) -> None:
        """A group came back: score it with those waiting once enough wait and a task slot is free."""
        self._waiting.append((request, result))
        self._waiting_samples += len(result.samples)
        if self._waiting_samples >= self.min_samples and self._running < self.max_tasks:
            self.close()

    def close(self) -> RewardBatches:
        """Start a task for every group still waiting (call once generation is over)."""
        if self._waiting:
            requests, results = zip(*self._waiting)
            ref = self._submit(list(requests), list(results))
            self._tasks.append((ref, [(result.group_id, len(result.samples)) for result in results]))
            with self._lock:
                self._running += 1
            ref.future().add_done_callback(self._task_done)
            self._waiting, self._waiting_samples = [], 0
        return self

    def _task_done(self, _future) -> None:
        with self._lock:
            self._running -= 1

    @property
    def tasks(self) -> int:
        return len(self._tasks)

    def per_group(self, get: Callable[[object], dict]) -> dict[int, dict]:
        """Each group's scores (`get` fetches a task's result): lists cut to the group's rows; a
        task's `reward_errors` count goes to its first group so that sums stay right."""
        scores = {}
        for ref, groups in self._tasks:
            task = get(ref)
            row = 0
            for position, (group_id, rows) in enumerate(groups):
                scores[group_id] = {
                    key: (value if position == 0 else 0) if key == "reward_errors" else value[row : row + rows]
                    for key, value in task.items()
                }
                row += rows
        return scores
