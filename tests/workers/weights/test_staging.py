"""The engine actor -> vLLM worker hop: buckets staged in shared memory, read in place by another process."""

import multiprocessing
import os

import torch

from workers.weights.buckets import checksum, pack, unpack
from workers.weights.staging import StagedRegion, StagingBuffer


def _load_in_child(messages, results):
    """What a vLLM worker does: map the region named in each message and load from it."""
    region = StagedRegion()
    for message in iter(messages.get, None):
        buckets = region.buckets(message)
        results.put((checksum(buckets), {name: tensor.clone() for b in buckets for name, tensor in unpack(b)}))


def test_another_process_reads_the_staged_weights_and_their_checksum():
    context = multiprocessing.get_context("spawn")  # vLLM starts its engine-core process the same way
    messages, results = context.Queue(), context.Queue()
    child = context.Process(target=_load_in_child, args=(messages, results))
    child.start()
    staging = StagingBuffer()
    try:
        for size in (10, 10, 1000):  # the third sync needs a larger region
            weights = {"a": torch.randn(size), "b": torch.arange(size, dtype=torch.int64)}
            buckets = pack(weights.items(), bucket_bytes=8 * size)
            messages.put(staging.stage(buckets))
            digest, loaded = results.get(timeout=60)
            staging.attached()
            assert digest == checksum(buckets)
            assert all(torch.equal(loaded[name], weights[name]) for name in weights)
    finally:
        messages.put(None)
        child.join(timeout=60)
        staging.close()
    assert child.exitcode == 0


def test_the_region_leaves_no_file_behind():
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    staging = StagingBuffer()
    message = staging.stage(pack({"w": torch.ones(100)}.items()))
    region = StagedRegion()
    assert torch.equal(dict(unpack(region.buckets(message)[0]))["w"], torch.ones(100))
    staging.attached()
    staging.close()
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert not any(name.startswith("grpo-weights") for name in after - before)
