"""An engine's queue of groups (workers/rollout/group_queue.py), with a fake generate: no Ray, no vLLM."""

import asyncio

import pytest

from orchestrator.contracts.groups import GroupRequest, GroupResult
from orchestrator.contracts.sampling import SamplingConfig
from workers.rollout.group_queue import GroupQueue


def _request(group_id: int, n: int = 4) -> GroupRequest:
    return GroupRequest(group_id, group_id, "p", [1, 2], n, SamplingConfig(max_tokens=4))


class FakeEngine:
    """Groups finish when the test says so; records which started and which were cancelled."""

    def __init__(self):
        self.started: list[int] = []
        self.cancelled: list[int] = []
        self.release: dict[int, asyncio.Future] = {}

    async def run(self, request: GroupRequest) -> GroupResult:
        self.started.append(request.group_id)
        self.release[request.group_id] = asyncio.get_running_loop().create_future()
        try:
            await self.release[request.group_id]
        except asyncio.CancelledError:
            self.cancelled.append(request.group_id)
            raise
        return GroupResult(request.group_id, 0, 0, [])

    async def finish_all(self) -> None:
        for future in self.release.values():
            if not future.done():
                future.set_result(None)
        await _settle()

    def finish(self, group_id: int, error: BaseException | None = None) -> None:
        if error is None:
            self.release[group_id].set_result(None)
        else:
            self.release[group_id].set_exception(error)


async def _settle():
    for _ in range(5):
        await asyncio.sleep(0)


def test_at_most_capacity_samples_run_and_the_queue_starts_the_moment_room_frees():
    async def main():
        engine = FakeEngine()
        queue = GroupQueue(engine.run, capacity=8)
        queue.submit(0, [_request(i) for i in range(4)])  # 4 groups of 4 samples: 2 fit
        await _settle()
        assert engine.started == [0, 1] and queue.held == 4
        engine.finish(0)
        await _settle()
        assert engine.started == [0, 1, 2]  # no driver call in between
        collected = await queue.collect(0, linger_s=0.0, refill_at=None)
        assert [r.group_id for r in collected.results] == [0] and collected.held == 3
        await engine.finish_all()

    asyncio.run(main())


def test_an_idle_engine_starts_a_group_larger_than_its_capacity():
    async def main():
        engine = FakeEngine()
        GroupQueue(engine.run, capacity=2).submit(0, [_request(0, n=8)])
        await _settle()
        assert engine.started == [0]

    asyncio.run(main())


def test_collect_lingers_for_more_results_but_not_past_the_last_one():
    async def main():
        engine = FakeEngine()
        queue = GroupQueue(engine.run, capacity=16)
        queue.submit(0, [_request(i) for i in range(3)])
        await _settle()
        engine.finish(0)
        collecting = asyncio.ensure_future(queue.collect(0, linger_s=30.0, refill_at=None))
        await _settle()
        engine.finish(1)
        await _settle()
        assert not collecting.done()  # lingering: group 2 is still running
        engine.finish(2)
        collected = await asyncio.wait_for(collecting, 1.0)  # nothing left held: returns at once
        assert sorted(r.group_id for r in collected.results) == [0, 1, 2] and collected.held == 0

    asyncio.run(main())


def test_collect_returns_at_once_when_the_queue_runs_low_and_the_driver_has_more():
    async def main():
        engine = FakeEngine()
        queue = GroupQueue(engine.run, capacity=4)
        queue.submit(0, [_request(i) for i in range(3)])  # one runs, two queued (8 samples)
        await _settle()
        engine.finish(0)  # group 1 starts: 4 samples queued
        collected = await asyncio.wait_for(queue.collect(0, linger_s=30.0, refill_at=4), 1.0)
        assert [r.group_id for r in collected.results] == [0] and collected.held == 2
        await engine.finish_all()

    asyncio.run(main())


def test_after_lingering_collect_returns_what_finished():
    async def main():
        engine = FakeEngine()
        queue = GroupQueue(engine.run, capacity=16)
        queue.submit(0, [_request(i) for i in range(2)])
        await _settle()
        engine.finish(0)
        collected = await asyncio.wait_for(queue.collect(0, linger_s=0.05, refill_at=None), 1.0)
        assert [r.group_id for r in collected.results] == [0] and collected.held == 1
        engine.finish(1)
        await _settle()

    asyncio.run(main())


