"""Tool calls through a real Ray tool host: results, failures and deadlines become observations."""

import asyncio
import time
from pathlib import Path

import pytest

from orchestrator.contracts.errors import UserError
from orchestrator.contracts.tools import ToolConfig
from workers.tools.runner import RayToolRunner, resolve

TOOLS = Path(__file__).with_name("flaky_tools.py")


def tool(name: str, timeout_s: float = 5.0) -> ToolConfig:
    return ToolConfig(name=name, fn=f"{TOOLS}:{name}", begin="<search>", end="</search>", timeout_s=timeout_s)


@pytest.fixture(scope="module")
def runner(ray_session):
    runner = RayToolRunner()
    yield runner
    runner.shutdown()


def call(runner, config: ToolConfig, text: str = " apple "):
    return asyncio.run(runner(config, text, {"prompt": "p", "group_id": 0, "sample_index": 2, "turn": 0}))


def test_a_tool_gets_the_call_text_and_the_context(runner):
    assert call(runner, tool("echo"))[:2] == ("apple@2", "ok")
    assert call(runner, tool("async_echo"))[:2] == ("APPLE", "ok")


def test_a_tool_that_raises_is_an_error_naming_the_tool_and_the_exception(runner):
    reason, status, _ = call(runner, tool("raises"))
    assert status == "error"
    assert "tool 'raises' raised ValueError: no index for 'apple'" in reason


def test_a_tool_past_its_deadline_is_a_timeout_and_does_not_block_other_calls(runner):
    start = time.perf_counter()

    async def both():
        return await asyncio.gather(
            runner(tool("sleeps", timeout_s=0.5), "x", {}), runner(tool("echo"), " b ", {"sample_index": 1})
        )

    (reason, status, latency), (result, ok, _) = asyncio.run(both())
    assert (status, ok, result) == ("timeout", "ok", "b@1")
    assert reason == "tool 'sleeps' did not answer within 0.5s" and 0.5 <= latency < 5
    assert time.perf_counter() - start < 5  # the 30 s sleep was not waited for


def test_a_tool_that_returns_a_non_string_is_an_error(runner):
    reason, status, _ = call(runner, tool("returns_number"))
    assert status == "error" and "returned int, expected str" in reason


def test_a_misspelt_tool_is_refused_with_its_config_key():
    with pytest.raises(UserError, match=r"tools\[1\]\.fn: .* has no function 'nope'"):
        resolve(f"{TOOLS}:nope", key="tools[1].fn")
    with pytest.raises(UserError, match=r"unknown built-in 'builtin:serch'"):
        resolve("builtin:serch")


def test_a_tool_the_host_cannot_import_stops_the_run_instead_of_becoming_an_observation(runner):
    missing = ToolConfig(name="gone", fn="/nowhere/tools.py:lookup", begin="<search>", end="</search>")
    with pytest.raises(UserError, match="file /nowhere/tools.py does not exist"):
        call(runner, missing)
