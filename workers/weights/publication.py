"""The learner's side of an object-store sync: its weights handed out one bucket at a time.

    publication = Publication(learner.named_weights(), bucket_bytes)   # headers only: nothing copied
    publication.bucket(0), publication.bucket(1), ...                    # Ray stores each as it returns
    publication.checksum()                                               # of everything handed out

The buckets are views of the live weights, so the object store holds only the buckets the engines
have not taken yet (the driver keeps a few in flight: workers/weights/object_store.py), never a
second copy of the whole model. If the weights are about to change while a publication is still
open (an engine admitted while the learner trains), `keep` first copies the buckets not yet handed
out: a publication is always one policy.
"""

from __future__ import annotations

import numpy as np

from workers.weights import adapters
from workers.weights.buckets import Checksum, WeightBucket


class Publication:
    def __init__(self, named_weights, bucket_bytes: int):
        self._buckets = adapters.pack_apart(named_weights, bucket_bytes)
        self._next = 0
        self._base, self._adapter = Checksum(), Checksum()
        self._kinds = {"base": False, "adapter": False}

    @property
    def headers(self) -> list:
        return [bucket.header() for bucket in self._buckets]

    @property
    def nbytes(self) -> int:
        return sum(bucket.nbytes for bucket in self._buckets)

    @property
    def open(self) -> bool:
        """Whether buckets remain to be handed out."""
        return self._next < len(self._buckets)

    def bucket(self, index: int) -> WeightBucket:
        """The next bucket; buckets are handed out once each, in order (the checksum follows that order)."""
        if index != self._next:
            raise ValueError(f"weight bucket {index} was asked for, but the next one to hand out is {self._next}")
        bucket = self._buckets[index]
        self._buckets[index] = None  # its bytes are Ray's now
        kind = "adapter" if adapters.is_adapter(bucket) else "base"
        (self._adapter if kind == "adapter" else self._base).add(bucket)
        self._kinds[kind] = True
        self._next += 1
        return bucket

    def checksum(self) -> str:
        """What the engines must report: one part per kind of tensor (workers/weights/adapters.py)."""
        if self.open:
            raise ValueError(f"the checksum was asked for with {len(self._buckets) - self._next} weight buckets not handed out")
        base = self._base.hexdigest() if self._kinds["base"] else None
        adapter = self._adapter.hexdigest() if self._kinds["adapter"] else None
        return adapters.combined_checksum(base, adapter)

    def keep(self) -> None:
        """Copy the buckets not handed out yet: the weights they view are about to change."""
        for index in range(self._next, len(self._buckets)):
            bucket = self._buckets[index]
            self._buckets[index] = WeightBucket(bucket.entries, tuple(np.array(chunk, copy=True) for chunk in bucket.chunks))
