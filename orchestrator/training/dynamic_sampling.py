"""Dynamic sampling (DAPO): train only on groups whose rewards differ, and generate more until a step
has `prompts_per_step` of them.

A group whose samples all score the same has zero advantage everywhere: it adds no policy gradient
and only dilutes the step. With `dynamic_sampling: true` such groups are dropped (kept in the
rollout Parquet with `filtered` true), and the step takes more prompts from the stream, up to
`dynamic_sampling_max_rounds` extra generation rounds. Each round asks for the groups still missing,
divided by the share of informative groups seen so far in the step (at most `prompts_per_step`).
Groups beyond the step's need are not trained on either (`filtered`, counted as surplus): the
first `prompts_per_step` informative groups in stream order are. Everything here depends only on the
rewards, so a run and its resume take the same prompts.
"""

from __future__ import annotations

import math

import numpy as np


def informative(rewards: np.ndarray, group_ids: np.ndarray) -> np.ndarray:
    """For each sample: whether its group's rewards are not all equal."""
    groups, member_of = np.unique(group_ids, return_inverse=True)
    high = np.full(len(groups), -np.inf)
    low = np.full(len(groups), np.inf)
    np.maximum.at(high, member_of, rewards)
    np.minimum.at(low, member_of, rewards)
    return (high > low)[member_of]


def extra_groups(missing: int, kept: int, generated: int, prompts_per_step: int) -> int:
    """How many groups the next round asks for, to find `missing` informative ones when `kept` of the
    `generated` so far were."""
    if kept == 0:
        return prompts_per_step
    return min(prompts_per_step, math.ceil(missing * generated / kept))


def trained(rewards: np.ndarray, group_ids: np.ndarray, prompts_per_step: int) -> np.ndarray:
    """For each sample: whether it is trained on, i.e. its group is among the first `prompts_per_step`
    informative groups in record order (the stream's)."""
    keep = informative(rewards, group_ids)
    order = list(dict.fromkeys(group_ids[keep].tolist()))  # informative groups, first appearance first
    return np.isin(group_ids, order[:prompts_per_step])


def count_groups(group_ids: np.ndarray, rows: np.ndarray) -> int:
    return len(np.unique(group_ids[rows]))
