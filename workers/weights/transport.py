"""How weights get from the learner into every engine: one interface, one implementation per device.

`ObjectStoreTransport` (CPU, and any cluster): the learner packs its weights into buckets and puts
them in Ray's object store; each engine pulls them (node to node, no shared filesystem), pauses,
loads them in place, resumes, and reports the checksum it received. `NcclTransport` (GPU): the
same engine-side pause/load/resume, with the bytes moving over NCCL through vLLM's native
weight-transfer engine. Both enforce one deadline per sync and verify every engine's checksum.
"""

from __future__ import annotations

import abc
import dataclasses
import time

from orchestrator.errors import RunError


class WeightSyncError(RunError):
    """A sync missed its deadline, or an engine holds weights other than the learner's."""


@dataclasses.dataclass(frozen=True)
class SyncReport:
    version: int
    checksum: str
    bytes: int
    seconds: float


class WeightTransport(abc.ABC):
    def __init__(self, timeout_s: float, bucket_bytes: int):
        self.timeout_s = timeout_s
        self.bucket_bytes = bucket_bytes

    @abc.abstractmethod
    def sync(self, learner, engines: dict[int, object], version: int) -> SyncReport:
        """Every engine holds the learner's weights as `version` when this returns."""

    def _await(self, refs: dict[int, object], what: str, deadline: float) -> dict[int, object]:
        import ray

        try:
            values = ray.get(list(refs.values()), timeout=max(0.0, deadline - time.monotonic()))
        except ray.exceptions.GetTimeoutError:
            raise WeightSyncError(
                f"{what} did not finish within weight_sync.timeout_s={self.timeout_s}s; engines {sorted(refs)} were waited on"
            ) from None
        return dict(zip(refs, values))

    @staticmethod
    def _verify(expected: str, version: int, reports: dict[int, tuple[int, str]]) -> None:
        wrong = {e: r for e, r in reports.items() if r != (version, expected)}
        if wrong:
            detail = ", ".join(f"engine {e} reports version {v} checksum {c}" for e, (v, c) in sorted(wrong.items()))
            raise WeightSyncError(
                f"weight provenance check failed: the learner sent version {version} checksum {expected}, but {detail}"
            )


class ObjectStoreTransport(WeightTransport):
    def sync(self, learner, engines: dict[int, object], version: int) -> SyncReport:
        start = time.monotonic()
        deadline = start + self.timeout_s
        published = self._await({-1: learner.publish_weights.remote(self.bucket_bytes)}, "publishing weights", deadline)
        bucket_refs, digest, nbytes = published[-1]
        loads = {engine_id: actor.load_weights.remote(bucket_refs, version) for engine_id, actor in engines.items()}
        self._verify(digest, version, self._await(loads, f"weight sync to version {version}", deadline))
        return SyncReport(version, digest, nbytes, time.monotonic() - start)


def make_transport(device: str, timeout_s: float, bucket_bytes: int, tensor_parallel_size: int = 1) -> WeightTransport:
    if device == "cpu":
        return ObjectStoreTransport(timeout_s, bucket_bytes)
    from workers.weights.nccl import NcclTransport

    return NcclTransport(timeout_s, bucket_bytes, tensor_parallel_size)
