"""The chat-template tool loop's rules (TRL's `_tool_call_loop`), with stand-ins for the engine, the tool
host and the template: token 9 is a reply that calls a tool, anything else a plain reply."""

from __future__ import annotations

import asyncio

from workers.environments.chat_loop import ChatTemplate, ToolResult, run_chat_sample
from workers.rollout.multi_turn import Turn

CALL = {"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
SUFFIX = [50, 51, 52]  # what the template renders for one round of tool messages
PROMPT = [{"role": "user", "content": "q"}]


def template() -> ChatTemplate:
    def parse(ids, prefix):
        return (
            {"role": "assistant", "content": "", "tool_calls": [CALL]} if 9 in ids else {"role": "assistant", "content": "done"}
        )

    return ChatTemplate(parse=parse, suffix_ids=lambda messages: list(SUFFIX), decode=lambda ids: " ".join(map(str, ids)))


def replies(*turns: list[int], finish: str = "stop"):
    """A generator of turns: each call answers the next of `turns` (cut to the budget), recording its calls."""
    seen = []

    async def generate(context, max_tokens, turn_index):
        seen.append((list(context), max_tokens, turn_index))
        ids = turns[len(seen) - 1][:max_tokens]
        return Turn(ids, "", [-0.5] * len(ids), finish, None, [turn_index] * len(ids))

    return generate, seen


async def tools(calls):
    return [ToolResult("f", "42", "ok", 0.0, {"x": 1}) for _ in calls]


def run(generate, budget=100, max_context=None, iterations=None):
    return asyncio.run(run_chat_sample(0, PROMPT, [1, 2], budget, max_context, iterations, template(), generate, tools))


def test_a_call_round_trip_masks_the_tool_block_and_keeps_versions_per_token():
    generate, seen = replies([7, 9], [8, 3])
    sample = run(generate)
    assert sample.completion_ids == [7, 9, *SUFFIX, 8, 3]
    assert sample.tool_mask == [1, 1, 0, 0, 0, 1, 1]
    assert sample.logprobs == [-0.5, -0.5, None, None, None, -0.5, -0.5]
    assert sample.output_versions == [0, 0, -1, -1, -1, 1, 1]
    assert seen[1] == ([1, 2, 7, 9, *SUFFIX], 100 - 5, 1)  # the rest of the budget, from the whole context
    assert sample.messages == [
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "name": "f", "content": "42"},
        {"role": "assistant", "content": "done"},
    ]
    assert [(call.name, call.call, call.result) for call in sample.tool_calls] == [("f", '{"x": 1}', "42")]
    assert sample.turns == 2 and sample.prompt_ids == [1, 2] and sample.prompt_messages == PROMPT


def test_results_past_the_budget_are_dropped_and_the_sample_ends_with_its_reply():
    generate, seen = replies([7, 9], [8])
    sample = run(generate, budget=4)  # 2 reply tokens + 3 of the tool block > 4
    assert len(seen) == 1
    assert sample.completion_ids == [7, 9] and sample.tool_mask == [1, 1] and sample.tool_calls == []
    assert sample.messages == [{"role": "assistant", "content": "", "tool_calls": [CALL]}]


def test_results_that_use_the_last_of_the_budget_end_the_sample_without_asking_for_zero_tokens():
    generate, seen = replies([7, 9], [8])
    sample = run(generate, budget=5)  # 2 reply tokens + 3 of the tool block: nothing left to generate
    assert len(seen) == 1 and sample.finish_reason == "length"
    assert sample.completion_ids == [7, 9, *SUFFIX] and sample.messages[-1]["role"] == "tool"


def test_results_that_would_fill_the_model_context_are_dropped():
    generate, seen = replies([7, 9], [8])
    sample = run(generate, max_context=7)  # prompt 2 + reply 2 + block 3 reaches the context
    assert len(seen) == 1 and sample.completion_ids == [7, 9]


def test_max_tool_calling_iterations_stops_the_calls():
    generate, seen = replies([9], [9], [9])
    sample = run(generate, iterations=1)
    assert len(seen) == 2 and len(sample.tool_calls) == 1
    assert sample.messages[-1]["tool_calls"] == [CALL]  # the last reply's call is not run


def test_a_turn_cut_short_runs_no_call():
    generate, seen = replies([9], finish="abort")
    sample = run(generate)
    assert sample.finish_reason == "abort" and sample.tool_calls == [] and len(seen) == 1
