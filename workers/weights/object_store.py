"""Weight sync through Ray's object store: CPU and colocated runs, and the fallback on any cluster.

    learner actor    publish_weights, weight_bucket(i)   a bucket at a time, views of its weights
                                                          (workers/weights/publication.py)
    engine actor     load_weights, feed_weights(i)        each bucket read in place from the store on
                                                          its node and passed to its vLLM worker through
                                                          a small shared-memory ring (receiving.py,
                                                          incoming.py, staging.py, vllm_worker.py)
    driver           ObjectStoreTransport                 streams the buckets, one deadline, checksums

The weights are streamed: each engine has at most `WINDOW` buckets in flight, and a bucket is
freed from the store once every engine has taken it, so a sync holds a few buckets in memory
beside the weights themselves, not copies of the whole model (an engine that falls behind holds
more, up to the whole model, rather than holding the others back).

Each engine reports the checksum of what its vLLM worker loaded, which must equal the learner's
checksum of what it handed out. An engine whose load fails is reported in `SyncReport.dead` and
refuses to generate until replaced. A learner that fails or stalls mid-stream leaves the engines
half-loaded: their loads are stopped (they refuse to generate, and are replaced) and the learner's
failure is raised.

With `weight_sync.delta` (delta.py) the same stream carries a patch to the engines that hold the
learner's baseline (`publish_delta`), then the whole model to the others (new, behind, or rejecting
the patch) in the same sync.
"""

from __future__ import annotations

import time

from workers.weights.delta import DeltaBook, figures, rejections
from workers.weights.rounds import await_round, verify
from workers.weights.transport import LearnerSyncTimeout, SyncReport, WeightTransport

WINDOW = 2  # buckets in flight to each engine: one being copied into its ring, one waiting


