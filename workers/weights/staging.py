"""The same-node hop of a CPU weight sync: engine actor -> its vLLM worker processes, through shared memory.

vLLM's `collective_rpc` serialises its arguments (msgpack) and sends them over a ZMQ socket to the
engine-core process: 84 MB of weights took about 0.5 s that way on a 2-core CPU, where copying
them takes about 0.01 s. Instead the engine actor copies the buckets into one shared-memory region
and the RPC carries only the bucket headers and where the region is; each worker maps the region
once and makes its tensors as views of it. The region lives as long as the engine: one more copy
of the weights in host memory, because memory mapped afresh for every sync costs page faults
worth several copies.

Nothing is left behind when a process dies: on Linux the region is an anonymous memfd (the worker
opens it through /proc/<actor pid>/fd/<fd>), which the kernel frees with the last process that maps
it. Elsewhere it is a temporary file, unlinked as soon as the workers have mapped it.
"""

from __future__ import annotations

import itertools
import mmap
import os
import tempfile

import numpy as np

from workers.weights.buckets import ALIGN, WeightBucket

_regions = itertools.count()


class StagingBuffer:
    """Engine actor side: one region reused sync after sync, replaced by a larger one if needed."""

    def __init__(self):
        self._map: mmap.mmap | None = None
        self._fd: int | None = None
        self._path = ""
        self._id = ""
        self._unlink_after_attach = False

    def stage(self, buckets: list[WeightBucket]) -> dict:
        """Lay the buckets out in the region (one copy); returns the message the workers open it from."""
        size = sum(_aligned(bucket.nbytes) for bucket in buckets)
        if self._map is None or len(self._map) < size:
            self._allocate(size)
        region = np.frombuffer(self._map, dtype=np.uint8)
        headers, base = [], 0
        for bucket in buckets:
            for entry, chunk in zip(bucket.entries, bucket.chunks):
                start = base + entry.offset
                np.copyto(region[start : start + entry.nbytes], np.frombuffer(chunk, dtype=np.uint8))
            headers.append([bucket.header(), base])
            base += _aligned(bucket.nbytes)  # each bucket starts on a cache line, as its tensors assume
        del region  # an exported buffer would keep the map from closing
        return {"id": self._id, "path": self._path, "size": len(self._map), "buckets": headers}

    def attached(self) -> None:
        """The workers have mapped the region: a temporary file's name is no longer needed."""
        if self._unlink_after_attach:
            os.unlink(self._path)
            self._unlink_after_attach = False

    def _allocate(self, size: int) -> None:
        self.close()
        if hasattr(os, "memfd_create"):
            self._fd = os.memfd_create("grpo-weights")
            self._path = f"/proc/{os.getpid()}/fd/{self._fd}"
        else:
            self._fd, self._path = tempfile.mkstemp(prefix="grpo-weights-")
            self._unlink_after_attach = True
        os.ftruncate(self._fd, size)
        self._map = mmap.mmap(self._fd, size)
        self._id = f"{os.getpid()}-{next(_regions)}"

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            os.close(self._fd)
            self.attached()
            self._map = self._fd = None


class StagedRegion:
    """Worker side: the engine actor's region, mapped once and kept while its id stays the same."""

    def __init__(self):
        self._id = ""
        self._map: mmap.mmap | None = None

    def buckets(self, message: dict) -> list[WeightBucket]:
        """The buckets of `message`, their bytes viewed in place in the mapped region."""
        if message["id"] != self._id:
            self._open(message)
        view = memoryview(self._map)
        return [
            WeightBucket.from_header(
                header, tuple(view[base + offset : base + offset + nbytes] for _, _, _, offset, nbytes in header)
            )
            for header, base in message["buckets"]
        ]

    def _open(self, message: dict) -> None:
        try:
            fd = os.open(message["path"], os.O_RDWR)
        except OSError as error:
            raise RuntimeError(
                f"cannot open the engine actor's weight staging region {message['path']} ({error}); the vLLM "
                "workers must run on the engine actor's node, in its process namespace"
            ) from error
        try:
            mapped = mmap.mmap(fd, message["size"])
        finally:
            os.close(fd)
        self._map, self._id = mapped, message["id"]  # the old map closes when its last view is gone


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN
