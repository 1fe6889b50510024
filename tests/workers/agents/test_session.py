"""A session keeps the ids the model saw: a call that extends the conversation keeps them as sampled,
even where re-tokenising the conversation would give other ids; a rewritten history starts a new
segment, and only the last segment becomes the sample (plain code: no vLLM)."""

import pytest

from workers.agents.session import Call, Session, SessionRefused
from workers.agents.trajectory import to_sample


@pytest.fixture(scope="module")
def lookup_tokenizer():
    from transformers import AutoTokenizer

    from orchestrator.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("builtin:lookup", None)[1])


def _codec(tokenizer):
    return (lambda text: tokenizer.encode(text, add_special_tokens=False)), (lambda ids: tokenizer.decode(ids))


def _call(session, rendered, completion, encode, decode, messages=None):
    ids, new = session.prompt_ids(rendered, encode, decode)
    call = Call(ids, completion, [-0.5] * len(completion), "stop", 0, new, messages)
    session.record(call, decode)
    return call


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

    assert second.prompt_ids[: len(prompt) + len(sampled)] == prompt + sampled  # as sampled, " app" + "le"
    assert second.prompt_ids[len(prompt) + len(sampled) :] == encode("<result> jade </result>")
    assert encode(conversation) != second.prompt_ids  # re-tokenising the conversation gives other ids
    assert not second.new_segment and session.prefix_mismatches == 0


def test_the_sample_trains_on_sampled_tokens_only(lookup_tokenizer):
    encode, decode = _codec(lookup_tokenizer)
    prompt, first, second = encode("Q: a ? A:"), encode(" <search> a </search>"), encode(" answer b")
    session = Session("g0-s1", 64, 4, "last")
    _call(session, prompt, first, encode, decode, [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "S"}])
    added = encode("<result> b </result>")
    messages = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "S"}, {"role": "tool", "content": "b"}]
    _call(session, prompt + first + added, second, encode, decode, [*messages, {"role": "assistant", "content": "A"}])

    sample = to_sample(session, 1, decode, eos_token_id=None, reward=1.0)
    assert sample.prompt_ids == prompt
    assert sample.completion_ids == first + added + second
    assert sample.tool_mask == [1] * len(first) + [0] * len(added) + [1] * len(second)
    assert sample.logprobs == [-0.5] * len(first) + [None] * len(added) + [-0.5] * len(second)
    assert sample.turns == 2 and sample.reward == 1.0
    assert [m["role"] for m in sample.messages] == ["assistant", "tool", "assistant"]  # after the prompt's messages


def test_a_rewritten_history_starts_a_new_segment_and_only_the_last_is_trained(lookup_tokenizer):
    encode, decode = _codec(lookup_tokenizer)
    session = Session("g0-s2", 64, 4, "last")
    _call(session, encode("Q: a ? A:"), encode(" answer a"), encode, decode)
    rewritten = encode("Q: b ? A:")  # not the earlier context continued
    _call(session, rewritten, encode(" answer b"), encode, decode)

    sample = to_sample(session, 2, decode, eos_token_id=None)
    assert session.prefix_mismatches == 1 and sample.prefix_mismatches == 1
    assert sample.prompt_ids == rewritten and sample.completion_ids == encode(" answer b") and sample.turns == 1


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
