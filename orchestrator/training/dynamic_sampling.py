"""Dynamic sampling (DAPO): train only on groups whose rewards differ, and generate more until a step
has `prompts_per_step` of them.

A group whose samples all score the same has zero advantage everywhere: it adds no policy gradient
and only dilutes the step. With `dynamic_sampling: true` such groups are dropped (kept in the
rollout Parquet with `filtered` true), and the step takes more prompts from the stream, up to
`dynamic_sampling_max_rounds` extra generation rounds. Each round asks for the groups still missing,
divided by the share of informative groups seen so far in the step (at most `prompts_per_step`).
Groups beyond the step's need are not trained on either (`filtered`, counted as surplus): the
first `prompts_per_step` informative groups in stream order are. Everything here depends only on the
rewards, so a run and its resume take the same prompts. `fill` runs the rounds; training/loop.py
calls it with a function that generates and scores the stream's next groups.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

import numpy as np

from orchestrator.rollout.samples import StepSamples


@dataclasses.dataclass
class Filled:
    samples: StepSamples  # every sample generated for the step, scored, `filtered` where not trained on
    reward_errors: int
    generate_s: float  # spent generating the extra rounds (their scoring is not in it)
    figures: dict  # the dynamic_sampling/* metrics
    informative: int  # groups whose rewards differ, of all generated


def fill(
    samples: StepSamples,
    reward_errors: int,
    generate: Callable[[int], tuple],
    prompts_per_step: int,
    max_rounds: int,
    at_least: int = 1,
) -> Filled:
    """Generate more groups (`generate(count)` -> (samples, their StepRewards), the next `count` of the
    stream) until `prompts_per_step` of all the step's groups are informative, or `max_rounds` extra
    rounds were taken, and mark the rest `filtered`. `samples` are the step's first groups, scored. A
    step short of informative groups trains on those it has, topped up with the first dropped ones
    (zero advantage) to `at_least` groups: one per learner rank."""
    parts, rounds, generate_s = [samples], 0, 0.0
    kept = count_groups(samples.group_id, informative(samples.reward, samples.group_id))
    generated = len(np.unique(samples.group_id))
    while kept < prompts_per_step and rounds < max_rounds:
        rounds += 1
        began = time.perf_counter()
        more, rewards = generate(extra_groups(prompts_per_step - kept, kept, generated, prompts_per_step))
        generate_s += time.perf_counter() - began
        scores = rewards.scores()
        more.set_scores(scores)
        reward_errors += scores["reward_errors"]
        parts.append(more)
        generated += len(np.unique(more.group_id))
        kept += count_groups(more.group_id, informative(more.reward, more.group_id))
    everything = StepSamples.concat(parts)
    differ = informative(everything.reward, everything.group_id)
    chosen = trained(everything.reward, everything.group_id, prompts_per_step)
    short = count_groups(everything.group_id, chosen) < at_least
    if short:  # the first groups not chosen, in stream order, until every rank has one
        taken = set(everything.group_id[chosen].tolist())
        spare = [group for group in dict.fromkeys(everything.group_id.tolist()) if group not in taken]
        chosen |= np.isin(everything.group_id, spare[: at_least - count_groups(everything.group_id, chosen)])
    everything.filtered = ~chosen
    figures = {
        "dynamic_sampling/rounds": rounds,
        "dynamic_sampling/groups_generated": generated,
        "dynamic_sampling/groups_filtered": count_groups(everything.group_id, ~differ & ~chosen),
        "dynamic_sampling/groups_surplus": count_groups(everything.group_id, differ & ~chosen),
        "dynamic_sampling/short_steps": int(kept < prompts_per_step),
    }
    return Filled(everything, reward_errors, generate_s, figures, kept)


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
