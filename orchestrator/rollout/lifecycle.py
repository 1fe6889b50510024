"""One record per rollout engine, with one lifecycle state, and the registry that keeps them.

                 admitted              drained, shrunk                 holds no group
    STARTING ------------> SERVING ------------------> DRAINING ------------------> STOPPING
        |                   |    ^  grown back (colocated)  |                          |
        |                   |    +--------------------------+                          | closed, or out of time
        +-------------------+------------------------------+---------------------------+--> gone (killed)
          failed, cancelled          died, replaced                  died

An engine is `Engine`: its actor, its state, the call it waits on (its `start()` while starting, its
`shutdown()` while stopping) with that call's deadline, and what it holds on the cluster (its node, its
placement group or colocated slot, what killing it leaves on its node). `EngineRecords` is the only place
a state changes (`move`, one of the arrows above), and it keeps the index the pool reads on every call,
`actors` (the engines that hold or take groups: serving or draining), in step. `problems()` lists any
invariant that does not hold; the unit tests check it after every change.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types


class Life(enum.Enum):
    STARTING = "starting"  # its actor starts vLLM; it serves once checked and synced (admitted)
    SERVING = "serving"  # takes groups
    DRAINING = "draining"  # takes no new groups; hands back or finishes those it holds, then stops
    STOPPING = "stopping"  # out of service, closing its vLLM engine; killed once closed or out of time


ARROWS = {
    Life.STARTING: {Life.SERVING},
    Life.SERVING: {Life.DRAINING, Life.STOPPING},
    Life.DRAINING: {Life.SERVING, Life.STOPPING},
    Life.STOPPING: set(),
}
WITH_GROUPS = (Life.SERVING, Life.DRAINING)  # states whose engines hold or take groups
WAITING = (Life.STARTING, Life.STOPPING)  # states that wait on a call with a deadline


@dataclasses.dataclass(eq=False)
class Engine:
    engine_id: int
    actor: object  # its Ray actor handle (or a simulated engine's)
    life: Life = Life.STARTING
    waiting: object = None  # ObjectRef of `start()` while starting, of `shutdown()` while stopping
    deadline: float = math.inf  # for that call
    node: str | None = None  # the Ray node it runs on, once admitted (where known)
    placement_group: object = None  # its own placement group (None: colocated, or local)
    slot: int | None = None  # colocated: the learner worker's bundle it sits in, until it stops
    leftovers: object = None  # what killing it leaves on its node (launcher.leftovers), once admitted


class EngineRecords:
    def __init__(self):
        self._engines: dict[int, Engine] = {}
        self._by_life: dict[Life, dict[int, Engine]] = {life: {} for life in Life}
        self.actors: dict[int, object] = {}  # engine id -> actor, for the engines serving or draining

    def add(self, engine: Engine) -> Engine:
        """A new engine, starting."""
        if engine.engine_id in self._engines or engine.life is not Life.STARTING:
            raise ValueError(f"engine {engine.engine_id}: added twice, or not as starting")
        self._engines[engine.engine_id] = engine
        self._by_life[Life.STARTING][engine.engine_id] = engine
        return engine

    def move(self, engine_id: int, life: Life) -> Engine:
        """Engine `engine_id` goes to `life`, along one of the arrows."""
        engine = self._engines[engine_id]
        if life not in ARROWS[engine.life]:
            raise ValueError(f"engine {engine_id} cannot go from {engine.life.value} to {life.value}")
        del self._by_life[engine.life][engine_id]
        engine.life = life
        self._by_life[life][engine_id] = engine
        if life in WITH_GROUPS:
            self.actors[engine_id] = engine.actor
        else:
            self.actors.pop(engine_id, None)
        return engine

    def remove(self, engine_id: int) -> Engine | None:
        """Engine `engine_id` is gone (killed), from whatever state; None if it was gone already."""
        engine = self._engines.pop(engine_id, None)
        if engine is not None:
            del self._by_life[engine.life][engine_id]
            self.actors.pop(engine_id, None)
        return engine

    def get(self, engine_id: int) -> Engine | None:
        return self._engines.get(engine_id)

    def __iter__(self):
        return iter(list(self._engines.values()))

    def in_state(self, life: Life) -> types.MappingProxyType:
        """The engines in `life`, by id (a read-only view: states change through `move` and `remove`)."""
        return types.MappingProxyType(self._by_life[life])

    def problems(self) -> list[str]:
        """The invariants that do not hold (none: [])."""
        found = []
        for engine in self._engines.values():
            if self._by_life[engine.life].get(engine.engine_id) is not engine:
                found.append(f"engine {engine.engine_id} is {engine.life.value} but not indexed so")
            if engine.life in WAITING and (engine.waiting is None or math.isinf(engine.deadline)):
                found.append(f"engine {engine.engine_id} is {engine.life.value} with no call or deadline to wait on")
            if engine.life not in WITH_GROUPS and engine.node is not None:
                found.append(f"engine {engine.engine_id} is {engine.life.value} but still placed on node {engine.node}")
        if sum(len(engines) for engines in self._by_life.values()) != len(self._engines):
            found.append("an engine is indexed in a state it is not in")
        serving = {e.engine_id: e.actor for e in self._engines.values() if e.life in WITH_GROUPS}
        if self.actors != serving:
            found.append(f"actors lists {sorted(self.actors)}, the engines serving or draining are {sorted(serving)}")
        slots = [e.slot for e in self._engines.values() if e.slot is not None]
        if len(slots) != len(set(slots)):
            found.append(f"two engines sit in one colocated slot: {sorted(slots)}")
        return found
