"""The Ray every command starts: what it costs the node's memory to stream weights through it."""

import re
from pathlib import Path

import numpy as np

from orchestrator.ray_runtime import FREE_OBJECTS_PERIOD

BUCKET_BYTES, BUCKETS, SYNCS, WINDOW = 32 << 20, 24, 3, 2


def _shared_memory() -> int:
    """The node's shared memory in bytes: where Ray's object store keeps the pages it has touched."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no Shmem in /proc/meminfo")


def test_streamed_buckets_reuse_the_object_stores_pages(ray_session):
    """Three syncs of 24 x 32 MB, two buckets in flight as the weight sync streams them: with Ray's
    default (freed objects go once a second) the store took 1.4 GB of new pages here, at 20 ms 0.1 GB."""
    import ray

    @ray.remote(num_cpus=0)
    class Learner:
        def bucket(self, index: int):
            return np.full(BUCKET_BYTES, index % 251, dtype=np.uint8)

    @ray.remote(num_cpus=0)
    class Engine:
        def feed(self, bucket) -> int:
            return int(bucket[-1])

    learner, engine = Learner.remote(), Engine.remote()
    assert ray.get(engine.feed.remote(learner.bucket.remote(1))) == 1
    before = _shared_memory()
    for _ in range(SYNCS):
        buckets, feeds, sent, taken = {}, {}, 0, 0
        while taken < BUCKETS:
            while sent < BUCKETS and sent - taken < WINDOW:
                buckets[sent] = learner.bucket.remote(sent)
                feeds[engine.feed.remote(buckets[sent])] = sent
                sent += 1
            ready, _ = ray.wait(list(feeds), num_returns=1)
            index = feeds.pop(ready[0])
            assert ray.get(ready[0]) == index % 251
            del buckets[index]
            taken += 1
    grown = _shared_memory() - before
    ray.kill(learner)
    ray.kill(engine)
    assert grown < 8 * BUCKET_BYTES, f"the object store took {grown / 1e6:.0f} MB of new shared memory"


def test_the_image_frees_objects_as_often_as_a_local_cluster():
    dockerfile = (Path(__file__).parents[2] / "deploy" / "Dockerfile").read_text(encoding="utf-8")
    name, value = FREE_OBJECTS_PERIOD
    assert re.search(rf"^\s*{name}={value}\b", dockerfile, flags=re.M), f"deploy/Dockerfile does not set {name}={value}"


def test_an_actor_that_asks_for_no_gpu_sees_none(ray_session):
    """Ray 2.60 leaves CUDA_VISIBLE_DEVICES alone for an actor with no GPU, which then sees every GPU of
    its node; the runtime every command starts sets it empty again (the same on a machine without GPUs)."""
    import os

    import ray

    @ray.remote(num_cpus=0, num_gpus=0)
    class CpuSide:
        def visible(self):
            return os.environ.get("CUDA_VISIBLE_DEVICES")

    actor = CpuSide.remote()
    assert ray.get(actor.visible.remote()) == ""
    ray.kill(actor)
