"""One sample of TRL's tool calling: generate, parse the reply with the chat template, run its tool calls,
append their `tool` messages as the template renders them, and generate again.

    prompt (chat template, tools rendered) | reply <tool_call>...</tool_call><|im_end|> | tool block | reply ...
                                             ^ the model's tokens (trained on)            ^ tool_mask 0

Plain async code (no vLLM, no Ray): the engine passes in how to generate, how to run a reply's tool
calls, and the chat template's operations, so the loop is unit-tested with stand-ins. Its rules are
TRL's `_tool_call_loop` (GRPOTrainer, TRL 1.16):
- a reply is parsed with `parse_response` (prefix: everything before it); its `tool_calls`, if any, run;
- each call's result becomes `{"role": "tool", "name": ..., "content": str(result)}` (an error:
  `{"error": ...}`), and the block the template renders for those messages is appended as token ids
  (the model's own tokens are never re-tokenized);
- tool results that would take the completion past `max_completion_length` (the budget), or the whole
  context to the model's length, are dropped and the sample ends with its reply as it is;
- at most `max_tool_calling_iterations` rounds of calls (None: until the budget);
- `completions` is TRL's: the parsed replies and the tool messages, in order (`Sample.messages`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable

from orchestrator.contracts.groups import Sample, ToolCall
from workers.rollout.continuation import ABORTED
from workers.rollout.multi_turn import CompletionTokens, Turn


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """One tool call's outcome, as its `tool` message gives it to the model."""

    name: str
    content: str  # str(what the tool returned), or TRL's str({"error": ...})
    status: str  # "ok", "error" (raised, unknown tool, unsupported call) or "timeout"
    latency_s: float
    arguments: dict | None = None


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
    """The chat template's operations the loop needs (workers/environments/chat.py builds them)."""

    parse: Callable[[list[int], list[int]], dict]  # (reply ids, ids before it) -> TRL's parsed message
    suffix_ids: Callable[[list[dict]], list[int]]  # tool messages -> the ids the template renders for them
    decode: Callable[[list[int]], str]


GenerateTurn = Callable[[list[int], int, int], Awaitable[Turn]]  # (context ids, max tokens, turn) -> Turn
CallTools = Callable[[list[dict]], Awaitable[list[ToolResult]]]  # a reply's tool calls -> their results, TRL's order


async def run_chat_sample(
    sample_index: int,
    prompt_messages: list[dict],
    prompt_ids: list[int],
    budget: int,
    max_context: int | None,
    max_iterations: int | None,
    chat: ChatTemplate,
    generate_turn: GenerateTurn,
    call_tools: CallTools,
) -> Sample:
    """One sample's loop, from `prompt_ids` (`prompt_messages`, the conversation after `reset`, rendered with
    its tools). A turn the engine cut short (it stopped serving) ends the sample with finish_reason "abort":
    such a sample starts again."""
    tokens, messages, calls = CompletionTokens(), [], []
    turn = await generate_turn(prompt_ids, budget, 0)
    tokens.add_turn(turn)
    reply = chat.parse(turn.token_ids, prompt_ids) if turn.token_ids else {}
    messages.append(reply)
    rounds = 0
    while reply.get("tool_calls") and turn.finish_reason != ABORTED and (max_iterations is None or rounds < max_iterations):
        results = await call_tools(reply["tool_calls"])
        tool_messages = [{"role": "tool", "name": result.name, "content": result.content} for result in results]
        suffix = chat.suffix_ids(tool_messages)
        context = len(prompt_ids) + len(tokens.ids) + len(suffix)
        if len(tokens.ids) + len(suffix) > budget or (max_context is not None and context >= max_context):
            break  # TRL drops results that do not fit: the sample ends with its reply as it is
        calls += [_record(result) for result in results]
        messages += tool_messages
        tokens.add_observation(suffix)
        context_ids = prompt_ids + tokens.ids
        rounds += 1
        if len(tokens.ids) >= budget:  # TRL generates and cuts the reply to nothing: the sample ends here
            turn = Turn([], "", [], "length", None, [])
            break
        turn = await generate_turn(context_ids, budget - len(tokens.ids), rounds)
        tokens.add_turn(turn)
        reply = chat.parse(turn.token_ids, context_ids) if turn.token_ids else {}
        if reply:
            messages.append(reply)
    return Sample(
        sample_index=sample_index,
        completion=chat.decode(tokens.ids),
        completion_ids=tokens.ids,
        logprobs=tokens.logprobs,
        finish_reason=turn.finish_reason,
        stop_reason=None if turn.stop_reason is None else str(turn.stop_reason),
        stop_token_id=turn.stop_reason if isinstance(turn.stop_reason, int) else None,
        tool_mask=tokens.mask,
        turns=rounds + 1,
        tool_calls=calls,
        prompt_ids=list(prompt_ids),
        messages=[message for message in messages if message],
        prompt_messages=prompt_messages,
        output_versions=tokens.versions,
    )


def _record(result: ToolResult) -> ToolCall:
    arguments = json.dumps(result.arguments, sort_keys=True, default=str) if result.arguments is not None else ""
    return ToolCall(name=result.name, call=arguments, result=result.content, status=result.status, latency_s=result.latency_s)
