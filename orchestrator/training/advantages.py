"""Advantages normalised within each group_id (never by prompt text, never by batch position).

Same arithmetic as TRL's GRPO (reward minus the group mean, divided by the group's std + 1e-4
when scaling by group), keyed by group identity so duplicate prompts stay separate groups.
Group sums are taken in one pass over the batch (`np.bincount`), so the cost is linear in the
samples however many groups there are.
"""

from __future__ import annotations

import numpy as np


def group_advantages(
    rewards: np.ndarray, group_ids: np.ndarray, scale: str = "group", counted: np.ndarray | None = None
) -> np.ndarray:
    """Each row's advantage. `counted` (bool; None: every row) marks the rows whose rewards make the
    statistics: a split agent session's segments (rollout/samples.py) share its reward and count once, and
    every row gets the advantage of its reward."""
    rewards = np.asarray(rewards, dtype=np.float64)
    group_ids = np.asarray(group_ids)
    counted = np.ones(len(rewards), dtype=bool) if counted is None else np.asarray(counted, dtype=bool)
    groups, member_of = np.unique(group_ids, return_inverse=True)
    counts = np.bincount(member_of, weights=counted, minlength=len(groups))
    if (counts < 2).any():
        small = int(np.argmax(counts < 2))
        raise ValueError(f"group {groups[small]} has {int(counts[small])} sample(s); GRPO needs at least 2 per group")
    means = np.bincount(member_of, weights=rewards * counted, minlength=len(groups)) / counts
    advantages = rewards - means[member_of]
    stds = np.sqrt(
        np.bincount(member_of, weights=advantages**2 * counted, minlength=len(groups)) / (counts - 1)
    )  # ddof=1, as TRL
    if scale == "group":
        advantages /= stds[member_of] + 1e-4
    elif scale == "batch":
        advantages /= rewards[counted].std(ddof=1) + 1e-4
    elif scale != "none":
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale!r}")
    return advantages
