"""What a group is on the wire: the request the driver sends an engine and the result it gets back.

Identity is never the prompt text: a group is named by `group_id` (its prompt's position in the
stream) and a sample by `(group_id, sample_index)`. The driver builds requests and assembles
results (orchestrator/rollout/groups.py); the engines (workers/rollout/) fill them in.
"""

from __future__ import annotations

import dataclasses

from orchestrator.contracts.agents import AgentUse
from orchestrator.contracts.environments import EnvironmentUse
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.contracts.tools import ToolUse


@dataclasses.dataclass(frozen=True)
class GroupRequest:
    group_id: int
    prompt_index: int  # the prompt's position in the prompt file (group_id is its position in the shuffled stream)
    prompt: str
    prompt_ids: list[int]
    num_generations: int
    sampling: SamplingConfig
    tools: ToolUse | None = None  # multi-turn: run tool calls and continue (workers/rollout/multi_turn.py)
    agent: AgentUse | None = None  # agent sessions (workers/agents/): the user's program makes the calls
    # with `agent` or `environment`: the prompt as the dataset holds it (text or messages) and its other columns,
    # what an agent session is called with and an environment's `reset` gets
    inputs: dict | None = None
    environment: EnvironmentUse | None = None  # TRL's tool calling (workers/environments/): tools, environments
    environment_name: str | None = None  # with `environment`: which of its environments this group's samples use
    progress: Progress | None = None  # a group handed back unfinished: what its samples have so far (continuation.py)


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
    finish_reason: str  # "stop" (EOS or a configured stop), "length", or "abort": handed back unfinished, to continue
    stop_reason: str | None  # the stop string, or the stop token id as text; None for EOS/length
    stop_token_id: int | None  # the stop token id when one ended the sample
    # Multi-turn samples: completion_ids interleave the model's tokens and a tool's observation tokens;
    # tool_mask (TRL's name and polarity) is 1 for the model's, 0 for an observation token (never
    # trained on; its logprob is None).
    tool_mask: list[int] | None = None  # None: every token is the model's
    turns: int = 1
    tool_calls: list[ToolCall] = dataclasses.field(default_factory=list)
    # With `sampling.top_logprobs` k > 0: at each position, the k most likely token ids and their logprobs
    # (under the distribution sampled, as `logprobs`). None otherwise.
    top_logprobs: list[dict[int, float]] | None = None
    # Agent samples (workers/agents/trajectory.py): the ids of the session's first prompt as the engine saw
    # them (None: the request's), the conversation after it (chat calls), what the agent returned as its
    # reward, why the session failed, and how many calls rewrote its history.
    prompt_ids: list[int] | None = None
    messages: list[dict] | None = None
    prompt_messages: list[dict] | None = None  # TRL's tool calling: the prompt after the environment's reset
    reward: float | None = None
    error: str | None = None
    prefix_mismatches: int = 0
    # A session split where its agent rewrote the history (agent.on_prefix_mismatch: split) is several samples
    # with the session's sample_index, numbered here from 0; every other sample is segment 0.
    segment: int = 0
    # The policy version that sampled each completion token (vLLM's weight-version spans: a sample spans an
    # update that landed while it was generated); -1 for a token no policy sampled (a tool's observation).
    # None: every token is of the group's policy_version.
    output_versions: list[int] | None = None

    @classmethod
    def unanswered(cls, prompt_ids: list[int], sample_index: int, eos_token_id: int | None, error: str) -> Sample:
        """A sample that has no completion (an agent that failed before its first model call, a group that
        kept killing its engines): the prompt and one token that is not trained on (tool_mask 0), so it is
        scored as failed (`error`: `reward_error_score`, or the run stops with it) and counts in its group."""
        return cls(
            sample_index=sample_index,
            completion="",
            completion_ids=[0 if eos_token_id is None else eos_token_id],
            logprobs=[None],
            finish_reason="stop",
            stop_reason=None,
            stop_token_id=None,
            tool_mask=[0],
            turns=0,
            prompt_ids=list(prompt_ids),
            error=error,
        )


@dataclasses.dataclass(frozen=True)
class Progress:
    """A group an engine handed back before it finished (a drain, a scale-down): its samples so far, each
    finished or cut short ("abort"), which another engine continues from their last token
    (workers/rollout/continuation.py)."""

    samples: tuple[Sample, ...]
    policy_version: int  # of the engine that started the group: the oldest its tokens can be
    handed_back: int = 1  # times the group was handed back so far


@dataclasses.dataclass(frozen=True)
class GroupResult:
    group_id: int
    engine_id: int
    policy_version: int
    samples: list[Sample]
