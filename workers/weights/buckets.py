"""Weights packed into a few large byte buffers instead of one message per tensor.

A bucket holds whole tensors back to back in one contiguous buffer plus the (name, dtype, shape,
offset) of each; it crosses Ray's object store and vLLM's `collective_rpc` (which serialises its
arguments with msgspec, so tensors must travel as bytes). Unpacking is zero-copy. The checksum
lets the orchestrator prove every engine received exactly what the learner sent.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Iterator

import torch

DEFAULT_BUCKET_BYTES = 256 << 20


@dataclasses.dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str  # torch dtype name, e.g. "float32"
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclasses.dataclass(frozen=True)
class WeightBucket:
    entries: tuple[TensorEntry, ...]
    data: bytes

    def to_wire(self) -> dict:
        """Plain types only, for vLLM's msgspec-serialised `collective_rpc`."""
        return {
            "entries": [[e.name, e.dtype, list(e.shape), e.offset, e.nbytes] for e in self.entries],
            "data": self.data,
        }

    @staticmethod
    def from_wire(wire: dict) -> WeightBucket:
        entries = tuple(TensorEntry(n, d, tuple(s), o, b) for n, d, s, o, b in wire["entries"])
        return WeightBucket(entries=entries, data=wire["data"])


def pack(named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> list[WeightBucket]:
    """Pack tensors into buckets of about `bucket_bytes` (a larger tensor gets a bucket of its own)."""
    buckets, entries, chunks, size = [], [], [], 0
    for name, tensor in named_tensors:
        raw = tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8)
        if entries and size + raw.numel() > bucket_bytes:
            buckets.append(_bucket(entries, chunks))
            entries, chunks, size = [], [], 0
        entries.append(TensorEntry(name, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), size, raw.numel()))
        chunks.append(raw)
        size += raw.numel()
    if entries:
        buckets.append(_bucket(entries, chunks))
    return buckets


def _bucket(entries: list[TensorEntry], chunks: list[torch.Tensor]) -> WeightBucket:
    return WeightBucket(entries=tuple(entries), data=torch.cat(chunks).numpy().tobytes())


def unpack(bucket: WeightBucket) -> Iterator[tuple[str, torch.Tensor]]:
    """The bucket's tensors as views of its buffer (no copy)."""
    buffer = torch.frombuffer(bytearray(bucket.data), dtype=torch.uint8) if bucket.data else torch.empty(0, dtype=torch.uint8)
    for entry in bucket.entries:
        raw = buffer[entry.offset : entry.offset + entry.nbytes]
        yield entry.name, raw.view(getattr(torch, entry.dtype)).view(entry.shape)


def checksum(buckets: Iterable[WeightBucket]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes, in order."""
    digest = hashlib.sha256()
    for bucket in buckets:
        for entry in bucket.entries:
            digest.update(f"{entry.name}|{entry.dtype}|{entry.shape}|".encode())
        digest.update(bucket.data)
    return digest.hexdigest()[:16]
