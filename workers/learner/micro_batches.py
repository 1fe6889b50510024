"""Which of a step's samples go through the model together: micro-batches formed by length.

A micro-batch's cost is the token slots its forward pass computes. Packed (padding-free, packing.py)
that is its real tokens, laid end to end in one row or in rows as long as its longest sequence (the
few slots left at the ends of rows are the only padding); padded, it is its rows times its longest
prompt plus its longest completion.
With `learner.max_tokens_per_micro_batch` set, samples are taken longest first and placed so that no
micro-batch costs more than the budget: packed, into the first micro-batch with room (first-fit
decreasing); padded, into runs of similar length, so little of the budget goes on padding. A sample
over the budget on its own is a micro-batch of one. `learner.micro_batch_size` caps the rows of each.
With neither set, the whole step is one micro-batch; with only `micro_batch_size`, consecutive slices.

How the micro-batches' losses add up to the step's loss is the learner's business (grpo.py `_share`);
the plan only decides membership. Plain numpy, tested without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Plan:
    micro_batches: list[np.ndarray]  # row indices of each micro-batch, ascending
    slots: int  # token slots the forward passes compute, padding included
    tokens: int  # real tokens (prompt + completion) of the rows planned


def plan(
    prompt_lengths: np.ndarray,
    completion_lengths: np.ndarray,
    max_tokens: int | None,
    max_rows: int | None,
    packed: bool,
    one_row: bool = False,
) -> Plan:
    """`packed`: micro-batches will be packed (`one_row`: into a single row, else rows as long as
    their longest sequence), which is what their cost counts."""
    prompt_lengths = np.asarray(prompt_lengths, dtype=np.int64)
    completion_lengths = np.asarray(completion_lengths, dtype=np.int64)
    rows = len(prompt_lengths)
    if max_tokens is None:
        size = max_rows or rows
        groups = [np.arange(first, min(first + size, rows)) for first in range(0, rows, size)]
    elif packed:
        groups = _first_fit_decreasing(prompt_lengths + completion_lengths, max_tokens, max_rows, one_row)
    else:
        groups = _similar_lengths(prompt_lengths, completion_lengths, max_tokens, max_rows)
    groups = [np.sort(group) for group in groups]
    return Plan(
        micro_batches=groups,
        slots=sum(cost(prompt_lengths[g], completion_lengths[g], packed, one_row) for g in groups),
        tokens=int(prompt_lengths.sum() + completion_lengths.sum()),
    )


def cost(prompt_lengths: np.ndarray, completion_lengths: np.ndarray, packed: bool, one_row: bool = False) -> int:
    """Token slots of one micro-batch's forward pass."""
    if len(prompt_lengths) == 0:
        return 0
    if packed:
        row_of, _, width = place_in_rows((prompt_lengths + completion_lengths).tolist(), one_row)
        return (max(row_of) + 1) * width
    return len(prompt_lengths) * int(prompt_lengths.max() + completion_lengths.max())


def place_in_rows(lengths: list[int], one_row: bool) -> tuple[list[int], list[int], int]:
    """(row, offset in its row) of each sequence packed end to end, and the rows' width: all in one row
    in order, or longest first into the first row with room, rows as long as the longest sequence."""
    if one_row:
        offsets = [sum(lengths[:i]) for i in range(len(lengths))]
        return [0] * len(lengths), offsets, max(1, sum(lengths))
    width = max(lengths)
    filled: list[int] = []
    row_of, offset = [0] * len(lengths), [0] * len(lengths)
    for sequence in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        row = next((r for r, used in enumerate(filled) if used + lengths[sequence] <= width), len(filled))
        if row == len(filled):
            filled.append(0)
        row_of[sequence], offset[sequence] = row, filled[row]
        filled[row] += lengths[sequence]
    return row_of, offset, width


def _first_fit_decreasing(lengths: np.ndarray, max_tokens: int, max_rows: int | None, one_row: bool) -> list[np.ndarray]:
    """Longest first, each sample into the first micro-batch it fits. A micro-batch's cost is its tokens
    in one row, or else its rows (as long as its first, longest sample) times their width, so a sample
    fits where a row has room for it, or where one more row stays within the budget."""
    members: list[list[int]] = []
    fills: list[list[int]] = []  # per micro-batch, the tokens in each of its rows
    for row in np.argsort(-lengths, kind="stable"):
        length = int(lengths[row])
        for batch, rows in enumerate(fills):
            if max_rows is not None and len(members[batch]) >= max_rows:
                continue
            if one_row:
                if rows[0] + length <= max_tokens:
                    rows[0] += length
                    break
                continue
            width = int(lengths[members[batch][0]])
            room = next((r for r, used in enumerate(rows) if used + length <= width), None)
            if room is not None:
                rows[room] += length
                break
            if (len(rows) + 1) * width <= max_tokens:
                rows.append(length)
                break
        else:
            members.append([])
            fills.append([length])
            batch = len(members) - 1
        members[batch].append(int(row))
    return [np.array(rows, dtype=np.int64) for rows in members]


def _similar_lengths(
    prompt_lengths: np.ndarray, completion_lengths: np.ndarray, max_tokens: int, max_rows: int | None
) -> list[np.ndarray]:
    """Longest first, each micro-batch as many rows as fit `rows x (longest prompt + longest completion)`."""
    order = np.argsort(-(prompt_lengths + completion_lengths), kind="stable")
    groups: list[list[int]] = [[]]
    widest_prompt = widest_completion = 0
    for row in order:
        prompt, completion = max(widest_prompt, int(prompt_lengths[row])), max(widest_completion, int(completion_lengths[row]))
        current = groups[-1]
        full = max_rows is not None and len(current) >= max_rows
        if current and (full or (len(current) + 1) * (prompt + completion) > max_tokens):
            groups.append([])
            current = groups[-1]
            prompt, completion = int(prompt_lengths[row]), int(completion_lengths[row])
        current.append(int(row))
        widest_prompt, widest_completion = prompt, completion
    return [np.array(rows, dtype=np.int64) for rows in groups]
