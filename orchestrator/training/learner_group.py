"""`LearnerGroup`: the learner actor(s), their placement group, and the calls the step loop makes.

The driver talks to the learner only through this object: it starts the actor on a learner node
(one placement group for its GPUs, owned here and removed at shutdown), asks it for the canonical
tokenizer, hands it each step's batch, has it save checkpoints, and names the actor that publishes
weights (`lead`) to the weight transport. A learner that dies (or is stuck past a sync deadline)
surfaces as `LearnerDiedError` saying why (learner_death.py); `restart` replaces it from a checkpoint.
"""

from __future__ import annotations

import contextlib

from orchestrator.contracts.errors import LearnerDiedError
from orchestrator.contracts.learning import GRPOSettings
from orchestrator.contracts.tokenizer import TokenizerBundle
from orchestrator.placement.labels import LEARNER_ROLE
from orchestrator.training.learner_death import death_cause, oom_kills

_PROBE_TIMEOUT_S = 10.0  # asking the learner's node for its OOM counters


class LearnerGroup:
    def __init__(self, lead, placement_group=None, start_args: tuple | None = None):
        self.lead = lead  # Ray actor handle of workers.learner.actor.Learner
        self._placement_group = placement_group
        self._start_args = start_args  # (cluster, config, model, tokenizer, resume_from, timeout_s)
        self._node_id: str | None = None
        self._oom_before: dict[str, int] | None = None

    @classmethod
    def start(
        cls, cluster, config: GRPOSettings, model: str, tokenizer: str, resume_from: str | None, timeout_s: float
    ) -> LearnerGroup:
        """Place and start the learner and wait until it has loaded the model; waits up to
        `timeout_s` for a learner node with room."""
        group = cls(*_launch(cluster, config, model, tokenizer, resume_from, timeout_s))
        group._start_args = (cluster, config, model, tokenizer, resume_from, timeout_s)
        group._watch()
        return group

    def restart(self, checkpoint: str | None) -> None:
        """Replace the learner by a new one loaded from `checkpoint` (a checkpoint folder: weights,
        optimizer, scheduler, RNG; None: the model the run started from)."""
        cluster, config, model, tokenizer, resume_from, timeout_s = self._start_args
        if checkpoint is not None:
            model = tokenizer = resume_from = checkpoint
        self.shutdown()
        self.lead, self._placement_group = _launch(cluster, config, model, tokenizer, resume_from, timeout_s)
        self._watch()

    def _watch(self) -> None:
        """Wait for the learner to be up; note its node and that node's OOM-kill counters, so a
        later death can be told apart as out of memory."""
        self._node_id = self._call("starting", self.lead.node_id.remote())
        self._oom_before = self._probe_node()

    def canonical_tokenizer(self) -> TokenizerBundle:
        return self._call("sending the canonical tokenizer", self.lead.canonical_tokenizer.remote())

    def train_step(self, batch: dict) -> dict[str, float]:
        return self._call("training", self.lead.train_step.remote(batch))

    def save(self, folder: str) -> str:
        return self._call("saving a checkpoint", self.lead.save.remote(folder))

    def sync(self, transport, engines: dict[int, object], version: int):
        """`transport.sync` from this learner. Its death becomes `LearnerDiedError`, as a learner stuck
        past the deadline already is (`LearnerSyncTimeout`); engine deaths stay in the report."""
        with self._publishing():
            return transport.sync(self.lead, engines, version)

    def load_current(self, transport, engine_id: int, actor, version: int):
        """`transport.load_current` (a new engine's first weights) from this learner, as `sync`."""
        with self._publishing():
            return transport.load_current(self.lead, engine_id, actor, version)

    @contextlib.contextmanager
    def _publishing(self):
        import ray

        try:
            yield
        except ray.exceptions.RayActorError as error:  # an engine's death is reported, never raised
            raise self._died("publishing weights", error) from None

    def node_ids(self) -> list[str]:
        return [self._node_id or self._call("starting", self.lead.node_id.remote())]

    def _call(self, doing: str, ref):
        import ray

        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as error:
            raise self._died(doing, error) from None

    def _died(self, doing: str, error: BaseException) -> LearnerDiedError:
        cause = death_cause(str(error), self._oom_before, self._probe_node())
        return LearnerDiedError(f"the learner died while {doing} ({cause})")

    def _probe_node(self) -> dict[str, int] | None:
        """The OOM-kill counters of the learner's node, or None when it cannot be asked in time."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._node_id is None:
            return None
        probe = ray.remote(oom_kills).options(
            num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(self._node_id, soft=False)
        )
        try:
            return ray.get(probe.remote(), timeout=_PROBE_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError):
            return None

    def shutdown(self) -> None:
        import ray

        ray.kill(self.lead)
        if self._placement_group is not None:
            ray.util.remove_placement_group(self._placement_group)
            self._placement_group = None


def _launch(cluster, config: GRPOSettings, model: str, tokenizer: str, resume_from: str | None, timeout_s: float):
    """(the learner actor, its placement group), placed on a learner node."""
    import ray

    from workers.learner.actor import Learner

    learner = config.learner
    options, group = cluster.placement.actor_options(LEARNER_ROLE, learner.num_cpus, learner.num_gpus, timeout_s)
    return ray.remote(Learner).options(**options).remote(config, model, tokenizer, resume_from), group
