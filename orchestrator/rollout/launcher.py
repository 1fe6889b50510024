"""How the pool gets an engine: one interface, two ways.

`ActorLauncher` (the default) starts one `RolloutWorker` Ray actor per engine, each with its own vLLM
engine. `orchestrator/bench/simulated_engines.py:SimulatedLauncher` gives handles to simulated engines,
so the pool's own code can be measured at hundreds of engines on one machine. Either way the pool
holds a handle per engine and calls `handle.<method>.remote(...)` on it (`start`, `generate`,
`shutdown`, ...), getting real Ray ObjectRefs back. The launcher also knows what a killed engine
leaves on its node and how to remove it (`leftovers`, `clean_up`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from orchestrator.contracts.rollout import RolloutConfig

LEFTOVERS_TIMEOUT_S = 60.0  # for a started engine to list its /dev/shm entries
CLEAN_UP_TIMEOUT_S = 30.0  # for a killed engine's processes to exit and unmap them


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

    def leftovers(self, handle):
        """What a started engine would leave on its node if killed (None: nothing), for `clean_up`."""
        return None

    def clean_up(self, leftovers):
        """Start removing what a dead engine left (`leftovers`); returns an ObjectRef to wait on, or None."""
        return None

    def node(self, leftovers) -> str | None:
        """The Ray node (hex id) a started engine runs on, from its `leftovers` (None: not a Ray node)."""
        return None


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

    def leftovers(self, handle) -> tuple[str, list, list[str]]:
        """(node id, the engine's processes, the /dev/shm entries they created): what a killed engine
        leaves on its node (workers/rollout/processes.py, shared_memory.py)."""
        import ray

        node_id, (processes, names) = ray.get([handle.node_id.remote(), handle.leftovers.remote()], timeout=LEFTOVERS_TIMEOUT_S)
        return node_id, processes, names

    def node(self, leftovers: tuple[str, list, list[str]]) -> str:
        return leftovers[0]

    def clean_up(self, leftovers: tuple[str, list, list[str]]):
        """A task on the engine's node that ends the engine's surviving processes (a stopped vLLM
        process outlives its killed actor) and then removes its /dev/shm entries once no process maps
        them. It needs no CPU, so a node full of engines still runs it; a node that is gone fails it,
        and nothing is left to clean there."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from workers.rollout.shared_memory import clean_up_after

        node_id, processes, names = leftovers
        strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
        task = ray.remote(clean_up_after).options(num_cpus=0, max_retries=0, scheduling_strategy=strategy)
        return task.remote(processes, names, timeout_s=CLEAN_UP_TIMEOUT_S)
