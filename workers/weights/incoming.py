"""The engine actor's side of an object-store load: the buckets the driver feeds, passed on in order.

    incoming = IncomingWeights(version, headers, timeout_s, readers)   # the ring, sized for the largest bucket
    await incoming.feed(index, bucket)                          # one call per bucket, any order of arrival
    incoming.message                                            # what the vLLM worker reads the ring from

The base model's buckets go through the shared-memory ring to the vLLM worker, which loads them as
they arrive (workers/weights/staging.py); `feed` returns once a bucket is copied into the ring, so
the object store can free it. A LoRA adapter's buckets are small: they are kept until the base
weights are loaded, then written as a PEFT folder (workers/weights/adapters.py).
"""

from __future__ import annotations

import asyncio

from workers.weights import adapters
from workers.weights.buckets import WeightBucket
from workers.weights.staging import StagingRing


class IncomingWeights:
    def __init__(self, version: int, headers: list, timeout_s: float, readers: int = 1):
        """`readers`: the engine's vLLM workers (its tensor-parallel size), which each load every bucket."""
        self.version = version
        self.timeout_s = timeout_s
        base = [header for header in headers if not adapters.is_adapter_header(header)]
        self.adapter_count = len(headers) - len(base)
        self.ring = StagingRing(max(_nbytes(header) for header in base), readers=readers) if base else None
        self.message = self.ring.message(base, timeout_s) if self.ring else None
        self._adapter: list[WeightBucket] = []
        self._adapter_done = asyncio.Event()
        if not self.adapter_count:
            self._adapter_done.set()
        self._next = 0
        self._turn = asyncio.Condition()
        self.closed = False

    async def feed(self, index: int, bucket: WeightBucket) -> None:
        """Pass bucket `index` on once the ones before it are; returns when the ring holds it."""
        async with self._turn:
            await self._turn.wait_for(lambda: self._next == index or self.closed)
        if self.closed:
            raise RuntimeError(f"weight bucket {index} of version {self.version} arrived after the load ended")
        if adapters.is_adapter(bucket):
            self._adapter.append(bucket)
            if len(self._adapter) == self.adapter_count:
                self._adapter_done.set()
        else:
            await self.ring.put(bucket)
        async with self._turn:
            self._next += 1
            self._turn.notify_all()

    async def adapter(self) -> list[WeightBucket]:
        """The adapter's buckets, once all have arrived (within `timeout_s`)."""
        await asyncio.wait_for(self._adapter_done.wait(), self.timeout_s)
        return self._adapter

    def close(self) -> None:
        """End the load: the ring is released, and feeds still waiting raise."""
        self.closed = True
        if self.ring is not None:
            self.ring.close()

        async def wake() -> None:
            async with self._turn:
                self._turn.notify_all()

        asyncio.ensure_future(wake())


def _nbytes(header: list) -> int:
    _, _, _, offset, nbytes = header[-1]
    return offset + nbytes
