"""An engine whose weight load fails part-way never resumes generation: it stays paused, refuses
groups (those waiting in the paused scheduler too) and takes no further loads. No vLLM here: a
stand-in scheduler records pause and resume."""

import asyncio

import pytest

from orchestrator.contracts.engine_death import WeightLoadFailedError
from workers.weights.loading import WeightLoads


class _Scheduler:
    def __init__(self):
        self.events = []

    async def pause(self):
        self.events.append("pause")

    async def resume(self):
        self.events.append("resume")


def _loads():
    scheduler = _Scheduler()
    return scheduler, WeightLoads(3, pause=scheduler.pause, resume=scheduler.resume)


async def _bad_load():
    raise KeyError("model.layers.9.mlp.up_proj.weight")


def test_a_load_that_succeeds_pauses_then_resumes():
    scheduler, loads = _loads()

    async def load():
        scheduler.events.append("load")
        return "digest"

    assert asyncio.run(loads.load(1, load)) == "digest"
    assert scheduler.events == ["pause", "load", "resume"] and not loads.failed


def test_a_load_that_raises_stays_paused_and_refuses_to_generate():
    scheduler, loads = _loads()
    failure = r"engine 3: loading policy version 2 failed part-way \(KeyError: 'model.layers.9"
    with pytest.raises(WeightLoadFailedError, match=failure):
        asyncio.run(loads.load(2, _bad_load))
    assert scheduler.events == ["pause"] and loads.failed  # never resumed
    with pytest.raises(WeightLoadFailedError, match="refuses to generate until the pool replaces it"):
        loads.check()  # what `RolloutEngine.generate` calls first


def test_a_failed_engine_takes_no_further_load():
    scheduler, loads = _loads()
    with pytest.raises(WeightLoadFailedError):
        asyncio.run(loads.load(2, _bad_load))

    async def good_load():
        scheduler.events.append("load")

    with pytest.raises(WeightLoadFailedError, match="version 2"):
        asyncio.run(loads.load(3, good_load))
    assert scheduler.events == ["pause"]


def test_groups_waiting_in_the_paused_scheduler_fail_when_the_load_fails():
    scheduler, loads = _loads()
    aborted = []

    async def group():  # a request held by the paused scheduler: it would wait forever
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            aborted.append("group")  # vLLM aborts the request here
            raise

    async def scenario():
        waiting = asyncio.ensure_future(loads.unless_failed(group()))
        await asyncio.sleep(0)
        with pytest.raises(WeightLoadFailedError):
            await loads.load(4, _bad_load)
        with pytest.raises(WeightLoadFailedError, match="version 4"):
            await asyncio.wait_for(waiting, timeout=5)

    asyncio.run(scenario())
    assert aborted == ["group"] and scheduler.events == ["pause"]


def test_groups_finish_normally_when_no_load_fails():
    _, loads = _loads()

    async def group():
        await asyncio.sleep(0)
        return ["sample"]

    assert asyncio.run(loads.unless_failed(group())) == ["sample"]
