"""Which failures mean "this engine is dead, replace it" rather than "this run is broken".

The pool replaces an engine whose call failed this way and sends its groups elsewhere; a weight
sync reports such an engine as dead instead of failing the run. Any other failure propagates.
An engine whose weight load failed part-way is alive but unusable, so it counts as dead too.
"""

from __future__ import annotations


class WeightLoadFailedError(RuntimeError):
    """An engine's weight load failed part-way: it holds a mix of two policies, so it never
    generates again (it stays paused until it is replaced)."""


# Causes that mean "replace it".
ENGINE_DEATHS = {"EngineDeadError", "EngineGenerateError", "TimeoutError", WeightLoadFailedError.__name__}


def is_engine_death(error: BaseException) -> bool:
    import ray

    if isinstance(error, ray.exceptions.RayActorError):
        return True
    cause = getattr(error, "cause", None)
    return type(cause).__name__ in ENGINE_DEATHS or type(error).__name__ in ENGINE_DEATHS


def reason(error: BaseException) -> str:
    """One line: the underlying error's type and the first line of its message, and, when the engine
    went down with its node, Ray's line saying so (it names the node; the first line does not)."""
    cause = getattr(error, "cause", None) or error
    lines = str(cause).splitlines() or [""]
    node_lost = [line.strip() for line in lines[1:] if "node has died" in line][:1]
    return f"{type(cause).__name__}: " + " ".join([lines[0][:200], *node_lost])
