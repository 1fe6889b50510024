"""Weights grouped into a few large buckets instead of one message per tensor.

A bucket is the (name, dtype, shape, offset) of tensors laid out back to back (64-byte aligned)
plus each tensor's bytes; a tensor larger than a bucket travels in pieces, one bucket each, so no
bucket, and no slot of memory it passes through, is larger than the bucket size. On the learner
those bytes are views of the weights themselves (or their casts to the engines' dtype):
Ray copies each into its object store as the learner hands it out (workers/weights/publication.py),
the only copy on the learner's side. The engine actor reads it in place from the store and writes
it, laid out, into the shared-memory ring its vLLM workers read (workers/weights/staging.py).
`tensors` reads them back without a copy. The checksum lets the orchestrator prove every engine
received exactly what the learner sent.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator

import numpy as np
import torch

DEFAULT_BUCKET_BYTES = 64 << 20
ALIGN = 64  # every tensor starts on a cache line, so any dtype can be viewed in place

Chunk = np.ndarray | memoryview | bytes | bytearray  # one tensor's bytes


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
    chunks: tuple[Chunk, ...]  # the bytes of each entry, in order

    @property
    def nbytes(self) -> int:
        """Bytes of the laid-out bucket, alignment padding included."""
        return self.entries[-1].offset + self.entries[-1].nbytes if self.entries else 0

    def header(self) -> list:
        """The entries as plain lists, for vLLM's msgspec-serialised `collective_rpc`."""
        return [[e.name, e.dtype, list(e.shape), e.offset, e.nbytes] for e in self.entries]

    @staticmethod
    def from_header(header: list, chunks: tuple[Chunk, ...]) -> WeightBucket:
        return WeightBucket(tuple(TensorEntry(n, d, tuple(s), o, b) for n, d, s, o, b in header), chunks)


def pack(
    named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int = DEFAULT_BUCKET_BYTES, dtype: str | None = None
) -> list[WeightBucket]:
    """Buckets of at most about `bucket_bytes`: a tensor larger than that is split into pieces, each
    in a bucket of its own (`tensors` joins them again). The chunks of contiguous CPU tensors are
    views of them, not copies: use the buckets before the weights change. `dtype`: floating-point
    tensors as that dtype (the engines' own), cast as each bucket is filled."""
    return [fill(group, dtype) for group in groups(named_tensors, bucket_bytes, dtype)]


Piece = tuple[str, torch.Tensor, int, int]  # name, tensor, first and last + 1 element of the flattened tensor


