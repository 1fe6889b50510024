"""Weight sync through Ray's object store: the CPU path, and the fallback on any cluster.

    learner actor    publish(weights)        buckets put in the store (its one copy of them)
    engine actor     fetch(bucket_refs)      read in place on its node, then RolloutEngine.load_weights
                                             stages them in shared memory and its vLLM workers load
                                             them (vllm_worker.py)
    driver           ObjectStoreTransport    one deadline; checksums verified; dead engines reported

Each engine reports the checksum of what its vLLM workers loaded, which must equal the learner's
checksum of what it published (computed while the engines load). An engine whose load fails is
reported in `SyncReport.dead` and refuses to generate until replaced.
"""

from __future__ import annotations

import time

from workers.weights import adapters
from workers.weights.buckets import WeightBucket
from workers.weights.rounds import await_round, verify
from workers.weights.transport import SyncReport, WeightTransport


# Learner side (inside the learner actor).
def publish(named_weights, bucket_bytes: int) -> tuple[list, int]:
    """Put the weights in Ray's object store in buckets; engines fetch them from there (across nodes, no
    shared filesystem). Returns (bucket refs, bytes)."""
    import ray

    buckets = adapters.pack_apart(named_weights, bucket_bytes)
    return [ray.put(bucket) for bucket in buckets], sum(bucket.nbytes for bucket in buckets)


def published_checksum(bucket_refs: list) -> str:
    """The checksum of what `publish` put in the store, read in place there: asked for while the engines
    load, and it stays right if training goes on meanwhile."""
    import ray

    return adapters.buckets_checksum(ray.get(bucket_refs))


# Engine side (inside the rollout actor).
async def fetch(bucket_refs: list) -> list[WeightBucket]:
    """The buckets, as numpy views of the object store on this node: no copy."""
    import asyncio

    return list(await asyncio.gather(*bucket_refs))


# Driver side.
class ObjectStoreTransport(WeightTransport):
    def sync(self, learner, engines: dict[int, object], version: int, adapter_only: bool = False) -> SyncReport:
        start = time.monotonic()
        digest, nbytes, dead = self.sync_by(learner, engines, version, start + self.timeout_s, adapter_only)
        return SyncReport(version, digest, nbytes, time.monotonic() - start, dead)

    def learner_replaced(self) -> None:
        """Nothing to do: each sync asks the learner actor it is given."""

    def sync_by(
        self, learner, engines: dict[int, object], version: int, deadline: float, adapter_only: bool = False
    ) -> tuple[str, int, dict]:
        """(checksum, bytes, failed engines) of a sync that ends by `deadline` (the NCCL path's fallback
        shares its deadline). `adapter_only`: a LoRA run's adapter, not its base weights."""
        published = learner.publish_weights.remote(self.bucket_bytes, adapter_only)
        bucket_refs, nbytes = await_round("publishing weights", deadline, self.timeout_s, {}, published).learner
        loads = {engine_id: actor.load_weights.remote(bucket_refs, version) for engine_id, actor in engines.items()}
        checked = learner.published_checksum.remote(bucket_refs)  # hashed on the learner while the engines load
        done = await_round(f"weight sync to version {version}", deadline, self.timeout_s, loads, checked)
        verify(done.learner, version, done.engines)
        return done.learner, nbytes, done.dead
