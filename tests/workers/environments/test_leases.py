"""Environment instances on a tool host (workers/environments/leases.py): TRL's pool ("construct once, reset
often"), its reset arguments, its tool-call results and order, and deadlines on the user's code."""

from __future__ import annotations

import asyncio
import textwrap

import pytest

from orchestrator.contracts.environments import SINGLE, Environment, EnvironmentUse
from orchestrator.contracts.user_functions import read
from workers.environments.leases import EnvironmentFailed, Leases

SOURCE = textwrap.dedent(
    '''
    import time

    made = []


    class Counter:
        def __init__(self):
            made.append(self)

        def reset(self, **columns):
            self.columns = columns
            if columns.get("boom"):
                raise RuntimeError("no board")
            return "ready" if columns.get("greet") else None

        def slow(self) -> str:
            """Sleep.

            Args:
            """
            time.sleep(5)
            return "late"

        def fail(self) -> str:
            raise ValueError("bad move")

        def listing(self) -> list:
            return [1, 2]

        async def get_reward(self) -> float:
            return float(len(self.columns))
    '''
)


def use(tmp_path, names=(SINGLE,)) -> EnvironmentUse:
    file = tmp_path / "counter.py"
    file.write_text(SOURCE)
    spec = f"{file}:Counter"
    environments = {name: Environment(spec=spec, class_name="Counter", owns_reward=True) for name in names}
    return EnvironmentUse(
        environments=environments, schemas={n: [] for n in names}, call_timeout_s=0.5, files={str(file): read(str(file), "test")}
    )


def leases() -> Leases:
    return Leases(lambda call: asyncio.to_thread(call))


def test_an_instance_is_made_once_and_reset_for_each_later_sample(tmp_path):
    environments, setup = leases(), use(tmp_path)

    async def scenario():
        first, _ = await environments.open(setup, SINGLE, {"a": 1})
        second, _ = await environments.open(setup, SINGLE, {"a": 2})  # in flight together: two instances
        environments.close(first)
        third, observation = await environments.open(setup, SINGLE, {"a": 3, "greet": True})
        return [environments._leased[i].instance for i in (second, third)], observation

    (second, third), observation = asyncio.run(scenario())
    assert second is not third and observation == "ready"
    assert len(type(third).__init__.__globals__["made"]) == 2  # the first instance was reused by the third sample


def test_reset_gets_the_row_and_only_several_environments_hide_the_routing_column(tmp_path):
    environments = leases()

    async def columns(setup, name):
        lease, _ = await environments.open(setup, name, {"prompt": "p", "environment": name})
        return environments._leased[lease].instance.columns

    assert asyncio.run(columns(use(tmp_path), SINGLE)) == {"prompt": "p", "environment": SINGLE}
    assert asyncio.run(columns(use(tmp_path, ("a", "b")), "a")) == {"prompt": "p"}


def test_tool_failures_become_trl_error_results_and_a_slow_tool_times_out(tmp_path):
    environments, setup = leases(), use(tmp_path)

    async def scenario():
        lease, _ = await environments.open(setup, SINGLE, {})
        first = environments._leased[lease].instance
        calls = [
            {"type": "function", "function": {"name": "fail", "arguments": {}}},
            {"type": "function", "function": {"name": "nope", "arguments": {}}},
            {"type": "other", "name": "x"},
            {"type": "function", "function": {"name": "listing", "arguments": [1]}},
            {"type": "function", "function": {"name": "listing", "arguments": {}}},
            {"type": "function", "function": {"name": "slow", "arguments": {}}},
        ]
        results = await environments.call(lease, calls, timeout_s=0.5)
        environments.close(lease)  # its slow call may still run: the instance is not handed to a later sample
        later, _ = await environments.open(setup, SINGLE, {})
        return results, environments._leased[later].instance is first

    results, reused = asyncio.run(scenario())
    statuses = [(r.name, r.status) for r in results]
    assert statuses == [
        ("fail", "error"),
        ("nope", "error"),
        ("x", "error"),
        ("listing", "error"),
        ("listing", "ok"),
        ("slow", "timeout"),
    ]
    assert results[0].content == "{'error': 'bad move'}"
    assert results[1].content == "{'error': 'Tool nope not found.'}"
    assert results[2].content == "{'error': 'Unsupported tool call type: other'}"
    assert "argument after ** must be a mapping" in results[3].content  # Python's words, as TRL gives them
    assert results[4].content == "[1, 2]"  # str(result), as the Parquet stores it
    assert "did not answer within 0.5s" in results[5].content
    assert not reused


def test_a_reset_that_raises_fails_the_sample_by_name_and_its_reward_is_awaited_otherwise(tmp_path):
    environments, setup = leases(), use(tmp_path)
    with pytest.raises(EnvironmentFailed, match=r"Counter.reset raised RuntimeError: no board"):
        asyncio.run(environments.open(setup, SINGLE, {"boom": True}))

    async def reward():
        lease, _ = await environments.open(setup, SINGLE, {"a": 1, "b": 2})
        return await environments.reward(lease, setup)

    assert asyncio.run(reward()) == 2.0
