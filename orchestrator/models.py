"""Resolve what the user named as model and tokenizer, and load the canonical tokenizer."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import UserError


def resolve_model(model: str | None, tokenizer: str | None) -> tuple[str, str]:
    """(model, tokenizer) as paths or hub names; None means the built-in tiny model."""
    if model is None:
        from orchestrator.builtin.tiny_model import tiny_model

        built = tiny_model()
        return str(built.model_dir), tokenizer or str(built.tokenizer_dir)
    for name, value in (("model", model), ("tokenizer", tokenizer)):
        if value and _looks_like_path(value) and not Path(value).exists():
            raise UserError(f"{name} path {value} does not exist (expected a model folder or a hub name)")
    return model, tokenizer or model


def _looks_like_path(value: str) -> bool:
    return value.startswith((".", "/", "~")) or value.count("/") != 1 or Path(value).exists()


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except OSError as error:
        raise UserError(f"cannot load a tokenizer from {name}: {error}") from None


def check_token_ids(token_ids: list[int], tokenizer, key: str) -> None:
    vocab = len(tokenizer)
    bad = [token for token in token_ids if not 0 <= token < vocab]
    if bad:
        raise UserError(f"{key}: token ids {bad} are outside the tokenizer's vocabulary (0..{vocab - 1})")
