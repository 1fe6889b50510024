"""Where actors go: rollout engines on rollout nodes, the learner on learner nodes.

One placement group per engine, and one for the learner: a single bundle with the actor's CPUs and
all its GPUs (an engine's tensor-parallel GPUs, the learner's GPUs), so they are on one node. A
data-parallel learner (`learner.workers` > 1) is one gang: one placement group with a bundle per
rank, reserved all at once and packed on as few learner nodes as hold it. Nodes
are chosen by Ray node labels (`role=rollout`, `role=learner`), or, on clusters without labels, by
the custom resources `rollout_node` / `learner_node`. On one local node nothing is labelled and
everything goes there.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from orchestrator.contracts.errors import UserError
from orchestrator.log import log
from orchestrator.placement.labels import LEARNER_RESOURCE, ROLE_LABEL, ROLLOUT_RESOURCE, ROLLOUT_ROLE

Mode = Literal["labels", "resources", "local"]
MARKER = 0.001  # a resource that marks a node: any number of actors can share it


@dataclasses.dataclass(frozen=True)
class Placement:
    mode: Mode

    def bundle(self, role: str, cpus: float, gpus: int) -> tuple[dict, dict | None]:
        """The one placement-group bundle of an actor (all its CPUs and GPUs, so they are on one node
        and the actor itself can hold them) and its label selector."""
        bundle = {"CPU": cpus}
        if gpus:
            bundle["GPU"] = gpus
        if self.mode == "resources":
            bundle[ROLLOUT_RESOURCE if role == ROLLOUT_ROLE else LEARNER_RESOURCE] = MARKER
        return bundle, ({ROLE_LABEL: role} if self.mode == "labels" else None)

    def actor_options(self, role: str, cpus: float, gpus: int, timeout_s: float | None) -> tuple[dict, object | None]:
        """Ray actor options placing one actor (with `gpus` GPUs, on one node) for `role`, and the
        placement group reserved for it (None locally); remove the group with the actor.
        With a `timeout_s`, wait that long for a node and fail with advice if none fits; with None,
        return at once (the actor then starts whenever a node frees up).

        The group has a single bundle holding every GPU of the actor, and the actor takes that bundle:
        an actor can only draw resources from one bundle, so one bundle per GPU could never host an
        actor of two or more GPUs. A tensor-parallel engine runs its vLLM workers as processes of its
        own (`distributed_executor_backend="mp"`), which see exactly the actor's GPUs."""
        options, group = self.gang_options(role, cpus, gpus, 1, timeout_s)
        return options[0], group

    def gang_options(
        self, role: str, cpus: float, gpus: int, count: int, timeout_s: float | None
    ) -> tuple[list[dict], object | None]:
        """Actor options for `count` actors of `cpus` CPUs and `gpus` GPUs each, placed together (all or
        none) on `role` nodes, several nodes allowed; and their one placement group (None locally).
        Option i takes bundle i. Timeout as `actor_options`."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if self.mode == "local":  # one unlabelled node: Ray's own scheduling is all it takes
            return [{"num_cpus": cpus, "num_gpus": gpus} for _ in range(count)], None
        bundle, selector = self.bundle(role, cpus, gpus)
        group = ray.util.placement_group(
            [bundle] * count,
            strategy="STRICT_PACK" if count == 1 else "PACK",
            bundle_label_selector=None if selector is None else [selector] * count,
        )
        if timeout_s is not None and not ready(group, timeout_s):
            ray.util.remove_placement_group(group)
            wanted = f"{bundle}" if count == 1 else f"{count} x {bundle}"
            raise UserError(
                f"no {role} node can host {wanted} within {timeout_s}s (placement: {self.mode}); "
                f"label nodes with {ROLE_LABEL}={role} (or give them the {role}_node resource) and check their free CPUs/GPUs"
            )
        return [
            {
                "num_cpus": cpus,
                "num_gpus": gpus,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(
                    group, placement_group_bundle_index=index, placement_group_capture_child_tasks=True
                ),
            }
            for index in range(count)
        ], group


def ready(group, timeout_s: float) -> bool:
    """Whether the placement group was reserved within `timeout_s`."""
    import ray

    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    return bool(ready)


def detect() -> Placement:
    """Labels if any alive node carries the role label, else resources if any node has a role
    resource, else local (one node, nothing labelled). Either role tells: on a cluster whose rollout
    nodes are all still to come (Ray's autoscaler adds them when engines wait for one), only the
    learner's node is there to say so."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if any(ROLE_LABEL in (n.get("Labels") or {}) for n in nodes):
        return Placement("labels")
    if any({ROLLOUT_RESOURCE, LEARNER_RESOURCE} & set(n.get("Resources") or {}) for n in nodes):
        return Placement("resources")
    return Placement("local")


def one_node() -> bool:
    """Whether the Ray cluster is this machine alone (as it is when the call is made)."""
    import ray

    return [node["NodeID"] for node in ray.nodes() if node["Alive"]] == [ray.get_runtime_context().get_node_id()]


def draining_nodes() -> dict[str, float]:
    """Node id (hex) -> the time by which Ray may end it, for every node Ray is draining
    (workers/fences/ray.py). Drains are acted on at best effort: when Ray cannot be asked, this warns and
    says none, and the caller asks again later."""
    from workers.fences import ray as fenced_ray

    try:
        return fenced_ray.draining_nodes()
    except Exception as error:  # a failed look is no reason to stop the run
        log.warning(f"could not ask Ray which nodes are draining ({type(error).__name__}: {error}); asking again later")
        return {}
