"""Where a sample is born: stream items become group requests, tokenised once on the driver.

A group's id is its prompt's position in the stream (data/stream.py), so identical prompts are
separate groups. Its prompt ids are what every engine receives: no engine re-tokenises a prompt.
"""

from __future__ import annotations

from orchestrator.contracts.groups import GroupRequest
from orchestrator.contracts.sampling import SamplingConfig
from orchestrator.contracts.tools import ToolUse
from orchestrator.data.stream import StreamItem


def build_requests(
    items: list[StreamItem],
    tokenizer,
    num_generations: int,
    sampling: SamplingConfig,
    tools: ToolUse | None = None,
    conversational: bool = False,
) -> list[GroupRequest]:
    """One request per item, its prompt tokenised with the canonical tokenizer (in one call). A
    rendered conversation already holds every special token its chat template wants (a BOS
    included), so none is added to it, as `apply_chat_template(tokenize=True)` does."""
    texts = [item.prompt for item in items]
    prompt_ids = tokenizer(texts, add_special_tokens=not conversational)["input_ids"] if items else []
    return [
        GroupRequest(
            group_id=item.group_id,
            prompt_index=item.prompt_index,
            prompt=item.prompt,
            prompt_ids=ids,
            num_generations=num_generations,
            sampling=sampling,
            tools=tools,
        )
        for item, ids in zip(items, prompt_ids)
    ]
