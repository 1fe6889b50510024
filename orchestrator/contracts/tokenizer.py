"""Load a tokenizer as saved, and ship it to another node as bytes, with no shared filesystem.

The driver loads the canonical tokenizer, saves it to a scratch folder and reads the files into a
`TokenizerBundle` (a few hundred KB for real tokenizers). Ray carries the bundle to each rollout
actor, which writes it to its own folder and points vLLM at that folder.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from orchestrator.contracts.errors import UserError


@dataclasses.dataclass(frozen=True)
class TokenizerBundle:
    files: dict[str, bytes]

    @property
    def size_bytes(self) -> int:
        return sum(len(data) for data in self.files.values())

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


def load_tokenizer(name: str):
    """The tokenizer at a path or hub name, exactly as saved; a failure is a one-line user error."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as error:
        raise UserError(f"cannot load a tokenizer from {name}: {str(error).splitlines()[0]}") from None
