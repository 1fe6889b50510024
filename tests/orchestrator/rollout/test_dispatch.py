"""`Dispatch` (one `RolloutPool.generate` call) on fake engines, without Ray: every group comes back
once, queues are taken back at the tail, a dead engine's groups go to the others, a group that kills
every engine it is on fails by name, a user error from an engine is raised as itself, and an engine that
loses groups stops the batch; an engine that stops serving hands back the groups it runs, cut short, and
they continue on the others."""

import concurrent.futures
import threading

import pytest
import ray

from orchestrator.contracts.errors import UserError
from orchestrator.contracts.groups import GroupRequest, GroupResult, Sample
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rollout.continued import Rework
from orchestrator.rollout.dispatch import Dispatch, problems
from orchestrator.rollout.fleet import EngineFailedError
from orchestrator.rollout.poison import GroupDeaths
from workers.rollout.group_queue import Collected


def _done(value=None, error: BaseException | None = None) -> concurrent.futures.Future:
    future = concurrent.futures.Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


class _Method:
    """`actor.method.remote(...).future()`, as Dispatch calls it: the fake runs at `remote` and its
    future is what `future()` hands back."""

    def __init__(self, engine, name):
        self.engine, self.name = engine, name

    def remote(self, batch, *args):
        self.answer = getattr(self.engine, self.name)(batch, *args)
        return self

    def future(self) -> concurrent.futures.Future:
        return self.answer


class FakeEngine:
    """Generates `per_call` groups at a time: each `exchange` answers after `delay_s` with the groups at
    the front of its queue, and `withdraw` gives back the others. `fail` makes `exchange` fail instead;
    `lose` makes it answer with nothing while holding groups."""

    def __init__(self, engine_id: int, per_call: int = 1000, delay_s: float = 0.0, fail=None, lose: bool = False, dies_with=None):
        """`dies_with`: a group id that kills the engine whenever it is sent there."""
        self.engine_id, self.per_call, self.delay_s, self.fail, self.lose = engine_id, per_call, delay_s, fail, lose
        self.dies_with = dies_with
        self.together: list[set[int]] = []  # the group ids it held, at each call
        self.queued: list[GroupRequest] = []
        self.seen: list[int] = []  # group ids taken, in order
        self.withdrawn: list[int] = []  # group ids given back
        self.progress: dict[int, object] = {}  # group id -> the progress it came with
        self.cut_short = False  # handed back: the groups it runs come back unfinished
        self._lock = threading.Lock()

    def __getattr__(self, name):
        if name in ("exchange", "submit", "withdraw", "hand_back", "responsive"):
            return _Method(self, "_" + name)
        raise AttributeError(name)

    def _exchange(self, batch, requests, linger_s, refill_at):
        self._submit(batch, requests)
        if self.fail is not None:
            return _done(error=self.fail)
        if self.dies_with in [request.group_id for request in self.queued]:
            return _done(error=ray.exceptions.ActorDiedError())
        future = concurrent.futures.Future()
        threading.Timer(self.delay_s, lambda: future.set_result(self._finish())).start()
        return future

    def _finish(self) -> Collected:
        with self._lock:
            if self.lose:
                return Collected([], 0)
            finished, self.queued = self.queued[: self.per_call], self.queued[self.per_call :]
            return Collected([GroupResult(r.group_id, self.engine_id, 0, self._samples(r)) for r in finished], len(self.queued))

    def _samples(self, request: GroupRequest) -> list[Sample]:
        """None for a group generated to the end (the fakes carry no samples); two tokens each, cut short, for
        a group running when the engine was handed back."""
        if not self.cut_short:
            return []
        return [Sample(i, "ab", [5, 6], [-0.1, -0.2], "abort", None, None) for i in range(request.num_generations)]

    def _submit(self, batch, requests):
        with self._lock:
            self.queued += requests
            self.together.append({request.group_id for request in self.queued})
            self.seen += [request.group_id for request in requests]
            self.progress.update({request.group_id: request.progress for request in requests})
        return _done()

    def _withdraw(self, batch):
        with self._lock:  # the front `per_call` groups are generating; the rest wait
            taken, self.queued = self.queued[self.per_call :], self.queued[: self.per_call]
            self.withdrawn += [request.group_id for request in taken]
        return _done(taken)

    def _hand_back(self, batch):
        self.cut_short = True
        return self._withdraw(batch)

    def _responsive(self, batch, timeout_s):
        return _done(True)


