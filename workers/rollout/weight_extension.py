"""Loaded into each vLLM worker process (`worker_extension_cls`): receive packed weights in place.

`model_runner.reload_weights` is used rather than `model.load_weights`: on the CPU backend the
latter fails after start-up because linear layers are repacked when the model loads.
"""

from __future__ import annotations

from workers.weights.buckets import WeightBucket, checksum, unpack


class WeightReceiver:
    def load_weight_buckets(self, wire_buckets: list[dict]) -> str:
        """Load every tensor of the buckets into the live model; return the checksum received."""
        buckets = [WeightBucket.from_wire(wire) for wire in wire_buckets]

        def tensors():
            for bucket in buckets:
                yield from unpack(bucket)

        self.model_runner.reload_weights(weights_iterator=tensors())
        return checksum(buckets)
