"""The multi-turn loop with stand-ins for the engine and the tool: what the model sees, what is masked."""

import asyncio
import re

from orchestrator.contracts.tools import ToolConfig, ToolUse
from workers.rollout.multi_turn import Turn, Vocabulary, run_sample

TAGS = ["<search>", "</search>", "<result>", "</result>", "<eos>"]
EOS = 1004


def encode(text: str) -> list[int]:
    """Characters as their code points; tags as single ids 1000.. (special tokens)."""
    ids = []
    for piece in re.split(f"({'|'.join(map(re.escape, TAGS))})", text):
        ids += [1000 + TAGS.index(piece)] if piece in TAGS else [ord(c) for c in piece]
    return ids


def decode(ids: list[int]) -> str:
    return "".join(TAGS[i - 1000] if i >= 1000 else chr(i) for i in ids)


VOCABULARY = Vocabulary(encode=encode, decode=decode, eos_token_id=EOS, eos_text="<eos>", end_tag_ids={1001: "search"})
SEARCH = ToolConfig(name="search", fn="builtin:lookup", begin="<search>", end="</search>")


def use(max_turns=3, max_observation_tokens=32) -> ToolUse:
    return ToolUse(
        tools=[SEARCH], max_turns=max_turns, max_observation_tokens=max_observation_tokens, error_observation="!{error}!"
    )


class ScriptedModel:
    """Returns the scripted turns in order and records every context it was asked to continue."""

    def __init__(self, *turns: tuple[str, str | int | None], versions: list[int] | None = None):
        self.turns = list(turns)
        self.versions = versions  # each turn's policy version (all its tokens), or unlabelled
        self.contexts, self.budgets = [], []

    async def __call__(self, context_ids, max_tokens, turn_index):
        self.contexts.append(list(context_ids))
        self.budgets.append(max_tokens)
        text, stop = self.turns.pop(0)
        ids = encode(text)[:max_tokens]
        finish = "length" if len(ids) == max_tokens and stop is None and ids[-1] != EOS else "stop"
        versions = None if self.versions is None else [self.versions[turn_index]] * len(ids)
        return Turn(ids, decode(ids), [-0.5] * len(ids), finish, stop, versions)


def tool_answering(result: str, status: str = "ok"):
    calls = []

    async def call(use, tool, call_text, context):
        calls.append((tool.name, call_text, context))
        return result, status, 0.01

    call.calls = calls
    return call


def run(model, tool, tool_use=None, budget=64, prompt=(7, 8, 9)):
    return asyncio.run(
        run_sample(0, list(prompt), budget, tool_use or use(), VOCABULARY, model, tool, {"prompt": "p", "group_id": 3})
    )


def test_a_call_is_answered_and_only_the_observation_is_masked():
    model = ScriptedModel((" <search> apple </search>", 1001), (" answer jade<eos>", None))
    tool = tool_answering(" jade ")
    sample = run(model, tool)

    first = encode(" <search> apple </search>")
    observation = encode("<result>") + encode(" jade ") + encode("</result>")
    answer = encode(" answer jade<eos>")
    assert sample.completion_ids == first + observation + answer
    assert sample.tool_mask == [1] * len(first) + [0] * len(observation) + [1] * len(answer)
    assert [lp is None for lp in sample.logprobs] == [not m for m in sample.tool_mask]
    assert model.contexts[1] == [7, 8, 9] + first + observation  # the model continues from everything, as ids
    assert tool.calls == [("search", " apple ", {"prompt": "p", "group_id": 3, "sample_index": 0, "turn": 0})]
    assert sample.completion == " <search> apple </search><result> jade </result> answer jade"  # EOS text dropped
    assert (sample.turns, sample.finish_reason, sample.stop_reason) == (2, "stop", None)
    assert [(c.call, c.result, c.status) for c in sample.tool_calls] == [(" apple ", " jade ", "ok")]


def test_the_budget_counts_observation_tokens_and_truncates_long_results():
    model = ScriptedModel((" <search> a </search>", "</search>"), ("0123456789" * 5, None))
    sample = run(model, tool_answering("x" * 50), tool_use=use(max_observation_tokens=4), budget=30)
    observation = encode("<result>") + encode("xxxx") + encode("</result>")
    used = len(encode(" <search> a </search>")) + len(observation)
    assert model.budgets == [30, 30 - used]
    assert len(sample.completion_ids) == 30 and sample.finish_reason == "length"
    assert sample.tool_calls[0].result == "xxxx"
    assert len(sample.tool_mask) - sum(sample.tool_mask) == len(observation)


def test_a_call_in_the_last_turn_is_not_run():
    model = ScriptedModel((" <search> a </search>", 1001), (" <search> b </search>", 1001))
    tool = tool_answering(" r ")
    sample = run(model, tool, tool_use=use(max_turns=2))
    assert len(tool.calls) == 1 and sample.turns == 2
    assert (sample.finish_reason, sample.stop_reason, sample.stop_token_id) == ("stop", "1001", 1001)
    assert sample.completion.endswith(" <search> b </search>")


def test_a_failed_call_shows_the_error_observation_and_is_recorded():
    model = ScriptedModel((" <search> a </search>", 1001), (" answer?<eos>", None))
    sample = run(
        model,
        tool_answering("tool 'search' did not answer within 1.0s", status="timeout"),
        tool_use=use(max_observation_tokens=64),
    )
    assert "<result>!tool 'search' did not answer within 1.0s!</result>" in sample.completion
    assert sample.tool_calls[0].status == "timeout"
    assert sample.tool_calls[0].result == "!tool 'search' did not answer within 1.0s!"


def test_an_end_tag_without_a_begin_tag_is_no_call():
    model = ScriptedModel((" apple </search>", "</search>"))
    tool = tool_answering(" r ")
    sample = run(model, tool)
    assert tool.calls == [] and sample.turns == 1 and sample.tool_mask == [1] * len(sample.completion_ids)


def test_without_a_call_the_sample_is_single_turn():
    model = ScriptedModel((" answer jade<eos>", None))
    sample = run(model, tool_answering(" r "))
    assert sample.turns == 1 and sample.tool_calls == [] and all(sample.tool_mask)
    assert sample.completion == " answer jade"


def test_each_model_token_keeps_the_version_of_its_turn_and_observations_have_none():
    """An update between two turns: the second turn's tokens carry the new version; a tool's observation
    tokens were sampled by no policy (-1)."""
    model = ScriptedModel((" <search> apple </search>", 1001), (" answer jade<eos>", None), versions=[2, 3])
    sample = run(model, tool_answering(" jade "))
    first, answer = encode(" <search> apple </search>"), encode(" answer jade<eos>")
    observation = len(sample.completion_ids) - len(first) - len(answer)
    assert sample.output_versions == [2] * len(first) + [-1] * observation + [3] * len(answer)
    unlabelled = run(ScriptedModel((" <search> apple </search>", 1001), (" a<eos>", None)), tool_answering(" jade "))
    assert unlabelled.output_versions is None  # the group's version stands for every token
