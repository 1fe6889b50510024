"""How one agent session ends, as the engine records it (runner.run_session): its reward, or why it failed."""

import asyncio

from workers.agents.runner import run_session


def _ended(fn, timeout_s: float = 5.0):
    return asyncio.run(run_session(fn, client=None, inputs={"prompt": "p"}, key="g1-s0-1", timeout_s=timeout_s))


def test_a_session_past_its_deadline_and_an_agent_whose_own_call_timed_out_are_told_apart():
    async def slow(client, prompt):
        await asyncio.sleep(60)

    async def own_deadline(client, prompt):
        raise TimeoutError("the search tool did not answer")  # the agent's own, well within the session's time

    assert _ended(slow, timeout_s=0.1).error == "session g1-s0-1 did not finish within agent.session_timeout_s=0.1s"
    assert _ended(own_deadline).error == "session g1-s0-1: the agent raised TimeoutError: the search tool did not answer"


def _returning(value):
    async def agent(client, prompt):
        return value

    return agent


def test_a_session_returns_its_reward_or_none_and_anything_else_is_its_failure():
    assert _ended(_returning(0.5)).reward == 0.5
    assert _ended(_returning(None)).error is None
    assert "the agent returned inf" in _ended(_returning(float("inf"))).error
