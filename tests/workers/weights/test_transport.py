"""Weight sync from a real learner actor into the real engines of the session pool."""

import dataclasses

import pytest

pytestmark = pytest.mark.engines


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


def _learner_version(learner) -> int:
    """The learner's own policy version, as a publication reports it (opened, then closed unsent)."""
    import ray

    _, _, version = ray.get(learner.publish_weights.remote(1 << 20))
    ray.get(learner.published_checksum.remote())
    return version


def _step_batch(tiny) -> dict:
    """Two groups of two samples of the tiny model's tokens, with made-up behaviour log-probs."""
    import numpy as np
    from transformers import AutoTokenizer

    from orchestrator.rollout.samples import StepSamples
    from orchestrator.training.advantages import group_advantages
    from orchestrator.training.batch import learner_batch

    tokenizer = AutoTokenizer.from_pretrained(str(tiny.tokenizer_dir))
    prompt = tokenizer("Q: what is apple ? A:")["input_ids"]
    completions = [tokenizer(" <search> apple </search>")["input_ids"], tokenizer(" apple")["input_ids"]] * 2
    samples = StepSamples.from_tokens([prompt] * 4, completions, [[-1.0] * len(c) for c in completions])
    advantages = group_advantages(np.array([1.0, 0.0, 1.0, 0.0]), np.array([0, 0, 1, 1]))
    return learner_batch(samples, advantages, pad_token_id=tokenizer.eos_token_id)  # masked out: any id pads


def test_an_engine_loaded_while_the_learner_trains_is_told_the_version_it_got(pool, learner, tiny):
    """Async mode: the generation thread admits an engine with the driver's version v while the
    training thread's step is under way on the learner. The learner publishes once its step is done,
    so the engine gets policy v + 1 and must be labelled v + 1, not serve it as v (and then miss the
    sync of v + 1, which started without it)."""
    import ray

    from workers.weights.object_store import ObjectStoreTransport

    version = _learner_version(learner)  # what the driver holds before the step: the learner's count
    engine_id, actor = next(iter(pool.engines.actors.items()))
    stepped = learner.train_step.remote(_step_batch(tiny))  # submitted first: the learner runs it first
    report = ObjectStoreTransport(timeout_s=120, bucket_bytes=64 << 10).sync(learner, {engine_id: actor}, version=version)
    ray.get(stepped)
    assert report.dead == {} and report.version == version + 1
    assert ray.get(actor.policy_version.remote()) == version + 1
    same = ObjectStoreTransport(timeout_s=120, bucket_bytes=64 << 10).sync(learner, {engine_id: actor}, version=version + 1)
    assert same.checksum == report.checksum  # what the engine took was that step's weights


def test_buckets_cast_for_bfloat16_engines_each_reach_the_store_as_handed_out(learner):
    """The learner casts every bucket into the same memory (workers/weights/buckets.py,
    `BucketBuffer`): each must be stored as it was when handed out, not as a later bucket left it."""
    import ray

    from workers.weights.buckets import checksum

    headers, _, _ = ray.get(learner.publish_weights.remote(64 << 10, False, "bfloat16"))
    refs = [learner.weight_bucket.remote(index) for index in range(len(headers))]
    buckets = ray.get(refs)  # every bucket handed out before any is read
    assert len(buckets) > 2 and [bucket.header() for bucket in buckets] == headers
    assert {entry.dtype for bucket in buckets for entry in bucket.entries} == {"bfloat16"}
    assert checksum(buckets) == ray.get(learner.published_checksum.remote())


def test_an_update_that_lands_mid_sample_stamps_each_token_with_the_policy_that_sampled_it(pool, learner, learner_tokenizer):
    """Async mode loads weights into engines while they generate (requests in flight are kept): the tokens
    sampled before the load carry the old version, those after it the new one (vLLM's weight-version
    spans), and the sample's own version is its oldest token's. The load lands at a moment the test does
    not control, so a group that finished first (or started after) is tried again with a later load."""
    import concurrent.futures
    import time

    import ray

    from orchestrator.contracts.groups import GroupRequest
    from orchestrator.contracts.sampling import SamplingConfig
    from orchestrator.rollout.samples import StepSamples
    from workers.weights.object_store import ObjectStoreTransport

    transport = ObjectStoreTransport(timeout_s=120, bucket_bytes=64 << 10)
    engines = pool.engines.actors
    prompt_ids = learner_tokenizer("Q: what is apple ? A:")["input_ids"]
    sampling = SamplingConfig(max_tokens=200, ignore_eos=True, seed=0)  # long, whatever the model would say
    spanning = []
    newest = max(ray.get([actor.policy_version.remote() for actor in engines.values()]))
    loaded = transport.sync(learner, engines, version=newest + 1).version  # every engine on one version
    with concurrent.futures.ThreadPoolExecutor(1) as generation:
        for attempt in range(6):
            started = loaded
            request = GroupRequest(attempt, 0, "", prompt_ids, 8, sampling)
            pending = generation.submit(pool.generate, [request])
            time.sleep(0.05 * attempt)
            loaded = transport.sync(learner, engines, version=started + 1).version
            [result] = pending.result()
            assert result.policy_version == started
            for sample in result.samples:
                versions = sample.output_versions
                assert len(versions) == len(sample.completion_ids) == 200
                assert versions == sorted(versions) and set(versions) <= {started, loaded}
            samples = StepSamples.assemble([request], [result])
            assert samples.policy_version.tolist() == [min(s.output_versions) for s in result.samples]
            spanning = [s for s in result.samples if len(set(s.output_versions)) == 2]
            if spanning:
                break
    assert spanning, "no load landed mid-sample in six tries"
