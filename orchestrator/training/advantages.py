"""Advantages normalised within each group_id (never by prompt text, never by batch position).

Same arithmetic as TRL's GRPO (reward minus the group mean, divided by the group's std + 1e-4
when scaling by group), keyed by group identity so duplicate prompts stay separate groups.
Group sums are taken in one pass over the batch (`np.bincount`), so the cost is linear in the
samples however many groups there are.
"""

from __future__ import annotations

import numpy as np


def group_advantages(rewards: np.ndarray, group_ids: np.ndarray, scale: str = "group") -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    groups, member_of, counts = np.unique(np.asarray(group_ids), return_inverse=True, return_counts=True)
    if (counts < 2).any():
        small = int(np.argmax(counts < 2))
        raise ValueError(f"group {groups[small]} has {counts[small]} sample(s); GRPO needs at least 2 per group")
    means = np.bincount(member_of, weights=rewards) / counts
    advantages = rewards - means[member_of]
    stds = np.sqrt(np.bincount(member_of, weights=advantages**2) / (counts - 1))  # ddof=1, as TRL
    if scale == "group":
        advantages /= stds[member_of] + 1e-4
    elif scale == "batch":
        advantages /= rewards.std(ddof=1) + 1e-4
    elif scale != "none":
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale!r}")
    return advantages
