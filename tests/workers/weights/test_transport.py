"""Weight sync from a real learner actor into the real engines of the session pool."""

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

    from workers.weights.transport import ObjectStoreTransport

    report = ObjectStoreTransport(timeout_s=120, bucket_bytes=64 << 10).sync(learner, pool.actors, version=1)
    assert report.version == 1 and report.bytes > 100_000 and len(report.checksum) == 16
    assert [ray.get(actor.policy_version.remote()) for actor in pool.actors.values()] == [1] * len(pool.actors)


def test_a_corrupted_transfer_stops_with_the_provenance_error(pool, learner):
    import ray

    from workers.weights.transport import ObjectStoreTransport, WeightSyncError

    transport = ObjectStoreTransport(timeout_s=120, bucket_bytes=64 << 10)
    engine_id, actor = sorted(pool.actors.items())[-1]
    ray.get(actor.corrupt_next_weight_load.remote())
    with pytest.raises(WeightSyncError, match=rf"weight provenance check failed: the learner sent version 2 checksum \w+, but engine {engine_id} reports version 2 checksum \w+"):
        transport.sync(learner, pool.actors, version=2)
    transport.sync(learner, pool.actors, version=3)  # a clean sync heals it


def test_a_sync_past_its_deadline_fails_clearly(pool, learner):
    from workers.weights.transport import ObjectStoreTransport, WeightSyncError

    with pytest.raises(WeightSyncError, match=r"did not finish within weight_sync.timeout_s=0.001s"):
        ObjectStoreTransport(timeout_s=0.001, bucket_bytes=64 << 10).sync(learner, pool.actors, version=4)
    ObjectStoreTransport(timeout_s=120, bucket_bytes=64 << 10).sync(learner, pool.actors, version=5)
