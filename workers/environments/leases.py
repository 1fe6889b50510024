"""Environment instances and TRL tool functions on an engine's tool host (workers/tools/runner.py).

Each sample in flight leases one instance of its environment: taken from the host's pool (or made by
calling the class, once per instance, as TRL's pool grows), `reset(**columns)` called on it, its public
methods (and the run's standalone tools) called by name as the model asks, `get_reward()` read at the
end, and the instance handed back to the pool for a later sample: TRL's "construct once, reset often".
Without an environment a lease holds the standalone tools only.

Every call of the user's functions (the class, `reset`, the tools, `get_reward`) has a deadline
(`call_timeout_s`): a plain function runs in a thread (which cannot be interrupted: it finishes in the
background, and its instance is then never reused), an `async def` on the host's loop. A tool call past
it, or one that raises, gives the model an error result, as TRL gives `{"error": str(e)}`; a `reset` or
`get_reward` past it or raising fails the sample, and its instance is not reused. (The user's file is
imported at its first use, with no deadline.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import itertools
import secrets
import time
from collections.abc import Awaitable, Callable

from orchestrator.contracts import builtins, user_functions
from orchestrator.contracts.environments import SINGLE, EnvironmentUse, tool_methods
from orchestrator.contracts.errors import UserError
from workers.environments.chat_loop import ToolResult

RunBlocking = Callable[[Callable[[], object]], Awaitable]  # runs a plain call off the event loop


class EnvironmentFailed(Exception):
    """An environment's `reset` or `get_reward` raised or missed its deadline; the message says which."""


@dataclasses.dataclass
class _Lease:
    spec: str | None  # the environment's class spec (None: no environment)
    instance: object | None
    tools: dict[str, Callable]  # by name: the standalone tools, then the instance's methods
    tainted: bool = False  # a call of it missed its deadline and may still run: never reused


class Leases:
    def __init__(self, run_blocking: RunBlocking):
        self._run_blocking = run_blocking
        self._free: dict[str, list[object]] = {}  # by class spec: instances whose samples ended
        self._leased: dict[str, _Lease] = {}
        self._ids = itertools.count()
        self._host = secrets.token_hex(4)

    async def open(self, use: EnvironmentUse, name: str, inputs: dict) -> tuple[str, str | None]:
        """A lease for one sample of environment `name`: (its id, what `reset` returned)."""
        tools = {}
        for index, spec in enumerate(use.tools):
            fn = user_functions.resolve(spec, f"tools[{index}]", builtins.TOOLS, use.files)
            tools[fn.__name__] = fn
        if not use.environments:
            return self._lease(_Lease(None, None, tools)), None
        environment = use.environments[name]
        cls = user_functions.resolve(environment.spec, "environment_factory", builtins.ENVIRONMENTS, use.files)
        free = self._free.setdefault(environment.spec, [])
        instance = free.pop() if free else await self._guarded(f"{environment.class_name}()", cls, use)
        # TRL's: with several environments `environment` is a routing column, not forwarded to reset
        columns = {key: value for key, value in inputs.items() if key != "environment"} if name != SINGLE else inputs
        observation = await self._guarded(f"{environment.class_name}.reset", lambda: instance.reset(**columns), use)
        tools.update({fn.__name__: getattr(instance, fn.__name__) for fn in tool_methods(type(instance))})
        return self._lease(_Lease(environment.spec, instance, tools)), observation

    async def call(self, lease_id: str, tool_calls: list[dict], timeout_s: float) -> list[ToolResult]:
        """A reply's tool calls, TRL's way: plain functions one after another, then the `async def` ones
        together; their results in that order."""
        lease = self._leased[lease_id]
        tools, results, pending = lease.tools, [], []
        for call in tool_calls:
            function = call.get("function") if call.get("type") == "function" else None
            if function is None:
                results.append(_failed(call.get("name", "unknown"), f"Unsupported tool call type: {call.get('type')}", 0.0))
                continue
            name, arguments = function["name"], function.get("arguments", {})
            fn = tools.get(name)
            if fn is None:
                results.append(_failed(name, f"Tool {name} not found.", 0.0, arguments))
            elif inspect.iscoroutinefunction(fn):
                pending.append((name, arguments, fn))
            else:
                run = functools.partial(self._run_blocking, functools.partial(_invoke, fn, arguments))
                results.append(await self._timed(lease, name, arguments, run, timeout_s))
        timed = [
            self._timed(lease, name, arguments, functools.partial(_invoke, fn, arguments), timeout_s)
            for name, arguments, fn in pending
        ]
        return results + list(await asyncio.gather(*timed))

    async def reward(self, lease_id: str, use: EnvironmentUse) -> float | None:
        """What the sample's environment's `get_reward()` returns (None: it has none)."""
        lease = self._leased[lease_id]
        if lease.instance is None or not hasattr(lease.instance, "get_reward"):
            return None
        name = f"{type(lease.instance).__name__}.get_reward"
        value = await self._guarded(name, lease.instance.get_reward, use)
        return None if value is None else float(value)

    def close(self, lease_id: str, reuse: bool = True) -> None:
        """The sample is done: its instance goes back to the pool (unless it failed: then it is dropped)."""
        lease = self._leased.pop(lease_id, None)
        if lease is not None and lease.instance is not None and reuse and not lease.tainted:
            self._free.setdefault(lease.spec, []).append(lease.instance)

    def _lease(self, lease: _Lease) -> str:
        lease_id = f"{self._host}-{next(self._ids)}"  # unique across host restarts: a stale id finds nothing
        self._leased[lease_id] = lease
        return lease_id

    async def _guarded(self, name: str, call: Callable[[], object], use: EnvironmentUse):
        """`call()`'s result (awaited if it is a coroutine), or EnvironmentFailed naming `name`."""
        try:
            result = await asyncio.wait_for(self._call(call), use.call_timeout_s)
        except TimeoutError:
            raise EnvironmentFailed(f"{name} did not return within tool_call_timeout_s={use.call_timeout_s:g}") from None
        except UserError:
            raise
        except Exception as error:
            raise EnvironmentFailed(f"{name} raised {type(error).__name__}: {error}") from None
        return result

    async def _call(self, call: Callable[[], object]):
        target = getattr(call, "__func__", call)
        if inspect.iscoroutinefunction(target):
            return await call()
        result = await self._run_blocking(call)
        return await result if inspect.isawaitable(result) else result

    async def _timed(self, lease: _Lease, name: str, arguments, call: Callable[[], Awaitable], timeout_s: float) -> ToolResult:
        """One tool call's result; a call past its deadline may still run in its thread, so its instance is not
        reused by a later sample."""
        start = time.perf_counter()
        try:
            result = await asyncio.wait_for(call(), timeout_s)
        except TimeoutError:
            lease.tainted = True
            reason = f"tool {name!r} did not answer within {timeout_s:g}s"
            return _failed(name, reason, time.perf_counter() - start, arguments, "timeout")
        except Exception as error:
            return _failed(name, str(error), time.perf_counter() - start, arguments)
        return ToolResult(name, str(result), "ok", time.perf_counter() - start, arguments)


def _invoke(fn: Callable, arguments):
    """`fn(**arguments)`, TRL's call; arguments that are not a mapping raise here, inside the call's guard."""
    return fn(**arguments)


def _failed(name: str, error: str, latency_s: float, arguments: dict | None = None, status: str = "error") -> ToolResult:
    """TRL's error result: the tool message's content is `str({"error": ...})`."""
    return ToolResult(name, str({"error": error}), status, latency_s, arguments)
