"""The driver's side of continuation: a group an engine handed back unfinished goes out again with its
samples so far, and what the run kept or generated again is counted.

An engine that stops serving (its node is draining, the pool shrinks) hands its running groups back at once
(workers/rollout/continuation.py says how a sample goes on from its last token). Each such group returns with
every sample it has: those finished are kept, those cut short ("abort") continue on another engine. An
agent group cannot continue (its sessions' state lives in the user's code), nor can a group of
environments (TRL's environment_factory): it starts again from its prompt, counted as regenerated. A
group on an engine that died goes out again with what it had when it was
last handed back, if it was; what the dead engine generated for it since is lost.
"""

from __future__ import annotations

import collections
import dataclasses

from orchestrator.contracts.engine_death import EngineWedgedError, GroupTimeoutError
from orchestrator.contracts.groups import GroupRequest, GroupResult, Progress
from workers.rollout.continuation import unfinished

ROLLOUT_REWORK = (  # the counts in each step's metrics, as rollout/<name>
    "samples_continued",
    "tokens_continued",
    "samples_regenerated/death",
    "samples_regenerated/timeout",
    "samples_regenerated/agent",
    "samples_regenerated/environment",
)


def handed_back(result: GroupResult) -> bool:
    """Whether `result` is a group handed back before all its samples finished."""
    return any(unfinished(sample) for sample in result.samples)


def continued(request: GroupRequest, result: GroupResult) -> GroupRequest:
    """`request` again, to continue from `result` (handed back unfinished) on another engine; an agent group,
    or one of environments (their state is the user's, on the engine's tool host), again from its start."""
    if request.agent is not None or request.environment is not None:
        return request
    before = request.progress
    version = result.policy_version if before is None else min(before.policy_version, result.policy_version)
    progress = Progress(tuple(result.samples), version, 1 if before is None else before.handed_back + 1)
    return dataclasses.replace(request, progress=progress)


class Rework:
    """What the run's groups kept across engines and what they generated again, over the run:

    samples_continued / tokens_continued    samples cut short on an engine that stopped serving, and their
                                            tokens, continued on another engine
    samples_regenerated/<why>               samples that generate again what an engine had generated for
                                            them (from their prompt, or from where they were last handed
                                            back): `death` (the engine died), `timeout` (it missed
                                            request_timeout_s or stopped answering), `agent` and `environment`
                                            (an agent group, or a group of environments, handed back starts again)
    """

    def __init__(self):
        self.counts: collections.Counter[str] = collections.Counter()

    def handed_back(self, request: GroupRequest, result: GroupResult) -> None:
        cut_short = [sample for sample in result.samples if unfinished(sample)]
        if request.agent is not None or request.environment is not None:
            why = "agent" if request.agent is not None else "environment"
            self.counts[f"samples_regenerated/{why}"] += request.num_generations
            return
        self.counts["samples_continued"] += sum(1 for sample in cut_short if sample.completion_ids)
        self.counts["tokens_continued"] += sum(len(sample.completion_ids) for sample in cut_short)

    def lost(self, request: GroupRequest, error: BaseException) -> None:
        """`request`'s engine died: its samples not finished before (when it was handed back) begin again."""
        cause = getattr(error, "cause", None) or error  # a Ray task error keeps what the actor raised as `cause`
        why = "timeout" if isinstance(cause, (GroupTimeoutError, EngineWedgedError)) else "death"
        kept = request.progress.samples if request.progress is not None else ()
        self.counts[f"samples_regenerated/{why}"] += request.num_generations - sum(1 for s in kept if not unfinished(s))
