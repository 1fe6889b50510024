"""A step's batch split over the learner's data-parallel ranks (`learner.workers`): whole groups per rank.

Advantages are computed over the whole step before the split (advantages.py), so where a sample trains
does not change them; a group's samples still stay together on one rank, so nothing TRL does per group
ever sees half a group. Groups go to ranks so that token counts are as even as they can be: a rank's
forward and backward passes cost its tokens (micro-batches are formed by token budget and packed,
workers/learner/micro_batches.py), and every rank waits for the busiest at each collective. The
learner logs the imbalance left (`learner/rank_imbalance`: the busiest rank's tokens over the mean).
"""

from __future__ import annotations

import numpy as np


def shard_rows(group_ids: np.ndarray, tokens: np.ndarray, ranks: int) -> list[np.ndarray]:
    """For each rank, the indices (in batch order) of the rows it trains on. `tokens` is each row's
    token count; groups are placed most tokens first on the rank with the fewest tokens (then rows)."""
    groups, member_of = np.unique(np.asarray(group_ids), return_inverse=True)
    if len(groups) < ranks:
        raise ValueError(
            f"{len(groups)} group(s) in the step cannot be shared by {ranks} learner ranks without splitting a "
            "group: lower learner.workers or raise prompts_per_step"
        )
    rows = np.bincount(member_of, minlength=len(groups))
    weights = np.bincount(member_of, weights=np.asarray(tokens, dtype=np.float64), minlength=len(groups))
    load = [(0.0, 0)] * ranks
    owner = np.empty(len(groups), dtype=np.int64)
    for group in sorted(range(len(groups)), key=lambda g: (-weights[g], -rows[g], g)):
        rank = min(range(ranks), key=lambda r: (load[r], r))
        owner[group] = rank
        load[rank] = (load[rank][0] + float(weights[group]), load[rank][1] + int(rows[group]))
    return [np.flatnonzero(owner[member_of] == rank) for rank in range(ranks)]


def shard_batch(batch: dict[str, np.ndarray], group_ids: np.ndarray, ranks: int) -> list[dict[str, np.ndarray]]:
    """`batch` (orchestrator/training/batch.py) as one batch per rank; `group_ids` gives each row's group.
    Columns keep the whole step's width: left-padded prompts keep their positions."""
    if len(group_ids) != len(batch["advantages"]):
        raise ValueError(f"{len(group_ids)} group ids for a batch of {len(batch['advantages'])} rows")
    tokens = batch["prompt_mask"].sum(axis=1) + batch["completion_mask"].sum(axis=1)
    return [{key: value[rows] for key, value in batch.items()} for rows in shard_rows(group_ids, tokens, ranks)]
