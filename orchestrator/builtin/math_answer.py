"""`builtin:math_answer`: 1.0 when a completion's final answer equals the `answer` column, else 0.0.

The final answer is, in order of preference: the content of the last `\\boxed{...}` (nested braces
allowed, `\\fbox` too), the number after the last `####` (GSM8K style), or else the last number in
the text. Both sides are normalised before comparing: `$`, `\\$`, thousands commas, spaces,
`\\text{...}` and `\\left`/`\\right` go; a trailing period, `.0`, `.00`...
do not matter; `\\frac{a}{b}`, `\\dfrac{a}{b}` and `a/b` compare as fractions, so `0.5`, `1/2` and
`\\frac{1}{2}` are equal; `50%` equals `50`. A completion with no answer scores 0.

    reward_funcs: [builtin:math_answer]     # needs an `answer` column in the prompt file

Completions come as text, or as TRL's conversational `[{"role": "assistant", "content": ...}]`.
"""

from __future__ import annotations

import re
from fractions import Fraction

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_HASHES = re.compile(r"####\s*([^\n]*)")
_FRAC = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")


def math_answer_reward(prompts, completions, answer, **kwargs) -> list[float]:
    """TRL reward signature; `answer` is the dataset column of expected answers."""
    return [
        1.0 if is_correct(completion_text(completion), expected) else 0.0
        for completion, expected in zip(completions, answer, strict=True)
    ]


def is_correct(completion: str, expected) -> bool:
    found = extract_answer(completion)
    return found is not None and expected is not None and same_answer(found, str(expected))


def completion_text(completion) -> str:
    """A completion's text (a conversational completion: its messages' contents, joined)."""
    if isinstance(completion, list):  # conversational: the assistant messages' text
        return "".join(message.get("content") or "" for message in completion)
    return completion


def extract_answer(text: str) -> str | None:
    """The completion's final answer as written (before normalisation), or None."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    hashes = _HASHES.findall(text)
    if hashes:
        numbers = _NUMBER.findall(hashes[-1])
        return numbers[0] if numbers else hashes[-1].strip() or None
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` or `\\fbox{...}`, braces matched; None if none is closed."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for position in range(brace, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : position]
    return None


def normalise(answer: str) -> str:
    """A canonical string for an answer; numbers become exact fractions' text."""
    text = answer.strip()
    text = re.sub(r"\\text\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\(left|right|!|,|;|\s)", "", text)
    text = text.replace("\\$", "").replace("$", "").replace("\\%", "%").replace(" ", "")
    text = _FRAC.sub(r"(\1)/(\2)", text)
    text = text.rstrip(".").removesuffix("%")
    value = _as_number(text)
    return text if value is None else str(value)


def same_answer(found: str, expected: str) -> bool:
    return normalise(found) == normalise(expected)


def _as_number(text: str) -> Fraction | None:
    text = text.replace(",", "")
    match = re.fullmatch(r"\(?(-?[\d.]+)\)?/\(?(-?[\d.]+)\)?", text)
    try:
        if match:
            return Fraction(match.group(1)) / Fraction(match.group(2))
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None
