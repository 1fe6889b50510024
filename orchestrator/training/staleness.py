"""Async mode's bound: no sample is trained on by a learner more than `max_staleness` policy versions
newer than the policy that generated it.

The loop submits step t's batch when step t - max_staleness starts (prefetch.py). Every token carries
the version of the weights that sampled it (`output_versions`: an update can land mid-sample), and a
sample's version is its oldest token's, no older than its engine's weights when the group started, so
the bound holds by construction. It is still checked per sample before a step trains: a group over it
(an engine that kept old weights, a change to the loop) is generated again on the current policy, and
counted, rather than trained on or fatal.
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
    """How many versions the step's samples (by their oldest token) and their sampled tokens are behind the
    learner that trains them, and the share of samples an update landed in (tokens of two versions or more)."""
    behind = learner_version - samples.policy_version
    out = {"staleness/max": int(behind.max()), "staleness/mean": float(behind.mean())}
    versions = samples.output_versions
    if versions is None:
        return out
    sampled = versions.values >= 0
    if sampled.any():
        tokens_behind = learner_version - versions.values[sampled]
        out |= {
            "staleness/token_min": int(tokens_behind.min()),
            "staleness/token_mean": float(tokens_behind.mean()),
            "staleness/token_max": int(tokens_behind.max()),
        }
    newest = np.full(len(versions), -1, dtype=np.int64)
    np.maximum.at(newest, np.repeat(np.arange(len(versions)), versions.lengths), versions.values)
    out["staleness/samples_spanning_updates"] = float((newest > samples.policy_version).mean())
    return out
