"""The rollout pool on real Ray actors and real vLLM (CPU) engines serving the tiny model."""

import collections

import pytest

from orchestrator.builtin import search_task
from orchestrator.contracts.rollout import RolloutConfig
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.rollout.groups import make_groups
from orchestrator.rollout.parquet import rollout_table
from orchestrator.rollout.samples import StepSamples

pytestmark = pytest.mark.engines


def _generate(pool, tokenizer, prompts, n, **sampling):
    requests = make_groups(prompts, [tokenizer(p)["input_ids"] for p in prompts], n, SamplingConfig(**sampling))
    return rollout_table(StepSamples.assemble(requests, pool.generate(requests))).to_pylist()


def _prompts(count=16):
    return search_task.prompts(count, seed=7)


def test_stop_string_for_an_added_special_token(pool, learner_tokenizer):
    rows = _generate(pool, learner_tokenizer, _prompts(), 4, stop=["<search>"], max_tokens=32, seed=1)
    ended = [r for r in rows if r["completion"].endswith("<search>") and r["finish_reason"] == "stop"]
    assert len(ended) >= 0.9 * len(rows), collections.Counter(r["completion"] for r in rows)
    assert all(r["stop_reason"] == "<search>" for r in ended)


def test_stop_token_id_ends_the_completion_with_that_id(pool, learner_tokenizer):
    search_id = learner_tokenizer.convert_tokens_to_ids("<search>")
    rows = _generate(pool, learner_tokenizer, _prompts(), 4, stop_token_ids=[search_id], max_tokens=32, seed=2)
    ended = [r for r in rows if r["completion_ids"][-1] == search_id]
    assert len(ended) >= 0.9 * len(rows)
    assert all(r["stop_token_id"] == search_id and r["stop_reason"] == str(search_id) for r in ended)
    assert all(r["completion"].endswith("<search>") for r in ended)


def test_without_stops_generation_runs_through_the_call_and_ends_at_eos(pool, learner_tokenizer):
    max_tokens = 48
    rows = _generate(pool, learner_tokenizer, _prompts(), 4, max_tokens=max_tokens, seed=3)
    eos = learner_tokenizer.eos_token_id
    at_eos = [r for r in rows if r["completion_ids"][-1] == eos and r["finish_reason"] == "stop"]
    assert len(at_eos) >= 0.9 * len(rows)
    assert all(len(r["completion_ids"]) < max_tokens // 2 for r in at_eos)
    assert all(r["stop_reason"] is None for r in at_eos)
    assert all(learner_tokenizer.eos_token not in r["completion"] for r in rows)
    closed = [r for r in rows if "<search>" in r["completion"] and r["completion"].rstrip().endswith("</search>")]
    assert len(closed) >= 0.5 * len(rows)


def test_duplicate_prompts_keep_their_own_groups_across_both_engines(pool, learner_tokenizer):
    pattern = [0, 0, 1, 0, 2, 2, 3, 0, 1, 4, 4, 4]
    topics = search_task.TOPICS
    prompts = [search_task.prompt_for(topics[i]) for i in pattern]
    rows = _generate(pool, learner_tokenizer, prompts, 3, max_tokens=16, seed=4)
    assert len(rows) == 36
    assert [(r["prompt_index"], r["group_id"], r["sample_index"]) for r in rows] == [
        (g, g, s) for g in range(12) for s in range(3)
    ]
    assert [r["prompt"] for r in rows[::3]] == prompts
    assert len({r["engine_id"] for r in rows}) == 2


def test_logprobs_are_of_the_tempered_distribution(pool, learner_tokenizer, tiny):
    """The engines' logprobs equal HF log_softmax(logits / T) of the same weights."""
    import torch
    from transformers import AutoModelForCausalLM

    temperature = 1.5
    rows = _generate(pool, learner_tokenizer, _prompts(4), 2, max_tokens=16, temperature=temperature, seed=5)
    model = AutoModelForCausalLM.from_pretrained(tiny.model_dir, dtype=torch.float32)
    worst = 0.0
    for row in rows:
        ids = torch.tensor([row["prompt_ids"] + row["completion_ids"]])
        with torch.no_grad():
            logits = model(ids).logits[0, len(row["prompt_ids"]) - 1 : -1] / temperature
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(row["completion_ids"])[:, None])[:, 0]
        worst = max(worst, (expected - torch.tensor(row["logprobs"])).abs().max().item())
    assert worst < 1e-3


def test_generation_needs_no_pad_token(pool, learner_tokenizer):
    assert learner_tokenizer.pad_token is None
    rows = _generate(pool, learner_tokenizer, _prompts(4), 2, max_tokens=8, seed=6)
    assert len(rows) == 8 and all(r["completion_ids"] for r in rows)


def test_engine_with_a_different_tokenizer_is_refused_before_any_request(tiny, learner_tokenizer, base_tokenizer, ray_session):
    from orchestrator.contracts.tokenizer import bundle_tokenizer
    from orchestrator.rollout.fleet import EngineFleet, TokenizerMismatchError

    engines = EngineFleet(
        ray_session,
        str(tiny.model_dir),
        learner_tokenizer,
        RolloutConfig(engines=1),
        engine_files=bundle_tokenizer(base_tokenizer),
    )
    with pytest.raises(TokenizerMismatchError) as refused:
        engines.start()
    message = str(refused.value)
    assert "engine 0: added token '<search>'" in message and "is missing" in message
    assert engines.actors == {} and engines.starting == {}  # nothing left running, no request was ever sent


def test_every_real_engine_answers_the_health_check(pool):
    """What the watchdog asks a busy engine (orchestrator/rollout/health.py): a real engine, loaded
    weights and all, says it answered."""
    import ray

    answers = ray.get([actor.responsive.remote(5.0) for actor in pool.engines.actors.values()], timeout=60)
    assert answers == [True, True]


def test_seeded_groups_with_more_prompt_tokens_than_an_engine_step_takes_kill_no_engine(pool, learner_tokenizer):
    """vLLM prefills at most `max_num_batched_tokens` tokens per engine step (2048 for these engines). With
    chunked prefill a prompt cut at that budget has the token sampled after its first chunk discarded and
    its generator rewound, which a CPU generator cannot do: the engine died ("CPU Generator does not use
    offset") as soon as one engine held seeded samples with more prompt tokens than that, as after a drain
    moved another engine's groups to it. CPU engines prefill whole prompts (workers/rollout/engine.py)."""
    prompt = " ".join(search_task.prompts(12, seed=11))
    ids = learner_tokenizer(prompt)["input_ids"]
    groups, n = 64, 4
    assert len(ids) * groups * n / len(pool.engines.actors) > 2 * 2048  # each engine is given more than a step takes
    restarts = pool.restarts
    rows = _generate(pool, learner_tokenizer, [prompt] * groups, n, max_tokens=2, ignore_eos=True, seed=5)
    assert len(rows) == groups * n and all(len(row["completion_ids"]) == 2 for row in rows)
    assert pool.restarts == restarts  # no engine died
