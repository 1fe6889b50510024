"""How weights get from the learner into every engine: one interface, one implementation per device.

The driver coordinates a sync; the bytes move between actors. `launch.py` picks the implementation.
`ObjectStoreTransport` (object_store.py; CPU, and any cluster): the learner puts its weights, in buckets, in Ray's
object store; each engine actor pulls them (node to node, no shared filesystem; read in place on its
node), lays them out in shared memory for its vLLM workers, pauses, loads them in place, resumes,
and reports the checksum of what its workers loaded, which is verified against the learner's
checksum of what it put in the store (computed while the engines load).
`NcclTransport` (nccl.py; GPU): the same engine-side pause/load/resume, with the bytes moving over NCCL
through vLLM's native weight-transfer engine; there only the policy version is verified. Both
enforce one deadline per sync. An engine that dies during a sync is reported in
`SyncReport.dead` (the pool replaces it) rather than failing the run.
"""

from __future__ import annotations

import abc
import dataclasses
import time

from orchestrator.contracts.errors import RunError


class WeightSyncError(RunError):
    """A sync missed its deadline, or an engine holds weights other than the learner's."""


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

    def _await(self, refs: dict[int, object], what: str, deadline: float) -> tuple[dict[int, object], dict[int, BaseException]]:
        """(results, dead engines) of one remote call per engine (key -1: the learner), by the deadline."""
        import ray

        from orchestrator.contracts.engine_death import is_engine_death

        waiting = {ref: key for key, ref in refs.items()}
        ready, late = ray.wait(list(waiting), num_returns=len(waiting), timeout=max(0.0, deadline - time.monotonic()))
        if late:
            names = ", ".join("the learner" if waiting[r] == -1 else f"engine {waiting[r]}" for r in late)
            raise WeightSyncError(f"{what} did not finish within weight_sync.timeout_s={self.timeout_s}s: waiting on {names}")
        values, dead = {}, {}
        for ref in ready:
            try:
                values[waiting[ref]] = ray.get(ref)
            except ray.exceptions.RayError as error:
                if waiting[ref] == -1 or not is_engine_death(error):
                    raise
                dead[waiting[ref]] = error
        return values, dead

    @staticmethod
    def _verify(expected: str, version: int, reports: dict[int, tuple[int, str]]) -> None:
        wrong = {e: r for e, r in reports.items() if r != (version, expected)}
        if wrong:
            detail = ", ".join(f"engine {e} reports version {v} checksum {c}" for e, (v, c) in sorted(wrong.items()))
            raise WeightSyncError(
                f"weight provenance check failed: the learner sent version {version} checksum {expected}, but {detail}"
            )
