"""Prompts become groups; groups come back as samples; assembly checks every group's shape.

Identity is never the prompt text. A group's id is its prompt's position in the stream, so two
identical prompts are two groups, each with its own `num_generations` samples, and a sample is
named by `(group_id, sample_index)` alone.
"""

from __future__ import annotations

import dataclasses

from orchestrator.config.sampling import SamplingConfig
from orchestrator.config.tools import ToolUse


@dataclasses.dataclass(frozen=True)
class GroupRequest:
    group_id: int
    prompt_index: int  # position in the input file (equal to group_id unless the stream is offset)
    prompt: str
    prompt_ids: list[int]
    num_generations: int
    sampling: SamplingConfig
    tools: ToolUse | None = None  # multi-turn: run tool calls and continue (workers/rollout/multi_turn.py)


@dataclasses.dataclass(frozen=True)
class ToolCall:
    name: str
    call: str  # the text between the tool's begin and end tags
    result: str  # what the model saw between the result tags (after truncation), error text included
    status: str  # "ok", "error" (the tool raised or returned a non-string) or "timeout"
    latency_s: float


@dataclasses.dataclass(frozen=True)
class Sample:
    sample_index: int
    completion: str
    completion_ids: list[int]
    logprobs: list[float | None]  # of each sampled token, under the distribution actually sampled
    finish_reason: str  # "stop" (EOS or a configured stop) or "length"
    stop_reason: str | None  # the stop string, or the stop token id as text; None for EOS/length
    stop_token_id: int | None  # the stop token id when one ended the sample
    # Multi-turn samples: completion_ids interleave model and observation tokens; observation_mask
    # marks the observation tokens (never trained on), whose logprobs are None.
    observation_mask: list[int] | None = None  # None: every token is the model's
    turns: int = 1
    tool_calls: list[ToolCall] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class GroupResult:
    group_id: int
    engine_id: int
    policy_version: int
    samples: list[Sample]


class GroupShapeError(RuntimeError):
    """A group came back with missing, extra or misnumbered samples."""


def make_groups(
    prompts: list[str], prompt_ids: list[list[int]], num_generations: int, sampling: SamplingConfig
) -> list[GroupRequest]:
    """One group per prompt, in order; duplicates stay separate groups."""
    if len(prompts) != len(prompt_ids):
        raise ValueError(f"{len(prompts)} prompts but {len(prompt_ids)} tokenized prompts")
    return [
        GroupRequest(
            group_id=index,
            prompt_index=index,
            prompt=text,
            prompt_ids=list(ids),
            num_generations=num_generations,
            sampling=sampling,
        )
        for index, (text, ids) in enumerate(zip(prompts, prompt_ids))
    ]


def assemble(requests: list[GroupRequest], results: list[GroupResult]) -> list[tuple[GroupRequest, GroupResult]]:
    """Pair each request with its result in request order, checking every group's shape."""
    by_id: dict[int, GroupResult] = {}
    for result in results:
        if result.group_id in by_id:
            raise GroupShapeError(f"group {result.group_id} came back twice")
        by_id[result.group_id] = result
    wanted = {request.group_id for request in requests}
    extra = sorted(set(by_id) - wanted)
    if extra:
        raise GroupShapeError(f"results for groups that were never requested: {extra[:10]}")
    pairs = []
    for request in requests:
        result = by_id.get(request.group_id)
        if result is None:
            raise GroupShapeError(f"group {request.group_id} (prompt {request.prompt_index}) has no result")
        indices = [sample.sample_index for sample in result.samples]
        if indices != list(range(request.num_generations)):
            raise GroupShapeError(
                f"group {request.group_id} has sample indices {indices}, expected 0..{request.num_generations - 1}"
            )
        pairs.append((request, result))
    return pairs
