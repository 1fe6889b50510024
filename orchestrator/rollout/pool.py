"""`RolloutPool`: sends groups to the engines of an `EngineGroup` and collects what comes back.

`generate` sends each group to the least-loaded serving engine (dispatcher.py), never more than
`rollout.max_inflight_samples` samples to one engine, and returns results as they finish; callers
get them back in any order and assemble by group id. A group whose engine died goes back to the
queue for the live engines, and the group replaces the engine (engine_group.py): the pool runs
degraded on the engines it has and fails only when none are left.

The pool is the front door to its engines: resizing (`resize`), replacing (`drop`) and weight syncs
(`sync_weights`) go through it, and nothing outside orchestrator/rollout/ touches its `EngineGroup`.

Engines come from a launcher (launcher.py): one vLLM actor each by default, or simulated engines,
which is how `python -m orchestrator simulate` measures this file at hundreds of engines.
"""

from __future__ import annotations

import collections
import concurrent.futures
import queue
from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.contracts.engine_death import is_engine_death
from orchestrator.contracts.errors import UserError
from orchestrator.contracts.groups import GroupRequest, GroupResult
from orchestrator.rollout.dispatcher import LeastLoadedDispatcher
from orchestrator.rollout.engine_group import EngineFailedError, EngineGroup
from orchestrator.rollout.health import EngineWedgedError, Watchdog

if TYPE_CHECKING:
    from orchestrator.learner.weights import PolicyWeights
    from workers.weights.transport import SyncReport


class RolloutPool:
    def __init__(self, engines: EngineGroup):
        self.engines = engines

    def start(self) -> RolloutPool:
        self.engines.start()
        return self

    def shutdown(self) -> None:
        self.engines.shutdown()

    @property
    def size(self) -> int:
        """Engines serving now."""
        return len(self.engines.actors)

    @property
    def restarts(self) -> int:
        """Engines replaced so far."""
        return self.engines.restarts

    def resize(self, engines: int) -> None:
        """Grow or shrink to `engines` (see `EngineGroup.resize`); applied as `generate` runs."""
        self.engines.resize(engines)

    def sync_weights(self, weights: PolicyWeights, replace_now: bool = True) -> SyncReport:
        """Load `weights.version` into every serving engine, and drop those the sync found dead."""
        report = weights.sync(dict(self.engines.actors))
        self.drop(report.dead, replace_now)
        return report

    def drop(self, dead: dict[int, BaseException], replace_now: bool = True) -> None:
        """Replace engines that died, failed their load or missed a deadline. With `replace_now` False
        another thread may be inside `generate` (async mode), which owns the set of engines: the actor
        is only killed, and `generate` replaces it when its next call to it fails."""
        for engine_id, error in dead.items():
            if replace_now:
                self.engines.engine_died(engine_id, error)
            elif (actor := self.engines.actors.get(engine_id)) is not None:  # the generation thread may drop it first
                self.engines.launcher.kill(actor)

    def generate(self, requests: list[GroupRequest], on_result: Callable[[GroupResult], None] | None = None) -> list[GroupResult]:
        """Generate every group; results in completion order (assemble them by group id).

        Each group's ObjectRef reports to one queue as it resolves, so what the loop does per
        group does not grow with the groups in flight: a `ray.wait` over every in-flight ref
        would, and at hundreds of engines that is thousands of refs per finished group."""
        import ray

        engines = self.engines
        engines.admit_ready(block=False)
        dispatcher = LeastLoadedDispatcher(list(engines.actors), engines.config.max_inflight_samples)
        watchdog = Watchdog(
            engines.config.health_check_interval_s,
            engines.config.health_check_timeout_s,
            lambda engine_id, timeout_s: engines.actors[engine_id].responsive.remote(timeout_s).future(),
        )
        pending = collections.deque(requests)
        inflight: dict[concurrent.futures.Future, tuple[int, GroupRequest, object]] = {}  # -> engine, request, ref
        finished: queue.SimpleQueue[concurrent.futures.Future] = queue.SimpleQueue()
        groups_on = collections.Counter()  # engine id -> its groups in flight
        results = []
        while pending or inflight:
            idle = not inflight and not (set(engines.actors) - engines.draining)
            for engine_id in engines.admit_ready(block=idle):
                dispatcher.add(engine_id)
            if engines.draining:
                for engine_id in engines.draining:
                    dispatcher.remove(engine_id)
                engines.stop_drained(busy={engine_id for engine_id, count in groups_on.items() if count})
            if not engines.actors and not inflight:
                raise EngineFailedError("no rollout engine is left to generate with")
            while pending and (engine_id := dispatcher.pick(pending[0].num_generations)) is not None:
                request = pending.popleft()
                ref = engines.actors[engine_id].generate.remote(request)
                future = ref.future()
                inflight[future] = (engine_id, request, ref)
                future.add_done_callback(finished.put)
                dispatcher.started(engine_id, request.num_generations)
                groups_on[engine_id] += 1
            for engine_id, why in watchdog.check(e for e, count in groups_on.items() if count and e in engines.actors).items():
                # Killed: its groups fail as an engine death's do, below, and go to the others.
                print(f"warning: engine {engine_id} is wedged: {why}; replacing it", flush=True)
                engines.engine_died(engine_id, EngineWedgedError(f"engine {engine_id}: {why}"))
                dispatcher.remove(engine_id)
            for future in _drain(finished, timeout=1.0):
                engine_id, request, _ = inflight.pop(future)
                dispatcher.finished(engine_id, request.num_generations)
                groups_on[engine_id] -= 1
                try:
                    result = future.result()
                except ray.exceptions.RayError as error:
                    if isinstance(getattr(error, "cause", None), UserError):
                        raise error.cause from None  # a configuration problem (e.g. a tool), worded for the user
                    if not is_engine_death(error):
                        raise
                    engines.engine_died(engine_id, error)
                    dispatcher.remove(engine_id)
                    pending.appendleft(request)  # generated again on a live engine, exactly once
                    continue
                results.append(result)
                if on_result is not None:
                    on_result(result)
        engines.stop_drained(busy=set())
        return results


def _drain(finished: queue.SimpleQueue, timeout: float) -> list:
    """Everything in the queue, waiting up to `timeout` for the first item (none: empty list)."""
    try:
        items = [finished.get(timeout=timeout)]
    except queue.Empty:
        return []
    while True:
        try:
            items.append(finished.get_nowait())
        except queue.Empty:
            return items
