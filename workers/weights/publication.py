"""The learner's side of an object-store sync: its weights handed out one bucket at a time.

    publication = Publication(learner.named_weights(), bucket_bytes, dtype)   # headers only: nothing copied
    publication.bucket(0), publication.bucket(1), ...                           # Ray stores each as it returns
    publication.checksum()                                                      # of everything handed out

Each bucket is made as it is asked for: views of the live weights, or (with `dtype`, the engines'
weight dtype, when it is not the learner's) their casts, made then into one bucket's worth of
memory the learner keeps for it (`BucketBuffer`), which the next bucket reuses once Ray has stored
this one. So neither the learner nor the object store ever holds a second copy of the whole model: the
store holds only the buckets the engines have not taken yet (the driver keeps a few in flight:
workers/weights/object_store.py). If the weights are about to change while a publication is still
open (an engine admitted while the learner trains), `keep` first copies the buckets not yet handed
out, once, into host memory and in the dtype they travel in: a publication is always one policy.
"""

from __future__ import annotations

from workers.weights import adapters
from workers.weights.buckets import BucketBuffer, Checksum, WeightBucket, fill, header, sent_dtype


class Publication:
    def __init__(self, named_weights, bucket_bytes: int, dtype: str | None = None, buffer: BucketBuffer | None = None):
        """`buffer`: memory the casts are made in, reused by each bucket (and by later publications):
        a bucket handed out is then valid only until the next is, which is how Ray uses it (it copies
        each into its store as `weight_bucket` returns)."""
        self._groups = adapters.groups_apart(named_weights, bucket_bytes, dtype)
        self._dtype = dtype
        self._buffer = buffer
        self.headers = [header(group, dtype) for group in self._groups]
        self._next = 0
        self._base, self._adapter = Checksum(), Checksum()
        self._kinds = {"base": False, "adapter": False}
        self._kept = False

    @property
    def nbytes(self) -> int:
        return sum(entries[-1][3] + entries[-1][4] for entries in self.headers if entries)

    @property
    def open(self) -> bool:
        """Whether buckets remain to be handed out."""
        return self._next < len(self._groups)

    def bucket(self, index: int) -> WeightBucket:
        """The next bucket; buckets are handed out once each, in order (the checksum follows that order)."""
        if index != self._next:
            raise ValueError(f"weight bucket {index} was asked for, but the next one to hand out is {self._next}")
        bucket = fill(self._groups[index], self._dtype, self._buffer)
        self._groups[index] = None  # its bytes are Ray's once this returns
        kind = "adapter" if adapters.is_adapter(bucket) else "base"
        (self._adapter if kind == "adapter" else self._base).add(bucket)
        self._kinds[kind] = True
        self._next += 1
        return bucket

    def checksum(self) -> str:
        """What the engines must report: one part per kind of tensor (workers/weights/adapters.py)."""
        if self.open:
            raise ValueError(f"the checksum was asked for with {len(self._groups) - self._next} weight buckets not handed out")
        base = self._base.hexdigest() if self._kinds["base"] else None
        adapter = self._adapter.hexdigest() if self._kinds["adapter"] else None
        return adapters.combined_checksum(base, adapter)

    def keep(self) -> None:
        """Copy the tensors not handed out yet: the weights they are about to change. The copies are
        the publication's own, so a second `keep` has nothing to do."""
        if self._kept:
            return
        self._kept = True
        copies: dict[int, object] = {}  # a tensor split across buckets is copied once

        def copy(tensor):
            if id(tensor) not in copies:  # on the host, as sent: a GPU learner's memory is not doubled
                copies[id(tensor)] = tensor.detach().to(device="cpu", dtype=sent_dtype(tensor, self._dtype), copy=True)
            return copies[id(tensor)]

        for index in range(self._next, len(self._groups)):
            self._groups[index] = [(name, copy(tensor), *piece) for name, tensor, *piece in self._groups[index]]
