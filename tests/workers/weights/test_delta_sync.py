"""Delta sync over the object store and gloo, from a real learner actor into the real engines of the session
pool: a dense anchor, then patches of what one optimizer step changed in bfloat16; the engines end
holding exactly what a dense load would give them; a corrupted patch is caught by the checksum and
repaired by a dense resync in the same sync; an engine that missed a version gets the dense weights."""

import dataclasses

import pytest

from tests.workers.weights.test_transport import _step_batch

pytestmark = pytest.mark.engines

BUCKET_BYTES = 64 << 10


def _transport(backend: str = "object_store"):
    from workers.weights.delta import DeltaBook
    from workers.weights.nccl import NcclTransport
    from workers.weights.object_store import ObjectStoreTransport

    if backend == "gloo":  # the NCCL path's code over gloo (gloo.py)
        return NcclTransport(timeout_s=120, bucket_bytes=BUCKET_BYTES, dtype="bfloat16", backend="gloo", delta=DeltaBook(50))
    return ObjectStoreTransport(timeout_s=120, bucket_bytes=BUCKET_BYTES, dtype="bfloat16", delta=DeltaBook(50))


def _generate(pool, learner_tokenizer) -> list[list[float]]:
    """The engines' log-probs of one greedy group per engine: equal weights give equal figures."""
    from orchestrator.builtin import search_task
    from orchestrator.contracts.sampling import SamplingConfig
    from orchestrator.rollout.groups import make_groups

    prompts = search_task.prompts(len(pool.engines.actors), seed=3)
    sampling = SamplingConfig(max_tokens=24, ignore_eos=True, temperature=0.0, seed=1)
    requests = make_groups(prompts, [learner_tokenizer(p)["input_ids"] for p in prompts], 1, sampling)
    results = sorted(pool.generate(requests), key=lambda result: result.group_id)
    return [sample.logprobs for result in results for sample in result.samples]


@pytest.mark.parametrize("backend", ["object_store", "gloo"])
def test_after_an_anchor_a_step_travels_as_a_patch_and_the_engines_hold_what_a_dense_load_gives(
    pool, learner, tiny, learner_tokenizer, backend
):
    import ray

    from workers.weights.object_store import ObjectStoreTransport

    transport, engines = _transport(backend), pool.engines.actors
    version = ray.get(learner.publish_delta.remote(BUCKET_BYTES, "bfloat16", True, 0))[2]
    ray.get(learner.published_checksum.remote())
    anchor = transport.sync(learner, engines, version)
    ray.get(learner.train_step.remote(_step_batch(tiny)))
    patch = transport.sync(learner, engines, version + 1)
    print(
        f"\nanchor: {anchor.bytes:,} bytes, density {anchor.delta['density']:.3f}; "
        f"patch: {patch.bytes:,} bytes, density {patch.delta['density']:.4f}"
    )
    assert anchor.delta["density"] == 1.0 and anchor.delta["dense_resyncs"] == 0 and anchor.dead == {}
    assert anchor.transport == patch.transport == backend
    assert patch.version == version + 1 and patch.dead == {} and patch.delta["dense_resyncs"] == 0
    assert 0 < patch.delta["density"] < 0.2 and patch.bytes * 5 < anchor.bytes
    assert [ray.get(actor.policy_version.remote()) for actor in engines.values()] == [version + 1] * len(engines)
    patched = _generate(pool, learner_tokenizer)
    ObjectStoreTransport(timeout_s=120, bucket_bytes=BUCKET_BYTES, dtype="bfloat16").sync(learner, engines, version + 1)
    assert _generate(pool, learner_tokenizer) == patched  # the same bits as the whole model loaded dense


class _Remote:
    def __init__(self, fn):
        self.remote = fn


