"""One agent session's token record: the context the model saw, kept as the ids it really saw.

An agent sends messages (text); the engine needs token ids. Re-tokenising the whole conversation at
every call would not give back the ids the model sampled (a model may sample " app" + "le" where the
tokenizer writes " apple"), and the learner would then train on tokens nobody sampled. So a session keeps
its context as ids, token-in-token-out: a call whose rendered prompt extends the text of the session's
context keeps that context's ids as they are and tokenizes only what was added (tool results, user turns,
template glue). A call whose prompt does not extend it (the agent rewrote its history) starts a new
segment from its own rendering (`prefix_mismatches` counts them).

Plain code: the gateway (gateway.py) passes in how to encode and decode; tested without vLLM.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable


class SessionRefused(Exception):
    """A call this session may not make (past its call or token limit, or a rewritten history under
    `on_prefix_mismatch: error`); the gateway answers it with an error the agent's client raises."""


@dataclasses.dataclass(frozen=True)
class Call:
    """One model call as the engine saw and answered it, kept as what it added to its session: the first call
    of a segment keeps its whole prompt, a later one the ids after the context before it, so what a session
    holds grows with its conversation, not with the conversation's square."""

    added_ids: list[int]  # the prompt's ids after the session's context (all of them if it starts a segment)
    completion_ids: list[int]  # what it sampled (a stop or EOS token included)
    logprobs: list[float]  # of each sampled token
    finish_reason: str  # vLLM's: "stop", "length" or "tool_calls"
    policy_version: int
    new_segment: bool  # its prompt did not extend the session's earlier context
    messages: (
        list[dict] | None
    )  # chat calls: the request's messages after the earlier calls' (all of them if it starts a segment), and the reply


class Session:
    def __init__(self, key: str, token_budget: int, max_calls: int, on_prefix_mismatch: str):
        self.key = key
        self.token_budget = token_budget  # model tokens over the whole session (max_completion_length)
        self.max_calls = max_calls
        self.on_prefix_mismatch = on_prefix_mismatch
        self.calls: list[Call] = []
        self.prefix_mismatches = 0
        self._context: list[int] = []  # the last call's prompt and completion ids
        self._context_text = ""
        self._messages = 0  # how many messages the last call's request and reply held

    def tokens_left(self) -> int:
        return self.token_budget - sum(len(call.completion_ids) for call in self.calls)

    def admit(self) -> int:
        """Checks that one more call is allowed; returns the model tokens it may sample."""
        if len(self.calls) >= self.max_calls:
            raise SessionRefused(f"session {self.key}: agent.max_calls={self.max_calls} calls made already")
        left = self.tokens_left()
        if left <= 0:
            raise SessionRefused(f"session {self.key}: its max_completion_length={self.token_budget} model tokens are spent")
        return left

    def prompt_ids(self, rendered_ids: list[int], encode: Callable[[str], list[int]], decode: Callable[[list[int]], str]):
        """The ids to send for a call whose canonical rendering is `rendered_ids`, and whether they start a
        new segment: the session's context ids plus the added text's ids when the rendering extends the
        context's text; the rendering itself otherwise (the first call, or a rewritten history)."""
        if not self._context:
            return list(rendered_ids), True
        text = decode(rendered_ids)
        if text.startswith(self._context_text):
            return self._context + encode(text[len(self._context_text) :]), False
        if self.on_prefix_mismatch == "error":
            raise SessionRefused(
                f"session {self.key}: the messages of call {len(self.calls) + 1} do not extend the earlier context "
                "(the agent rewrote its history; agent.on_prefix_mismatch: split trains each part as a sample of its own)"
            )
        self.prefix_mismatches += 1
        return list(rendered_ids), True

    def record(
        self, prompt_ids: list[int], new_segment: bool, messages: list[dict] | None, decode: Callable[[list[int]], str], **answer
    ) -> Call:
        """Keep a call: the `prompt_ids` and `new_segment` that `prompt_ids()` gave for it, its chat `messages`
        (the request's and the reply), and `answer`, the rest of its `Call` (what the engine sampled)."""
        added = prompt_ids if new_segment else prompt_ids[len(self._context) :]
        kept = messages if messages is None or new_segment else messages[self._messages :]
        call = Call(added_ids=list(added), new_segment=new_segment, messages=kept, **answer)
        self.calls.append(call)
        self._context = list(prompt_ids) + call.completion_ids
        self._context_text = decode(self._context)
        self._messages = 0 if messages is None else len(messages)
        return call
