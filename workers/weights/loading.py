"""Loading new weights into a serving engine: pause, load, resume, and what a failed load leaves behind.

vLLM's workers load tensor by tensor, so a load that fails part-way (a worker raises, or the
workers disagree on what they loaded) leaves the engine holding a mix of two policies. Such an
engine never resumes: it stays paused, the groups it holds and every later one fail with
`WeightLoadFailedError`, and it takes no further loads. The driver gets the same error from the
load, counts the engine as dead (orchestrator/contracts/engine_death.py) and replaces it; the
replacement loads the current weights before it serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from orchestrator.contracts.engine_death import WeightLoadFailedError, reason

T = TypeVar("T")


class WeightLoads:
    def __init__(self, engine_id: int, pause: Callable[[], Awaitable[None]], resume: Callable[[], Awaitable[None]]):
        """`pause` and `resume` stop and restart the engine's scheduler (requests in flight are kept)."""
        self.engine_id = engine_id
        self._pause = pause
        self._resume = resume
        self._failure = ""  # why the engine stopped serving; empty while it serves
        self._failed = asyncio.Event()
        self._loading = False

    @property
    def loading(self) -> bool:
        """Whether a load is under way (generation is paused meanwhile)."""
        return self._loading

    @property
    def failed(self) -> bool:
        return bool(self._failure)

    def check(self) -> None:
        """Raise `WeightLoadFailedError` if a load failed: the engine's weights are not any policy."""
        if self._failure:
            raise WeightLoadFailedError(self._failure)

    async def load(self, version: int, load: Callable[[], Awaitable[T]]) -> T:
        """`load()` with generation paused. Generation resumes only if it returned; if it raised, the
        engine stays paused for good and this raises `WeightLoadFailedError`."""
        self.check()
        self._loading = True
        try:
            await self._pause()
            result = await load()
        except asyncio.CancelledError:
            self._fail(version, "the load was cancelled")
            raise
        except Exception as error:
            self._fail(version, reason(error))
            raise WeightLoadFailedError(self._failure) from error
        finally:
            self._loading = False
        await self._resume()
        return result

    async def unless_failed(self, work: Awaitable[T]) -> T:
        """`work`, unless a load fails first: then `work` is cancelled (vLLM aborts its requests,
        which would otherwise wait forever in the paused scheduler) and this raises."""
        task = asyncio.ensure_future(work)
        failed = asyncio.ensure_future(self._failed.wait())
        try:
            await asyncio.wait({task, failed}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the caller's own timeout
            task.cancel()
            raise
        finally:
            failed.cancel()
        if not task.done():  # a load failed first
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)  # vLLM aborts the requests as it unwinds
            self.check()
        return task.result()

    def _fail(self, version: int, why: str) -> None:
        self._failure = (
            f"engine {self.engine_id}: loading policy version {version} failed part-way ({why}); its weights are a mix "
            "of two policies, so it stays paused and refuses to generate until the pool replaces it"
        )
        self._failed.set()
