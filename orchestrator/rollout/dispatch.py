"""`Dispatch`: one `RolloutPool.generate` call, a batch of groups on its way through the engines.

The state of the batch lives here, and each thing that can happen to it is one method:

    admit()           engines that finished starting join; draining ones stop taking groups
    assign()          waiting groups go to the least-loaded engines with room (dispatcher.py)
    start_tail()      every group is out: queued groups are taken back for engines that free room first
    send(outgoing)    one `exchange` per engine carries its new groups and brings finished ones back
    withdraw(...)     at the tail, engines hand back the groups still queued on them; engines that stop
                      serving (drained, scaled down) hand back their running groups too, cut short,
                      and those continue on other engines from their last token (continued.py)
    check_health()    engines that hold groups and stopped answering are replaced (health.py)
    drain()           engines on nodes Ray is draining take no more groups and hand back what they hold
    collect(future)   a call came back: results are kept, a death sends the engine's groups elsewhere
    died(engine, e)   an engine is gone: its groups go back to the front of the queue, those that kept
                      killing engines fail by name (poison.py)

`run()` repeats them until every group has a result. Between any two of them these hold (`problems()`
checks them; the unit tests call it as results arrive):

    - each group is in one place: waiting (`pending`), on one engine (`held`), or done (`results`);
    - `holding` counts the groups on engines, and the dispatcher's load of an engine is the samples it holds;
    - every engine that holds groups is serving or draining; each has at most one `exchange` waiting
      (`calling`), and `side_calls` counts its other calls under way;
    - a group handed back unfinished carries one sample so far per sample index (continued.py).

Groups go out in batches and come back in
batches (workers/rollout/group_queue.py): each engine has at most one call waiting, `exchange`,
which carries the groups picked for it and returns with the groups it finished. Each call's future
reports to one queue as it resolves, so what the loop does per result does not grow with the
engines: a `ray.wait` over every waiting call would. An engine lingers up to engines /
`rollout.engine_calls_per_s` seconds to hand several results back together (less when half its
queue has started and more groups wait), so the more engines, the more results each call carries.
"""

from __future__ import annotations

import collections
import concurrent.futures
import queue
import time
from collections.abc import Callable

from orchestrator.contracts.engine_death import EngineWedgedError, is_engine_death
from orchestrator.contracts.errors import UserError
from orchestrator.contracts.groups import GroupRequest, GroupResult
from orchestrator.log import log
from orchestrator.rollout.collector import ResultFreezer
from orchestrator.rollout.continued import Rework, continued, handed_back
from orchestrator.rollout.dispatcher import LeastLoadedDispatcher
from orchestrator.rollout.fleet import EngineFailedError, EngineFleet
from orchestrator.rollout.health import Watchdog
from orchestrator.rollout.poison import GroupDeaths

WATCHDOG_TICK_S = 1.0  # how often the loop looks for wedged engines (each is asked every health_check_interval_s)
DRAIN_CHECK_S = 5.0  # how often it asks Ray which nodes are draining (a preemption notice gives 30 s or more)


