"""The weight transport for a run: `weight_sync.backend`, or for `auto` the device's.

    auto           NCCL on GPU, the object store on CPU
    nccl / gloo    the collective path (nccl.py); gloo is its CPU stand-in (gloo.py)
    object_store   buckets through Ray's object store (object_store.py), on any cluster; with
                   weight_sync.delta, patches after a dense anchor (delta.py)

A LoRA run takes the object store (config/train.py refuses a collective backend with lora:): after
each engine's first load only the adapter travels (megabytes), the store's path verifies every
engine's checksum, and it keeps no group to rebuild when an engine is replaced."""

from __future__ import annotations

from workers.weights.transport import WeightTransport


def chosen_backend(device: str, backend: str, lora: bool) -> str:
    """The backend a run takes: `backend`, or for auto the device's (a LoRA run: the object store)."""
    if backend != "auto":
        return backend
    return "object_store" if device == "cpu" or lora else "nccl"


def make_transport(
    device: str,
    timeout_s: float,
    bucket_bytes: int,
    tensor_parallel_size: int = 1,
    lora: bool = False,
    dtype: str | None = None,
    backend: str = "auto",
    anchor_every: int | None = None,
) -> WeightTransport:
    """`dtype`: the engines' weight dtype, if known; the weights travel in it. `anchor_every`: sync by
    patches, with a dense anchor after this many (delta.py; the object store's and gloo's paths)."""
    from workers.weights.delta import DeltaBook

    backend = chosen_backend(device, backend, lora)
    patched = anchor_every is not None and not lora and backend in ("object_store", "gloo")
    delta = DeltaBook(anchor_every) if patched else None
    if backend == "object_store":
        from workers.weights.object_store import ObjectStoreTransport

        return ObjectStoreTransport(timeout_s, bucket_bytes, dtype, delta)
    from workers.weights.nccl import NcclTransport

    return NcclTransport(timeout_s, bucket_bytes, tensor_parallel_size, dtype, backend=backend, delta=delta)
