"""Where a sample is born: stream items become group requests carrying their prompt's token ids.

A group's id is its prompt's position in the stream (data/stream.py), so identical prompts are
separate groups. Its prompt ids are the ones `train` computed once, before Ray started
(training/preflight.py checks their lengths with them), with the canonical tokenizer: what every
engine receives. Nothing re-tokenises a prompt.
"""

from __future__ import annotations

from orchestrator.contracts.groups import GroupRequest
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.contracts.tools import ToolUse
from orchestrator.data.stream import StreamItem
from orchestrator.rollout.samples import Ragged


def tokenize_prompts(prompts: list[str], tokenizer, conversational: bool = False) -> list[list[int]]:
    """Every prompt's ids, in one call. A rendered conversation already holds every special token its
    chat template wants (a BOS included), so none is added to it, as `apply_chat_template(tokenize=True)` does."""
    return tokenizer(prompts, add_special_tokens=not conversational)["input_ids"] if prompts else []


def build_requests(
    items: list[StreamItem],
    prompt_ids: Ragged,
    num_generations: int,
    sampling: SamplingConfig,
    tools: ToolUse | None = None,
) -> list[GroupRequest]:
    """One request per item; `prompt_ids[i]` are the ids of prompt i of the prompt list (one int32 array
    for the whole list: a driver holds every prompt's ids for the whole run)."""
    return [
        GroupRequest(
            group_id=item.group_id,
            prompt_index=item.prompt_index,
            prompt=item.prompt,
            prompt_ids=prompt_ids[item.prompt_index].tolist(),
            num_generations=num_generations,
            sampling=sampling,
            tools=tools,
        )
        for item in items
    ]