class Dispatch:
    def __init__(
        self,
        engines: EngineFleet,
        requests: list[GroupRequest],
        batch: int,
        on_result: Callable[[GroupResult], None] | None = None,
        deaths: GroupDeaths | None = None,
        policy_version: int = 0,
        rework: Rework | None = None,
    ):
        """`batch` numbers this call on the engines (their queues hold one batch at a time); `deaths` counts
        engine deaths per group across batches, `policy_version` stamps the results of failed groups, and
        `rework` counts samples continued or generated again (continued.py)."""
        self.engines, self.batch, self.on_result = engines, batch, on_result
        config = self.config = engines.config
        self.deaths = deaths or GroupDeaths(config.max_group_deaths)
        self.policy_version = policy_version
        self.rework = rework or Rework()
        engines.admit_ready(block=False)
        self.queued = config.max_inflight_samples if config.max_queued_samples is None else config.max_queued_samples
        self.dispatcher = LeastLoadedDispatcher(list(engines.actors), config.max_inflight_samples + self.queued)
        self.watchdog = Watchdog(
            config.health_check_interval_s,
            config.health_check_timeout_s,
            lambda engine_id, timeout_s: engines.actors[engine_id].responsive.remote(timeout_s).future(),
        )
        self.pending = collections.deque(requests)
        self.held: dict[int, dict[int, GroupRequest]] = collections.defaultdict(dict)  # engine -> group id -> request
        self.holding = 0  # groups on engines
        self.calls: dict[concurrent.futures.Future, tuple[int, str]] = {}  # a waiting call -> its engine, its method
        self.calling: set[int] = set()  # engines with an `exchange` waiting
        self.side_calls = collections.Counter()  # engine -> its `submit` and `withdraw` calls under way
        self.finished: queue.SimpleQueue[concurrent.futures.Future] = queue.SimpleQueue()
        self.returned: set[int] = set()  # engines whose `exchange` came back since the loop last called them
        self.tail = not self.queued  # the last groups are out: engines with room get the queued ones
        self.to_withdraw: set[int] = set()  # engines to ask for their queued groups back, at the end of the batch
        self.to_hand_back: set[int] = set()  # engines that stop serving, to ask for every group they hold
        self.handing_back: set[int] = set()  # engines asked to (once is enough: they take no more groups)
        self.next_check = 0.0
        self.next_drain_check = 0.0
        self.results: list[GroupResult] = []
        self.freezer = ResultFreezer()  # results pile up: keep the collector from re-walking them (collector.py)

    def run(self) -> list[GroupResult]:
        """Every group's result, in completion order."""
        for request in [request for request in self.pending if self.deaths.failed(request)]:
            self.pending.remove(request)  # failed in an earlier batch: not sent to an engine again
            self._fail(request, engine_id=-1)
        while self.pending or self.holding:
            self.admit()
            outgoing = self.assign()
            self.start_tail()
            self.send(outgoing)
            self.withdraw(outgoing)
            self.returned.clear()
            self.check_health()
            self.drain()
            for future in _take_all(self.finished, timeout=WATCHDOG_TICK_S):
                self.collect(future)
        self.engines.stop_drained(busy=set())
        self.engines.finish_stops(timeout_s=0.0)
        return self.results

    def admit(self) -> None:
        """Engines that finished starting take groups from now on (with nothing else to wait for, wait
        for one); draining engines take no more and stop once they hold none, and stopped ones that
        closed are killed (no wait: the others generate meanwhile)."""
        engines = self.engines
        idle = not self.calling and not (set(engines.actors) - engines.draining)
        for engine_id in engines.admit_ready(block=idle):
            self.dispatcher.add(engine_id)
        if engines.draining:
            for engine_id in engines.draining:
                self.dispatcher.remove(engine_id)
                self._stop_serving(engine_id)
            engines.stop_drained(busy={engine_id for engine_id, groups in self.held.items() if groups})
        engines.finish_stops(timeout_s=0.0)
        if not engines.actors and not self.calling:
            raise EngineFailedError("no rollout engine is left to generate with")

    def assign(self) -> dict[int, list[GroupRequest]]:
        """Waiting groups, front first, each to the least-loaded engine with room for it: engine -> groups.
        A suspect (poison.py) goes only to an engine that holds no other suspect, or waits in its place."""
        outgoing: dict[int, list[GroupRequest]] = collections.defaultdict(list)
        waiting = []
        while self.pending:
            suspect = self.deaths.suspect(self.pending[0])
            engine_id = self.dispatcher.pick(self.pending[0].num_generations, self._holding_suspects() if suspect else None)
            if engine_id is None and suspect:
                waiting.append(self.pending.popleft())
                continue
            if engine_id is None:
                break
            request = self.pending.popleft()
            outgoing[engine_id].append(request)
            self.held[engine_id][request.group_id] = request
            self.holding += 1
            self.dispatcher.started(engine_id, request.num_generations)
        self.pending.extendleft(reversed(waiting))
        return outgoing

    def _holding_suspects(self) -> set[int]:
        return {e for e, groups in self.held.items() if any(self.deaths.suspect(r) for r in groups.values())}

    def start_tail(self) -> None:
        """Once every group is out, engines queue no more than they generate, and the groups waiting in
        their queues are to be taken back (`withdraw`): a batch's end waits for no engine's queue."""
        if not self.pending and not self.tail:
            self.tail = True
            self.dispatcher.capacity = self.config.max_inflight_samples
            self.to_withdraw = {engine_id for engine_id, groups in self.held.items() if groups}

    def send(self, outgoing: dict[int, list[GroupRequest]]) -> None:
        """New groups to their engines, and a new `exchange` to each engine that still holds groups."""
        linger_s = len(self.engines.actors) / self.config.engine_calls_per_s
        refill_at = self.queued // 2 if not self.tail else 0
        for engine_id in self.returned | outgoing.keys():
            if engine_id in self.calling:  # groups taken back at the end of the batch, or from a dead engine
                self._call(engine_id, "submit", outgoing[engine_id])
            elif self.held.get(engine_id):
                self._call(engine_id, "exchange", outgoing.get(engine_id, []), linger_s, refill_at if self.pending else None)

    def withdraw(self, outgoing: dict[int, list[GroupRequest]]) -> None:
        """Ask the tail's engines for their queued groups back, and engines that stop serving for every
        group they hold (`hand_back`: the running ones come back through `exchange`, cut short). After the
        engine's earlier calls of this batch, so that it gives back this batch's groups (and hands results
        back at once from then on); an engine sent groups just now is asked next pass."""
        for engine_id in [e for e in self.to_withdraw | self.to_hand_back if e not in outgoing and e not in self.returned]:
            method = "hand_back" if engine_id in self.to_hand_back else "withdraw"
            self.to_withdraw.discard(engine_id)
            self.to_hand_back.discard(engine_id)
            if self.held.get(engine_id):
                self._call(engine_id, method)

    def check_health(self) -> None:
        """Every WATCHDOG_TICK_S, the busy engines that stopped answering are replaced; killed, an engine's
        waiting call fails as a death's does, and its groups go to the others."""
        if time.monotonic() < self.next_check:  # each check looks at every busy engine: not once per result
            return
        self.next_check = time.monotonic() + WATCHDOG_TICK_S
        busy = [engine_id for engine_id, groups in self.held.items() if groups and engine_id in self.engines.actors]
        for engine_id, why in self.watchdog.check(busy).items():
            log.warning(f"engine {engine_id} is wedged: {why}; replacing it")
            self.died(engine_id, EngineWedgedError(f"engine {engine_id}: {why}"))

    def drain(self) -> None:
        """Every DRAIN_CHECK_S, engines on nodes Ray is draining are drained (fleet.py): they take
        no more groups and their queued ones are taken back; they finish what they started if their node
        lasts, and a death's handling covers the rest."""
        if time.monotonic() < self.next_drain_check:
            return
        self.next_drain_check = time.monotonic() + DRAIN_CHECK_S
        for engine_id in self.engines.drain_leaving_nodes():
            self.dispatcher.remove(engine_id)
            self._stop_serving(engine_id)

    def _stop_serving(self, engine_id: int) -> None:
        """A draining engine hands back its groups: every one with `rollout.continuation` (those running come
        back cut short and continue elsewhere), else its queued ones only (it finishes those it began)."""
        if not self.held.get(engine_id) or engine_id in self.handing_back:
            return
        self.handing_back.add(engine_id)
        (self.to_hand_back if self.config.continuation else self.to_withdraw).add(engine_id)

    def collect(self, future: concurrent.futures.Future) -> None:
        """A call came back."""
        engine_id, method = self.calls.pop(future)
        if method != "exchange":  # a failed one fails the engine's `exchange` too, which handles it
            self.side_calls[engine_id] -= 1
        if method in ("withdraw", "hand_back"):
            self._withdrawn(engine_id, future)
        elif method == "exchange" and engine_id in self.calling:  # else its engine was found wedged and replaced
            self.calling.discard(engine_id)
            self._exchanged(engine_id, future)

    def died(self, engine_id: int, error: BaseException) -> None:
        """The engine is replaced (fleet.py); its groups are generated again on live engines, exactly once,
        but for those that have now been on `max_group_deaths` dying engines: they fail (poison.py)."""
        leaving = engine_id in self.engines.draining  # its node went away: no group's fault
        self.engines.engine_died(engine_id, error)
        self.dispatcher.remove(engine_id)
        self.calling.discard(engine_id)
        lost = self.held.pop(engine_id, {})
        self.holding -= len(lost)
        for request in [] if leaving else self.deaths.engine_died(list(lost.values()), error):
            del lost[request.group_id]
            self._fail(request, engine_id)
        for request in lost.values():
            self.rework.lost(request, error)
        self.pending.extendleft(reversed(lost.values()))

    def _fail(self, request: GroupRequest, engine_id: int) -> None:
        result = self.deaths.result(request, engine_id, self.policy_version)
        log.warning(result.samples[0].error)
        self._finished(result)

    def _call(self, engine_id: int, method: str, *args) -> None:
        future = getattr(self.engines.actors[engine_id], method).remote(self.batch, *args).future()
        self.calls[future] = (engine_id, method)
        if method == "exchange":
            self.calling.add(engine_id)
        else:
            self.side_calls[engine_id] += 1
        future.add_done_callback(self.finished.put)

    def _finished(self, result: GroupResult) -> None:
        self.results.append(result)
        self.freezer.added()
        if self.on_result is not None:
            self.on_result(result)

    def _withdrawn(self, engine_id: int, future: concurrent.futures.Future) -> None:
        """The groups an engine handed back go to the end of the queue."""
        if engine_id not in self.held or future.exception() is not None:  # it died: its groups went back already
            return
        for request in future.result():
            if self.held[engine_id].pop(request.group_id, None) is not None:
                self.dispatcher.finished(engine_id, request.num_generations)
                self.holding -= 1
                self.pending.append(request)

    def _exchanged(self, engine_id: int, future: concurrent.futures.Future) -> None:
        """An engine's `exchange` came back with its finished groups, or failed."""
        import ray

        try:
            collected = future.result()
        except ray.exceptions.RayError as error:
            if isinstance(getattr(error, "cause", None), UserError):
                raise error.cause from None  # a configuration problem (e.g. a tool), worded for the user
            if not is_engine_death(error):
                raise
            self.died(engine_id, error)
            return
        mine = self.held[engine_id]
        if collected.results:
            self.watchdog.heard(engine_id)
        for result in collected.results:
            request = mine.pop(result.group_id)
            self.dispatcher.finished(engine_id, request.num_generations)
            self.holding -= 1
            if handed_back(result):  # its engine stops serving: the group goes on elsewhere, first
                self.rework.handed_back(request, result)
                self.pending.appendleft(continued(request, result))
                continue
            self.deaths.came_back(request)
            self._finished(result)
        if mine and not collected.results and not collected.held and not self.side_calls[engine_id]:
            raise RuntimeError(f"engine {engine_id} holds none of the {len(mine)} group(s) the driver gave it")
        self.returned.add(engine_id)


