"""The weight transport for a device: the object store on CPU, vLLM's NCCL weight transfer on GPU."""

from __future__ import annotations

from workers.weights.transport import WeightTransport


def make_transport(device: str, timeout_s: float, bucket_bytes: int, tensor_parallel_size: int = 1) -> WeightTransport:
    if device == "cpu":
        from workers.weights.object_store import ObjectStoreTransport

        return ObjectStoreTransport(timeout_s, bucket_bytes)
    from workers.weights.nccl import NcclTransport

    return NcclTransport(timeout_s, bucket_bytes, tensor_parallel_size)
