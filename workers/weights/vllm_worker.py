"""Loaded into each vLLM worker process (`worker_extension_cls`): receive packed weights in place.

The bytes arrive in the engine actor's shared-memory staging region (workers/weights/staging.py);
only their headers travel through `collective_rpc`. The worker's `reload_weights` (vLLM's config
context around `model_runner.reload_weights`) is used rather than `model.load_weights`: on the CPU
backend the latter fails after start-up because linear layers are repacked when the model loads.
"""

from __future__ import annotations

from workers.weights.buckets import checksum, unpack
from workers.weights.staging import StagedRegion


class WeightReceiver:
    def load_weight_buckets(self, staged: dict) -> str:
        """Load every tensor of the staged buckets into the live model; return the checksum of
        the bytes loaded."""
        if not hasattr(self, "_staged_region"):
            self._staged_region = StagedRegion()
        buckets = self._staged_region.buckets(staged)

        def tensors():
            for bucket in buckets:
                yield from unpack(bucket)

        # The worker's own reload_weights: it runs the model runner's under vLLM's config context, which
        # the GPU path needs (on CPU the model runner alone also worked).
        self.reload_weights(weights_iterator=tensors())
        return checksum(buckets)
