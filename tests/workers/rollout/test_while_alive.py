"""Agent groups on an engine whose vLLM process dies: the group fails with vLLM's engine-death error (which
the pool answers by replacing the engine and sending the group elsewhere), never with sessions scored as the
agent's own failures. `while_alive` with a stand-in for vLLM's `AsyncLLM` (its `errored` and `dead_error`)."""

import asyncio

import pytest

from workers.rollout.engine import while_alive


class EngineDeadError(Exception):
    pass


class FakeLLM:
    def __init__(self):
        self.errored = False

    @property
    def dead_error(self):
        return EngineDeadError("EngineCore encountered an issue")


def test_the_groups_result_while_the_engine_lives():
    async def sessions():
        await asyncio.sleep(0.05)
        return ["outcome"]

    assert asyncio.run(while_alive(FakeLLM(), sessions(), every_s=0.01)) == ["outcome"]


async def _sessions_until_cancelled(stopped: asyncio.Event):
    """Sessions that never end by themselves (an agent retrying its failed calls); `stopped` once cancelled."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        stopped.set()
        raise


def test_a_death_mid_group_ends_it_at_once_and_stops_its_sessions():
    """An agent that retries its failed calls would otherwise run until agent.session_timeout_s."""
    llm, stopped = FakeLLM(), asyncio.Event()

    async def main():
        group = asyncio.ensure_future(while_alive(llm, _sessions_until_cancelled(stopped), every_s=0.01))
        await asyncio.sleep(0.05)
        llm.errored = True
        with pytest.raises(EngineDeadError):
            await asyncio.wait_for(group, timeout=1.0)
        assert stopped.is_set()

    asyncio.run(main())


def test_sessions_that_ended_because_the_engine_died_do_not_count_as_the_agents_failures():
    """The sessions end first (each call answered with an error), the death is seen as they end."""
    llm = FakeLLM()

    async def failing_sessions():
        llm.errored = True
        return ["session g0-s0-0: the agent raised InternalServerError: EngineCore encountered an issue"]

    with pytest.raises(EngineDeadError):
        asyncio.run(while_alive(llm, failing_sessions(), every_s=10.0))


@pytest.mark.parametrize("gathered", [False, True], ids=["coroutine", "gather"])
def test_cancelling_the_group_cancels_its_sessions_and_leaves_no_unread_error(gathered, caplog):
    """The engine passes `asyncio.gather(...)` itself: cancelled with its group (rollout.request_timeout_s, a
    failed weight load), its CancelledError must not be logged as never retrieved."""
    import gc
    import logging

    async def main():
        stopped = asyncio.Event()
        sessions = _sessions_until_cancelled(stopped)
        group = asyncio.ensure_future(while_alive(FakeLLM(), asyncio.gather(sessions) if gathered else sessions, every_s=0.01))
        await asyncio.sleep(0.05)
        group.cancel()
        with pytest.raises(asyncio.CancelledError):
            await group
        await asyncio.sleep(0.01)
        assert stopped.is_set()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(main())
        gc.collect()
    assert "never retrieved" not in caplog.text
