"""One multi-turn sample: generate until a tool call closes, run the tool, append its result, go on.

    prompt | model turn ... <search> q </search> | <result> r </result> | model turn ... EOS
             ^ model tokens (trained on)            ^ observation tokens (mask 1, never trained on)

Plain async code (no vLLM, no Ray): the engine passes in how to generate one turn and how to call
a tool, so this loop is unit-tested with stand-ins. Each sample runs its own loop; the engine runs
all of them at once, so vLLM batches turns of different samples and groups continuously.

Rules:
- A turn ends at EOS, at a configured stop, at a tool's `end` tag, or at the token budget.
- A tool call is the text of that turn between the tool's last `begin` and its `end`. A turn that
  ends at `end` with no `begin` before it made no call: the sample ends there.
- The observation is `result_begin + result + result_end`, tokenized with the canonical tokenizer
  and appended as token ids; the model's own tokens are never re-tokenized. The result is cut to
  `max_observation_tokens`, and the whole observation to the budget left.
- `max_completion_length` (the budget) counts model and observation tokens together; at most
  `max_turns` model turns are generated, so a call in the last turn is not run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from orchestrator.contracts.groups import Sample, ToolCall
from orchestrator.contracts.tools import ToolConfig, ToolUse
from workers.rollout.continuation import ABORTED


@dataclasses.dataclass(frozen=True)
class Turn:
    """One generation segment as the engine returned it."""

    token_ids: list[int]
    text: str
    logprobs: list[float]
    finish_reason: str  # "stop", "length", or "abort" (cut short: the engine stopped serving)
    stop_reason: str | int | None  # vLLM's: the stop string, the stop token id, or None (EOS / length)
    versions: list[int] | None = None  # the policy version of each token (None: unlabelled)


GenerateTurn = Callable[[list[int], int, int], Awaitable[Turn]]  # (context ids, max tokens, turn) -> Turn
# (use, tool, call text, context) -> (result, "ok", latency) or (why it failed, "error" | "timeout", latency)
CallTool = Callable[[ToolUse, ToolConfig, str, dict], Awaitable[tuple[str, str, float]]]


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """The canonical tokenizer, as the loop needs it."""

    encode: Callable[[str], list[int]]  # without special tokens added
    decode: Callable[[list[int]], str]
    eos_token_id: int | None
    eos_text: str | None
    end_tag_ids: dict[int, str]  # token id -> tool name, for end tags that are a single token


@dataclasses.dataclass
class CompletionTokens:
    """A sample's completion as it grows: the model's turns and the tools' observations between them."""

    ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float | None] = dataclasses.field(default_factory=list)
    mask: list[int] = dataclasses.field(default_factory=list)  # tool_mask: 1 the model's own tokens
    versions: list[int] | None = dataclasses.field(default_factory=list)  # None once a turn came back unlabelled

    def add_turn(self, turn: Turn) -> None:
        self.ids += turn.token_ids
        self.logprobs += turn.logprobs
        self.mask += [1] * len(turn.token_ids)
        self.versions = None if self.versions is None or turn.versions is None else self.versions + turn.versions

    def add_observation(self, observation: list[int]) -> None:
        self.ids += observation
        self.logprobs += [None] * len(observation)
        self.mask += [0] * len(observation)
        self.versions = None if self.versions is None else self.versions + [-1] * len(observation)  # no policy's


async def run_sample(
    sample_index: int,
    prompt_ids: list[int],
    budget: int,
    use: ToolUse,
    vocabulary: Vocabulary,
    generate_turn: GenerateTurn,
    call_tool: CallTool,
    context: dict,
    resume: Sample | None = None,
) -> Sample:
    """One sample's loop. A turn the engine cut short (finish_reason "abort": it stopped serving) ends the
    loop with the sample so far, finish_reason "abort"; given back as `resume`, the loop goes on from there
    on another engine (continuation.py): its tokens, masks, tool calls and turns as they were, and a turn
    cut short continues from its last token as the same turn."""
    loop = _Loop.resumed(resume) if resume is not None else _Loop()
    ending: tuple[str, str | None, int | None] = ("length", None, None)
    while True:
        prior = loop.cut_short_turn(vocabulary)  # the turn to continue, or None: a new one
        if len(loop.tokens.ids) >= budget or (prior is None and loop.turns >= use.max_turns):
            break
        if prior is None:
            loop.turns += 1
        new = await generate_turn(prompt_ids + loop.tokens.ids, budget - len(loop.tokens.ids), loop.turns - 1)
        loop.tokens.add_turn(new)
        if new.finish_reason == ABORTED:
            if prior is None and not new.token_ids:  # a turn that never began
                loop.turns -= 1
            loop.text += new.text
            return loop.sample(sample_index, (ABORTED, None, None))
        turn = new if prior is None else _whole(prior, new)
        ending = _ending(turn)
        tool = _closed_call(turn, use.tools, vocabulary)
        loop.text += _without_eos(new.text, vocabulary.eos_text) if tool is None and _ended_at_eos(new, vocabulary) else new.text
        if tool is None or loop.turns == use.max_turns:
            break
        call_text = _call_text(turn.text, tool)
        if call_text is None or len(loop.tokens.ids) >= budget:  # not a call, or no room left for its result
            break
        result, status, latency = await call_tool(
            use, tool, call_text, {**context, "sample_index": sample_index, "turn": loop.turns - 1}
        )
        if status != "ok":
            result = use.error_observation.replace("{error}", result)
        observation, seen = _observation(tool, result, use.max_observation_tokens, budget - len(loop.tokens.ids), vocabulary)
        loop.calls.append(ToolCall(name=tool.name, call=call_text, result=seen, status=status, latency_s=latency))
        loop.tokens.add_observation(observation)
        loop.text += vocabulary.decode(observation)
        ending = ("length", None, None)  # until a later turn ends otherwise
    return loop.sample(sample_index, ending)


