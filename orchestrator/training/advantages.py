"""Advantages normalised within each group_id (never by prompt text, never by batch position).

Same arithmetic as TRL's GRPO (reward minus the group mean, divided by the group's std + 1e-4
when scaling by group), keyed by group identity so duplicate prompts stay separate groups.
"""

from __future__ import annotations

import numpy as np


def group_advantages(rewards: np.ndarray, group_ids: np.ndarray, scale: str = "group") -> np.ndarray:
    rewards = np.asarray(rewards, dtype=np.float64)
    group_ids = np.asarray(group_ids)
    advantages = np.empty_like(rewards)
    stds = np.empty_like(rewards)
    for group in np.unique(group_ids):
        members = group_ids == group
        if members.sum() < 2:
            raise ValueError(f"group {group} has {members.sum()} sample(s); GRPO needs at least 2 per group")
        advantages[members] = rewards[members] - rewards[members].mean()
        stds[members] = rewards[members].std(ddof=1)
    if scale == "group":
        advantages /= stds + 1e-4
    elif scale == "batch":
        advantages /= rewards.std(ddof=1) + 1e-4
    elif scale != "none":
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale!r}")
    return advantages