class FakeEngines:
    """What `Dispatch` uses of an `EngineFleet`: the serving actors, admission, draining, deaths."""

    def __init__(self, engines: list[FakeEngine], leaving: set[int] = frozenset(), **config):
        """`leaving`: engines whose node Ray drains, noticed at the first health check."""
        self.config = RolloutConfig(engines=len(engines), **config)
        self.actors = {engine.engine_id: engine for engine in engines}
        self.draining: set[int] = set()
        self.died: dict[int, BaseException] = {}
        self.leaving = set(leaving)
        self.stop_waits: set[float] = set()  # timeouts `finish_stops` was called with

    def drain_leaving_nodes(self) -> list[int]:
        drained, self.leaving = sorted(self.leaving), set()
        self.draining.update(drained)
        return drained

    def admit_ready(self, block: bool) -> list[int]:
        return []

    def stop_drained(self, busy: set[int]) -> None:
        pass

    def finish_stops(self, timeout_s: float) -> None:
        self.stop_waits.add(timeout_s)

    def engine_died(self, engine_id: int, error: BaseException) -> None:
        self.died[engine_id] = error
        del self.actors[engine_id]


def _run(dispatch: Dispatch) -> list[GroupResult]:
    """`dispatch.run()`, its invariants checked as every result arrives and at the end."""
    seen, handed_on = [], dispatch.on_result

    def check(result: GroupResult) -> None:
        seen.append(problems(dispatch))
        if handed_on is not None:
            handed_on(result)

    dispatch.on_result = check
    results = dispatch.run()
    assert seen and not any(seen) and problems(dispatch) == [] and not dispatch.held.get(0) and not dispatch.pending
    return results


def _requests(count: int, size: int = 4) -> list[GroupRequest]:
    return [GroupRequest(group, group, "p", [1], size, SamplingConfig()) for group in range(count)]


def test_every_group_comes_back_once_and_each_result_is_handed_on():
    engines = FakeEngines([FakeEngine(0), FakeEngine(1)], max_inflight_samples=8)
    handed = []
    results = _run(Dispatch(engines, _requests(10), batch=0, on_result=handed.append))
    assert sorted(result.group_id for result in results) == list(range(10))
    assert handed == results
    assert {result.engine_id for result in results} == {0, 1}  # both engines took groups
    assert engines.stop_waits == {0.0}  # stopped engines are killed as they close, never waited for


def test_groups_queued_on_a_slow_engine_at_the_tail_go_to_the_engine_with_room():
    slow = FakeEngine(0, per_call=1, delay_s=0.2)  # one group at a time, slowly
    fast = FakeEngine(1)
    engines = FakeEngines([slow, fast], max_inflight_samples=4, max_queued_samples=12)
    results = _run(Dispatch(engines, _requests(8), batch=0))
    assert sorted(result.group_id for result in results) == list(range(8))
    assert slow.withdrawn and set(slow.withdrawn) <= set(fast.seen)  # taken back and generated elsewhere
    assert {result.group_id for result in results if result.engine_id == 0}.isdisjoint(slow.withdrawn)


def test_a_dead_engines_groups_are_generated_once_on_the_others():
    dead = FakeEngine(0, fail=ray.exceptions.ActorDiedError())
    alive = FakeEngine(1)
    engines = FakeEngines([dead, alive], max_inflight_samples=8)
    results = _run(Dispatch(engines, _requests(6), batch=0))
    assert sorted(result.group_id for result in results) == list(range(6))
    assert {result.engine_id for result in results} == {1}
    assert list(engines.died) == [0] and set(dead.seen) <= set(alive.seen)


