"""How weights get from the learner into every engine: one small interface, one implementation per path.

    transport = make_transport(device, timeout_s, bucket_bytes, lora=...)   # factory.py
    report = transport.sync(learner, engines, version)           # every engine holds `version`, or is in report.dead
    transport.sync(learner, engines, version, adapter_only=True)  # a LoRA run's steps: the adapter alone

`ObjectStoreTransport` (object_store.py; CPU, colocated GPUs, and the fallback on any cluster) and
`NcclTransport` (nccl.py; NCCL on GPUs, gloo as its CPU stand-in) each hold, in one file, the learner's sending side, the engines' receiving side and
the driver's coordinator. Both end every sync by one deadline (rounds.py), and the driver never waits
past it:

- an engine that dies, fails its load (it then refuses to generate: loading.py) or is still loading at
  the deadline is listed in `SyncReport.dead`; the pool replaces it (`RolloutPool.drop`);
- a learner whose side is late raises `LearnerSyncTimeout`: the learner is stuck (on the NCCL path its
  broadcast waits forever for a rank that died) and must be restarted;
- an engine holding weights other than the learner's fails the run (`WeightSyncError`): that is a
  bug, not a fault to ride out.
"""

from __future__ import annotations

import abc
import dataclasses

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
    checksum: str  # what every engine verified, or nccl.UNVERIFIED
    bytes: int
    seconds: float
    dead: dict[int, BaseException] = dataclasses.field(default_factory=dict)  # engines to replace
    transport: str = "object_store"  # the path the weights took: "nccl", "gloo", "object_store", or "none"
    delta: dict | None = None  # a delta sync's "density" (share of elements sent), "dense_resyncs", "model_bytes" (delta.py)

    def figures(self) -> dict:
        """The step's `weight_sync/*` metrics; with delta sync, also what share of the weights travelled
        (`density`), the bytes sent (`wire_bytes`, as `bytes`), the engines resynced dense after
        rejecting a patch, and the bytes of the weights the engines hold (`model_bytes`)."""
        figures = {
            "weight_sync/bytes": self.bytes,
            "weight_sync/checksum": self.checksum,
            "weight_sync/transport": self.transport,
        }
        if self.delta is not None:
            figures["weight_sync/wire_bytes"] = self.bytes
            figures.update({f"weight_sync/{key}": value for key, value in self.delta.items()})
        return figures


class WeightTransport(abc.ABC):
    collective = False  # True: the first sync opens one group for every engine, so they join together

    def __init__(self, timeout_s: float, bucket_bytes: int):
        self.timeout_s = timeout_s
        self.bucket_bytes = bucket_bytes

    @abc.abstractmethod
    def sync(self, learner, engines: dict[int, object], version: int, adapter_only: bool = False) -> SyncReport:
        """Publish the `learner` actor's weights, have every engine actor load them as `version`, verify.
        `adapter_only`: a LoRA run's adapter alone (engines that already hold the base weights)."""

    def for_joining(self) -> WeightTransport:
        """The transport that gives an engine joining on its own (a replacement, a resize) its first weights."""
        return self

    @abc.abstractmethod
    def learner_replaced(self) -> None:
        """A new learner actor publishes from now on (the old one died)."""
