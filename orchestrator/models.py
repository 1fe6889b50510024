"""Resolve what the user named as model and tokenizer, and load the canonical tokenizer."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import UserError


def resolve_model(model: str | None, tokenizer: str | None) -> tuple[str, str]:
    """(model, tokenizer) as paths or hub names. None (or 'builtin:search') is the built-in tiny
    model of the search task, 'builtin:lookup' the one of the lookup-tool task, 'builtin:chat' the tiny
    chat model (one folder with weights and a ChatML tokenizer, like a hub chat model)."""
    if model == "builtin:chat":
        from orchestrator.builtin.chat_model import chat_model

        folder = str(chat_model())
        return folder, tokenizer or folder
    if model is None or model.startswith("builtin:"):
        from orchestrator.builtin.tiny_model import TASKS, TinyModelSpec, tiny_model

        task = "search" if model is None else model.removeprefix("builtin:")
        if task not in TASKS:
            raise UserError(f"model: unknown built-in {model!r} (built-ins: {', '.join('builtin:' + t for t in [*TASKS, 'chat'])})")
        built = tiny_model(TinyModelSpec(task=task))
        return str(built.model_dir), tokenizer or str(built.tokenizer_dir)
    model, tokenizer = _expand(model), _expand(tokenizer)
    for name, value in (("model", model), ("tokenizer", tokenizer)):
        if value and value.startswith((".", "/")) and not Path(value).exists():
            raise UserError(f"{name} path {value} does not exist (expected a model folder or a hub name)")
    return model, tokenizer or model


def _expand(value: str | None) -> str | None:
    return str(Path(value).expanduser()) if value and value.startswith("~") else value


def load_tokenizer(name: str):
    """The tokenizer at a path or hub name, exactly as saved; a failure is a one-line user error."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as error:
        raise UserError(f"cannot load a tokenizer from {name}: {str(error).splitlines()[0]}") from None


def check_token_ids(token_ids: list[int], tokenizer, key: str) -> None:
    vocab = len(tokenizer)
    bad = [token for token in token_ids if not 0 <= token < vocab]
    if bad:
        raise UserError(f"{key}: token ids {bad} are outside the tokenizer's vocabulary (0..{vocab - 1})")


def context_limit(model: str, max_model_len: int | None) -> int | None:
    """Prompt + completion tokens an engine accepts: rollout.max_model_len, else the model's
    max_position_embeddings (when its config.json is local), else unknown (None)."""
    if max_model_len is not None:
        return max_model_len
    config = Path(model) / "config.json"
    if config.is_file():
        import json

        return json.loads(config.read_text()).get("max_position_embeddings")
    return None


def check_prompt_fits(lengths: list[int], max_new_tokens: int, limit: int | None, where: str) -> None:
    """Fail before any engine starts if a prompt plus its completion budget exceeds the context."""
    if limit is None:
        return
    for index, length in enumerate(lengths):
        if length + max_new_tokens > limit:
            raise UserError(
                f"prompt {index} ({where}) has {length} tokens; with {max_new_tokens} completion tokens that exceeds the "
                f"model's context of {limit} (shorten the prompt, lower the completion budget, or raise rollout.max_model_len)"
            )
