"""Prompts from a Hugging Face dataset: a name on the Hub (`prompts: trl-lib/DeepMath-103K`), a local
folder that `datasets.load_dataset` reads (data files such as `data/train-*.parquet` or `*.jsonl`,
subsets declared in its README.md), or a folder written by `Dataset.save_to_disk`.

A value is a local folder when one of that name exists (a config file's relative values are looked
for beside the file first: config/relative_paths.py); otherwise, shaped like a Hub id, it is a
dataset name. `prompts_split`, `prompts_subset` (datasets' `name`) and `prompts_column` choose
within it; the chosen column becomes the `prompt` column TRL's GRPO expects.

The dataset is prepared in the datasets cache as `load_dataset` prepares it (every split of the
subset, converted to Arrow once) and read memory-mapped: only the prompt column becomes Python
objects, since it is checked and tokenised before the run; the other columns stay in Arrow and are
read a row at a time when a reward task scores that prompt (prompt_data.ArrowRows). What can be known
before the download fails before it, in one line naming the config key to fix: the Hub unreachable,
an unknown subset or split, and a missing column when the dataset's card lists its features.
"""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.contracts.errors import UserError, first_line
from orchestrator.data.prompt_data import PromptData, PromptFileError, missing_column

# A Hub dataset id: `name` or `owner/name`. A name with a data file's suffix is a missing file instead.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_FILE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".txt", ".arrow", ".py")


def is_dataset_name(value: str) -> bool:
    return bool(_HUB_ID.fullmatch(value)) and not value.endswith(_FILE_SUFFIXES)


def read(source: str, column: str, split: str, subset: str | None, key: str, revision: str | None = None) -> PromptData:
    """The prompts of `column` in a Hub dataset (at `revision`, a commit, when pinned) or a local dataset
    folder, and each row's other columns."""
    if _is_saved(Path(source)):
        dataset, where = _load_saved(Path(source), split, key)
    else:
        dataset, where = _load(source, column, split, subset, key, revision)
    if column not in dataset.column_names:
        raise missing_column(where, column, dataset.column_names, key)
    return PromptData.of_table(dataset.with_format("arrow")[:], column, where)


def _is_saved(path: Path) -> bool:
    """A `save_to_disk` folder: a Dataset's state.json, or a DatasetDict's dataset_dict.json."""
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


def _load_saved(path: Path, split: str, key: str):
    from datasets import DatasetDict, load_from_disk

    try:
        dataset = load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as error:
        raise PromptFileError(f"prompts folder {path} is not a saved dataset ({first_line(error)})") from None
    if not isinstance(dataset, DatasetDict):  # one split, saved on its own
        return dataset, str(path)
    if split not in dataset:
        raise _missing_split(str(path), split, list(dataset), key)
    return dataset[split], f"{path} (split {split!r})"


def _load(source: str, column: str, split: str, subset: str | None, key: str, revision: str | None):
    """What `load_dataset(source, subset, split=split)` returns, checked step by step, so that a wrong
    subset, split or column fails before the data is downloaded."""
    import pyarrow as pa
    from datasets import load_dataset_builder
    from datasets.exceptions import DatasetBuildError, DatasetNotFoundError

    try:
        builder = load_dataset_builder(source, subset, revision=revision)
    except ConnectionError:  # datasets' own, and huggingface_hub's OfflineModeIsEnabled
        raise _unreachable(source, key) from None
    except DatasetNotFoundError as error:
        raise UserError(
            f"{key}: {source!r} is no local file or folder, and no dataset on the Hugging Face Hub that this machine "
            f"can read ({first_line(error)})"
        ) from None
    except ValueError as error:  # an unknown subset, or none named where the dataset has several
        raise _subset_error(source, subset, key, error, revision) from None
    except (FileNotFoundError, RuntimeError) as error:  # a folder without data files; a loading script
        raise UserError(
            f"{key}: datasets.load_dataset cannot read {source} ({first_line(error)}); expected data files "
            "(such as data/train-*.parquet or *.jsonl) or a save_to_disk folder"
        ) from None
    named = source if subset is None else f"{source} (subset {subset!r})"
    splits = list(builder.info.splits or builder.config.data_files or {})
    if splits and any(name not in splits for name in _split_names(split)):
        raise _missing_split(named, split, splits, key)
    where = f"{source} (split {split!r})" if subset is None else f"{source} (subset {subset!r}, split {split!r})"
    features = builder.info.features  # known before the download when the dataset's card lists them
    if features is not None and column not in features:
        raise missing_column(where, column, list(features), key)
    try:
        builder.download_and_prepare()
    except ConnectionError:
        raise _unreachable(source, key) from None
    except (DatasetBuildError, pa.ArrowException) as error:  # a file that is not what its suffix says, columns that differ
        raise UserError(f"{key}: {named} cannot be read ({first_line(error.__cause__ or error)})") from None
    try:
        return builder.as_dataset(split=split), where
    except ValueError as error:  # a split datasets could not list before preparing, or a bad slice
        raise UserError(f"{key}_split: {named}: {first_line(error)}") from None


def _split_names(split: str) -> list[str]:
    """The splits a split expression reads: 'train[:1000]+test' reads train and test."""
    return [part.split("[")[0].strip() for part in split.split("+")]


def _missing_split(named: str, split: str, splits: list[str], key: str) -> UserError:
    return UserError(f"{key}_split: {named} has no split {split!r} (splits: {', '.join(splits)})")


def _subset_error(source: str, subset: str | None, key: str, error: ValueError, revision: str | None) -> UserError:
    from datasets import get_dataset_config_names

    try:
        subsets = get_dataset_config_names(source, revision=revision)
    except (ValueError, OSError):  # the same fault again: report the first
        subsets = []
    if subset is None and len(subsets) > 1:
        return UserError(f"{key}_subset: dataset {source!r} has several subsets ({', '.join(subsets)}); set {key}_subset to one")
    if subset is not None and subsets and subset not in subsets:
        return UserError(f"{key}_subset: dataset {source!r} has no subset {subset!r} (subsets: {', '.join(subsets)})")
    return UserError(f"{key}: cannot load dataset {source!r} ({first_line(error)})")


def _unreachable(source: str, key: str) -> UserError:
    return UserError(
        f"{key}: cannot load dataset {source!r}: the Hugging Face Hub is unreachable (no network, or HF_HUB_OFFLINE=1) "
        "and the datasets cache has no copy of it; no local file or folder has that name either"
    )