@dataclasses.dataclass
class _Loop:
    """Where a sample's loop stands: its completion so far, its text, its tool calls and its turns begun."""

    tokens: CompletionTokens = dataclasses.field(default_factory=CompletionTokens)
    text: str = ""
    calls: list[ToolCall] = dataclasses.field(default_factory=list)
    turns: int = 0
    cut_short: bool = False  # the last turn was cut short and goes on next

    @classmethod
    def resumed(cls, sample: Sample) -> _Loop:
        mask = list(sample.tool_mask or [1] * len(sample.completion_ids))
        tokens = CompletionTokens(list(sample.completion_ids), list(sample.logprobs), mask, _copy(sample.output_versions))
        return cls(tokens, sample.completion, list(sample.tool_calls), sample.turns, cut_short=bool(mask) and mask[-1] == 1)

    def cut_short_turn(self, vocabulary: Vocabulary) -> Turn | None:
        """The model's tokens of the turn that was cut short (after the last observation), once."""
        if not self.cut_short:
            return None
        self.cut_short = False
        mask = self.tokens.mask
        begin = len(mask) - next((i for i, m in enumerate(reversed(mask)) if m == 0), len(mask))
        ids = self.tokens.ids[begin:]
        return Turn(ids, vocabulary.decode(ids), [], ABORTED, None)

    def sample(self, sample_index: int, ending: tuple[str, str | None, int | None]) -> Sample:
        finish_reason, stop_reason, stop_token_id = ending
        return Sample(
            sample_index=sample_index,
            completion=self.text,
            completion_ids=self.tokens.ids,
            logprobs=self.tokens.logprobs,
            finish_reason=finish_reason,
            stop_reason=stop_reason,
            stop_token_id=stop_token_id,
            tool_mask=self.tokens.mask,
            turns=self.turns,
            tool_calls=self.calls,
            output_versions=self.tokens.versions,
        )


def _copy(versions: list[int] | None) -> list[int] | None:
    return None if versions is None else list(versions)


def _whole(prior: Turn, new: Turn) -> Turn:
    """A turn that was cut short, and the rest of it generated elsewhere, as one turn (for reading its call)."""
    return dataclasses.replace(new, token_ids=prior.token_ids + new.token_ids, text=prior.text + new.text)


def _ending(turn: Turn) -> tuple[str, str | None, int | None]:
    reason = turn.stop_reason
    return turn.finish_reason, None if reason is None else str(reason), reason if isinstance(reason, int) else None


def _closed_call(turn: Turn, tools: list[ToolConfig], vocabulary: Vocabulary) -> ToolConfig | None:
    """The tool whose end tag ended this turn, if one did."""
    if turn.finish_reason != "stop" or turn.stop_reason is None:
        return None
    for tool in tools:
        if turn.stop_reason == tool.end or vocabulary.end_tag_ids.get(turn.stop_reason) == tool.name:
            return tool
    return None


def _call_text(text: str, tool: ToolConfig) -> str | None:
    end = text.rfind(tool.end)
    begin = text.rfind(tool.begin, 0, end if end >= 0 else len(text))
    if end < 0 or begin < 0:
        return None
    return text[begin + len(tool.begin) : end]


def _observation(tool: ToolConfig, result: str, max_tokens: int, room: int, vocabulary: Vocabulary) -> tuple[list[int], str]:
    """(observation token ids, the result text the model saw)."""
    begin_ids, result_ids = vocabulary.encode(tool.result_begin), vocabulary.encode(result)
    kept = result_ids[: min(max_tokens, max(0, room - len(begin_ids)))]
    if len(kept) < len(result_ids):
        result = vocabulary.decode(kept)
    return (begin_ids + kept + vocabulary.encode(tool.result_end))[:room], result


def _ended_at_eos(turn: Turn, vocabulary: Vocabulary) -> bool:
    return turn.finish_reason == "stop" and bool(turn.token_ids) and turn.token_ids[-1] == vocabulary.eos_token_id


def _without_eos(text: str, eos_text: str | None) -> str:
    return text[: -len(eos_text)] if eos_text and text.endswith(eos_text) else text
