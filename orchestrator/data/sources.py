"""Weighted prompt sources: `prompts: [{source, ratio}, ...]` read one by one and joined into one
prompt list, with which rows each source holds (the stream draws them by ratio: stream.MixedStream).

Every row has every column of every source (None where its source has none), since reward functions
get the dataset's columns by name and a batch mixes the sources' rows.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from collections.abc import Sequence

import numpy as np

from orchestrator.contracts.errors import UserError
from orchestrator.data.prompt_data import PromptData


class JoinedRows(Sequence):
    """The rows of several sources' columns, one after the other, each with the union of their keys."""

    def __init__(self, parts: list[Sequence[dict]]):
        self.parts = parts
        self.keys = list(dict.fromkeys(key for part in parts if len(part) for key in part[0]))
        self._starts = [sum(len(part) for part in parts[:i]) for i in range(len(parts) + 1)]

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} of {len(self)}")
        part = bisect.bisect_right(self._starts, index) - 1
        row = self.parts[part][index - self._starts[part]]
        return {key: row.get(key) for key in self.keys}


class WithColumn(Sequence):
    """Rows with one more column, of one value in every row (it replaces a column of that name)."""

    def __init__(self, rows: Sequence[dict], key: str, value):
        self.rows, self.key, self.value = rows, key, value

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        return {**self.rows[index], self.key: self.value}


def join(parts: list[PromptData]) -> tuple[PromptData, list[list[int]]]:
    """One prompt list of `parts` (one per source, in order), and each source's row indices in it."""
    prompts = [prompt for part in parts for prompt in part.prompts]
    starts = [sum(len(part.prompts) for part in parts[:i]) for i in range(len(parts))]
    rows = [list(range(start, start + len(part.prompts))) for start, part in zip(starts, parts)]
    return PromptData(prompts, JoinedRows([part.columns for part in parts])), rows


@dataclasses.dataclass(frozen=True)
class Sources:
    """The weighted sources of a run's prompts: their names (in the metrics), ratios and rows."""

    names: list[str]
    ratios: list[float]
    rows: list[list[int]]  # each source's indices in the joined prompt list
    max_tokens: list[int | None] | None = None  # each source's completion budget (None: the run's)

    @functools.cached_property
    def of_rows(self) -> np.ndarray:
        """Each prompt's source, by index (computed once: the metrics read it every step)."""
        source = np.zeros(sum(len(rows) for rows in self.rows), dtype=np.int32)
        for index, rows in enumerate(self.rows):
            source[rows] = index
        return source

    def kept(self, kept: list[int]) -> Sources:
        """These sources after only the prompts `kept` (old indices, in order) stay, renumbered."""
        new = {old: position for position, old in enumerate(kept)}
        rows = [[new[row] for row in source_rows if row in new] for source_rows in self.rows]
        emptied = [name for name, source_rows in zip(self.names, rows) if not source_rows]
        if emptied:
            raise UserError(
                f"prompts: source {emptied[0]!r} has no prompt within max_prompt_length (drop_long_prompts dropped them all)"
            )
        return Sources(self.names, self.ratios, rows, self.max_tokens)

    def budget(self, prompt_index: int) -> int | None:
        """The completion budget of a prompt's source, if it has its own."""
        return None if self.max_tokens is None else self.max_tokens[self.of_rows[prompt_index]]
