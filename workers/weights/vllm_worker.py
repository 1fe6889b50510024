"""Loaded into each vLLM worker process (`worker_extension_cls`): receive weights as they are staged.

Importing it registers the gloo and the timed NCCL weight-transfer engines (gloo.py, timed_nccl.py) in
the worker's process, before vLLM builds the engine `weight_transfer_config` names.

The bytes arrive a bucket at a time in the engine actor's shared-memory ring
(workers/weights/staging.py); only the bucket headers travel through `collective_rpc`. vLLM loads
them as they come, layer by layer, in one call. A delta's patch is first applied to the worker's
copy of its weights and checked (workers/weights/delta.py); the model then reloads from that copy.
The worker's `reload_weights` (vLLM's config context around `model_runner.reload_weights`) is used
rather than `model.load_weights`: on the CPU backend the latter fails after start-up because linear
layers are repacked when the model loads.
"""

from __future__ import annotations

from workers.host_memory import return_freed_memory
from workers.weights import gloo, timed_nccl  # noqa: F401  (register "gloo" and "nccl_timed" with vLLM in this process)
from workers.weights.buckets import Checksum, tensors
from workers.weights.delta import MIRROR, REJECTED, Manifest, PatchRejected
from workers.weights.staging import StagedStream


class WeightReceiver:
    def load_weight_buckets(self, staged: dict) -> str:
        """Load every tensor of the staged buckets into the live model, as they arrive; return the
        checksum of the bytes loaded. Every tensor-parallel worker loads every bucket (vLLM's
        `load_weights` keeps each rank's shard), reading the ring as reader `rank`."""
        stream = StagedStream(staged, reader=self.rank)  # vLLM's Worker: its rank in the engine
        digest = Checksum()

        def buckets():
            for bucket in stream.buckets():
                digest.add(bucket)
                yield bucket

        try:
            # Copies, not views: the slot is reused for a later bucket, and vLLM may keep a tensor until the
            # rest of its layer arrives (and a mirror keeps them all).
            named = tensors(buckets(), copy=True)
            if staged.get("patch") is not None:
                try:
                    named = MIRROR.apply(Manifest.from_dict(staged["patch"]), named)
                except PatchRejected as why:
                    return REJECTED + str(why)
            elif staged.get("mirror"):
                named = MIRROR.record(named)
            # The worker's own reload_weights: it runs the model runner's under vLLM's config context,
            # which the GPU path needs (on CPU the model runner alone also worked).
            self.reload_weights(weights_iterator=named)
        finally:
            stream.close()
            return_freed_memory()  # the tensors' copies, vLLM's per-layer buffers
        if staged.get("patch") is not None:
            return staged["patch"]["checksum"]  # the mirror's, checked against it before anything was loaded
        if staged.get("mirror"):
            MIRROR.loaded(staged["version"])
        return digest.hexdigest()

    def weight_transfer_checksum(self) -> str | None:
        """The checksum of the last update received over the collective path (gloo.py); None from
        vLLM's own NCCL engine, which hashes nothing."""
        return getattr(self.weight_transfer_engine, "checksum", None)