# Driver side.
class ObjectStoreTransport(WeightTransport):
    def __init__(self, timeout_s: float, bucket_bytes: int, dtype: str | None = None, delta: DeltaBook | None = None):
        """`dtype`: the engines' weight dtype, if known: floating-point weights travel in it (half the
        bytes of a float32 learner's, for bfloat16 engines), cast a bucket at a time on the learner.
        `delta`: sync by patches after a dense anchor (workers/weights/delta.py)."""
        super().__init__(timeout_s, bucket_bytes)
        self.dtype = dtype
        self.delta = delta

    def sync(self, learner, engines: dict[int, object], version: int, adapter_only: bool = False) -> SyncReport:
        start = time.monotonic()
        if self.delta is not None and not adapter_only:
            return self.sync_delta_by(learner, engines, version, start + self.timeout_s)
        version, digest, nbytes, dead = self.sync_by(learner, engines, version, start + self.timeout_s, adapter_only)
        return SyncReport(version, digest, nbytes, time.monotonic() - start, dead, transport="object_store")

    def learner_replaced(self) -> None:
        """Each sync asks the learner actor it is given; a new one holds no baseline for patches."""
        if self.delta is not None:
            self.delta.base = None

    def sync_by(
        self, learner, engines: dict[int, object], version: int, deadline: float, adapter_only: bool = False
    ) -> tuple[int, str, int, dict]:
        """(version loaded, checksum, bytes, failed engines) of a sync that ends by `deadline` (the NCCL
        path's fallback shares its deadline). `adapter_only`: a LoRA run's adapter, not its base weights.

        The engines are told the version of what the learner publishes. It is `version` unless the
        learner's own count is ahead: then it took an optimizer step between the caller reading
        `version` and the publication (async mode: an engine admitted while the learner trains), and
        the weights sent are that step's. Labelled `version`, the engine would serve the newer policy
        under the older number and, admitted after the sync of the newer one began, miss that sync."""
        published = learner.publish_weights.remote(self.bucket_bytes, adapter_only, self.dtype)
        headers, nbytes, learner_version = await_round("publishing weights", deadline, self.timeout_s, {}, published).learner
        version = max(version, learner_version)
        expected, synced, dead = self._stream(learner, engines, headers, version, deadline)
        if synced:  # else no engine took every bucket, and the learner handed out only some
            verify(expected, version, synced)
        return version, expected or "", nbytes, dead

    def _stream(
        self, learner, engines: dict[int, object], headers: list, version: int, deadline: float, *delta
    ) -> tuple[str | None, dict, dict]:
        """The open publication into every engine's load: (the learner's checksum of what it handed out,
        what each engine that loaded it reports, the engines that failed). `delta`: (manifest, mirror),
        what a delta sync's loads take besides."""
        loads = {e: actor.load_weights.remote(headers, version, self.timeout_s, *delta) for e, actor in engines.items()}
        stream = BucketStream(learner, engines, version, len(headers), self.timeout_s)
        try:
            late = stream.run(deadline)
            checked = learner.published_checksum.remote()  # closes the publication, once it is handed out
            waiting = {e: ref for e, ref in loads.items() if e not in late}
            done = await_round(f"weight sync to version {version}", deadline, self.timeout_s, waiting, checked)
        except BaseException:
            stream.abort()
            raise
        stream.abort({**late, **done.dead})
        failed = {e: error for e, error in stream.failed.items() if e not in done.dead}  # its load did not say why
        synced = {e: report for e, report in done.engines.items() if e not in failed}
        return done.learner, synced, {**late, **failed, **done.dead}

    def sync_delta_by(self, learner, engines: dict[int, object], version: int, deadline: float) -> SyncReport:
        """A delta sync that ends by `deadline`: a patch to the engines that hold the learner's baseline,
        then the dense weights to the others (new, replaced, behind, or rejecting the patch), which then
        hold the new baseline too."""
        start, book = time.monotonic(), self.delta
        patched, dense, everyone = book.split(engines)
        dead, wire, checksum, manifest, model_bytes, resyncs = {}, 0, "", None, 0, book.dense_resyncs
        if patched:
            version, manifest, wire, rejected, failed = self._patch(learner, {e: engines[e] for e in patched}, version, deadline)
            checksum = manifest["checksum"]
            dead.update(failed)
            dense += [e for e in rejected if e not in dense]
        if dense:
            published = learner.publish_delta.remote(self.bucket_bytes, self.dtype, True, version)
            headers, model_bytes, version, _ = await_round("publishing weights", deadline, self.timeout_s, {}, published).learner
            expected, synced, failed = self._stream(
                learner, {e: engines[e] for e in dense}, headers, version, deadline, None, True
            )
            if synced:
                verify(expected, version, synced)
            book.anchored(version, synced, everyone)
            book.forget(failed)
            dead.update(failed)
            checksum, wire = checksum or expected or "", wire + model_bytes
        delta = figures(manifest, model_bytes, book.dense_resyncs - resyncs)
        return SyncReport(version, checksum, wire, time.monotonic() - start, dead, "object_store", delta)

    def _patch(self, learner, engines: dict[int, object], version: int, deadline: float) -> tuple:
        """The patch round: (version, the patch's manifest, bytes, engines that rejected it, engines that failed)."""
        published = learner.publish_delta.remote(self.bucket_bytes, self.dtype, False, version)
        headers, nbytes, version, manifest = await_round(
            "publishing a weight patch", deadline, self.timeout_s, {}, published
        ).learner
        _, synced, failed = self._stream(learner, engines, headers, version, deadline, manifest, True)
        rejected = rejections(synced, version)
        accepted = {e: report for e, report in synced.items() if e not in rejected}
        if accepted:
            verify(manifest["checksum"], version, accepted)
        self.delta.patched(version, accepted, rejected)
        self.delta.forget(failed)
        return version, manifest, nbytes, rejected, failed


