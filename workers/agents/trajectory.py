"""A finished session's calls become its sample(s): the tokens the model sampled, trained on, and the rest
(tool results, user turns, template glue) as context between them.

    call 1 prompt | call 1 sampled | added before call 2 | call 2 sampled | ...
    prompt_ids    | tool_mask 1    | tool_mask 0          | tool_mask 1    |

A call that rewrote the history starts a new segment (session.py): its prompt is not the earlier context
continued, so no one token sequence holds both. With `agent.on_prefix_mismatch: split` each segment is a
sample of its own, at the session's place in the group (`sample_index`) and numbered by `segment`; with
`last` only the last segment is. Plain code, tested without vLLM.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.contracts.groups import Sample
from workers.agents.session import Call, Session


def segments(calls: list[Call]) -> list[list[Call]]:
    """The calls cut where a call starts a new segment, in order."""
    starts = [index for index, call in enumerate(calls) if call.new_segment and index > 0]
    bounds = [0, *starts, len(calls)]
    return [calls[begin:end] for begin, end in zip(bounds, bounds[1:])]


def session_samples(
    session: Session,
    sample_index: int,
    decode: Callable[[list[int]], str],
    eos_token_id: int | None,
    reward: float | None = None,
    error: str | None = None,
    split: bool = True,
) -> list[Sample]:
    """The samples of a session that made at least one call: one per segment with `split`, else the last
    segment's alone. `reward` is what the agent returned, `error` why the session failed (every segment is
    then scored as a failed sample: rewards/scoring.py)."""
    parts = segments(session.calls)
    kept = enumerate(parts) if split else [(0, parts[-1])]
    return [
        _segment_sample(calls, segment, session, sample_index, decode, eos_token_id, reward, error) for segment, calls in kept
    ]


def _segment_sample(
    calls: list[Call],
    segment: int,
    session: Session,
    sample_index: int,
    decode: Callable[[list[int]], str],
    eos_token_id: int | None,
    reward: float | None,
    error: str | None,
) -> Sample:
    ids, logprobs, mask, versions = [], [], [], []
    for index, call in enumerate(calls):
        added = call.added_ids if index else []  # the first call's are the segment's prompt
        ids += added + call.completion_ids
        logprobs += [None] * len(added) + list(call.logprobs)
        mask += [0] * len(added) + [1] * len(call.completion_ids)
        versions += [-1] * len(added) + [call.policy_version] * len(call.completion_ids)  # the version it started on
    last = calls[-1]
    ended_at_eos = bool(last.completion_ids) and last.completion_ids[-1] == eos_token_id
    return Sample(
        sample_index=sample_index,
        completion=decode(ids[:-1] if ended_at_eos else ids),
        completion_ids=ids,
        logprobs=logprobs,
        finish_reason="length" if last.finish_reason == "length" else "stop",
        stop_reason=None,
        stop_token_id=eos_token_id if ended_at_eos else None,
        tool_mask=mask,
        output_versions=versions,
        turns=len(calls),
        prompt_ids=list(calls[0].added_ids),
        messages=_conversation(calls),
        reward=reward,
        error=error,
        prefix_mismatches=session.prefix_mismatches,
        segment=segment,
    )


def _conversation(calls: list[Call]) -> list[dict] | None:
    """The messages after the segment's first prompt (TRL's conversational completion): the first reply,
    then what each later call added and its reply. None for text completions."""
    if any(call.messages is None for call in calls):
        return None
    return [calls[0].messages[-1], *(message for call in calls[1:] for message in call.messages)]
