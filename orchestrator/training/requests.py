"""Where a sample is born: stream items become group requests carrying their prompt's token ids.

A group's id is its prompt's position in the stream (data/stream.py), so identical prompts are
separate groups. Its prompt ids are the ones `train` computed once, before Ray started
(training/preflight.py checks their lengths with them), with the canonical tokenizer: what every
engine receives. Nothing re-tokenises a prompt.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from orchestrator.contracts.agents import AgentUse
from orchestrator.contracts.environments import EnvironmentUse
from orchestrator.contracts.groups import GroupRequest
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.contracts.tools import ToolUse
from orchestrator.data.sources import Sources
from orchestrator.data.stream import StreamItem
from orchestrator.rollout.groups import make_groups, row_inputs
from orchestrator.rollout.samples import Ragged

if TYPE_CHECKING:
    from orchestrator.training.evaluation import EvalSet


@dataclasses.dataclass(frozen=True)
class PromptSet:
    """The prompts a run trains on, as preflight checked them (training/preflight.py), and its held-out set."""

    prompts: list[str]  # the text the engines continue (a conversation: its rendered text)
    prompt_ids: Ragged  # each prompt's ids with the canonical tokenizer: what the engines receive
    columns: Sequence[dict] | None = None  # each prompt's other dataset columns (reward kwargs; data/prompt_data.py)
    conversations: list[list[dict]] | None = None  # each prompt's messages, when the prompts are conversations
    environment: EnvironmentUse | None = None  # TRL's tool calling: tools and environments (orchestrator/environments.py)
    environment_names: list[str] | None = None  # with `environment`: each prompt's environment
    sources: Sources | None = None  # weighted sources: their names, ratios and rows (data/sources.py)
    eval_set: EvalSet | None = None  # held-out prompts (training/evaluation.py)

    @staticmethod
    def of_texts(prompts: list[str], tokenizer) -> PromptSet:
        """Plain-text prompts tokenised here, with nothing else (`bench`)."""
        return PromptSet(prompts, Ragged.of(tokenize_prompts(prompts, tokenizer), np.int32))


def tokenize_prompts(prompts: list[str], tokenizer, conversational: bool = False) -> list[list[int]]:
    """Every prompt's ids, in one call. A rendered conversation already holds every special token its
    chat template wants (a BOS included), so none is added to it, as `apply_chat_template(tokenize=True)` does."""
    return tokenizer(prompts, add_special_tokens=not conversational)["input_ids"] if prompts else []


def build_requests(
    items: list[StreamItem],
    data: PromptSet,
    num_generations: int,
    sampling: SamplingConfig,
    tools: ToolUse | None = None,
    agent: AgentUse | None = None,
) -> list[GroupRequest]:
    """One request per item, with the ids of its prompt in `data` (one int32 array for the whole list: a
    driver holds every prompt's ids for the whole run), and its environment when the run has them."""
    rows = agent is not None or data.environment is not None
    requests = make_groups(
        [item.prompt for item in items],
        [data.prompt_ids[item.prompt_index].tolist() for item in items],
        num_generations,
        sampling,
        tools,
        group_ids=[item.group_id for item in items],
        prompt_indices=[item.prompt_index for item in items],
        agent=agent,
        inputs=[row_inputs(data, item.prompt_index) for item in items] if rows else None,
        environment=data.environment,
        environment_names=None if data.environment is None else [data.environment_names[item.prompt_index] for item in items],
    )
    return requests if data.sources is None or data.sources.max_tokens is None else _budgeted(requests, data.sources)


def _budgeted(requests: list[GroupRequest], sources: Sources) -> list[GroupRequest]:
    """Each request with its source's completion budget, where the source has its own."""
    sampling = {}  # one SamplingConfig per budget
    for index, request in enumerate(requests):
        budget = sources.budget(request.prompt_index)
        if budget is not None:
            budgeted = sampling.setdefault(budget, request.sampling.model_copy(update={"max_tokens": int(budget)}))
            requests[index] = dataclasses.replace(request, sampling=budgeted)
    return requests
