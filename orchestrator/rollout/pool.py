"""`RolloutPool`: sends groups to the engines of an `EngineFleet` and collects what comes back.

`generate` sends each group to the least-loaded serving engine (dispatcher.py), never more than
`rollout.max_inflight_samples` generating plus `rollout.max_queued_samples` queued on one engine, in
one call per engine for all the groups picked for it at once, and returns results as they finish;
callers get them back in any order and assemble by group id. Once every group is out, the groups
still queued on engines are taken back and go to whichever engines free room first, as the driver
would have sent them with no queues at all: a batch's end waits for no engine's queue. A group whose engine died goes back to the
queue for the live engines, and the group replaces the engine (fleet.py): the pool runs
degraded on the engines it has and fails only when none are left. A group that keeps killing its
engines fails by name instead of spending every replacement (poison.py). An engine that stops serving
(drained, scaled down) hands its running groups back cut short, and other engines continue their
samples from the last token (continued.py).

The pool is the front door to its engines: resizing (`resize`), replacing (`drop`) and weight syncs
(`sync_weights`) go through it, and nothing outside orchestrator/rollout/ touches its `EngineFleet`.

Engines come from a launcher (launcher.py): one vLLM actor each by default, or simulated engines,
which is how `python -m orchestrator simulate` measures this file at hundreds of engines.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.contracts.groups import GroupRequest, GroupResult
from orchestrator.rollout.continued import Rework
from orchestrator.rollout.dispatch import Dispatch
from orchestrator.rollout.fleet import EngineFleet
from orchestrator.rollout.poison import GroupDeaths
from workers.weights.transport import LearnerSyncTimeout

if TYPE_CHECKING:
    from orchestrator.learner.weights import PolicyWeights
    from workers.weights.transport import SyncReport


class RolloutPool:
    def __init__(self, engines: EngineFleet):
        self.engines = engines
        self._batches = itertools.count()  # each `generate` call is a batch of its own on the engines
        self._deaths = GroupDeaths(engines.config.max_group_deaths)  # engine deaths per group, over the run
        self._policy_version = 0  # the engines' weights, as last synced
        self.rework = Rework()  # samples continued on another engine or generated again, over the run (continued.py)

    def start(self) -> RolloutPool:
        self.engines.start()
        return self

    def shutdown(self) -> None:
        self.engines.shutdown()

    @property
    def size(self) -> int:
        """Engines serving now."""
        return len(self.engines.actors)

    @property
    def serving(self) -> int:
        """Engines serving and not being drained (`size` counts those draining until they stop)."""
        return len(set(self.engines.actors) - self.engines.draining)

    @property
    def pending(self) -> int:
        """Engines starting: asked for, not serving yet (on a cluster, perhaps waiting for a node)."""
        return len(self.engines.starting)

    @property
    def drained(self) -> int:
        """Engines taken out of service so far because Ray was draining their node."""
        return self.engines.drained

    @property
    def restarts(self) -> int:
        """Engines replaced so far."""
        return self.engines.restarts

    def resize(self, engines: int) -> None:
        """Grow or shrink to `engines` (see `EngineFleet.resize`); applied as `generate` runs."""
        self.engines.resize(engines)

    def sync_weights(self, weights: PolicyWeights, replace_now: bool = True) -> SyncReport:
        """Load `weights.version` into every serving engine, and drop those the sync found dead, also when
        the learner was stuck (`LearnerSyncTimeout`: engines stuck in its NCCL broadcast never finish it,
        so they are replaced now, not once the next sync has timed out on them too)."""
        try:
            report = weights.sync(dict(self.engines.actors))
        except LearnerSyncTimeout as stuck:
            self.drop(stuck.engines, replace_now)
            raise
        self.drop(report.dead, replace_now)
        self._policy_version = weights.version
        return report

    def drop(self, dead: dict[int, BaseException], replace_now: bool = True) -> None:
        """Replace engines that died, failed their load or missed a deadline. With `replace_now` False
        another thread may be inside `generate` (async mode), which owns the set of engines: the actor
        is only killed, and `generate` replaces it when its next call to it fails."""
        for engine_id, error in dead.items():
            if replace_now:
                self.engines.engine_died(engine_id, error)
            elif (actor := self.engines.actors.get(engine_id)) is not None:  # the generation thread may drop it first
                self.engines.launcher.kill(actor)

    def generate(self, requests: list[GroupRequest], on_result: Callable[[GroupResult], None] | None = None) -> list[GroupResult]:
        """Generate every group; results in completion order (assemble them by group id). `on_result`
        is called with each as it arrives. One call is one batch on the engines (dispatch.py)."""
        batch = next(self._batches)
        return Dispatch(self.engines, requests, batch, on_result, self._deaths, self._policy_version, self.rework).run()
