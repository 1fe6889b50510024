"""A sample handed back unfinished and continued on another engine: where it stopped, what it may still
generate, and the one sample its two parts make.

An engine that stops serving while it generates (its node is draining, the pool shrinks) aborts its
running requests, and vLLM returns what each has so far: its token ids, log-probs and weight versions,
with finish_reason "abort". The group goes back to the driver with those samples, finished or not
(`Progress`), and another engine continues each unfinished one from its last token:

    context  = prompt ids + completion ids so far   (ids, never re-tokenized text)
    budget   = max_completion_length - completion tokens so far
    sample   = the tokens so far + the tokens it generates now, as one completion

so the learner trains one completion whose every token has the log-prob and policy version of the engine
that sampled it. A sample's place in its group (`sample_index`) and its stops are unchanged; vLLM looks for
stop strings only in the text of the request it runs, which begins at the seam, so a stop string cut in
two by the seam is looked for here (`joined`). Multi-turn samples resume their tool loop where it stopped
(multi_turn.py); agent sessions, whose state lives in the user's code, start again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from orchestrator.contracts.groups import Sample

ABORTED = "abort"  # vLLM's finish_reason for a request aborted before it finished


def unfinished(sample: Sample) -> bool:
    return sample.finish_reason == ABORTED


def tokens_left(sample: Sample, max_tokens: int) -> int:
    """What a continued sample may still generate: never past `max_completion_length` in all."""
    return max(0, max_tokens - len(sample.completion_ids))


def joined(
    head: Sample,
    tail: Sample,
    decode: Callable[[list[int]], str],
    eos: tuple[int | None, str | None],
    stops: list[str],
    include_stop: bool,
) -> Sample:
    """`head` (a sample cut short) followed by `tail` (what an engine generated from its last token), as one
    sample: ids, log-probs, top log-probs and versions in order, the text decoded from all the ids (as vLLM's
    detokenizer does, without the EOS text), and `tail`'s ending, unless a stop string spans the seam: then
    the sample ends there, as vLLM ends one at a stop string (its ids up to the token that completed it, its
    text up to the stop, with it when `include_stop`)."""
    seam = _seam_stop(head.completion_ids, tail.completion_ids, decode, stops)
    if seam is not None:
        kept, stop, at = seam
        tail = dataclasses.replace(tail, finish_reason="stop", stop_reason=stop, stop_token_id=None)
        tail = _first(tail, kept)
    ids = head.completion_ids + tail.completion_ids
    text = decode(ids)
    eos_id, eos_text = eos
    if seam is not None:
        text = text[: at + len(stop) if include_stop else at]
    elif tail.finish_reason == "stop" and ids and ids[-1] == eos_id and eos_text and text.endswith(eos_text):
        text = text[: -len(eos_text)]
    return dataclasses.replace(
        tail,
        sample_index=head.sample_index,
        completion=text,
        completion_ids=ids,
        logprobs=head.logprobs + tail.logprobs,
        top_logprobs=None if head.top_logprobs is None or tail.top_logprobs is None else head.top_logprobs + tail.top_logprobs,
        output_versions=_versions(head, tail),
    )


def _versions(head: Sample, tail: Sample) -> list[int] | None:
    if head.output_versions is None or tail.output_versions is None:
        return None
    return head.output_versions + tail.output_versions


def _first(sample: Sample, count: int) -> Sample:
    """`sample`'s first `count` tokens."""
    return dataclasses.replace(
        sample,
        completion_ids=sample.completion_ids[:count],
        logprobs=sample.logprobs[:count],
        top_logprobs=None if sample.top_logprobs is None else sample.top_logprobs[:count],
        output_versions=None if sample.output_versions is None else sample.output_versions[:count],
    )


def _seam_stop(head: list[int], tail: list[int], decode, stops: list[str]) -> tuple[int, str, int] | None:
    """(how many of `tail`'s tokens to keep, the stop string, where it begins in the text) when a stop string
    begins before the seam and ends after it; None otherwise. Such a string ends within its own length in
    tokens after the seam (every token adds at least one character, but for a byte of a character cut in
    two), so only those are read."""
    if not stops or not tail or not head:
        return None
    seam = len(decode(head))
    longest = max(len(stop) for stop in stops)
    for kept in range(1, min(len(tail), longest + 3) + 1):
        text = decode(head + tail[:kept])
        for stop in stops:
            at = text.find(stop, max(0, seam - len(stop) + 1))
            if 0 <= at < seam:
                return kept, stop, at
    return None
