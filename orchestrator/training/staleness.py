"""Async mode's bound: no sample is trained on by a learner more than `max_staleness` policy versions
newer than the policy that generated it.

The loop submits step t's batch when step t - max_staleness starts (prefetch.py), and each group is
stamped with the version its engine held when the group started, so the bound holds by
construction. It is still checked per sample before a step trains: a group over it (an engine that
kept old weights, a change to the loop) is generated again on the current policy, and counted, rather
than trained on or fatal.
"""

from __future__ import annotations

import numpy as np

from orchestrator.rollout.samples import StepSamples


def stale_groups(samples: StepSamples, learner_version: int, max_staleness: int) -> list[int]:
    """Ids of the groups with a sample older than `learner_version - max_staleness`, in stream order."""
    old = samples.policy_version < learner_version - max_staleness
    return sorted(set(samples.group_id[old].tolist()))


def replace_groups(samples: StepSamples, fresh: StepSamples) -> StepSamples:
    """`samples` with the groups `fresh` holds replaced by `fresh`'s, in stream order."""
    kept = samples.take(np.flatnonzero(~np.isin(samples.group_id, fresh.group_id)))
    merged = StepSamples.concat([kept, fresh])
    return merged.take(np.lexsort((merged.segment, merged.sample_index, merged.group_id)))


def figures(samples: StepSamples, learner_version: int) -> dict:
    """How many versions the step's samples are behind the learner that trains them."""
    behind = learner_version - samples.policy_version
    return {"staleness/max": int(behind.max()), "staleness/mean": float(behind.mean())}
