"""Which cores a CPU engine's threads run on, when the pool's engines share one node.

vLLM's CPU engine binds its threads itself (`VLLM_CPU_OMP_THREADS_BIND=auto`): the first NUMA node's
cores less one kept for its scheduler process. Every engine on a node makes that same choice, so two
engines share one core while the rest sit idle, and on a 2-core machine one engine uses one core of
two. On a one-node cluster the pool knows every engine on the node, so it gives each engine a slot
and each slot its own slice of the cores (`rollout.cpu_threads_bind` set by hand wins). The slices
are cut for `rollout.engines`: engines added later by `scale` share the cores of the first slots.
"""

from __future__ import annotations


def core_slice(cores: list[int], engines: int, slot: int) -> str:
    """The cores of engine slot `slot` of `engines` sharing `cores`, as VLLM_CPU_OMP_THREADS_BIND
    takes them ('0,1'). With more engines than cores, slots share cores round the list."""
    cores = sorted(cores)
    if engines >= len(cores):
        return str(cores[slot % len(cores)])
    each = len(cores) // engines
    first = slot % engines * each
    mine = cores[first : first + each] if slot % engines < engines - 1 else cores[first:]  # the last takes any remainder
    return ",".join(map(str, mine))


class CoreSlots:
    """Slots for the engines of one node: the lowest free one for a new engine, freed when it stops."""

    def __init__(self, cores: list[int], engines: int):
        self.cores, self.engines = cores, engines
        self._taken: dict[int, int] = {}  # engine id -> slot

    def take(self, engine_id: int) -> str:
        used = set(self._taken.values())
        slot = next(s for s in range(len(used) + 1) if s not in used)
        self._taken[engine_id] = slot
        return core_slice(self.cores, self.engines, slot)

    def free(self, engine_id: int) -> None:
        self._taken.pop(engine_id, None)
