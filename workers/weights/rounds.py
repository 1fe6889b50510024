"""One round of remote calls of a weight sync, the learner's and the engines', ended by one deadline.

A round tells the two sides apart: an engine that dies, fails its load or is late is listed as
dead (it is replaced, the run goes on), while a learner that fails raises and a late learner raises
`LearnerSyncTimeout` (it is restarted). `verify` checks what the engines report against what the
learner sent.
"""

from __future__ import annotations

import dataclasses
import time

from orchestrator.contracts.engine_death import is_engine_death
from workers.weights.transport import LearnerSyncTimeout, WeightSyncError


@dataclasses.dataclass
class Round:
    learner: object  # what the learner's call returned (None if it made none)
    engines: dict[int, object]  # what each engine's call returned
    dead: dict[int, BaseException]  # engines that died, failed or were late


def await_round(
    what: str, deadline: float, timeout_s: float, engines: dict[int, object], learner=None, limit: str | None = None
) -> Round:
    """Wait for one call per engine (ObjectRefs by engine id) and the learner's call (an ObjectRef or
    None) until `deadline`. `timeout_s` is only named in the messages (weight_sync.timeout_s), or
    `limit` in its place when the round has a deadline of its own."""
    import ray

    waiting = {ref: engine_id for engine_id, ref in engines.items()}
    refs = list(waiting) + ([learner] if learner is not None else [])
    ready, late = ray.wait(refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic()))
    result = Round(learner=None, engines={}, dead={})
    for ref in ready:
        if learner is not None and ref == learner:
            result.learner = ray.get(ref)  # the learner's failure is the run's (LearnerGroup names it)
            continue
        try:
            result.engines[waiting[ref]] = ray.get(ref)
        except ray.exceptions.RayError as error:
            if not is_engine_death(error):
                raise
            result.dead[waiting[ref]] = error
    within = f"did not finish within {limit or f'weight_sync.timeout_s={timeout_s}s'}"
    late_engines = sorted(waiting[ref] for ref in late if ref in waiting)
    for engine_id in late_engines:
        result.dead[engine_id] = TimeoutError(f"engine {engine_id}: {what} {within}")
    if any(ref not in waiting for ref in late):  # the learner's
        names = ", ".join(["the learner"] + [f"engine {engine_id}" for engine_id in late_engines])
        raise LearnerSyncTimeout(f"{what} {within}: waiting on {names}; the learner is stuck", engines=result.dead)
    return result


def verify(expected: str, version: int, reports: dict[int, tuple[int, str]]) -> None:
    """Every engine reports (version, checksum) of what it loaded: both must be what the learner sent."""
    wrong = {e: r for e, r in reports.items() if r != (version, expected)}
    if wrong:
        detail = ", ".join(f"engine {e} reports version {v} checksum {c}" for e, (v, c) in sorted(wrong.items()))
        raise WeightSyncError(
            f"weight provenance check failed: the learner sent version {version} checksum {expected}, but {detail}"
        )
