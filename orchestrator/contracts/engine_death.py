"""Which failures mean "this engine is dead, replace it" rather than "this run is broken".

The pool replaces an engine whose call failed this way and sends its groups elsewhere; a weight
sync reports such an engine as dead instead of failing the run. Any other failure propagates.
An engine whose weight load failed part-way is alive but unusable, so it counts as dead too.

Failures are recognised by exception type: Ray's error for a dead actor, and, as the error or as
the cause a Ray task error carries, vLLM's engine errors, a timeout, a failed weight load, or a
wedged engine.
"""

from __future__ import annotations

import sys

# Where vLLM 0.32 defines `EngineDeadError` (its engine core died) and `EngineGenerateError` (a
# request failed inside the engine); workers/fences/vllm.py holds the engines to that release.
VLLM_ENGINE_ERRORS = "vllm.v1.engine.exceptions"


class WeightLoadFailedError(RuntimeError):
    """An engine's weight load failed part-way: it holds a mix of two policies, so it never
    generates again (it stays paused until it is replaced)."""


class EngineWedgedError(RuntimeError):
    """An engine that stopped answering health checks (orchestrator/rollout/health.py): replaced like a
    dead one."""


class GroupTimeoutError(TimeoutError):
    """One group did not finish within `rollout.request_timeout_s` on its engine, which is replaced; the
    group it names is the one blamed (orchestrator/rollout/poison.py)."""

    def __init__(self, message: str, group_id: int):
        super().__init__(message)
        self.group_id = group_id

    def __reduce__(self):  # pickled across Ray with its group id
        return type(self), (str(self), self.group_id)


class EngineDiedError(RuntimeError):
    """An engine died, and the message says why: a vLLM engine whose processes logged the root cause
    (workers/rollout/start_failure.py), or a simulated one (bench/simulated_engines.py). A vLLM engine
    whose cause was not found raises vLLM's own `EngineDeadError`."""


def engine_death_types() -> tuple[type[BaseException], ...]:
    """The exception types that mean "replace it". `TimeoutError` is also `asyncio.TimeoutError`
    (Python 3.11+): a group past `rollout.request_timeout_s`, or an engine past a sync's deadline."""
    deaths: tuple[type[BaseException], ...] = (TimeoutError, WeightLoadFailedError, EngineWedgedError, EngineDiedError)
    # vLLM is not imported here: that takes seconds, and the driver has no other use for it. Nor does
    # it need to be: an engine's error reaches this process pickled, and unpickling a vLLM exception
    # imports the module that defines it, so while that module is not loaded no vLLM error exists here.
    vllm_errors = sys.modules.get(VLLM_ENGINE_ERRORS)
    if vllm_errors is not None:
        deaths += (vllm_errors.EngineDeadError, vllm_errors.EngineGenerateError)
    return deaths


def is_engine_death(error: BaseException) -> bool:
    import ray

    if isinstance(error, ray.exceptions.RayActorError):
        return True
    deaths = engine_death_types()
    # A Ray task error keeps the exception the actor raised as `.cause`.
    return isinstance(error, deaths) or isinstance(getattr(error, "cause", None), deaths)


def reason(error: BaseException) -> str:
    """One line: the underlying error's type and the first line of its message; for Ray's report of a
    dead actor, also its second sentence, which says why it died (its node died, naming the node; it
    was killed; it exited). Ray writes the sentences unindented and the actor's details indented."""
    import ray

    cause = getattr(error, "cause", None) or error
    lines = str(cause).splitlines() or [""]
    said = [lines[0][:200]]
    if isinstance(cause, ray.exceptions.ActorDiedError):
        said += [line.strip()[:200] for line in lines[1:] if line and not line[0].isspace()][:1]
    return f"{type(cause).__name__}: " + " ".join(said)
