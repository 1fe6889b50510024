"""Conversational prompts (TRL's format): a list of `{"role", "content"}` messages per prompt.

A conversation is checked when its file is read (a bad message is a one-line error with the file
and line, or row), rendered once on the driver with the canonical tokenizer's chat template
(`add_generation_prompt=True`, so the model continues as the assistant) and tokenised once: the
engines get token ids, as for plain prompts. Reward functions get TRL's conversational shapes when
the prompts were conversations: `prompts` as the message lists and each completion as
`[{"role": "assistant", "content": text}]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.contracts.errors import UserError

ROLES = ("system", "user", "assistant", "tool")


class ConversationError(UserError):
    """A conversation that cannot be used as is; the message names the file and line (or row)."""


class ChatTemplateError(UserError):
    """Conversational prompts with a tokenizer that cannot render them."""


def is_conversation(value) -> bool:
    """TRL's test: a list whose items are dicts (an empty list is a conversation, found empty)."""
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)


def check_conversation(value, where: str) -> list[dict]:
    """The messages as given, or a one-line error naming `where` (file:line or file row N)."""
    if not value:
        raise ConversationError(f"{where}: empty conversation (expected at least one {{role, content}} message)")
    for index, message in enumerate(value):
        # (Parquet and saved datasets give a message's absent fields as None)
        missing = [key for key in ("role", "content") if message.get(key) is None]
        if missing:
            raise ConversationError(
                f"{where}: message {index} has no {' or '.join(repr(k) for k in missing)} (expected {{role, content}})"
            )
        if message["role"] not in ROLES:
            raise ConversationError(
                f"{where}: message {index} has unknown role {message['role']!r} (expected one of {', '.join(ROLES)})"
            )
        if not isinstance(message["content"], str):
            raise ConversationError(f"{where}: message {index} content must be a string, got {type(message['content']).__name__}")
    return value


def read_chat_template(value: str | None) -> str | None:
    """`chat_template` as a Jinja string: the file's text when it names a file, else the value."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if "{" not in value:  # not a template: it must be a file
        if not path.is_file():
            raise UserError(f"chat_template: {value} is neither a file nor a Jinja template")
        return path.read_text(encoding="utf-8")
    return value


def require_template(tokenizer, name: str) -> None:
    """Fail before anything starts when conversations meet a tokenizer without a template."""
    if not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateError(
            f"the prompts are conversations but the tokenizer {name} has no chat template: "
            "set chat_template (a Jinja file or string), or use a chat model's tokenizer"
        )


def with_system_prompt(messages: list[dict], system_prompt: str | None) -> list[dict]:
    """`system_prompt` goes first unless the conversation brings its own system message."""
    if system_prompt is None or (messages and messages[0]["role"] == "system"):
        return messages
    return [{"role": "system", "content": system_prompt}, *messages]


def render(tokenizer, messages: list[dict], tools: list[dict] | None = None, chat_template: str | None = None) -> str:
    """The text the model continues: the template applied (`chat_template`, or the tokenizer's), with the
    schemas of the tools it may call (TRL's tool calling), ending with the assistant's header."""
    return tokenizer.apply_chat_template(
        messages, tools=tools or None, chat_template=chat_template, tokenize=False, add_generation_prompt=True
    )


MESSAGES = "__messages__"  # where render_records keeps each record's conversation beside its text


def render_records(
    records: list[dict],
    tokenizer,
    tokenizer_name: str,
    system_prompt: str | None,
    where: str,
    tools: Sequence[list[dict]] | None = None,
    chat_template: str | None = None,
) -> tuple[list[dict], bool]:
    """Records whose conversational prompts are replaced by their rendered text (the engines and
    the rollout table see that), each conversation kept under MESSAGES (reward functions see
    those; take them out with `split_messages`). Plain prompts come back as they are. With TRL's
    tool calling, record i renders the schemas `tools[i]`, with `chat_template` when given."""
    conversational = is_conversation(records[0]["prompt"])
    for index, record in enumerate(records):
        if is_conversation(record["prompt"]) != conversational:
            kinds = ("a string", "a conversation") if conversational else ("a conversation", "a string")
            raise ConversationError(
                f"{where}: prompt {index} is {kinds[0]} but prompt 0 is {kinds[1]}; use one format for every prompt"
            )
    if not conversational:
        return records, False
    require_template(tokenizer, tokenizer_name)
    rendered = []
    for index, record in enumerate(records):
        messages = with_system_prompt(record["prompt"], system_prompt)
        text = render(tokenizer, messages, tools[index] if tools is not None else None, chat_template)
        rendered.append({**record, "prompt": text, MESSAGES: messages})
    return rendered, True


def split_messages(records: list[dict], conversational: bool) -> list[list[dict]] | None:
    """Take the conversations out of rendered records (None for plain prompts)."""
    return [record.pop(MESSAGES) for record in records] if conversational else None
