"""The chat template's side of TRL's tool calling, on an engine: render a sample's conversation with its
tools, parse a reply into TRL's message (tool calls included), and give the ids of a round of tool
results, each exactly as TRL's GRPOTrainer does it (TRL's `parse_response`, `add_response_schema`, and
its suffix computation through workers/fences/trl.py).

The engine's own copy of the canonical tokenizer is used (read from the folder the engine was built
from), so that the response schema set on it touches nothing vLLM holds.
"""

from __future__ import annotations

import functools
from pathlib import Path

from workers.environments.chat_loop import ChatTemplate


def parses_responses(tokenizer) -> bool:
    """Whether the tokenizer carries its own reply parser (a response template, or a legacy schema)."""
    return getattr(tokenizer, "response_template", None) is not None or getattr(tokenizer, "response_schema", None) is not None


class Chat:
    """The canonical tokenizer with its response schema, and the run's template (None: the tokenizer's)."""

    def __init__(self, tokenizer, chat_template: str | None):
        from trl.chat_template_utils import add_response_schema

        if not parses_responses(tokenizer):
            tokenizer = add_response_schema(tokenizer)
        self.tokenizer = tokenizer
        self.chat_template = chat_template

    @classmethod
    def of_folder(cls, folder: Path, chat_template: str | None) -> Chat:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(folder)), chat_template)

    def prompt_ids(self, messages: list[dict], schemas: list[dict]) -> list[int]:
        """The conversation rendered with `schemas` and the assistant's header, tokenized (TRL's call)."""
        rendered = self.tokenizer.apply_chat_template(
            conversation=[messages],
            tools=schemas or None,  # TRL's `or None`: some templates render tool boilerplate for []
            chat_template=self.chat_template,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
        )
        return list(rendered["input_ids"][0])

    def parse(self, ids: list[int], prefix: list[int], schemas: list[dict]) -> dict:
        from trl.chat_template_utils import parse_response

        return parse_response(self.tokenizer, ids, prefix=prefix, tools=schemas)

    def suffix_ids(self, tool_messages: list[dict]) -> list[int]:
        from workers.fences.trl import tool_suffix_ids

        return tool_suffix_ids(self.tokenizer, self.chat_template, tool_messages)

    def template(self, schemas: list[dict], skip_special_tokens: bool) -> ChatTemplate:
        """What one sample's loop (chat_loop.py) uses, for a sample whose prompt rendered `schemas`."""
        decode = functools.partial(self.tokenizer.decode, skip_special_tokens=skip_special_tokens)
        return ChatTemplate(parse=functools.partial(self._parse_with, schemas), suffix_ids=self.suffix_ids, decode=decode)

    def _parse_with(self, schemas: list[dict], ids: list[int], prefix: list[int]) -> dict:
        return self.parse(ids, prefix, schemas)


def with_observation(messages: list[dict], observation: str | None) -> list[dict]:
    """TRL's `reset` rule: text it returns is appended to the last message's content (a new list: the
    dataset's messages are left as they are)."""
    if observation is None:
        return list(messages)
    return [*messages[:-1], {**messages[-1], "content": messages[-1]["content"] + observation}]
