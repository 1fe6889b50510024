"""Tool calls run off the engine, in a Ray actor beside it, with a deadline; a failure becomes an
observation.

Each engine gets a `ToolHost` actor (on its node where possible) that runs calls concurrently: a
plain function in a thread, an `async def` on the host's event loop. The engine's event loop only
awaits, so a slow tool never stalls the other samples in flight, and a worker process per call
(seconds to start on a small machine) is never paid. A tool that raises, returns something other
than a string, or misses its `timeout_s` gives the model the configured error observation
(`tool_error_observation`); the call is recorded with status "error" or "timeout" and counted in
the run's metrics, and the run goes on. A call past its deadline is cancelled; a plain function
cannot be interrupted, so its thread finishes in the background, and once `CALL_THREADS` calls
were abandoned the host is replaced. A host that dies (a tool that crashes its process) is
restarted by Ray. Each call carries the tools' files as the driver read them (`ToolUse.files`, a few
kilobytes), so the host runs that code whatever its node's disk holds, a host restarted by Ray
included. A tool that cannot be imported on the host's node stops the run with the error.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import time
from collections.abc import Callable, Mapping

from orchestrator.contracts import builtins, user_functions
from orchestrator.contracts.environments import EnvironmentUse
from orchestrator.contracts.errors import UserError
from orchestrator.contracts.tools import ToolConfig, ToolUse
from orchestrator.contracts.user_functions import UserFile
from workers.environments.chat_loop import ToolResult
from workers.environments.leases import EnvironmentFailed, Leases

CALL_THREADS = 64  # concurrent plain-function calls per host
HOST_START_S = 120.0  # deadline for a tool host to come up


def resolve(spec: str, key: str = "tools.fn", files: Mapping[str, UserFile] | None = None) -> Callable:
    """The tool function `spec` names, from `files` (the driver's copies) where they hold its file."""
    return user_functions.resolve(spec, key, builtins.TOOLS, files)


class ToolHost:
    """Runs tool functions by spec, and holds the environments of TRL-style tool calling
    (workers/environments/leases.py); created through `ray.remote(ToolHost)`."""

    def __init__(self):
        self._threads = concurrent.futures.ThreadPoolExecutor(CALL_THREADS, thread_name_prefix="tool")
        self.environments = Leases(self._in_thread)

    async def _in_thread(self, call):
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    async def open(self, use: EnvironmentUse, name: str, inputs: dict) -> tuple[str, str | None]:
        return await self.environments.open(use, name, inputs)

    async def call_tools(self, lease_id: str, tool_calls: list[dict], timeout_s: float) -> list[ToolResult]:
        return await self.environments.call(lease_id, tool_calls, timeout_s)

    async def reward(self, lease_id: str, use: EnvironmentUse) -> float | None:
        return await self.environments.reward(lease_id, use)

    def close(self, lease_id: str, reuse: bool) -> None:
        self.environments.close(lease_id, reuse)

    async def call(self, spec: str, key: str, files: dict[str, UserFile], call_text: str, context: dict):
        """`spec`'s function (its file loaded once per process, from `files`) on the call; `key` names
        the tool in errors (`tools[0].fn`)."""
        fn = resolve(spec, key, files)
        if inspect.iscoroutinefunction(fn):
            return await fn(call_text, **context)
        return await asyncio.get_running_loop().run_in_executor(self._threads, lambda: fn(call_text, **context))


class RayToolRunner:
    """`await runner(use, tool, call_text, context)`: one call of `use.tools`' `tool` on this engine's
    tool host."""

    def __init__(self, node_id: str | None = None):
        self._node_id = node_id
        self._host = None  # started on the first call: engines without tools never start one
        self._ready = None
        self._abandoned = 0  # calls past their deadline since the host started (their threads may still run)

    async def _started_host(self):
        """The host, once it is up: its start-up does not count against a call's deadline, but has
        its own (HOST_START_S); a host that fails to start is dropped, so the next call tries again."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._host is None:
            near = NodeAffinitySchedulingStrategy(self._node_id, soft=True) if self._node_id else None
            self._host = (
                ray.remote(ToolHost)
                .options(num_cpus=0, max_concurrency=CALL_THREADS * 4, max_restarts=-1, scheduling_strategy=near)
                .remote()
            )
            self._ready = self._host.__ray_ready__.remote()
            self._abandoned = 0
        try:
            await asyncio.wait_for(asyncio.wrap_future(self._ready.future()), HOST_START_S)
        except (TimeoutError, ray.exceptions.RayError):
            self.shutdown()
            raise
        return self._host

    async def __call__(self, use: ToolUse, tool: ToolConfig, call_text: str, context: dict) -> tuple[str, str, float]:
        """(result, "ok", latency) or (reason, "error" | "timeout", latency); never raises for a tool's
        failure (the multi-turn loop turns a reason into the error observation). A tool that cannot
        be imported where it runs is a configuration error and stops the run."""
        import ray

        try:
            host = await self._started_host()
        except (TimeoutError, ray.exceptions.RayError) as error:
            return f"the tool host did not start within {HOST_START_S}s: {type(error).__name__}", "error", 0.0
        start = time.perf_counter()
        ref = host.call.remote(tool.fn, f"tools[{use.tools.index(tool)}].fn", use.files, call_text, context)
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(ref.future()), tool.timeout_s)
        except TimeoutError:
            ray.cancel(ref)
            self._abandon()
            return f"tool {tool.name!r} did not answer within {tool.timeout_s}s", "timeout", time.perf_counter() - start
        except asyncio.CancelledError:  # the group's own deadline passed: stop the call too
            ray.cancel(ref)
            raise
        except ray.exceptions.RayError as error:
            cause = getattr(error, "cause", None) or error
            if isinstance(cause, UserError):
                raise cause from None
            return f"tool {tool.name!r} raised {type(cause).__name__}: {cause}", "error", time.perf_counter() - start
        if not isinstance(result, str):
            return f"tool {tool.name!r} returned {type(result).__name__}, expected str", "error", time.perf_counter() - start
        return result, "ok", time.perf_counter() - start

    async def environment(self, method: str, *args, deadline_s: float):
        """One call of the tool host's environment `method` (`open`, `call_tools`, `reward`, `close`). The host
        keeps the user's deadlines itself; `deadline_s` bounds the whole call, so a host that stopped answering
        fails the sample (EnvironmentFailed) instead of holding its group. A user error (an environment that
        cannot be imported there) stops the run."""
        import ray

        try:
            host = await self._started_host()
        except (TimeoutError, ray.exceptions.RayError) as error:
            raise EnvironmentFailed(f"the tool host did not start within {HOST_START_S}s: {type(error).__name__}") from None
        ref = getattr(host, method).remote(*args)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), deadline_s)
        except TimeoutError:
            ray.cancel(ref)
            raise EnvironmentFailed(f"the tool host did not answer {method} within {deadline_s:g}s") from None
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise
        except ray.exceptions.RayError as error:
            cause = getattr(error, "cause", None) or error
            if isinstance(cause, (UserError, EnvironmentFailed)):
                raise cause from None
            raise EnvironmentFailed(f"the tool host failed in {method}: {type(cause).__name__}: {cause}") from None

    def _abandon(self) -> None:
        """A plain function past its deadline keeps its thread; once as many calls were abandoned as
        the host has threads, later calls could only queue, so the host is replaced."""
        self._abandoned += 1
        if self._abandoned >= CALL_THREADS:
            print(f"warning: {self._abandoned} tool calls missed their deadline; restarting the tool host", flush=True)
            self.shutdown()

    def shutdown(self) -> None:
        import ray

        if self._host is not None:
            ray.kill(self._host)
        self._host = self._ready = None
