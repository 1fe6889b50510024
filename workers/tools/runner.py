"""Tool calls run off the engine, in a Ray actor beside it, with a deadline; a failure becomes an
observation.

Each engine gets a `ToolHost` actor (on its node where possible) that runs calls concurrently: a
plain function in a thread, an `async def` on the host's event loop. The engine's event loop only
awaits, so a slow tool never stalls the other samples in flight, and a worker process per call
(seconds to start on a small machine) is never paid. A tool that raises, returns something other
than a string, or misses its `timeout_s` gives the model the configured error observation
(`tool_error_observation`); the call is recorded with status "error" or "timeout" and counted in
the run's metrics, and the run goes on. A call past its deadline is cancelled; a plain function
cannot be interrupted, so its thread finishes in the background (`CALL_THREADS` bounds how many
such calls can pile up). A host that dies (a tool that crashes its process) is restarted by Ray.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import time
from collections.abc import Callable

from orchestrator import user_functions
from orchestrator.config.tools import ToolConfig

CALL_THREADS = 64  # concurrent plain-function calls per host

BUILTIN = {"lookup": "orchestrator.builtin.lookup_task:lookup"}

_resolved: dict[str, Callable] = {}  # per worker process: import each tool file once


def resolve(spec: str, key: str = "tools.fn") -> Callable:
    return user_functions.resolve(spec, key, BUILTIN)


class ToolHost:
    """Runs tool functions by spec (created through `ray.remote(ToolHost)`)."""

    def __init__(self):
        self._threads = concurrent.futures.ThreadPoolExecutor(CALL_THREADS, thread_name_prefix="tool")

    async def call(self, spec: str, call_text: str, context: dict):
        fn = _resolved.get(spec) or _resolved.setdefault(spec, resolve(spec))
        if inspect.iscoroutinefunction(fn):
            return await fn(call_text, **context)
        return await asyncio.get_running_loop().run_in_executor(self._threads, lambda: fn(call_text, **context))


class RayToolRunner:
    """`await runner(tool, call_text, context)`: one call on this engine's tool host."""

    def __init__(self, node_id: str | None = None):
        self._node_id = node_id
        self._host = None  # started on the first call: engines without tools never start one
        self._ready = None

    async def _started_host(self):
        """The host, once it is up: its start-up (seconds) does not count against a call's deadline."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._host is None:
            near = NodeAffinitySchedulingStrategy(self._node_id, soft=True) if self._node_id else None
            self._host = (
                ray.remote(ToolHost)
                .options(num_cpus=0, max_concurrency=CALL_THREADS * 4, max_restarts=-1, scheduling_strategy=near)
                .remote()
            )
            self._ready = asyncio.ensure_future(self._host.__ray_ready__.remote())
        await asyncio.shield(self._ready)
        return self._host

    async def __call__(self, tool: ToolConfig, call_text: str, context: dict) -> tuple[str, str, float]:
        """(result, "ok", latency) or (reason, "error" | "timeout", latency); never raises for a tool's
        failure (the multi-turn loop turns a reason into the error observation)."""
        import ray

        host = await self._started_host()
        start = time.perf_counter()
        ref = host.call.remote(tool.fn, call_text, context)
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(ref.future()), tool.timeout_s)
        except TimeoutError:
            ray.cancel(ref)
            return f"tool {tool.name!r} did not answer within {tool.timeout_s}s", "timeout", time.perf_counter() - start
        except ray.exceptions.RayError as error:
            cause = getattr(error, "cause", None) or error
            return f"tool {tool.name!r} raised {type(cause).__name__}: {cause}", "error", time.perf_counter() - start
        if not isinstance(result, str):
            return f"tool {tool.name!r} returned {type(result).__name__}, expected str", "error", time.perf_counter() - start
        return result, "ok", time.perf_counter() - start

    def shutdown(self) -> None:
        import ray

        if self._host is not None:
            ray.kill(self._host)
            self._host = None
