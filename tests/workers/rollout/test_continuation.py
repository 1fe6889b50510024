"""A sample cut short on one engine and continued on another, with stand-ins for the engines: the two parts
make one completion (ids, log-probs, versions in order), the budget is what is left, a stop string cut in
two by the seam still ends it, and a tool loop goes on with its masks, calls and turns as they were."""

import asyncio

from orchestrator.contracts.groups import Sample
from tests.workers.rollout.test_multi_turn import EOS, VOCABULARY, decode, encode, tool_answering, use
from workers.rollout.continuation import joined, tokens_left, unfinished
from workers.rollout.multi_turn import Turn, run_sample

EOS_PAIR = (EOS, "<eos>")


def _sample(text: str, finish: str, version: int, stop=None) -> Sample:
    ids = encode(text)
    logprobs = [-0.25 * (i + 1) for i in range(len(ids))]
    return Sample(0, decode(ids), ids, logprobs, finish, stop, None, output_versions=[version] * len(ids))


def test_a_continued_sample_is_one_completion_with_each_tokens_logprob_and_version():
    head = _sample(" the answer is", "abort", version=4)
    tail = _sample(" jade<eos>", "stop", version=5)
    whole = joined(head, tail, decode, EOS_PAIR, stops=[], include_stop=False)
    assert whole.completion_ids == head.completion_ids + tail.completion_ids
    assert whole.logprobs == head.logprobs + tail.logprobs
    assert whole.output_versions == [4] * len(head.completion_ids) + [5] * len(tail.completion_ids)
    assert (whole.completion, whole.finish_reason) == (" the answer is jade", "stop")  # EOS text dropped
    assert not unfinished(whole) and unfinished(head)


def test_the_budget_left_is_max_completion_length_less_the_tokens_so_far():
    head = _sample("0123456789", "abort", version=0)
    assert tokens_left(head, 32) == 22
    assert tokens_left(head, 10) == 0  # a sample never exceeds it: nothing is generated past it
    tail = _sample("x" * tokens_left(head, 32), "length", version=0)
    assert len(joined(head, tail, decode, EOS_PAIR, [], False).completion_ids) == 32


def test_a_stop_string_cut_in_two_by_the_seam_ends_the_sample_there():
    """vLLM looks for stop strings in the text of the request it runs, which begins at the seam."""
    head = _sample(" the ans", "abort", version=1)
    tail = _sample("wer is jade and more", "length", version=2)
    whole = joined(head, tail, decode, EOS_PAIR, stops=["answer"], include_stop=False)
    assert (whole.finish_reason, whole.stop_reason) == ("stop", "answer")
    assert whole.completion_ids == encode(" the answer")  # up to the token that completed it, as vLLM keeps it
    assert whole.completion == " the " and len(whole.logprobs) == len(whole.output_versions) == len(whole.completion_ids)
    kept = joined(head, tail, decode, EOS_PAIR, stops=["answer"], include_stop=True)
    assert kept.completion == " the answer"
    untouched = joined(head, tail, decode, EOS_PAIR, stops=["jade"], include_stop=False)  # after the seam: vLLM's own
    assert untouched.completion_ids == head.completion_ids + tail.completion_ids


class CutShort:
    """A stand-in engine: scripted turns (text, stop, finish), each token of `version`."""

    def __init__(self, version: int, *turns):
        self.version, self.turns, self.contexts, self.budgets = version, list(turns), [], []

    async def __call__(self, context_ids, max_tokens, turn_index):
        self.contexts.append(list(context_ids))
        self.budgets.append(max_tokens)
        text, stop, finish = self.turns.pop(0)
        ids = encode(text)[:max_tokens]
        return Turn(ids, decode(ids), [-0.5] * len(ids), finish, stop, [self.version] * len(ids))


def _run(model, tool, resume=None, budget=64):
    context = {"prompt": "p", "group_id": 3}
    return asyncio.run(run_sample(0, [7, 8, 9], budget, use(), VOCABULARY, model, tool, context, resume=resume))


def test_a_tool_loop_cut_short_mid_call_goes_on_with_its_masks_calls_and_turns():
    whole = _run(
        CutShort(0, (" <search> apple </search>", 1001, "stop"), (" answer jade<eos>", None, "stop")), tool_answering(" jade ")
    )
    first = _run(CutShort(2, (" <search> app", None, "abort")), tool_answering(" jade "))
    assert (first.finish_reason, first.turns, first.tool_mask) == ("abort", 1, [1] * len(encode(" <search> app")))
    tool = tool_answering(" jade ")
    second = CutShort(3, ("le </search>", 1001, "stop"), (" answer jade<eos>", None, "stop"))
    resumed = _run(second, tool, resume=first)
    assert second.contexts[0] == [7, 8, 9] + encode(" <search> app")  # from its last token, as ids
    assert tool.calls[0][1] == " apple "  # the call reads the whole turn, both sides of the seam
    for field in ("completion_ids", "tool_mask", "turns", "finish_reason", "completion"):
        assert getattr(resumed, field) == getattr(whole, field), field
    assert [c.result for c in resumed.tool_calls] == [c.result for c in whole.tool_calls]
    cut = len(encode(" <search> app"))
    assert resumed.output_versions[:cut] == [2] * cut and resumed.output_versions[cut:][-3:] == [3, 3, 3]
    assert -1 in resumed.output_versions  # the observation: no policy's


def test_a_tool_loop_cut_short_between_turns_begins_its_next_turn_on_the_other_engine():
    first = _run(CutShort(2, (" <search> apple </search>", 1001, "stop"), ("", None, "abort")), tool_answering(" jade "))
    assert (first.finish_reason, first.turns, first.tool_mask[-1]) == ("abort", 1, 0)  # ends with the observation
    second = CutShort(3, (" answer jade<eos>", None, "stop"))
    resumed = _run(second, tool_answering(" never "), resume=first)
    assert resumed.turns == 2 and resumed.finish_reason == "stop" and len(resumed.tool_calls) == 1
    assert resumed.completion.endswith("</result> answer jade")


def test_a_continued_tool_loop_never_exceeds_its_budget():
    first = _run(CutShort(2, ("0123456789", None, "abort")), tool_answering(" r "), budget=24)
    second = CutShort(3, ("abcdefghijklmnopqrstuvwxyz", None, "length"))
    resumed = _run(second, tool_answering(" r "), resume=first, budget=24)
    assert second.budgets == [14] and len(resumed.completion_ids) == 24 and resumed.finish_reason == "length"
