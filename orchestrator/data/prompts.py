"""Read prompts from a `.jsonl` or `.parquet` file, or a `datasets.save_to_disk` folder, with a
"prompt" column: a string, or a conversation (a list of {role, content} messages; conversations.py).

Every problem is reported before any engine starts, with the file and line (or row) to fix.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.contracts.errors import UserError
from orchestrator.data.conversations import check_conversation, is_conversation


class PromptFileError(UserError):
    """A prompt file that cannot be used as is; the message names the file and line."""


def read_prompts(path: str | Path, column: str = "prompt") -> list[str]:
    prompts = [record[column] for record in read_records(path, column)]
    if any(not isinstance(prompt, str) for prompt in prompts):
        raise PromptFileError(f"{path}: these prompts are conversations; this command takes string prompts")
    return prompts


def read_records(path: str | Path, column: str = "prompt") -> list[dict]:
    """Every row with its checked prompt and any other columns (reward functions receive those as
    keyword arguments, as with TRL)."""
    path = Path(path)
    if path.is_dir():
        return _read_saved_dataset(path, column)
    if not path.is_file():
        raise PromptFileError(f"prompts file {path} does not exist (expected a .jsonl or .parquet file)")
    if path.suffix == ".jsonl":
        return _read_jsonl(path, column)
    if path.suffix == ".parquet":
        return _read_parquet(path, column)
    raise PromptFileError(f"prompts file {path}: unsupported suffix {path.suffix!r} (expected .jsonl or .parquet)")


def _read_jsonl(path: Path, column: str) -> list[dict]:
    prompts = []
    with path.open("rb") as lines:  # decoded line by line, so a bad byte is reported with its line
        for number, raw in enumerate(lines, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise PromptFileError(
                    f"{path}:{number}: not valid UTF-8 (byte {raw[error.start]:#04x} at column {error.start + 1}); "
                    "expected UTF-8 text, one JSON object per line"
                ) from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise PromptFileError(f"{path}:{number}: invalid JSON ({error.msg})") from None
            if not isinstance(record, dict) or column not in record:
                raise PromptFileError(f"{path}:{number}: expected an object with a {column!r} field")
            _check(record[column], f"{path}:{number}")
            prompts.append(record)
    if not prompts:
        raise PromptFileError(f"{path}: no prompts found")
    return prompts


def _read_parquet(path: Path, column: str) -> list[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
        if column not in table.column_names:
            raise PromptFileError(f"{path}: no {column!r} column (columns: {table.column_names})")
        prompts = table.to_pylist()
    except (pa.ArrowException, OSError) as error:  # a truncated file fails at its footer, a corrupt page when decoded
        reason = str(error).splitlines()[0].replace(f"Could not open Parquet input source '{path}': ", "")
        raise PromptFileError(f"{path}: not a readable Parquet file ({reason}); expected a complete Parquet file") from None
    for row, record in enumerate(prompts):
        _check(record[column], f"{path} row {row}")
    if not prompts:
        raise PromptFileError(f"{path}: no prompts found")
    return prompts


def _read_saved_dataset(path: Path, column: str) -> list[dict]:
    """A folder written by `datasets.Dataset.save_to_disk` (its rows are checked like Parquet's)."""
    from datasets import load_from_disk

    try:
        dataset = load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as error:
        raise PromptFileError(f"prompts folder {path} is not a saved dataset ({str(error).splitlines()[0]})") from None
    if column not in dataset.column_names:
        raise PromptFileError(f"{path}: no {column!r} column (columns: {dataset.column_names})")
    prompts = dataset.to_list()
    for row, record in enumerate(prompts):
        _check(record[column], f"{path} row {row}")
    if not prompts:
        raise PromptFileError(f"{path}: no prompts found")
    return prompts


def _check(value, where: str):
    if is_conversation(value):
        return check_conversation(value, where)
    if not isinstance(value, str):
        raise PromptFileError(f"{where}: prompt must be a string, got {type(value).__name__}")
    if not value.strip():
        raise PromptFileError(f"{where}: empty prompt")
    return value
