"""How weights get from the learner into every engine: one interface, one implementation per device.

The driver coordinates a sync; the bytes move between actors. `launch.py` picks the implementation.
`ObjectStoreTransport` (object_store.py; CPU, and any cluster): the learner puts its weights, in buckets, in Ray's
object store; each engine actor pulls them (node to node, no shared filesystem; read in place on its
node), lays them out in shared memory for its vLLM workers, pauses, loads them in place, resumes,
and reports the checksum of what its workers loaded, which is verified against the learner's
checksum of what it put in the store (computed while the engines load).
`NcclTransport` (nccl.py; GPU): the same engine-side pause/load/resume, with the bytes moving over NCCL
through vLLM's native weight-transfer engine; there only the policy version is verified. Both
enforce one deadline per sync, and the driver never waits past it:

- an engine that dies, fails its load (it then refuses to generate: workers/rollout/weight_loading.py)
  or is still loading at the deadline is reported in `SyncReport.dead`, and the pool replaces it,
  rather than failing the run;
- a learner whose side is late raises `LearnerSyncTimeout`: the learner is stuck (on the NCCL path
  its broadcast waits forever for a rank that died) and must be restarted;
- an engine holding weights other than the learner's fails the run (`WeightSyncError`): that is a
  bug, not a fault to ride out.
"""

from __future__ import annotations

import abc
import dataclasses
import time

from orchestrator.contracts.errors import LearnerDiedError, RunError


class WeightSyncError(RunError):
    """The learner missed a sync's deadline (`LearnerSyncTimeout`), an engine holds weights other than the
    learner's, or a new engine did not take the current weights."""


class LearnerSyncTimeout(WeightSyncError, LearnerDiedError):
    """The learner's side of a sync missed the deadline. Treat the learner as dead: on the NCCL path its
    broadcast blocks until every rank has received, and neither vLLM nor NCCL can time it out from
    outside, so only restarting the learner frees it. `engines`: the engines that had died, failed or
    not finished by then; their weights are unknown, so they are to be replaced as well."""

    def __init__(self, message: str, engines: dict[int, BaseException]):
        super().__init__(message)
        self.engines = engines


@dataclasses.dataclass(frozen=True)
class SyncReport:
    version: int
    checksum: str
    bytes: int
    seconds: float
    dead: dict[int, BaseException] = dataclasses.field(default_factory=dict)  # engines that died meanwhile


class WeightTransport(abc.ABC):
    def __init__(self, timeout_s: float, bucket_bytes: int):
        self.timeout_s = timeout_s
        self.bucket_bytes = bucket_bytes

    @abc.abstractmethod
    def sync(self, learner, engines: dict[int, object], version: int) -> SyncReport:
        """Every engine holds the learner's weights as `version` when this returns."""

    def learner_replaced(self) -> None:
        """A new learner actor publishes from now on (the old one died); nothing to do unless the
        transport holds a connection to the old one."""
        return

    def load_current(self, learner, engine_id: int, actor, version: int) -> SyncReport:
        """Load the learner's weights into a new engine before it serves; raises if it did not take them."""
        from orchestrator.contracts.engine_death import reason

        report = self.sync(learner, {engine_id: actor}, version)
        if engine_id in report.dead:
            why = reason(report.dead[engine_id])
            raise WeightSyncError(f"engine {engine_id} did not load policy version {version}: {why}")
        return report

    def _await(self, refs: dict[int, object], what: str, deadline: float) -> tuple[dict[int, object], dict[int, BaseException]]:
        """(results, failed engines) of one remote call per engine (key -1: the learner), by the deadline.
        An engine counts as failed if it died, failed its load, or had not answered by the deadline."""
        import ray

        from orchestrator.contracts.engine_death import is_engine_death

        waiting = {ref: key for key, ref in refs.items()}
        ready, late = ray.wait(list(waiting), num_returns=len(waiting), timeout=max(0.0, deadline - time.monotonic()))
        values, dead = {}, {}
        for ref in ready:
            try:
                values[waiting[ref]] = ray.get(ref)
            except ray.exceptions.RayError as error:
                if waiting[ref] == -1 or not is_engine_death(error):
                    raise
                dead[waiting[ref]] = error
        late_keys = sorted(waiting[ref] for ref in late)
        within = f"did not finish within weight_sync.timeout_s={self.timeout_s}s"
        if -1 in late_keys:
            names = ", ".join(["the learner"] + [f"engine {key}" for key in late_keys if key != -1])
            dead.update({key: TimeoutError(f"engine {key}: {what} {within}") for key in late_keys if key != -1})
            raise LearnerSyncTimeout(f"{what} {within}: waiting on {names}; the learner is stuck", engines=dead)
        for key in late_keys:  # the learner's side finished: these engines are stuck or gone
            dead[key] = TimeoutError(f"engine {key}: {what} {within}")
        return values, dead

    @staticmethod
    def _verify(expected: str, version: int, reports: dict[int, tuple[int, str]]) -> None:
        wrong = {e: r for e, r in reports.items() if r != (version, expected)}
        if wrong:
            detail = ", ".join(f"engine {e} reports version {v} checksum {c}" for e, (v, c) in sorted(wrong.items()))
            raise WeightSyncError(
                f"weight provenance check failed: the learner sent version {version} checksum {expected}, but {detail}"
            )