def problems(dispatch: Dispatch) -> list[str]:
    """The invariants in the module docstring that do not hold for `dispatch` (none: [])."""
    found = []
    where = collections.Counter(r.group_id for r in dispatch.pending)
    where.update(group_id for groups in dispatch.held.values() for group_id in groups)
    where.update(result.group_id for result in dispatch.results)
    found += [f"group {group_id} is in {count} places" for group_id, count in where.items() if count > 1]
    if dispatch.holding != sum(len(groups) for groups in dispatch.held.values()):
        found.append(f"holding is {dispatch.holding}, engines hold {sum(len(g) for g in dispatch.held.values())} groups")
    for engine_id, groups in dispatch.held.items():
        if groups and engine_id not in dispatch.engines.actors:
            found.append(f"engine {engine_id} holds {len(groups)} group(s) but does not serve")
        held = sum(request.num_generations for request in groups.values())
        if dispatch.dispatcher.load.get(engine_id, held) != held:
            found.append(f"engine {engine_id} holds {held} samples, the dispatcher counts {dispatch.dispatcher.load[engine_id]}")
    exchanges = collections.Counter(engine_id for engine_id, method in dispatch.calls.values() if method == "exchange")
    if set(exchanges) != dispatch.calling or any(count > 1 for count in exchanges.values()):
        found.append(f"exchanges waiting {dict(exchanges)}, calling {sorted(dispatch.calling)}")
    side = collections.Counter(engine_id for engine_id, method in dispatch.calls.values() if method != "exchange")
    if +dispatch.side_calls != side:
        found.append(f"other calls under way {dict(side)}, counted {dict(+dispatch.side_calls)}")
    for request in [*dispatch.pending, *(r for groups in dispatch.held.values() for r in groups.values())]:
        if request.progress is not None and [s.sample_index for s in request.progress.samples] != list(
            range(request.num_generations)
        ):
            found.append(f"group {request.group_id} was handed back without one sample per index")
    return found


def _take_all(finished: queue.SimpleQueue, timeout: float) -> list:
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
