"""Continuation on real Ray actors and real vLLM (CPU) engines: an engine told to stop serving (`hand_back`)
returns its running group at once, each sample cut short with its tokens, log-probs and versions so far;
the other engine continues the group from there; and the learner's log-probs of every token of the
continued samples, the seam included, equal the engines' (the two parts are one completion, token-exact).
A scale-down in the middle of a batch stops its engine within a second or two and loses no token."""

import dataclasses
import time

import pytest

from orchestrator.builtin import search_task
from orchestrator.contracts.groups import GroupRequest
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rollout.continued import continued, handed_back
from orchestrator.rollout.groups import make_groups
from workers.rollout.continuation import unfinished

pytestmark = pytest.mark.engines

MAX_TOKENS, SHORT_TOKENS, TEMPERATURE = 200, 16, 1.5


def _exchange(pool, engine: int, batch: int, requests: list[GroupRequest]):
    """The `engine`-th serving engine's `exchange`, as the pool calls it."""
    return pool.engines.actors[sorted(pool.engines.actors)[engine]].exchange.remote(batch, requests, 0.0, None)


def _cut_short(pool, request: GroupRequest):
    """`request` run on engine 0 and handed back while it generates: (its batch, the result it came back with)."""
    import ray

    for wait_s in (0.4, 0.2, 0.1, 0.05):  # until the hand-back lands while the samples are under way
        batch = next(pool._batches)  # a batch of the pool's own numbering, so later `generate` calls stay newer
        call = _exchange(pool, 0, batch, [request])
        time.sleep(wait_s)
        ray.get(pool.engines.actors[min(pool.engines.actors)].hand_back.remote(batch), timeout=60)
        started = time.monotonic()
        (result,) = ray.get(call, timeout=60).results
        back_s = time.monotonic() - started
        if handed_back(result) and any(s.completion_ids for s in result.samples):
            return batch, result, back_s
    pytest.fail("every group finished before its engine was handed back")


def test_a_group_handed_back_mid_completion_continues_on_another_engine_token_exact(pool, learner_tokenizer, tiny):
    import ray
    import torch
    from transformers import AutoModelForCausalLM

    prompt = search_task.prompts(1, seed=11)[0]
    sampling = SamplingConfig(max_tokens=MAX_TOKENS, ignore_eos=True, temperature=TEMPERATURE, seed=8)
    (request,) = make_groups([prompt], [learner_tokenizer(prompt)["input_ids"]], 4, sampling)
    batch, result, back_s = _cut_short(pool, request)
    heads = {sample.sample_index: sample for sample in result.samples}
    cut = [s for s in result.samples if unfinished(s)]
    assert all(len(s.completion_ids) < MAX_TOKENS and len(s.logprobs) == len(s.output_versions) for s in cut)

    (whole,) = ray.get(_exchange(pool, 1, batch, [continued(request, result)]), timeout=120).results
    assert whole.engine_id == max(pool.engines.actors) and [s.sample_index for s in whole.samples] == [0, 1, 2, 3]
    model = AutoModelForCausalLM.from_pretrained(tiny.model_dir, dtype=torch.float32)
    worst = 0.0
    for sample in whole.samples:
        head = heads[sample.sample_index]
        assert len(sample.completion_ids) == MAX_TOKENS and sample.finish_reason == "length"  # the budget, never past it
        assert sample.completion_ids[: len(head.completion_ids)] == head.completion_ids  # the tokens so far, kept
        assert sample.logprobs[: len(head.logprobs)] == head.logprobs
        assert len(sample.output_versions) == MAX_TOKENS
        ids = torch.tensor([request.prompt_ids + sample.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(request.prompt_ids) - 1 : -1] / TEMPERATURE
        learner = torch.log_softmax(logits, -1).gather(-1, torch.tensor(sample.completion_ids)[:, None])[:, 0]
        worst = max(worst, (learner - torch.tensor(sample.logprobs)).abs().max().item())
    print(f"\ncut short at {sorted(len(s.completion_ids) for s in cut)} tokens, back in {back_s:.2f} s; worst gap {worst:.1e}")
    assert worst < 1e-3
    assert whole.samples[0].completion == learner_tokenizer.decode(whole.samples[0].completion_ids)


def test_a_scale_down_mid_batch_stops_its_engine_at_once_and_loses_no_token(pool, learner_tokenizer):
    prompts = search_task.prompts(16, seed=12)
    sampling = SamplingConfig(max_tokens=MAX_TOKENS, ignore_eos=True, seed=9)
    requests = make_groups(prompts, [learner_tokenizer(p)["input_ids"] for p in prompts], 4, sampling)
    # The first two groups (one per engine: each goes to the least-loaded one) are short, so the first result
    # comes back while both engines are in the middle of their long groups, whichever engine it comes from.
    short = sampling.model_copy(update={"max_tokens": SHORT_TOKENS})
    requests[:2] = [dataclasses.replace(request, sampling=short) for request in requests[:2]]
    fleet, before = pool.engines, dict(pool.rework.counts)
    fleet.admit_ready(block=True)  # a steady pool of two serving engines, whatever the tests before left starting
    assert len(fleet.actors) == 2 and not fleet.starting
    leaving = max(fleet.actors)
    stopped_at, decided_at, arrived = {}, [], []
    remove_engine = fleet.remove_engine

    def stop(engine_id: int) -> None:  # when the pool takes the engine out of service
        stopped_at[engine_id] = time.monotonic()
        remove_engine(engine_id)

    def scale_down_once(result) -> None:  # in the middle of the batch: its first group is back
        arrived.append(time.monotonic())
        if not decided_at:
            decided_at.append(time.monotonic())
            pool.resize(1)

    fleet.remove_engine = stop
    try:
        results = pool.generate(requests, on_result=scale_down_once)
    finally:
        del fleet.remove_engine
        pool.resize(2)  # the other tests' pool: two engines again
        fleet.admit_ready(block=True)
    took_s = stopped_at[leaving] - decided_at[0]
    work = {key: pool.rework.counts[key] - before.get(key, 0) for key in pool.rework.counts}
    print(f"\nengine {leaving} stopped {took_s:.2f} s after the scale-down; {work}")
    assert stopped_at[leaving] < arrived[-1]  # out of service while the batch still generated, not at its end
    assert sorted(result.group_id for result in results) == list(range(16))
    budget = {request.group_id: request.sampling.max_tokens for request in requests}
    assert all(len(s.completion_ids) == budget[r.group_id] and s.finish_reason == "length" for r in results for s in r.samples)
    assert work.get("tokens_continued", 0) > 0, f"the engine scaled down held no group under way: {work}"
    assert not any(work.get(f"samples_regenerated/{why}") for why in ("death", "timeout"))
