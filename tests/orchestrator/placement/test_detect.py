"""How a run tells the cluster's placement from the nodes Ray lists (placement.detect), without Ray:
a cluster whose rollout nodes are all still to come (Ray's autoscaler adds them when engines wait) is
told by its learner node alone."""

import pytest

from orchestrator.placement.labels import LEARNER_RESOURCE, ROLE_LABEL, ROLLOUT_RESOURCE
from orchestrator.placement.placement import detect


def _node(resources: dict | None = None, labels: dict | None = None, alive: bool = True) -> dict:
    return {"Alive": alive, "Resources": {"CPU": 1.0, **(resources or {})}, "Labels": labels or {}}


@pytest.mark.parametrize(
    ("nodes", "mode"),
    [
        ([_node(), _node()], "local"),
        ([_node(), _node({ROLLOUT_RESOURCE: 1.0})], "resources"),
        ([_node({LEARNER_RESOURCE: 1.0})], "resources"),  # no rollout node yet
        ([_node(), _node({ROLLOUT_RESOURCE: 1.0}, alive=False)], "local"),  # a dead node tells nothing
        ([_node({LEARNER_RESOURCE: 1.0}, {ROLE_LABEL: "learner"})], "labels"),
    ],
)
def test_the_placement_is_told_by_any_live_node_with_a_role(monkeypatch, nodes, mode):
    import ray

    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    assert detect().mode == mode
