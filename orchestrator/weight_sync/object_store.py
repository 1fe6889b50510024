"""Weight sync through Ray's object store: the CPU path, and the fallback on any cluster.

The learner puts its weights in the store in buckets; each engine actor pulls them (node to node,
read in place on its node), loads them, and reports the checksum of what its vLLM workers loaded,
which must equal the learner's checksum of what it published (computed while the engines load).
An engine whose load fails is reported in `SyncReport.dead` and refuses to generate until replaced.
"""

from __future__ import annotations

import time

from orchestrator.weight_sync.transport import SyncReport, WeightTransport


class ObjectStoreTransport(WeightTransport):
    def sync(self, learner, engines: dict[int, object], version: int) -> SyncReport:
        start = time.monotonic()
        digest, nbytes, dead = self.sync_by(learner, engines, version, start + self.timeout_s)
        return SyncReport(version, digest, nbytes, time.monotonic() - start, dead)

    def sync_by(self, learner, engines: dict[int, object], version: int, deadline: float) -> tuple[str, int, dict]:
        """(checksum, bytes, failed engines) of a sync that ends by `deadline` (the NCCL path's fallback
        shares its deadline)."""
        published, _ = self._await({-1: learner.publish_weights.remote(self.bucket_bytes)}, "publishing weights", deadline)
        bucket_refs, nbytes = published[-1]
        calls = {engine_id: actor.load_weights.remote(bucket_refs, version) for engine_id, actor in engines.items()}
        calls[-1] = learner.published_checksum.remote(bucket_refs)  # hashed on the learner while the engines load
        reports, dead = self._await(calls, f"weight sync to version {version}", deadline)
        digest = reports.pop(-1)
        self._verify(digest, version, reports)
        return digest, nbytes, dead