def groups(named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int, dtype: str | None = None) -> list[list[Piece]]:
    """What each bucket `pack` would make holds, not yet laid out: `header` and `fill` each later."""
    result, group, size = [], [], 0
    for name, tensor in named_tensors:
        itemsize = _itemsize(tensor, dtype)
        count = tensor.numel()
        if group and size + count * itemsize > bucket_bytes:
            result.append(group)
            group, size = [], 0
        step = max(1, bucket_bytes // itemsize)
        for start in range(0, count, step) if count > step else [0]:
            if group and start:  # the pieces of a tensor too large for one bucket: one bucket each
                result.append(group)
                group, size = [], 0
            stop = min(count, start + step)
            group.append((name, tensor, start, stop))
            size = _aligned(size + (stop - start) * itemsize)
    if group:
        result.append(group)
    return result


def header(group: list[Piece], dtype: str | None = None) -> list:
    """`fill(group, dtype).header()`, without touching a byte."""
    entries, size = [], 0
    for name, tensor, start, stop in group:
        nbytes = (stop - start) * _itemsize(tensor, dtype)
        entries.append([name, str(sent_dtype(tensor, dtype)).removeprefix("torch."), list(tensor.shape), size, nbytes])
        size = _aligned(size + nbytes)
    return entries


def fill(group: list[Piece], dtype: str | None = None, into: BucketBuffer | None = None) -> WeightBucket:
    """One bucket of `group`'s tensors (or pieces of one), laid out as `header` says: views of them, or
    their casts to `dtype`. With `into`, what has to be made (a cast, a copy off the GPU) is written
    into its memory rather than fresh pages, and the bucket's chunks are views of it: valid until
    the next bucket is filled into it."""
    entries = header(group, dtype)
    size = entries[-1][3] + entries[-1][4] if entries else 0  # the laid-out bucket's bytes
    chunks = []
    for (_, tensor, start, stop), (_, _, _, offset, nbytes) in zip(group, entries):
        whole = start == 0 and stop == tensor.numel()
        part = tensor.detach() if whole else tensor.detach().reshape(-1)[start:stop]  # sliced where it lies
        sent = sent_dtype(tensor, dtype)
        if into is not None and (part.device.type != "cpu" or part.dtype != sent or not part.is_contiguous()):
            region = into.get(size)[offset : offset + nbytes]  # grown once, if at all
            region.view(sent).copy_(part.reshape(-1))
            chunks.append(region.numpy())
            continue
        chunks.append(part.to(device="cpu", dtype=sent).contiguous().view(-1).view(torch.uint8).numpy())
    return WeightBucket.from_header(entries, tuple(chunks))


class BucketBuffer:
    """Host memory that buckets are cast into (`fill(into=...)`), kept from one sync to the next.

    Writing memory a process has written before is several times faster than writing fresh pages,
    which the kernel must first map and zero: a float32 -> bfloat16 cast of the Qwen2.5-0.5B
    embedding ran at 9.7 GB/s into the same tensor again, 1.7 GB/s into a new one (one thread, this
    machine). A learner casting every bucket into new tensors paid that on each of a sync's ~1.3 GB."""

    def __init__(self):
        self._memory = torch.empty(0, dtype=torch.uint8)

    def get(self, nbytes: int) -> torch.Tensor:
        """At least `nbytes` of this buffer's memory (grown, once, for a larger bucket)."""
        if self._memory.numel() < nbytes:
            self._memory = torch.empty(nbytes, dtype=torch.uint8)
        return self._memory


def sent_dtype(tensor: torch.Tensor, dtype: str | None) -> torch.dtype:
    """What `tensor` travels as: `dtype` for floating-point weights, if given; else its own."""
    return getattr(torch, dtype) if dtype is not None and tensor.is_floating_point() else tensor.dtype


def _itemsize(tensor: torch.Tensor, dtype: str | None) -> int:
    return torch.empty(0, dtype=sent_dtype(tensor, dtype)).element_size()


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def tensors(buckets: Iterable[WeightBucket], copy: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor of the buckets, in order, the pieces of a split one joined (into a new tensor as
    its last piece arrives); the others as views of their chunks, or copies of them with `copy`. A
    bucket's views are taken before the next bucket is asked for."""
    joining: tuple[str, torch.Tensor, int] | None = None  # name, bytes so far, bytes filled
    for bucket in buckets:
        for entry, chunk in zip(bucket.entries, bucket.chunks):
            dtype = getattr(torch, entry.dtype)
            whole = math.prod(entry.shape) * torch.empty(0, dtype=dtype).element_size()
            data = _bytes(entry, chunk)
            if joining is None and entry.nbytes == whole:
                tensor = data.view(dtype).view(entry.shape)
                yield entry.name, tensor.clone() if copy else tensor
                continue
            if joining is None:
                joining = (entry.name, torch.empty(whole, dtype=torch.uint8), 0)
            name, target, filled = joining
            if entry.name != name:
                raise ValueError(f"weight buckets: {name} ended after {filled} of {target.numel()} bytes")
            target[filled : filled + entry.nbytes].copy_(data)
            joining = (name, target, filled + entry.nbytes)
            if filled + entry.nbytes == whole:
                yield name, target.view(dtype).view(entry.shape)
                joining = None
    if joining is not None:
        raise ValueError(f"weight buckets: {joining[0]} ended after {joining[2]} of {joining[1].numel()} bytes")


def _bytes(entry: TensorEntry, chunk: Chunk) -> torch.Tensor:
    """A chunk as a uint8 tensor, in place (a read-only chunk is copied once)."""
    if not entry.nbytes:
        return torch.empty(0, dtype=torch.uint8)
    data = bytearray(chunk) if memoryview(chunk).readonly else chunk
    return torch.frombuffer(data, dtype=torch.uint8)


def checksum(buckets: Iterable[WeightBucket]) -> str:
    """XXH3-128 over every tensor's name, dtype, shape and bytes, in order. It proves the bytes
    arrived unchanged (any flipped byte changes it) at about memory speed on one core: 84 MB in
    ~13 ms here, against sha256's ~85 ms, on the critical path of every sync."""
    digest = Checksum()
    for bucket in buckets:
        digest.add(bucket)
    return digest.hexdigest()


class Checksum:
    """`checksum`, a bucket at a time: for buckets that are never all in memory at once."""

    def __init__(self):
        import xxhash

        self._digest = xxhash.xxh3_128()

    def add(self, bucket: WeightBucket) -> None:
        for entry, chunk in zip(bucket.entries, bucket.chunks):
            self._digest.update(f"{entry.name}|{entry.dtype}|{entry.shape}|".encode())
            self._digest.update(chunk)

    def add_tensor(self, name: str, tensor) -> None:
        """One tensor as the collective paths carry it (gloo.py): its name, dtype, shape and bytes."""

        self._digest.update(f"{name}|{tensor.dtype}|{list(tensor.shape)}|".encode())
        self._digest.update(tensor.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy())

    def hexdigest(self) -> str:
        return self._digest.hexdigest()[:16]
