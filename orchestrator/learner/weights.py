"""The policy the engines serve: which learner publishes it, over which transport, at which version.

    weights = PolicyWeights(learner, transport, version)
    pool = start_pool(..., on_engine_ready=weights.load_into)   # a new engine serves only the current policy
    weights.version += 1; pool.sync_weights(weights)            # after each optimizer step

It is the one place a policy version meets the transport: the training loop moves the version, the
pool hands it its engines and applies the report (rollout/pool.py). Syncs run one at a time: in async
mode an engine admitted by the generation thread takes its weights while the training thread may be
syncing the others, and the learner publishes one set of buckets at a time.
"""

from __future__ import annotations

import threading

from orchestrator.contracts.engine_death import reason
from orchestrator.learner.group import LearnerGroup
from workers.weights.transport import SyncReport, WeightSyncError, WeightTransport


class PolicyWeights:
    def __init__(
        self,
        learner: LearnerGroup,
        transport: WeightTransport,
        version: int,
        first_sync_together: bool = False,
        adapter: bool = False,
    ):
        """`first_sync_together`: engines admitted before the first `sync` take no weights on their own
        (the NCCL group is opened for all of them together by that sync). `adapter`: a LoRA run, whose
        engines take the base weights once, as they are admitted, and then only the adapter."""
        self.learner = learner
        self.adapter = adapter
        self.transport = transport
        self.version = version
        self._together = first_sync_together
        self._one_at_a_time = threading.Lock()

    def sync(self, engines: dict[int, object]) -> SyncReport:
        """Every engine holds `version` when this returns, or is listed in the report's `dead`."""
        with self._one_at_a_time:
            self._together = False
            return self.learner.sync(self.transport, engines, self.version, adapter_only=self.adapter)

    def load_into(self, engine_id: int, actor) -> None:
        """A new engine's first weights, before it serves; raises if it did not take them."""
        with self._one_at_a_time:
            if self._together:
                return
            # In async mode the learner may be training meanwhile: if it publishes the next policy, the
            # engine is told that version, not this one (workers/weights/object_store.py).
            report = self.learner.sync(self.transport.for_joining(), {engine_id: actor}, self.version)
        if engine_id in report.dead:
            why = reason(report.dead[engine_id])
            raise WeightSyncError(f"engine {engine_id} did not load policy version {report.version}: {why}")

    def learner_replaced(self, version: int) -> None:
        """A new learner (restarted from a checkpoint of `version`) publishes from now on."""
        self.transport.learner_replaced()
        self.version = version
