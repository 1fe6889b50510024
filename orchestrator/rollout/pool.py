"""`RolloutPool`: sends groups to the engines of an `EngineGroup` and collects what comes back.

`generate` sends each group to the least-loaded serving engine (dispatcher.py), never more than
`rollout.max_inflight_samples` generating plus `rollout.max_queued_samples` queued on one engine, in
one call per engine for all the groups picked for it at once, and returns results as they finish;
callers get them back in any order and assemble by group id. Once every group is out, the groups
still queued on engines are taken back and go to whichever engines free room first, as the driver
would have sent them with no queues at all: a batch's end waits for no engine's queue. A group whose engine died goes back to the
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
import itertools
import queue
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.contracts.engine_death import is_engine_death
from orchestrator.contracts.errors import UserError
from orchestrator.contracts.groups import GroupRequest, GroupResult
from orchestrator.rollout.collector import ResultFreezer
from orchestrator.rollout.dispatcher import LeastLoadedDispatcher
from orchestrator.rollout.engine_group import EngineFailedError, EngineGroup
from orchestrator.rollout.health import EngineWedgedError, Watchdog

WATCHDOG_TICK_S = 1.0  # how often the loop looks for wedged engines (each is asked every health_check_interval_s)

if TYPE_CHECKING:
    from orchestrator.learner.weights import PolicyWeights
    from workers.weights.transport import SyncReport


class RolloutPool:
    def __init__(self, engines: EngineGroup):
        self.engines = engines
        self._batches = itertools.count()  # each `generate` call is a batch of its own on the engines

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

        Groups go out in batches and come back in batches (workers/rollout/group_queue.py): each
        engine has at most one call waiting, `exchange`, which carries the groups picked for it and
        returns with the groups it finished. Each call's future reports to one queue as it resolves,
        so what the loop does per result does not grow with the engines: a `ray.wait` over every
        waiting call would. An engine lingers up to engines / `rollout.engine_calls_per_s` seconds to
        hand several results back together (less when half its queue has started and more groups
        wait), so the more engines, the more results each call carries."""
        import ray

        engines = self.engines
        config = engines.config
        engines.admit_ready(block=False)
        queued = config.max_inflight_samples if config.max_queued_samples is None else config.max_queued_samples
        dispatcher = LeastLoadedDispatcher(list(engines.actors), config.max_inflight_samples + queued)
        watchdog = Watchdog(
            config.health_check_interval_s,
            config.health_check_timeout_s,
            lambda engine_id, timeout_s: engines.actors[engine_id].responsive.remote(timeout_s).future(),
        )
        batch = next(self._batches)
        pending = collections.deque(requests)
        held: dict[int, dict[int, GroupRequest]] = collections.defaultdict(dict)  # engine -> group id -> request
        calls: dict[concurrent.futures.Future, tuple[int, str]] = {}  # a waiting call -> its engine, its method
        calling: set[int] = set()  # engines with an `exchange` waiting
        side_calls = collections.Counter()  # engine -> its `submit` and `withdraw` calls under way
        tail = not queued  # the last groups are out: engines with room get the queued ones (module docstring)
        finished: queue.SimpleQueue[concurrent.futures.Future] = queue.SimpleQueue()
        returned: set[int] = set()  # engines whose `exchange` came back since the loop last called them
        results, holding, next_check = [], 0, 0.0  # holding: groups on engines
        to_withdraw: set[int] = set()  # engines to ask for their queued groups back, at the end of the batch

        def call(engine_id: int, method: str, *args) -> None:
            future = getattr(engines.actors[engine_id], method).remote(batch, *args).future()
            calls[future] = (engine_id, method)
            if method == "exchange":
                calling.add(engine_id)
            else:
                side_calls[engine_id] += 1
            future.add_done_callback(finished.put)

        freezer = ResultFreezer()  # results pile up: keep the collector from re-walking them (collector.py)

        def died(engine_id: int, error: BaseException) -> None:
            nonlocal holding
            engines.engine_died(engine_id, error)
            dispatcher.remove(engine_id)
            calling.discard(engine_id)
            lost = held.pop(engine_id, {})
            holding -= len(lost)
            pending.extendleft(reversed(lost.values()))  # generated again on live engines, exactly once

        while pending or holding:
            idle = not calling and not (set(engines.actors) - engines.draining)
            for engine_id in engines.admit_ready(block=idle):
                dispatcher.add(engine_id)
            if engines.draining:
                for engine_id in engines.draining:
                    dispatcher.remove(engine_id)
                engines.stop_drained(busy={engine_id for engine_id, groups in held.items() if groups})
            if not engines.actors and not calling:
                raise EngineFailedError("no rollout engine is left to generate with")
            outgoing: dict[int, list[GroupRequest]] = collections.defaultdict(list)
            while pending and (engine_id := dispatcher.pick(pending[0].num_generations)) is not None:
                request = pending.popleft()
                outgoing[engine_id].append(request)
                held[engine_id][request.group_id] = request
                holding += 1
                dispatcher.started(engine_id, request.num_generations)
            if not pending and not tail:  # every group is out: take back what waits in engines' queues
                tail = True
                dispatcher.capacity = config.max_inflight_samples
                to_withdraw = {engine_id for engine_id, groups in held.items() if groups}
            linger_s = len(engines.actors) / config.engine_calls_per_s
            refill_at = queued // 2 if not tail else 0
            for engine_id in returned | outgoing.keys():
                if engine_id in calling:  # groups taken back at the end of the batch, or from a dead engine
                    call(engine_id, "submit", outgoing[engine_id])
                elif held.get(engine_id):
                    call(engine_id, "exchange", outgoing.get(engine_id, []), linger_s, refill_at if pending else None)
            # After the engine's earlier calls of this batch, so that it gives back this batch's queue (and
            # hands results back at once from then on); an engine sent groups just now is asked next pass.
            for engine_id in [e for e in to_withdraw if e not in outgoing and e not in returned]:
                to_withdraw.discard(engine_id)
                if held.get(engine_id):
                    call(engine_id, "withdraw")
            returned.clear()
            if time.monotonic() >= next_check:  # each check looks at every busy engine: not once per result
                next_check = time.monotonic() + WATCHDOG_TICK_S
                busy = [engine_id for engine_id, groups in held.items() if groups and engine_id in engines.actors]
                for engine_id, why in watchdog.check(busy).items():
                    # Killed: its waiting call fails as an engine death's does, below, and its groups go to the others.
                    print(f"warning: engine {engine_id} is wedged: {why}; replacing it", flush=True)
                    died(engine_id, EngineWedgedError(f"engine {engine_id}: {why}"))
            for future in _drain(finished, timeout=WATCHDOG_TICK_S):
                engine_id, method = calls.pop(future)
                if method != "exchange":  # a failed one fails the engine's `exchange` too, which handles it
                    side_calls[engine_id] -= 1
                if method == "withdraw":
                    if engine_id in held and future.exception() is None:  # else it died: its groups went back already
                        for request in future.result():
                            if held[engine_id].pop(request.group_id, None) is not None:
                                dispatcher.finished(engine_id, request.num_generations)
                                holding -= 1
                                pending.append(request)
                if method != "exchange":
                    continue
                if engine_id not in calling:  # its engine was found wedged and replaced meanwhile
                    continue
                calling.discard(engine_id)
                try:
                    collected = future.result()
                except ray.exceptions.RayError as error:
                    if isinstance(getattr(error, "cause", None), UserError):
                        raise error.cause from None  # a configuration problem (e.g. a tool), worded for the user
                    if not is_engine_death(error):
                        raise
                    died(engine_id, error)
                    continue
                mine = held[engine_id]
                if collected.results:
                    watchdog.heard(engine_id)
                for result in collected.results:
                    dispatcher.finished(engine_id, mine.pop(result.group_id).num_generations)
                    holding -= 1
                    results.append(result)
                    freezer.added()
                    if on_result is not None:
                        on_result(result)
                if mine and not collected.results and not collected.held and not side_calls[engine_id]:
                    raise RuntimeError(f"engine {engine_id} holds none of the {len(mine)} group(s) the driver gave it")
                returned.add(engine_id)
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
