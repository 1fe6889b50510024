"""`vllm_mode: colocate`: each learner worker shares its GPU with one rollout engine (TRL's colocate mode).

    colocation = Colocation.reserve(cluster.placement, config, timeout_s)   # before either side starts
    learner actor i:  colocation.learner_options(i)     engine in slot i:  colocation.engine_options(i)

One placement group with a bundle per learner worker, each holding one GPU and the CPUs of both
actors, reserved before either starts and kept for the whole run: a learner restarted from a
checkpoint and an engine replaced after a death go back into their bundle, so every pair stays on
one GPU. Ray splits the GPU by `vllm_gpu_memory_utilization` (the engine's share, also what vLLM
takes of the GPU's memory) and the rest (the learner's); both actors see the same device. The group
belongs to the run, not to the learner or the pool: `Components.shutdown` removes it (launch.py).

Which mode a run takes, and the refusal of a server-mode run that does not fit, are in gpus.py.
"""

from __future__ import annotations

import dataclasses

from orchestrator.contracts.errors import UserError
from orchestrator.placement.labels import LEARNER_ROLE
from orchestrator.placement.placement import Placement, ready

GPU_SHARE_DIGITS = 4  # Ray's resolution for fractional resources
CONTEXT_MARGIN = 0.05  # of a colocated GPU, left out of the learner's cap: the two processes' CUDA contexts


def learner_within_its_share(config):
    """`config` (vllm_mode colocate) with the learner's allocator capped below the engine's share, unless
    `learner.max_gpu_memory_fraction` is set: vLLM starts only if its share of the GPU is free, and the
    learner's cache would otherwise keep its peak from the first step on, so a replacement engine could
    never start."""
    if config.learner.max_gpu_memory_fraction is not None:
        return config
    cap = round(1 - config.vllm_gpu_memory_utilization - CONTEXT_MARGIN, GPU_SHARE_DIGITS)
    return config.model_copy(update={"learner": config.learner.model_copy(update={"max_gpu_memory_fraction": cap})})


@dataclasses.dataclass
class Colocation:
    group: object  # the Ray placement group: bundle i holds learner worker i and engine slot i
    share: float  # the engine's part of its GPU (vllm_gpu_memory_utilization)
    learner_cpus: float
    engine_cpus: float

    @staticmethod
    def reserve(placement: Placement, config, timeout_s: float) -> Colocation:
        """Reserve a GPU (and both actors' CPUs) for every learner worker on learner nodes, waiting up
        to `timeout_s`; `config` is a TrainConfig with `vllm_mode: colocate`."""
        import ray

        workers, learner_cpus, engine_cpus = config.learner.workers, config.learner.num_cpus, config.rollout.num_cpus_per_engine
        bundle, selector = placement.bundle(LEARNER_ROLE, learner_cpus + engine_cpus, 1)
        group = ray.util.placement_group(
            [bundle] * workers, strategy="PACK", bundle_label_selector=None if selector is None else [selector] * workers
        )
        if not ready(group, timeout_s):
            ray.util.remove_placement_group(group)
            raise UserError(
                f"no learner node can host {workers} x {bundle} within {timeout_s}s (vllm_mode: colocate, one GPU for "
                "each learner worker and its engine); check the learner nodes' free GPUs and CPUs"
            )
        return Colocation(group, round(config.vllm_gpu_memory_utilization, GPU_SHARE_DIGITS), learner_cpus, engine_cpus)

    @property
    def slots(self) -> int:
        """Engines the colocation has room for: one per learner worker's GPU."""
        return len(self.group.bundle_specs)

    def learner_options(self, rank: int) -> dict:
        return self._options(rank, self.learner_cpus, round(1 - self.share, GPU_SHARE_DIGITS))

    def engine_options(self, slot: int) -> dict:
        return self._options(slot, self.engine_cpus, self.share)

    def _options(self, bundle: int, cpus: float, gpus: float) -> dict:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(
            self.group, placement_group_bundle_index=bundle, placement_group_capture_child_tasks=True
        )
        return {"num_cpus": cpus, "num_gpus": gpus, "scheduling_strategy": strategy}

    def remove(self) -> None:
        import ray

        ray.util.remove_placement_group(self.group)
