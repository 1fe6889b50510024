"""Load a tokenizer as saved, and ship it to another node as bytes, with no shared filesystem.

The driver loads the canonical tokenizer, saves it to a scratch folder and reads the files into a
`TokenizerBundle` (a few hundred KB for real tokenizers). Ray carries the bundle to each rollout
actor, which writes it to its own folder and points vLLM at that folder.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

from orchestrator.contracts.errors import UserError


@dataclasses.dataclass(frozen=True)
class TokenizerBundle:
    files: dict[str, bytes]

    def write_to(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in self.files.items():
            (folder / name).write_bytes(data)
        return folder


def bundle_tokenizer(tokenizer) -> TokenizerBundle:
    """Everything `save_pretrained` writes for this tokenizer object, as bytes."""
    with tempfile.TemporaryDirectory(prefix="tokenizer-bundle-") as scratch:
        tokenizer.save_pretrained(scratch)
        files = {path.name: path.read_bytes() for path in sorted(Path(scratch).iterdir()) if path.is_file()}
    return TokenizerBundle(files=files)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
TOKENIZER_JSON = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def load_tokenizer(name: str, revision: str | None = None):
    """The tokenizer at a path or hub name (at `revision`, when pinned), exactly as saved; a failure is a
    one-line user error."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name, revision=revision)
    except Exception as error:  # a malformed tokenizer file fails with KeyError, TypeError, tokenizers' own errors...
        reason = _tokenizer_folder_problem(Path(name)) if Path(name).is_dir() else None
        if reason is None:
            reason = (
                f"missing key {error}" if isinstance(error, KeyError) else " ".join(str(error).split()) or type(error).__name__
            )
            reason = reason if len(reason) <= 200 else reason[:200] + "..."
        raise UserError(
            f"cannot load a tokenizer from {name}: {reason} (expected a tokenizer as written by save_pretrained: "
            "tokenizer.json or vocabulary files, with tokenizer_config.json)"
        ) from None


def _tokenizer_folder_problem(folder: Path) -> str | None:
    """A shorter reason than transformers gives for the common cases: no vocabulary file at all,
    or a JSON file that does not parse (named with its line)."""
    if not any((folder / file).is_file() for file in TOKENIZER_FILES):
        return "no tokenizer file there"
    for file in TOKENIZER_JSON:
        if (folder / file).is_file():
            try:
                json.loads((folder / file).read_bytes())
            except json.JSONDecodeError as error:
                return f"{file}:{error.lineno}: invalid JSON ({error.msg})"
            except UnicodeDecodeError:
                return f"{file} is not UTF-8 text"
    return None
