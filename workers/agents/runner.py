"""Where agent sessions run: the user's function, one call per sample, in a thread of its own.

The engine's event loop serves the gateway and vLLM's outputs; an agent that blocks it (a synchronous
tool, a slow environment) would stall every group on the engine. So sessions run on an event loop in
their own thread: a blocking agent holds up other agents, never the engine. Each session gets an
`openai.AsyncOpenAI` whose base URL is its session's (gateway.py), and runs within
`agent.session_timeout_s`; what it returns (a reward or None) or why it failed comes back to the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import numbers
import ssl
import threading
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class Outcome:
    reward: float | None  # what the agent returned; None: reward_funcs score it
    error: str | None  # why the session failed (raised, timed out, returned something else)


class AgentThread:
    def __init__(self):
        import uvloop  # vLLM's server dependencies bring it; its loop costs the sessions ~20% less CPU than asyncio's

        self._loop = uvloop.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agent-sessions", daemon=True)
        self._thread.start()
        self._tls = ssl.create_default_context()  # every session's HTTP client shares it: making one costs ~30 ms

    async def session(
        self, fn: Callable, base_url: str, token: str, inputs: dict, key: str, timeouts: tuple[float, float]
    ) -> Outcome:
        """One session on the agents' loop; cancelling the caller cancels it there."""
        work = self._session(fn, base_url, token, inputs, key, *timeouts)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self._loop))

    async def _session(self, fn, base_url, token, inputs, key, timeout_s: float, call_timeout_s: float) -> Outcome:
        """Each session has an HTTP client of its own: one shared by every session spends its time in httpcore's
        connection pool, whose bookkeeping grows with connections x waiting requests (most of a step's CPU at 64
        sessions)."""
        import httpx
        import openai

        # Idle connections are dropped well before the gateway closes them (gateway.KEEP_ALIVE_S): reusing one the
        # server closes at the same moment fails the call with a connection error. The gateway is inside the
        # cluster: proxy settings in the environment (HTTP_PROXY...) must not send its calls elsewhere.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=4, keepalive_expiry=30.0)
        async with httpx.AsyncClient(verify=self._tls, limits=limits, trust_env=False) as http:
            # The client's own deadline is a margin over the gateway's, whose answer (an error naming the call) comes first.
            client = openai.AsyncOpenAI(
                base_url=base_url, api_key=token, timeout=call_timeout_s + 10.0, max_retries=0, http_client=http
            )
            return await run_session(fn, client, inputs, key, timeout_s)

    def close(self) -> None:
        """Cancels the sessions still running (each closes its HTTP client), then stops the loop."""
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_cancel_all(), self._loop).result(timeout=10.0)
        self._loop.call_soon_threadsafe(self._loop.stop)


async def _cancel_all() -> None:
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=5.0)


async def run_session(fn: Callable, client, inputs: dict, key: str, timeout_s: float) -> Outcome:
    """`fn(client, prompt, **columns)` for one session, within `timeout_s`."""
    columns = {name: value for name, value in inputs.items() if name != "prompt"}
    deadline = asyncio.timeout(timeout_s)
    try:
        async with deadline:
            returned = await fn(client, inputs["prompt"], **columns)
    except TimeoutError as error:
        if deadline.expired():
            return Outcome(None, f"session {key} did not finish within agent.session_timeout_s={timeout_s:g}s")
        return Outcome(None, f"session {key}: the agent raised TimeoutError: {error}")  # its own, e.g. a tool's deadline
    except asyncio.CancelledError:
        if asyncio.current_task().cancelling():  # the group was cancelled: so is its session
            raise
        return Outcome(None, f"session {key}: the agent raised CancelledError")
    except BaseException as error:  # SystemExit and the like too: they would stop every session's loop
        return Outcome(None, f"session {key}: the agent raised {type(error).__name__}: {error}")
    return _outcome(returned, key)


def _outcome(returned, key: str) -> Outcome:
    if returned is None:
        return Outcome(None, None)
    if isinstance(returned, bool) or not isinstance(returned, numbers.Real) or not math.isfinite(returned):
        return Outcome(None, f"session {key}: the agent returned {returned!r}; it returns its reward (a finite number) or None")
    return Outcome(float(returned), None)