class BucketStream:
    """The learner's buckets to every engine, each engine at its own pace, `WINDOW` at a time."""

    def __init__(self, learner, engines: dict[int, object], version: int, count: int, timeout_s: float):
        self.learner, self.engines, self.version, self.count, self.timeout_s = learner, engines, version, count, timeout_s
        self.buckets: dict[int, object] = {}  # index -> the learner's ObjectRef, until every engine took it
        self.sent = dict.fromkeys(engines, 0)
        self.taken = dict.fromkeys(engines, 0)  # an engine takes its buckets in order
        self.feeds: dict[object, tuple[int, int]] = {}  # a feed's ObjectRef -> (engine id, bucket index)
        self.failed: dict[int, BaseException] = {}  # engines a feed failed for: their loads are stopped
        self.late: dict[int, BaseException] = {}

    def run(self, deadline: float) -> dict[int, BaseException]:
        """Stream until every engine took every bucket, failed or was late (at the deadline); returns
        the late engines. Raises the learner's failure, or `LearnerSyncTimeout` if it stalled."""
        import ray

        while True:
            self._send()
            if not self.feeds:
                return self.late
            waiting = list(self.feeds)
            ready, _ = ray.wait(waiting, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                self._late()
                return self.late
            ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)  # every feed done by now
            for ref in ready:
                if ref in self.feeds:  # not dropped with its engine meanwhile
                    self._took(ref)
            self._release()

    def abort(self, engines=None) -> None:
        """Stop the loads of `engines` (default: every engine): they fail at once instead of waiting."""
        for engine_id in self.engines if engines is None else engines:
            self.engines[engine_id].abort_weights.remote(self.version)

    def _send(self) -> None:
        for engine_id, actor in self.engines.items():
            while engine_id not in self.failed and self.sent[engine_id] < self.count and self._in_flight(engine_id) < WINDOW:
                index = self.sent[engine_id]
                if index not in self.buckets:
                    self.buckets[index] = self.learner.weight_bucket.remote(index)
                self.feeds[actor.feed_weights.remote(self.version, index, self.buckets[index])] = (engine_id, index)
                self.sent[engine_id] += 1

    def _in_flight(self, engine_id: int) -> int:
        return self.sent[engine_id] - self.taken[engine_id]

    def _took(self, ref) -> None:
        import ray

        from orchestrator.contracts.engine_death import is_engine_death

        engine_id, index = self.feeds.pop(ref)
        if engine_id in self.failed:
            return
        try:
            ray.get(ref)
        except ray.exceptions.RayError as error:
            self._raise_if_the_learner_failed(index)
            if not is_engine_death(error) and not isinstance(error, ray.exceptions.RayTaskError):
                raise
            self._drop(engine_id, error)
            return
        self.taken[engine_id] += 1

    def _drop(self, engine_id: int, error: BaseException) -> None:
        """The engine's load cannot finish: stop it now, so that its `load_weights` says why at once."""
        self.failed[engine_id] = error
        self.feeds = {ref: feed for ref, feed in self.feeds.items() if feed[0] != engine_id}
        self.abort([engine_id])

    def _raise_if_the_learner_failed(self, index: int) -> None:
        """A feed also fails when its bucket does: that is the learner's failure, raised as such."""
        import ray

        ready, _ = ray.wait([self.buckets[index]], timeout=0)
        if ready:
            ray.get(ready[0])  # raises the learner's error, if it failed

    def _release(self) -> None:
        """Free the buckets every live engine has taken."""
        live = [self.taken[e] for e in self.engines if e not in self.failed]
        below = min(live, default=self.count)
        for index in [i for i in self.buckets if i < below]:
            del self.buckets[index]

    def _late(self) -> None:
        import ray

        requested = list(self.buckets.values())
        ready, _ = ray.wait(requested, num_returns=len(requested), timeout=0) if requested else ([], [])
        late = sorted({engine_id for engine_id, _ in self.feeds.values()})
        within = f"did not finish within weight_sync.timeout_s={self.timeout_s}s"
        for engine_id in late:
            self.late[engine_id] = TimeoutError(
                f"engine {engine_id}: weight sync to version {self.version} {within} "
                f"({self.taken[engine_id]} of {self.count} buckets taken)"
            )
        self.feeds = {}
        if len(ready) < len(requested):
            names = ", ".join(["the learner"] + [f"engine {engine_id}" for engine_id in late])
            raise LearnerSyncTimeout(
                f"publishing weights (version {self.version}) {within}: waiting on {names}; the learner is stuck",
                engines={**self.failed, **self.late},
            )