def test_a_group_that_kills_every_engine_it_is_on_fails_by_name_and_spends_no_more_engines():
    engines = [FakeEngine(engine_id, dies_with=3) for engine_id in range(5)]
    fleet = FakeEngines(engines, max_inflight_samples=8, max_group_deaths=2)  # two groups of 4 per engine
    deaths = GroupDeaths(limit=2)
    results = _run(Dispatch(fleet, _requests(12), batch=0, deaths=deaths, policy_version=6))
    assert sorted(result.group_id for result in results) == list(range(12))  # each once
    failed = [result for result in results if result.samples]  # the fakes' own results carry no samples
    assert [result.group_id for result in failed] == [3] and failed[0].policy_version == 6
    assert failed[0].samples[0].error.startswith("group 3 (prompt 3, generation only) failed: its prompt's groups were on 2")
    assert len(fleet.died) == 2  # the limit, not every engine
    first = next(iter(fleet.died))
    suspects = set(engines[first].seen)  # what the first engine to die held: each goes on alone among them
    assert all(len(held & suspects) <= 1 for engine in engines if engine.engine_id != first for held in engine.together)
    fresh = FakeEngine(9)
    again = _run(Dispatch(FakeEngines([fresh], max_inflight_samples=8), _requests(4), batch=1, deaths=deaths))
    assert [result.group_id for result in again if result.samples] == [3] and 3 not in fresh.seen  # failed at once


def test_an_engine_on_a_draining_node_hands_back_what_it_runs_cut_short_and_other_engines_continue_it():
    leaving = FakeEngine(0, per_call=1, delay_s=0.2)  # generates one group at a time: the rest wait queued
    staying = FakeEngine(1)
    engines = FakeEngines([leaving, staying], leaving={0}, max_inflight_samples=4, max_queued_samples=12)
    rework = Rework()
    results = _run(Dispatch(engines, _requests(12), batch=0, rework=rework))
    assert sorted(result.group_id for result in results) == list(range(12))  # each once
    assert {result.engine_id for result in results} == {1} and engines.draining == {0}  # it finished nothing itself
    (running,) = set(leaving.seen) - set(leaving.withdrawn)  # the group it had begun when the drain came
    progress = staying.progress[running]
    assert progress.handed_back == 1 and [s.completion_ids for s in progress.samples] == [[5, 6]] * 4
    assert rework.counts == {"samples_continued": 4, "tokens_continued": 8}
    assert set(leaving.withdrawn) <= set(staying.seen) and all(staying.progress[g] is None for g in leaving.withdrawn)


def test_without_continuation_a_draining_engine_hands_back_its_queued_groups_and_finishes_the_rest():
    leaving = FakeEngine(0, per_call=1, delay_s=0.2)
    staying = FakeEngine(1)
    engines = FakeEngines([leaving, staying], leaving={0}, max_inflight_samples=4, max_queued_samples=12, continuation=False)
    results = _run(Dispatch(engines, _requests(12), batch=0))
    assert sorted(result.group_id for result in results) == list(range(12))  # each once
    assert leaving.withdrawn and set(leaving.withdrawn) <= set(staying.seen)
    on_leaving = [result.group_id for result in results if result.engine_id == 0]
    assert len(on_leaving) <= 1 and set(on_leaving).isdisjoint(leaving.withdrawn)  # it finished what it had started
    assert engines.draining == {0}


def test_with_no_engine_left_the_batch_fails():
    engines = FakeEngines([FakeEngine(0, fail=ray.exceptions.ActorDiedError())], max_inflight_samples=8)
    with pytest.raises(EngineFailedError, match="no rollout engine is left"):
        Dispatch(engines, _requests(2), batch=0).run()


def test_a_user_error_inside_an_engine_is_raised_as_itself():
    error = ray.exceptions.RayTaskError("exchange", "traceback", UserError("tools: 'lookup' is not callable"))
    engines = FakeEngines([FakeEngine(0, fail=error)], max_inflight_samples=8)
    with pytest.raises(UserError, match="tools: 'lookup' is not callable"):
        Dispatch(engines, _requests(2), batch=0).run()


def test_an_engine_that_loses_its_groups_stops_the_batch():
    engines = FakeEngines([FakeEngine(0, lose=True)], max_inflight_samples=8)
    with pytest.raises(RuntimeError, match="engine 0 holds none of the 2 group"):
        Dispatch(engines, _requests(2), batch=0).run()
