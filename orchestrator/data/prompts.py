"""Read the prompts that `prompts` (or `eval_prompts`) names: a `.jsonl` or `.parquet` file, or a
Hugging Face dataset (a Hub name, a local dataset folder or a `save_to_disk` folder: hf_datasets.py).
The prompt column (`prompt` unless `prompts_column` names another) holds a string or a conversation
(a list of {role, content} messages; conversations.py) per row; the other columns reach reward
functions as keyword arguments, as with TRL.

Every problem is reported before any engine starts, with the file and line (or row) to fix.
"""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.data.prompt_data import PromptData, PromptFileError, check_prompt, missing_column


def read_prompts(path: str | Path) -> list[str]:
    prompts = read_prompt_data(str(path)).prompts
    if any(not isinstance(prompt, str) for prompt in prompts):
        raise PromptFileError(f"{path}: these prompts are conversations; this command takes string prompts")
    return prompts


def read_prompt_data(
    source: str,
    column: str = "prompt",
    split: str = "train",
    subset: str | None = None,
    key: str = "prompts",
    revision: str | None = None,
) -> PromptData:
    """`source`'s prompts (from `column`) and other columns. `split` and `subset` choose within a
    dataset that has them, `revision` is the commit of a Hub dataset to read; `key` is the config key
    that named the source (errors name it)."""
    from orchestrator.data import hf_datasets

    path = Path(source)
    if path.is_dir() or (not path.exists() and hf_datasets.is_dataset_name(source)):
        return hf_datasets.read(source, column, split, subset, key, revision)
    if not path.is_file():
        raise PromptFileError(
            f"prompts file {path} does not exist (expected a .jsonl or .parquet file, a dataset folder, or a dataset "
            "name on the Hugging Face Hub such as trl-lib/DeepMath-103K)"
        )
    if path.suffix == ".jsonl":
        return PromptData.of_records(_read_jsonl(path, column), column)
    if path.suffix == ".parquet":
        return PromptData.of_table(_read_parquet(path, column, key), column, str(path))
    raise PromptFileError(
        f"prompts file {path}: unsupported suffix {path.suffix!r} (expected .jsonl or .parquet, or a dataset folder)"
    )


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
            check_prompt(record[column], f"{path}:{number}")
            prompts.append(record)
    if not prompts:
        raise PromptFileError(f"{path}: no prompts found")
    return prompts


def _read_parquet(path: Path, column: str, key: str):
    """The file as an Arrow table (decoded here, so a corrupt page fails now, not in a reward task)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as error:  # a truncated file fails at its footer, a corrupt page when decoded
        reason = str(error).splitlines()[0].replace(f"Could not open Parquet input source '{path}': ", "")
        raise PromptFileError(f"{path}: not a readable Parquet file ({reason}); expected a complete Parquet file") from None
    if column not in table.column_names:
        raise missing_column(str(path), column, table.column_names, key)
    return table
