"""What makes two tokenizers the same, and a readable account of how two differ.

A fingerprint is computed on the driver from the canonical tokenizer and on every engine from the
tokenizer vLLM actually loaded. The pool refuses to start unless they are equal: a `<search>`
token that the engine does not know silently breaks stop strings and completions otherwise.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json


@dataclasses.dataclass(frozen=True)
class TokenizerFingerprint:
    vocab_size: int  # len(tokenizer): base vocabulary plus added tokens
    vocab_sha256: str  # of the sorted (token, id) pairs
    added_tokens: dict[str, int]  # added token text -> id
    special_tokens: dict[str, str]  # role (eos_token, pad_token, ...) -> token text
    eos_token_id: int | None
    pad_token_id: int | None
    bos_token_id: int | None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def fingerprint(tokenizer) -> TokenizerFingerprint:
    """Fingerprint a Hugging Face tokenizer (or vLLM's wrapper of one)."""
    vocab = tokenizer.get_vocab()
    digest = hashlib.sha256(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode()).hexdigest()
    added = {token: int(idx) for token, idx in tokenizer.get_added_vocab().items()}
    special = {role: str(value) for role, value in tokenizer.special_tokens_map.items() if isinstance(value, str)}
    return TokenizerFingerprint(
        vocab_size=len(tokenizer),
        vocab_sha256=digest,
        added_tokens=dict(sorted(added.items(), key=lambda item: item[1])),
        special_tokens=dict(sorted(special.items())),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )


def differences(expected: TokenizerFingerprint, actual: TokenizerFingerprint) -> list[str]:
    """One line per difference, naming tokens and ids; empty when the tokenizers are the same."""
    lines = []
    if expected.vocab_size != actual.vocab_size:
        lines.append(f"vocab size {actual.vocab_size}, expected {expected.vocab_size}")
    for token, idx in expected.added_tokens.items():
        if token not in actual.added_tokens:
            lines.append(f"added token {token!r} (id {idx}) is missing")
        elif actual.added_tokens[token] != idx:
            lines.append(f"added token {token!r} has id {actual.added_tokens[token]}, expected {idx}")
    for token, idx in actual.added_tokens.items():
        if token not in expected.added_tokens:
            lines.append(f"unexpected added token {token!r} (id {idx})")
    for role in sorted(set(expected.special_tokens) | set(actual.special_tokens)):
        want, got = expected.special_tokens.get(role), actual.special_tokens.get(role)
        if want != got:
            lines.append(f"{role} is {got!r}, expected {want!r}")
    for name in ("eos_token_id", "pad_token_id", "bos_token_id"):
        want, got = getattr(expected, name), getattr(actual, name)
        if want != got:
            lines.append(f"{name} is {got}, expected {want}")
    if not lines and expected.vocab_sha256 != actual.vocab_sha256:
        lines.append("base vocabulary differs (same size, different tokens or ids)")
    return lines
