"""A real engine whose weight load fails part-way never serves on the mixed weights: it refuses to
generate, the sync reports it dead, and the pool replaces it with an engine that serves. Replaces
one of the session pool's engines (about a minute: the replacement starts a vLLM engine)."""

import pytest

pytestmark = pytest.mark.engines


class _Remote:
    def __init__(self, fn):
        self.remote = fn


class _BrokenLearner:
    """The learner's handle as the transport sees it, publishing buckets whose load fails part-way: a
    real tensor first, then the final norm with a shape the model does not have."""

    def __init__(self, tiny):
        import ray
        import torch
        from safetensors.torch import load_file

        from workers.weights.buckets import checksum, pack

        weights = load_file(str(tiny.model_dir / "model.safetensors"))
        embedding = weights["model.embed_tokens.weight"]
        named = [("model.embed_tokens.weight", embedding), ("model.norm.weight", torch.ones(3))]
        buckets = pack(named, bucket_bytes=embedding.nbytes)  # one bucket per tensor: the first loads, the second fails
        headers = [bucket.header() for bucket in buckets]
        self.publish_weights = _Remote(
            lambda bucket_bytes, adapter_only, dtype: ray.put((headers, sum(b.nbytes for b in buckets), 0))
        )
        self.weight_bucket = _Remote(lambda index: ray.put(buckets[index]))
        self.published_checksum = _Remote(lambda: ray.put(checksum(buckets)))


def _requests(tokenizer, count=4):
    from orchestrator.builtin import search_task
    from orchestrator.contracts.sampling import SamplingConfig
    from orchestrator.rollout.groups import make_groups

    prompts = search_task.prompts(count, seed=5)
    return make_groups(prompts, [tokenizer(p)["input_ids"] for p in prompts], 2, SamplingConfig(max_tokens=8, seed=0))


def test_an_engine_whose_load_fails_refuses_to_generate_and_is_replaced(pool, learner_tokenizer, tiny):
    import ray

    from orchestrator.contracts.engine_death import WeightLoadFailedError
    from orchestrator.rollout.parquet import rollout_table
    from orchestrator.rollout.samples import StepSamples
    from workers.weights.object_store import ObjectStoreTransport

    engines = pool.engines
    victim = max(engines.actors)
    actor, restarts = engines.actors[victim], engines.restarts
    version_before = ray.get(actor.policy_version.remote())

    transport = ObjectStoreTransport(timeout_s=120, bucket_bytes=1 << 20)
    report = transport.sync(_BrokenLearner(tiny), {victim: actor}, version=7)
    assert list(report.dead) == [victim]
    assert isinstance(report.dead[victim].cause, WeightLoadFailedError)
    assert f"engine {victim}: loading policy version 7 failed part-way" in str(report.dead[victim])

    requests = _requests(learner_tokenizer)
    with pytest.raises(ray.exceptions.RayTaskError, match="refuses to generate until the pool replaces it") as refused:
        # What the pool's call to this engine gets: no samples from mixed weights. (A batch number beyond
        # any of the pool's: the engine is replaced just below, and takes no other batch.)
        ray.get(actor.exchange.remote(1 << 30, [requests[0]], 0.0, None))
    assert isinstance(refused.value.cause, WeightLoadFailedError)
    assert ray.get(actor.policy_version.remote()) == version_before
    # A bucket of the failed load that comes late, and a load the driver gave up before it arrived,
    # fail at once rather than waiting out their timeouts.
    with pytest.raises(ray.exceptions.RayTaskError, match="bucket 1 of version 7 came after its load failed"):
        ray.get(actor.feed_weights.remote(7, 1, None), timeout=30)
    ray.get(actor.abort_weights.remote(8))
    with pytest.raises(ray.exceptions.RayTaskError, match="load of policy version 8 was aborted before it began"):
        ray.get(actor.load_weights.remote([], 8, 120), timeout=30)

    engines.engine_died(victim, report.dead[victim])  # what the step loop does with `report.dead`
    assert victim not in engines.actors and engines.restarts == restarts + 1
    rows = rollout_table(StepSamples.assemble(requests, pool.generate(requests))).to_pylist()
    assert len(rows) == 8 and victim not in {r["engine_id"] for r in rows}

    [replacement] = engines.admit_ready(block=True)
    requests = _requests(learner_tokenizer, count=12)
    rows = rollout_table(StepSamples.assemble(requests, pool.generate(requests))).to_pylist()
    assert replacement in {r["engine_id"] for r in rows}
