"""Tool calls through a real Ray tool host: results, failures and deadlines become observations; the
host runs the tools' files as the driver read them."""

import asyncio
import time
from pathlib import Path

import pytest

from orchestrator.contracts import user_functions
from orchestrator.contracts.errors import UserError
from orchestrator.contracts.tools import ToolConfig, ToolUse
from workers.tools.runner import RayToolRunner, ToolHost, resolve

TOOLS = Path(__file__).with_name("flaky_tools.py")


def tool(name: str, timeout_s: float = 5.0) -> ToolConfig:
    return ToolConfig(name=name, fn=f"{TOOLS}:{name}", begin="<search>", end="</search>", timeout_s=timeout_s)


@pytest.fixture(scope="module")
def runner(ray_session):
    runner = RayToolRunner()
    yield runner
    runner.shutdown()


def shipped(*tools: ToolConfig) -> ToolUse:
    """The tools as a run sends them to the engines: with their files as the driver read them."""
    files = user_functions.ship({config.fn: f"tools[{index}].fn" for index, config in enumerate(tools)})
    return ToolUse(tools=list(tools), max_turns=2, max_observation_tokens=64, error_observation="{error}", files=files)


def call(runner, config: ToolConfig, text: str = " apple ", use: ToolUse | None = None):
    context = {"prompt": "p", "group_id": 0, "sample_index": 2, "turn": 0}
    return asyncio.run(runner(use or shipped(config), config, text, context))


def test_a_tool_gets_the_call_text_and_the_context(runner):
    assert call(runner, tool("echo"))[:2] == ("apple@2", "ok")
    assert call(runner, tool("async_echo"))[:2] == ("APPLE", "ok")


def test_a_tool_that_raises_is_an_error_naming_the_tool_and_the_exception(runner):
    reason, status, _ = call(runner, tool("raises"))
    assert status == "error"
    assert "tool 'raises' raised ValueError: no index for 'apple'" in reason


def test_a_tool_past_its_deadline_is_a_timeout_and_does_not_block_other_calls(runner):
    slow, echo = tool("sleeps", timeout_s=0.5), tool("echo")
    use = shipped(slow, echo)
    start = time.perf_counter()

    async def both():
        return await asyncio.gather(runner(use, slow, "x", {}), runner(use, echo, " b ", {"sample_index": 1}))

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
    unshipped = ToolUse(tools=[tool("echo"), missing], max_turns=2, max_observation_tokens=64, error_observation="{error}")
    with pytest.raises(UserError, match=r"tools\[1\]\.fn: /nowhere/tools.py was not sent with the run"):
        call(runner, missing, use=unshipped)


def test_the_host_runs_the_drivers_copy_of_a_tool_file_that_its_disk_no_longer_has(runner, tmp_path):
    source = tmp_path / "my_tools.py"
    source.write_text("def version(call_text, **context):\n    return 'shipped ' + call_text.strip()\n")
    config = ToolConfig(name="version", fn=f"{source}:version", begin="<v>", end="</v>")
    use = shipped(config)
    source.unlink()
    assert call(runner, config, use=use)[:2] == ("shipped apple", "ok")


def test_a_host_loads_a_shipped_tool_file_once_and_names_the_tool_in_errors(tmp_path):
    source = tmp_path / "counting_tools.py"
    source.write_text("CALLS = []\ndef count(call_text, **context):\n    CALLS.append(call_text)\n    return str(len(CALLS))\n")
    files = user_functions.ship({f"{source}:count": "tools[0].fn"})
    source.write_text("def count(call_text, **context):\n    return 'the file on this disk'\n")
    host = ToolHost()
    calls = [asyncio.run(host.call(f"{source}:count", "tools[0].fn", files, "x", {})) for _ in range(3)]
    assert calls == ["1", "2", "3"]  # the driver's copy, one module: its globals persist between calls
    with pytest.raises(UserError, match=rf"tools\[2\]\.fn: '{source}' has no function 'nope'"):
        asyncio.run(host.call(f"{source}:nope", "tools[2].fn", files, "x", {}))
