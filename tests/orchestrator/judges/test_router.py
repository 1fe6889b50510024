"""The judge router without Ray or engines: prompts become one-sample groups for the pool, answers come
back in the caller's order, choices are told apart where they first differ, and a call that cannot be
served as asked is refused before it reaches the pool."""

import time

import pytest

from orchestrator.contracts.groups import GroupResult, Sample
from orchestrator.contracts.judges import JudgeSettings
from orchestrator.judges.router import JudgeError, JudgeRouter, JudgeTimeoutError


class FakePool:
    """Answers each group with its prompt's last token, in reverse order (an engine finishes in any order)."""

    def __init__(self):
        self.calls = []

    def generate(self, requests):
        self.calls.append(requests)
        results = []
        for request in reversed(requests):
            last = request.prompt_ids[-1]
            allowed = request.sampling.allowed_token_ids or [last, last + 1]
            top = {token: -0.5 * (rank + 1) for rank, token in enumerate(allowed)} if request.sampling.top_logprobs else None
            sample = Sample(0, f"<{last}>", [last], [-0.25], "length", None, None, top_logprobs=[top] if top else None)
            results.append(GroupResult(request.group_id, 0, 0, [sample]))
        return results


@pytest.fixture
def router(base_tokenizer):
    return JudgeRouter("quality", FakePool(), base_tokenizer, JudgeSettings(model="m", max_tokens=3), context=40)


def test_answers_come_back_in_the_callers_order_and_are_counted(router, base_tokenizer):
    prompts = ["one", "two words", "three little words"]
    answers = router.generate(prompts, deadline=time.time() + 60)
    ids = [base_tokenizer(prompt)["input_ids"] for prompt in prompts]
    assert [answer.token_ids for answer in answers] == [[prompt_ids[-1]] for prompt_ids in ids]
    assert [answer.prompt_tokens for answer in answers] == [len(prompt_ids) for prompt_ids in ids]
    (requests,) = router.pool.calls
    assert {r.num_generations for r in requests} == {1} and len({r.group_id for r in requests}) == 3
    assert {r.sampling.max_tokens for r in requests} == {3} and {r.sampling.temperature for r in requests} == {0.0}
    stats = router.take_stats()
    assert stats["calls"] == 1 and stats["prompts"] == 3 and stats["completion_tokens"] == 3
    assert stats["prompt_tokens"] == sum(map(len, ids))
    assert set(router.take_stats().values()) == {0}  # taken: the next step counts afresh


def test_a_conversation_goes_through_the_judges_chat_template(router, base_tokenizer):
    base_tokenizer.chat_template = None
    with pytest.raises(JudgeError, match="prompt 0 is a conversation and the judge's tokenizer has no chat template"):
        router.generate([[{"role": "user", "content": "hi"}]], deadline=time.time() + 60)
    with pytest.raises(JudgeError, match="prompt 1 is a int; expected a string or a list of messages"):
        router.generate(["fine", 7], deadline=time.time() + 60)
    assert router.pool.calls == []  # refused before the pool saw any of it


def test_a_prompt_the_judges_context_cannot_hold_is_refused_naming_the_key(router):
    with pytest.raises(
        JudgeError, match=r"prompt 1 has \d+ tokens; with 3 answer tokens .* context of 40 .*judges.quality.pool.max_model_len"
    ):
        router.generate(["short", "word " * 60], deadline=time.time() + 60)
    assert router.pool.calls == []


def test_a_call_whose_deadline_passed_while_waiting_is_not_started(router):
    with pytest.raises(JudgeTimeoutError, match="waited past its deadline"):
        router.generate(["late"], deadline=time.time() - 1)
    assert router.pool.calls == []


def test_choices_are_asked_at_the_first_token_where_they_differ(router, base_tokenizer):
    yes, no = (base_tokenizer(text, add_special_tokens=False)["input_ids"] for text in (" yes", " no"))
    shared = [a for a, b in zip(yes, no) if a == b]  # the tiny vocabulary spells both after a shared " "
    odds = router.choices(["Is it?"], [" yes", " no"], deadline=time.time() + 60)
    (request,) = router.pool.calls[0]
    assert request.prompt_ids[len(request.prompt_ids) - len(shared) :] == shared
    assert request.sampling.allowed_token_ids == [yes[len(shared)], no[len(shared)]]
    assert request.sampling.max_tokens == 1 and request.sampling.top_logprobs == 2
    assert odds == [{" yes": -0.5, " no": -1.0}]  # each choice named by its own token's logprob
    with pytest.raises(JudgeError, match="cannot be told apart by one token"):
        router.choices(["Is it?"], [" yes", " yes please"], deadline=time.time() + 60)
    with pytest.raises(JudgeError, match="choices takes 2 to 20 choices, got 1"):
        router.choices(["Is it?"], [" yes"], deadline=time.time() + 60)
