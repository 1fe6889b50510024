"""`LearnerGroup`: the learner actor(s), their placement group, and the calls the step loop makes.

The driver talks to the learner only through this object: it starts the actor on a learner node
(one placement group for its GPUs, owned here and removed at shutdown), asks it for the canonical
tokenizer, hands it each step's batch, has it save checkpoints, and names the actor that publishes
weights (`lead`) to the weight transport.
"""

from __future__ import annotations

from orchestrator.contracts.learning import GRPOSettings
from orchestrator.contracts.tokenizer import TokenizerBundle
from orchestrator.placement.labels import LEARNER_ROLE


class LearnerGroup:
    def __init__(self, lead, placement_group=None):
        self.lead = lead  # Ray actor handle of workers.learner.actor.Learner
        self._placement_group = placement_group

    @classmethod
    def start(
        cls, cluster, config: GRPOSettings, model: str, tokenizer: str, resume_from: str | None, timeout_s: float
    ) -> LearnerGroup:
        """Place and start the learner; waits up to `timeout_s` for a learner node with room."""
        import ray

        from workers.learner.actor import Learner

        learner = config.learner
        options, group = cluster.placement.actor_options(LEARNER_ROLE, learner.num_cpus, learner.num_gpus, timeout_s)
        return cls(ray.remote(Learner).options(**options).remote(config, model, tokenizer, resume_from), group)

    def canonical_tokenizer(self) -> TokenizerBundle:
        import ray

        return ray.get(self.lead.canonical_tokenizer.remote())

    def train_step(self, batch: dict) -> dict[str, float]:
        import ray

        return ray.get(self.lead.train_step.remote(batch))

    def save(self, folder: str) -> str:
        import ray

        return ray.get(self.lead.save.remote(folder))

    def node_ids(self) -> list[str]:
        import ray

        return [ray.get(self.lead.node_id.remote())]

    def shutdown(self) -> None:
        import ray

        ray.kill(self.lead)
        if self._placement_group is not None:
            ray.util.remove_placement_group(self._placement_group)
            self._placement_group = None
