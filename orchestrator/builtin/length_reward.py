"""A length reward for summarisation runs (TL;DR-style): summaries near a target length score best."""

from __future__ import annotations

TARGET_WORDS = 40


def summary_length(prompts: list[str], completions: list[str], **kwargs) -> list[float]:
    """1.0 at exactly TARGET_WORDS words, falling linearly to 0.0 at twice (or zero) that length."""
    return [max(0.0, 1.0 - abs(len(c.split()) - TARGET_WORDS) / TARGET_WORDS) for c in completions]
