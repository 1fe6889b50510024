"""What a prompt source is read into (prompts.py for files, hf_datasets.py for datasets): each row's
prompt, checked, and its other columns, which reward functions get as keyword arguments.

Columns read from Arrow (a Parquet file, a Hugging Face dataset) stay there: `ArrowRows` converts a
row when a reward task asks for it, so a large dataset's answers or reasoning traces never become a
Python object per cell on the driver. Only the prompts are read whole: they are checked and
tokenised before the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from orchestrator.contracts.errors import UserError
from orchestrator.data.conversations import check_conversation, is_conversation


class PromptFileError(UserError):
    """Prompts that cannot be used as they are; the message names the file and line (or row)."""


class ArrowRows(Sequence):
    """Each row of an Arrow table as a dict, converted when a reward task asks for it."""

    def __init__(self, table, rows: list[int] | None = None):
        self.table = table  # a pyarrow.Table
        self.rows = rows  # the table rows this sequence holds, in order; None: all of them

    def __len__(self) -> int:
        return self.table.num_rows if self.rows is None else len(self.rows)

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} of {len(self)}")
        row = index if self.rows is None else self.rows[index]
        return {name: column[row].as_py() for name, column in zip(self.table.column_names, self.table.columns)}

    def select(self, rows: list[int]) -> ArrowRows:
        return ArrowRows(self.table, rows if self.rows is None else [self.rows[row] for row in rows])


@dataclasses.dataclass(frozen=True)
class PromptData:
    """A prompt source as read and checked."""

    prompts: list  # each row's prompt: a string, or a conversation (a list of {role, content} messages)
    columns: Sequence[dict]  # each row's other columns (reward functions get them as keyword arguments)

    @classmethod
    def of_records(cls, records: list[dict], column: str = "prompt") -> PromptData:
        return cls([record[column] for record in records], [{k: v for k, v in r.items() if k != column} for r in records])

    @classmethod
    def of_table(cls, table, column: str, where: str) -> PromptData:
        """An Arrow table's prompt column, read and checked; its other columns stay in Arrow."""
        prompts = table.column(column).to_pylist()
        if not prompts:
            raise PromptFileError(f"{where}: no prompts found")
        for row, prompt in enumerate(prompts):
            check_prompt(prompt, f"{where} row {row}")
        return cls(prompts, ArrowRows(table.drop_columns([column])))


def select(columns: Sequence[dict], rows: list[int]) -> Sequence[dict]:
    """The rows `rows` of `columns`, in that order (rows in Arrow stay there)."""
    return columns.select(rows) if isinstance(columns, ArrowRows) else [columns[row] for row in rows]


def missing_column(where: str, column: str, present: list[str], key: str) -> PromptFileError:
    return PromptFileError(
        f"{where}: no {column!r} column (columns: {', '.join(present) or 'none'}); "
        f"set {key}_column to the column that holds the prompts"
    )


def check_prompt(value, where: str):
    """`value` if it is a usable prompt, else a one-line error naming `where` (file:line or row)."""
    if is_conversation(value):
        return check_conversation(value, where)
    if not isinstance(value, str):
        raise PromptFileError(f"{where}: prompt must be a string, got {type(value).__name__}")
    if not value.strip():
        raise PromptFileError(f"{where}: empty prompt")
    return value