class _CorruptingLink:
    """The learner's handle as the transport sees it, except that one byte of the first bucket of each
    patch flips on the way to the engines."""

    def __init__(self, learner):
        import ray

        patching = []

        def publish_delta(bucket_bytes, dtype, anchor, version):
            patching[:] = [not anchor]
            return learner.publish_delta.remote(bucket_bytes, dtype, anchor, version)

        def bucket(index):
            sent = ray.get(learner.weight_bucket.remote(index))
            if index == 0 and patching[0]:
                chunk = bytearray(sent.chunks[-1])
                chunk[len(chunk) // 2] ^= 0xFF
                sent = dataclasses.replace(sent, chunks=(*sent.chunks[:-1], chunk))
            return ray.put(sent)

        self.publish_delta = _Remote(publish_delta)
        self.weight_bucket = _Remote(bucket)
        self.published_checksum = learner.published_checksum


def test_a_corrupted_patch_is_rejected_by_every_engine_and_repaired_by_a_dense_resync(pool, learner, tiny, learner_tokenizer):
    import ray

    transport, engines = _transport(), pool.engines.actors
    version = ray.get(learner.publish_delta.remote(BUCKET_BYTES, "bfloat16", True, 0))[2]
    ray.get(learner.published_checksum.remote())
    transport.sync(learner, engines, version)
    ray.get(learner.train_step.remote(_step_batch(tiny)))
    repaired = transport.sync(_CorruptingLink(learner), engines, version + 1)
    assert repaired.dead == {} and repaired.delta["dense_resyncs"] == len(engines)
    assert transport.delta.held == dict.fromkeys(engines, version + 1)
    ray.get(learner.train_step.remote(_step_batch(tiny)))
    clean = transport.sync(learner, engines, version + 2)  # patches again
    assert clean.delta["dense_resyncs"] == 0 and clean.delta["density"] < 0.2


def test_an_engine_that_missed_a_version_gets_the_dense_weights_and_the_others_a_patch(pool, learner, tiny):
    import ray

    transport, engines = _transport(), dict(pool.engines.actors)
    first, second = sorted(engines)
    version = ray.get(learner.publish_delta.remote(BUCKET_BYTES, "bfloat16", True, 0))[2]
    ray.get(learner.published_checksum.remote())
    transport.sync(learner, engines, version)
    ray.get(learner.train_step.remote(_step_batch(tiny)))
    transport.sync(learner, {first: engines[first]}, version + 1)  # the second engine misses it
    ray.get(learner.train_step.remote(_step_batch(tiny)))
    both = transport.sync(learner, engines, version + 2)
    dense = ray.get(learner.publish_delta.remote(BUCKET_BYTES, "bfloat16", True, version + 2))[1]
    ray.get(learner.published_checksum.remote())
    assert both.dead == {} and transport.delta.held == {first: version + 2, second: version + 2}
    assert dense < both.bytes < dense * 1.2  # the dense weights (to the second) and a patch (to the first)
    assert both.delta["dense_resyncs"] == 0  # behind is not a rejection


def test_a_gloo_patch_an_engine_cannot_take_leaves_its_model_untouched_and_it_takes_the_whole_model(pool, learner, tiny):
    """The second engine's copy is made to hold another version than the learner's baseline behind the
    gloo transport's back: it rejects the broadcast patch (vLLM puts back each layer it paused), and gets
    the whole model through the object store in the same sync; the first engine takes the patch."""
    import ray

    from workers.weights.delta import DeltaBook
    from workers.weights.object_store import ObjectStoreTransport

    gloo, engines = _transport("gloo"), dict(pool.engines.actors)
    first, second = sorted(engines)
    version = ray.get(learner.publish_delta.remote(BUCKET_BYTES, "bfloat16", True, 0))[2]
    ray.get(learner.published_checksum.remote())
    gloo.sync(learner, engines, version)  # both engines' copies: `version`
    ray.get(learner.train_step.remote(_step_batch(tiny)))
    side = ObjectStoreTransport(timeout_s=120, bucket_bytes=BUCKET_BYTES, dtype="bfloat16", delta=DeltaBook(50))
    side.delta.base, side.delta.held = version, {first: version}
    side.sync(learner, {first: engines[first]}, version + 1)  # the first engine and the learner's baseline move on
    ray.get(learner.train_step.remote(_step_batch(tiny)))
    report = gloo.sync(learner, engines, version + 2)  # a patch against version + 1: the second holds `version`
    assert report.dead == {} and report.transport == "gloo" and report.delta["dense_resyncs"] == 1
    assert gloo.delta.held == {first: version + 2, second: version + 2}
    assert [ray.get(engines[e].policy_version.remote()) for e in (first, second)] == [version + 2] * 2
    ray.get(learner.train_step.remote(_step_batch(tiny)))
    again = gloo.sync(learner, engines, version + 3)  # both hold the baseline again: a patch for both
    assert again.delta["dense_resyncs"] == 0 and again.delta["density"] < 0.2