def test_withdraw_gives_back_only_groups_not_started_and_results_then_come_at_once():
    async def main():
        engine = FakeEngine()
        queue = GroupQueue(engine.run, capacity=4)
        queue.submit(1, [_request(i) for i in range(3)])
        await _settle()
        assert [r.group_id for r in queue.withdraw(1)] == [1, 2]
        assert queue.withdraw(0) == []  # an older batch's: nothing
        collecting = asyncio.ensure_future(queue.collect(1, linger_s=30.0, refill_at=None))
        engine.finish(0)
        collected = await asyncio.wait_for(collecting, 1.0)
        assert [r.group_id for r in collected.results] == [0] and engine.started == [0]

    asyncio.run(main())


def test_a_failed_group_fails_the_collect_with_its_error():
    async def main():
        engine = FakeEngine()
        queue = GroupQueue(engine.run, capacity=16)
        queue.submit(0, [_request(0), _request(1)])
        await _settle()
        engine.finish(1, TimeoutError("group 1 past its deadline"))
        with pytest.raises(TimeoutError, match="group 1"):
            await asyncio.wait_for(queue.collect(0, linger_s=30.0, refill_at=None), 1.0)
        engine.finish(0)
        await _settle()

    asyncio.run(main())


def test_a_new_batch_cancels_what_an_abandoned_one_left_and_never_returns_its_results():
    async def main():
        engine = FakeEngine()
        queue = GroupQueue(engine.run, capacity=4)
        queue.submit(0, [_request(i) for i in range(3)])
        await _settle()
        old = asyncio.ensure_future(queue.collect(0, linger_s=30.0, refill_at=None))
        await _settle()
        queue.submit(1, [_request(10)])
        await _settle()
        assert engine.cancelled == [0] and engine.started == [0, 10]  # 1 and 2 never start
        assert (await asyncio.wait_for(old, 1.0)).results == []
        engine.finish(10)
        collected = await asyncio.wait_for(queue.collect(1, linger_s=30.0, refill_at=None), 1.0)
        assert [r.group_id for r in collected.results] == [10] and collected.held == 0

    asyncio.run(main())


def test_a_late_call_of_an_older_batch_changes_nothing():
    async def main():
        engine = FakeEngine()
        queue = GroupQueue(engine.run, capacity=4)
        queue.submit(1, [_request(0), _request(1)])
        await _settle()
        queue.submit(0, [_request(9)])  # reached the engine after batch 1's call
        assert queue.withdraw(0) == []
        await _settle()
        assert engine.started == [0] and engine.cancelled == [] and queue.held == 2
        engine.finish(0)
        collected = await asyncio.wait_for(queue.collect(1, linger_s=0.0, refill_at=None), 1.0)
        assert [r.group_id for r in collected.results] == [0] and collected.held == 1
        await engine.finish_all()

    asyncio.run(main())


def test_hand_back_gives_back_the_queue_stops_the_running_groups_and_their_results_come_at_once():
    async def main():
        engine = FakeEngine()
        stopped = []

        async def stop_running():  # the engine aborts its requests: each running group returns what it has
            stopped.append(sorted(engine.release))
            await engine.finish_all()

        queue = GroupQueue(engine.run, capacity=8, stop_running=stop_running)
        queue.submit(0, [_request(i) for i in range(4)])
        await _settle()
        collecting = asyncio.ensure_future(queue.collect(0, linger_s=60.0, refill_at=None))
        taken = await queue.hand_back(0)
        assert [request.group_id for request in taken] == [2, 3] and stopped == [[0, 1]]
        collected = await asyncio.wait_for(collecting, 1.0)  # no lingering: the engine is leaving
        assert sorted(result.group_id for result in collected.results) == [0, 1] and collected.held == 0
        assert await queue.hand_back(0) == [] and stopped == [[0, 1]]  # nothing runs: nothing to stop
        assert await queue.hand_back(-1) == []  # an older batch's call changes nothing

    asyncio.run(main())
