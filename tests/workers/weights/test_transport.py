"""Weight sync from a real learner actor into the real engines of the session pool."""

import dataclasses

import pytest

pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def learner(tiny, ray_session):
    import ray

    from orchestrator.config.train import TrainConfig
    from workers.learner.actor import Learner

    config = TrainConfig(num_generations=2, prompts_per_step=1, max_steps=1)
    actor = ray.remote(Learner).options(num_cpus=0).remote(config, str(tiny.model_dir), str(tiny.tokenizer_dir))
    yield actor
    ray.kill(actor)


def test_every_engine_reports_the_version_and_checksum_sent(pool, learner):
    import ray

    from workers.weights.object_store import ObjectStoreTransport

    report = ObjectStoreTransport(timeout_s=120, bucket_bytes=64 << 10).sync(learner, pool.engines.actors, version=1)
    assert report.version == 1 and report.bytes > 100_000 and len(report.checksum) == 16
    assert [ray.get(actor.policy_version.remote()) for actor in pool.engines.actors.values()] == [1] * len(pool.engines.actors)


class _Remote:
    def __init__(self, fn):
        self.remote = fn


class _CorruptingLink:
    """The learner's handle as the transport sees it, except that one byte of what it publishes
    flips on the way to the engines, as a broken transfer would. The learner's checksum is still of
    the bytes it meant to send."""

    def __init__(self, learner):
        import ray

        def bucket(index):
            sent = ray.get(learner.weight_bucket.remote(index))
            if index == 0:
                chunk = bytearray(sent.chunks[0])
                chunk[len(chunk) // 2] ^= 0xFF
                sent = dataclasses.replace(sent, chunks=(chunk, *sent.chunks[1:]))
            return ray.put(sent)

        self.publish_weights = learner.publish_weights
        self.weight_bucket = _Remote(bucket)
        self.published_checksum = learner.published_checksum


def test_a_corrupted_transfer_stops_with_the_provenance_error(pool, learner):
    from workers.weights.object_store import ObjectStoreTransport
    from workers.weights.transport import WeightSyncError

    transport = ObjectStoreTransport(timeout_s=120, bucket_bytes=64 << 10)
    engines = pool.engines.actors
    with pytest.raises(
        WeightSyncError,
        match=r"weight provenance check failed: the learner sent version 2 checksum \w+, but engine \d+ reports version 2 checksum \w+",
    ):
        transport.sync(_CorruptingLink(learner), engines, version=2)
    transport.sync(learner, engines, version=3)  # a clean sync heals it


def test_a_sync_past_its_deadline_fails_clearly(pool, learner):
    from workers.weights.object_store import ObjectStoreTransport
    from workers.weights.transport import WeightSyncError

    with pytest.raises(WeightSyncError, match=r"did not finish within weight_sync.timeout_s=0.001s"):
        ObjectStoreTransport(timeout_s=0.001, bucket_bytes=64 << 10).sync(learner, pool.engines.actors, version=4)
    ObjectStoreTransport(timeout_s=120, bucket_bytes=64 << 10).sync(learner, pool.engines.actors, version=5)


def test_a_finished_load_survives_an_abort_and_takes_its_version_again(pool, learner):
    """The driver aborts every engine's load when the learner fails at the end of a sync; engines that
    had finished keep serving, and after the learner restarts from a checkpoint they load the same
    version number again."""
    import ray

    from workers.weights.object_store import ObjectStoreTransport

    transport = ObjectStoreTransport(timeout_s=120, bucket_bytes=64 << 10)
    engines = pool.engines.actors
    transport.sync(learner, engines, version=6)
    ray.get([actor.abort_weights.remote(6) for actor in engines.values()])
    report = transport.sync(learner, engines, version=6)
    assert report.dead == {} and report.version == 6
