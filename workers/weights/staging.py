"""The same-node hop of a CPU weight sync: engine actor -> its vLLM worker, a few buckets at a time.

vLLM's `collective_rpc` serialises its arguments (msgpack) and sends them over a ZMQ socket to the
engine-core process: 84 MB of weights took about 0.5 s that way on a 2-core CPU, where copying
them takes about 0.01 s. Instead the bytes go through a small shared-memory ring of `slots` slots of
one bucket each, and the RPC carries only the bucket headers and where the ring is:

    engine actor (StagingRing.put)              vLLM worker (StagedStream.buckets)
    wait for a free slot, copy the bucket in,   read "bucket i is in slot s", load its tensors
    write "i s" to each reader's ready pipe --->  (copied out of the slot), write "s" to the free pipe

So the weights are never all in the ring at once: a model of any size passes through `slots`
buckets of memory, each slot reused as soon as the worker has copied its tensors out (vLLM may keep
a tensor until the rest of its layer arrives, so the worker hands it a copy, not a view of a slot
the next bucket will overwrite). An engine of several tensor-parallel workers has one reader each:
every worker loads every bucket (vLLM's `load_weights` takes each rank's shard), each reads its own
ready pipe (`reader` = its rank), and a slot is free again once every reader has released it. The
pipes order the processes' memory accesses and tell each side when the other has gone: a worker
that waits longer than the message's `timeout_s`, or finds the actor's end closed, raises, and the
load fails (workers/weights/loading.py).

Nothing is left behind when a process dies: on Linux the ring is an anonymous memfd and the pipes
belong to the actor; the worker opens all three through /proc/<actor pid>/fd/<fd>, and the kernel
frees them with the last process that holds them. Elsewhere the ring is a temporary file, unlinked
when the actor closes it.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import select
import tempfile
from collections import Counter

import numpy as np

from workers.weights.buckets import ALIGN, WeightBucket

SLOTS = 2  # one bucket being copied in while the worker loads the other


class StagingRing:
    """Engine actor side of one load: `put` each bucket in order, then `close`. `readers`: the worker
    processes that each load every bucket (the engine's tensor-parallel size)."""

    def __init__(self, slot_bytes: int, slots: int = SLOTS, readers: int = 1):
        self.slot_bytes = max(ALIGN, _aligned(slot_bytes))
        self.slots = slots
        self.readers = readers
        size = self.slot_bytes * slots
        if hasattr(os, "memfd_create"):
            self._fd = os.memfd_create("grpo-weights")
            self._path, self._temporary = f"/proc/{os.getpid()}/fd/{self._fd}", False
        else:
            self._fd, self._path = tempfile.mkstemp(prefix="grpo-weights-")
            self._temporary = True
        os.ftruncate(self._fd, size)
        self._map = mmap.mmap(self._fd, size)
        self._ready = [os.pipe() for _ in range(readers)]  # actor -> each worker: "bucket slot\n"
        self._free_read, self._free_write = os.pipe()  # every worker -> actor: "slot\n"
        os.set_blocking(self._free_read, False)
        self._free: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(slots):
            self._free.put_nowait(slot)
        self._released: Counter[int] = Counter()  # readers done with each slot since it was filled
        self._closed = asyncio.Event()
        self._partial = b""
        self._watching = False
        self._sent = 0

    def message(self, headers: list, timeout_s: float) -> dict:
        """What the worker opens the ring from: `headers` are the buckets' `WeightBucket.header()`s,
        in the order `put` will send them."""
        pid = os.getpid()
        return {
            "path": self._path,
            "size": len(self._map),
            "slot_bytes": self.slot_bytes,
            "ready": [f"/proc/{pid}/fd/{read}" for read, _ in self._ready],
            "free": f"/proc/{pid}/fd/{self._free_write}",
            "headers": headers,
            "timeout_s": timeout_s,
        }

    async def put(self, bucket: WeightBucket) -> None:
        """Copy the bucket into the next free slot and tell the worker; waits while both are in use.
        Raises if the ring was closed meanwhile (the load ended)."""
        if bucket.nbytes > self.slot_bytes:
            raise ValueError(f"a bucket of {bucket.nbytes} bytes does not fit the ring's {self.slot_bytes}-byte slots")
        self._watch()
        slot = await self._next_free()
        region = np.frombuffer(self._map, dtype=np.uint8, count=self.slot_bytes, offset=slot * self.slot_bytes)
        for entry, chunk in zip(bucket.entries, bucket.chunks):
            np.copyto(region[entry.offset : entry.offset + entry.nbytes], np.frombuffer(chunk, dtype=np.uint8))
        del region  # an exported buffer would keep the map from closing
        for _, write in self._ready:
            os.write(write, f"{self._sent} {slot}\n".encode())
        self._sent += 1

    def close(self) -> None:
        """Release the ring; a `put` still waiting raises. The worker sees the pipe closed."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._watching:
            asyncio.get_running_loop().remove_reader(self._free_read)
        for fd in (*(fd for pipe in self._ready for fd in pipe), self._free_read, self._free_write, self._fd):
            os.close(fd)
        self._map.close()
        if self._temporary:
            os.unlink(self._path)

    async def _next_free(self) -> int:
        if self._closed.is_set():
            raise RuntimeError("the weight load ended before this bucket was staged")
        free = asyncio.ensure_future(self._free.get())
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait({free, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
        if not free.done():
            free.cancel()
            raise RuntimeError("the weight load ended before this bucket was staged")
        return free.result()

    def _watch(self) -> None:
        if not self._watching:
            asyncio.get_running_loop().add_reader(self._free_read, self._on_free)
            self._watching = True

    def _on_free(self) -> None:
        try:
            data = os.read(self._free_read, 4096)
        except BlockingIOError:
            return
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            slot = int(line)
            self._released[slot] += 1
            if self._released[slot] == self.readers:
                del self._released[slot]
                self._free.put_nowait(slot)


class StagedStream:
    """Worker side: the buckets of one load, in order, as they arrive in the actor's ring. `reader`:
    this worker's rank among the engine's tensor-parallel workers."""

    def __init__(self, message: dict, reader: int = 0):
        self._message = message
        if not 0 <= reader < len(message["ready"]):
            raise RuntimeError(
                f"weight staging: worker rank {reader} has no reader of its own in a ring staged for "
                f"{len(message['ready'])} (rollout.tensor_parallel_size); the engine's workers disagree with its config"
            )
        opened = []
        try:
            opened.append(os.open(message["path"], os.O_RDWR))
            opened.append(os.open(message["ready"][reader], os.O_RDONLY))
            opened.append(os.open(message["free"], os.O_WRONLY))
        except OSError as error:
            for fd in opened:
                os.close(fd)
            raise RuntimeError(
                f"cannot open the engine actor's weight staging ring {message['path']} ({error}); the vLLM "
                "workers must run on the engine actor's node, in its process namespace"
            ) from error
        fd, self._ready, self._free = opened
        try:
            self._map = mmap.mmap(fd, message["size"])
        finally:
            os.close(fd)
        self._pending = b""

    def buckets(self):
        """Each bucket as it arrives, its bytes viewed in its slot: valid until the next one is asked
        for, when the slot goes back to the actor."""
        view = memoryview(self._map)
        size = self._message["slot_bytes"]
        for index, header in enumerate(self._message["headers"]):
            sent, slot = self._next_line(index)
            if sent != index:
                raise RuntimeError(f"weight staging: expected bucket {index}, the actor sent bucket {sent}")
            base = slot * size
            chunks = tuple(view[base + offset : base + offset + nbytes] for _, _, _, offset, nbytes in header)
            yield WeightBucket.from_header(header, chunks)
            del chunks
            try:
                os.write(self._free, f"{slot}\n".encode())
            except BrokenPipeError:
                raise RuntimeError(f"weight staging: the engine actor stopped sending after bucket {index}") from None
        view.release()

    def close(self) -> None:
        os.close(self._ready)
        os.close(self._free)
        try:
            self._map.close()
        except BufferError:  # a tensor still views it; the map goes with the last view
            pass

    def _next_line(self, index: int) -> tuple[int, int]:
        timeout_s = self._message["timeout_s"]
        poll = select.poll()  # not select.select: a busy worker's descriptors may be numbered past 1024
        poll.register(self._ready, select.POLLIN)
        while b"\n" not in self._pending:
            if not poll.poll(timeout_s * 1000):
                raise TimeoutError(f"weight staging: bucket {index} did not arrive within {timeout_s}s")
            data = os.read(self._ready, 4096)
            if not data:
                raise RuntimeError(f"weight staging: the engine actor stopped sending before bucket {index}")
            self._pending += data
        line, self._pending = self._pending.split(b"\n", 1)
        sent, slot = line.split()
        return int(sent), int(slot)


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN
