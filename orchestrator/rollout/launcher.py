"""How the pool gets an engine: one interface, two ways.

`ActorLauncher` (the default) starts one `RolloutWorker` Ray actor per engine, each with its own vLLM
engine. `orchestrator/bench/simulated_engines.py:SimulatedLauncher` gives handles to simulated engines,
so the pool's own code can be measured at hundreds of engines on one machine. Either way the pool
holds a handle per engine and calls `handle.<method>.remote(...)` on it (`start`, `generate`,
`shutdown`, ...), getting real Ray ObjectRefs back.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from orchestrator.contracts.rollout import RolloutConfig


class EngineLauncher(ABC):
    @abstractmethod
    def launch(
        self, engine_id: int, model: str | None, tokenizer_ref, config: RolloutConfig, device: str, seed: int, options: dict
    ):
        """Start engine `engine_id` in the background and return its handle at once. `options` are
        the Ray actor options that place it (resources, placement group)."""

    @abstractmethod
    def kill(self, handle) -> None:
        """Stop an engine now, whatever it is doing; its pending calls fail."""


class ActorLauncher(EngineLauncher):
    """One `RolloutWorker` actor per engine."""

    def launch(self, engine_id, model, tokenizer_ref, config, device, seed, options):
        import ray

        from workers.rollout.actor import RolloutWorker

        return (
            ray.remote(RolloutWorker)
            .options(**options, max_concurrency=10_000)
            .remote(engine_id, model, tokenizer_ref, config, device, seed)
        )

    def kill(self, handle) -> None:
        import ray

        ray.kill(handle)
