"""A session keeps the ids the model saw: a call that extends the conversation keeps them as sampled,
even where re-tokenising the conversation would give other ids; a rewritten history starts a new
segment, and each segment becomes a sample of its own, or only the last does (plain code: no vLLM)."""

import pytest

from workers.agents.session import Session, SessionRefused
from workers.agents.trajectory import session_samples


@pytest.fixture(scope="module")
def lookup_tokenizer():
    from transformers import AutoTokenizer

    from orchestrator.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("builtin:lookup", None)[1])


def _codec(tokenizer):
    return (lambda text: tokenizer.encode(text, add_special_tokens=False)), (lambda ids: tokenizer.decode(ids))


def _call(session, rendered, completion, encode, decode, messages=None, version=0):
    """The ids the engine is sent for the call, after recording it."""
    ids, new = session.prompt_ids(rendered, encode, decode)
    answer = dict(completion_ids=completion, logprobs=[-0.5] * len(completion), finish_reason="stop", policy_version=version)
    session.record(ids, new, messages, decode, **answer)
    return ids


def test_a_continued_conversation_keeps_the_sampled_ids_where_re_tokenising_would_not(lookup_tokenizer):
    encode, decode = _codec(lookup_tokenizer)
    prompt = encode("Q: what is the code of apple ? A:")
    canonical = encode(" apple")
    split = [encode(" app")[0], *encode("le")]  # " app" + "le": the same text in other tokens
    assert decode(split) == decode(canonical) and split != canonical
    sampled = encode(" <search>") + split + encode(" </search>")
    session = Session("g0-s0", token_budget=64, max_calls=4, on_prefix_mismatch="last")
    _call(session, prompt, sampled, encode, decode)
    conversation = decode(prompt + sampled) + "<result> jade </result>"
    second = _call(session, encode(conversation), encode(" answer jade"), encode, decode)

    assert second[: len(prompt) + len(sampled)] == prompt + sampled  # as sampled, " app" + "le"
    assert second[len(prompt) + len(sampled) :] == encode("<result> jade </result>")
    assert encode(conversation) != second  # re-tokenising the conversation gives other ids
    assert not session.calls[1].new_segment and session.prefix_mismatches == 0
    assert session.calls[1].added_ids == encode("<result> jade </result>")  # kept: what the call added


def test_the_sample_trains_on_sampled_tokens_only(lookup_tokenizer):
    encode, decode = _codec(lookup_tokenizer)
    prompt, first, second = encode("Q: a ? A:"), encode(" <search> a </search>"), encode(" answer b")
    session = Session("g0-s1", 64, 4, "last")
    _call(session, prompt, first, encode, decode, [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "S"}])
    added = encode("<result> b </result>")
    messages = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "S"}, {"role": "tool", "content": "b"}]
    _call(session, prompt + first + added, second, encode, decode, [*messages, {"role": "assistant", "content": "A"}], 1)

    [sample] = session_samples(session, 1, decode, eos_token_id=None, reward=1.0)
    assert sample.prompt_ids == prompt
    assert sample.completion_ids == first + added + second
    assert sample.tool_mask == [1] * len(first) + [0] * len(added) + [1] * len(second)
    assert sample.logprobs == [-0.5] * len(first) + [None] * len(added) + [-0.5] * len(second)
    # each call's tokens carry the policy it started on (an update landed between the two calls)
    assert sample.output_versions == [0] * len(first) + [-1] * len(added) + [1] * len(second)
    assert sample.turns == 2 and sample.reward == 1.0
    assert [m["role"] for m in sample.messages] == ["assistant", "tool", "assistant"]  # after the prompt's messages


def test_a_rewritten_history_starts_a_new_segment_trained_as_a_sample_of_its_own(lookup_tokenizer):
    encode, decode = _codec(lookup_tokenizer)
    session = Session("g0-s2", 64, 4, "split")
    first = encode("Q: a ? A:")
    _call(session, first, encode(" answer a"), encode, decode)
    rewritten = encode("Q: b ? A:")  # not the earlier context continued
    _call(session, rewritten, encode(" answer b"), encode, decode)
    _call(session, rewritten + encode(" answer b") + encode(" more"), encode(" c"), encode, decode)
    assert session.prefix_mismatches == 1

    split = session_samples(session, 2, decode, eos_token_id=None, reward=0.5)
    assert [(s.sample_index, s.segment, s.turns, s.reward) for s in split] == [(2, 0, 1, 0.5), (2, 1, 2, 0.5)]
    assert split[0].prompt_ids == first and split[0].completion_ids == encode(" answer a")
    assert split[1].prompt_ids == rewritten
    assert split[1].completion_ids == encode(" answer b") + encode(" more") + encode(" c")
    assert split[1].tool_mask == [1] * len(encode(" answer b")) + [0] * len(encode(" more")) + [1] * len(encode(" c"))

    [last] = session_samples(session, 2, decode, eos_token_id=None, split=False)  # on_prefix_mismatch: last
    assert last.segment == 0 and last.prefix_mismatches == 1
    assert last.prompt_ids == split[1].prompt_ids and last.completion_ids == split[1].completion_ids


def test_limits_and_the_error_setting_refuse_the_call(lookup_tokenizer):
    encode, decode = _codec(lookup_tokenizer)
    strict = Session("g1-s0", 64, 4, "error")
    _call(strict, encode("Q: a ? A:"), encode(" answer a"), encode, decode)
    with pytest.raises(SessionRefused, match="call 2 do not extend the earlier context"):
        strict.prompt_ids(encode("Q: b ? A:"), encode, decode)

    capped = Session("g1-s1", token_budget=3, max_calls=1, on_prefix_mismatch="last")
    assert capped.admit() == 3  # the call may sample what is left of the session's budget
    _call(capped, encode("Q"), encode(" a"), encode, decode)
    with pytest.raises(SessionRefused, match="agent.max_calls=1"):
        capped.admit()
    spent = Session("g1-s2", token_budget=1, max_calls=5, on_prefix_mismatch="last")
    _call(spent, encode("Q"), [5], encode, decode)
    with pytest.raises(SessionRefused, match="max_completion_length=1 model tokens are spent"):
        spent.admit()
