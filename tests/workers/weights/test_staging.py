"""The engine actor -> vLLM worker hop: buckets pass through a two-slot shared-memory ring, read by
another process as they arrive."""

import asyncio
import multiprocessing
import os

import pytest
import torch

from workers.weights.buckets import checksum, pack, tensors
from workers.weights.staging import SLOTS, StagedStream, StagingRing


def _load_in_child(message, results, reader=0):
    """What a vLLM worker does: read each bucket as it arrives and copy its tensors out."""
    stream = StagedStream(message, reader)
    results.put("opened")
    received = []

    def each():
        for bucket in stream.buckets():
            received.append(checksum([bucket]))
            yield bucket

    try:
        loaded = {name: tensor.numpy() for name, tensor in tensors(each(), copy=True)}  # plain pickles
        results.put((received, loaded))
    except Exception as error:
        results.put(error)
    finally:
        stream.close()


def _weights(count: int) -> dict[str, torch.Tensor]:
    return {f"w{i}": torch.arange(1000 * (i + 1), dtype=torch.float32) + i for i in range(count)}


async def _stage(ring: StagingRing, buckets) -> None:
    for bucket in buckets:
        await ring.put(bucket)


def test_a_model_larger_than_the_ring_arrives_whole_in_another_process():
    weights = _weights(10)
    buckets = pack(weights.items(), bucket_bytes=16_000)  # the largest tensors travel in pieces
    assert len(buckets) > 2 * SLOTS  # the ring is reused several times
    ring = StagingRing(max(bucket.nbytes for bucket in buckets))
    context = multiprocessing.get_context("spawn")  # vLLM starts its engine-core process the same way
    results = context.Queue()
    child = context.Process(target=_load_in_child, args=(ring.message([b.header() for b in buckets], 60), results))
    child.start()
    try:
        asyncio.run(asyncio.wait_for(_stage(ring, buckets), 60))
        assert results.get(timeout=60) == "opened"
        received, loaded = results.get(timeout=60)
    finally:
        child.join(timeout=60)
        asyncio.run(_close(ring))
    assert received == [checksum([bucket]) for bucket in buckets]
    assert all(torch.equal(torch.from_numpy(loaded[name]), weights[name]) for name in weights)
    assert ring.slots * ring.slot_bytes < sum(bucket.nbytes for bucket in buckets) / 2
    assert child.exitcode == 0


def test_every_tensor_parallel_worker_reads_every_bucket_and_slots_wait_for_all_of_them():
    """An engine of two tensor-parallel workers: each loads the whole model through its own reader,
    and a slot is refilled only once both have released it (else the slower one would read the next
    bucket's bytes)."""
    weights = _weights(10)
    buckets = pack(weights.items(), bucket_bytes=16_000)
    ring = StagingRing(max(bucket.nbytes for bucket in buckets), readers=2)
    context = multiprocessing.get_context("spawn")
    message = ring.message([b.header() for b in buckets], 60)
    queues = [context.Queue(), context.Queue()]
    children = [context.Process(target=_load_in_child, args=(message, queues[r], r)) for r in (0, 1)]
    for child in children:
        child.start()
    try:
        asyncio.run(asyncio.wait_for(_stage(ring, buckets), 60))
        loads = []
        for results in queues:
            assert results.get(timeout=60) == "opened"
            loads.append(results.get(timeout=60))
    finally:
        for child in children:
            child.join(timeout=60)
        asyncio.run(_close(ring))
    for received, loaded in loads:
        assert received == [checksum([bucket]) for bucket in buckets]
        assert all(torch.equal(torch.from_numpy(loaded[name]), weights[name]) for name in weights)
    assert [child.exitcode for child in children] == [0, 0]


def test_a_worker_rank_the_ring_was_not_staged_for_is_refused():
    buckets = pack(_weights(1).items())

    async def open_as_rank_one():
        ring = StagingRing(buckets[0].nbytes)  # one reader: a tensor-parallel size of 1
        try:
            with pytest.raises(
                RuntimeError, match=r"worker rank 1 has no reader .* staged for 1 \(rollout.tensor_parallel_size\)"
            ):
                StagedStream(ring.message([buckets[0].header()], timeout_s=10), reader=1)
        finally:
            ring.close()

    asyncio.run(open_as_rank_one())


async def _close(ring: StagingRing) -> None:
    ring.close()


def test_a_worker_whose_buckets_stop_coming_fails_instead_of_waiting_forever():
    buckets = pack(_weights(3).items(), bucket_bytes=4_000)

    async def send_one_then_stop():
        ring = StagingRing(max(bucket.nbytes for bucket in buckets))
        message = ring.message([b.header() for b in buckets], timeout_s=60)
        results = multiprocessing.get_context("spawn").Queue()
        child = multiprocessing.get_context("spawn").Process(target=_load_in_child, args=(message, results))
        child.start()
        await ring.put(buckets[0])
        assert await asyncio.to_thread(results.get, timeout=60) == "opened"
        ring.close()  # the load was given up (the driver's abort, or the engine shutting down)
        with pytest.raises(RuntimeError, match="weight load ended"):
            await ring.put(buckets[1])
        return results.get(timeout=60), child

    error, child = asyncio.run(send_one_then_stop())
    child.join(timeout=60)
    assert isinstance(error, RuntimeError) and "engine actor stopped sending" in str(error)


def test_a_worker_gives_up_after_the_timeout():
    buckets = pack(_weights(2).items(), bucket_bytes=4_000)

    async def never_send():
        ring = StagingRing(max(bucket.nbytes for bucket in buckets))
        stream = StagedStream(ring.message([b.header() for b in buckets], timeout_s=0.2))
        try:
            with pytest.raises(TimeoutError, match=r"bucket 0 did not arrive within 0.2s"):
                next(stream.buckets())
        finally:
            stream.close()
            ring.close()

    asyncio.run(never_send())


def test_the_ring_leaves_nothing_open_behind():
    """Its memory, pipes and the worker's ends are all closed after a load (on Linux the ring is a
    memfd: it has no name to leave behind, only descriptors)."""
    before = set(os.listdir("/proc/self/fd"))
    buckets = pack({"w": torch.ones(100)}.items())

    async def one_load():
        ring = StagingRing(buckets[0].nbytes)
        stream = StagedStream(ring.message([buckets[0].header()], timeout_s=10))
        await ring.put(buckets[0])
        loaded = [dict(tensors([bucket]))["w"].clone() for bucket in stream.buckets()]
        stream.close()
        ring.close()
        return loaded

    assert torch.equal(asyncio.run(one_load())[0], torch.ones(100))
    assert set(os.listdir("/proc/self/fd")) - before == set()
