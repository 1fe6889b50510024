"""The weight transport for a device: the object store on CPU, vLLM's NCCL weight transfer on GPU.

A LoRA run takes the object store on GPU too: after each engine's first load only the adapter
travels (megabytes), the store's path verifies every engine's checksum, and it keeps no NCCL group
to rebuild when an engine is replaced."""

from __future__ import annotations

from workers.weights.transport import WeightTransport


def make_transport(
    device: str,
    timeout_s: float,
    bucket_bytes: int,
    tensor_parallel_size: int = 1,
    lora: bool = False,
    dtype: str | None = None,
) -> WeightTransport:
    """`dtype`: the engines' weight dtype, if known; the object store carries the weights in it."""
    if device == "cpu" or lora:
        from workers.weights.object_store import ObjectStoreTransport

        return ObjectStoreTransport(timeout_s, bucket_bytes, dtype)
    from workers.weights.nccl import NcclTransport

    return NcclTransport(timeout_s, bucket_bytes, tensor_parallel_size, dtype)
