"""Two looks at the cluster, without Ray: its placement, from the nodes Ray lists (placement.detect),
told by the learner node alone while the rollout nodes are all still to come (Ray's autoscaler adds them
when engines wait); and the nodes Ray is draining, whose failed look is no reason to stop a run."""

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


def test_a_failed_look_at_draining_nodes_warns_and_says_none(monkeypatch, capsys):
    """Drains are acted on at best effort: both the pool and the learner go on when Ray cannot be asked."""
    from orchestrator.placement.placement import draining_nodes
    from workers.fences import ray as fenced_ray

    def unreachable():
        raise ConnectionError("GCS unreachable")

    monkeypatch.setattr(fenced_ray, "draining_nodes", unreachable)
    assert draining_nodes() == {}
    assert "could not ask Ray which nodes are draining (ConnectionError: GCS unreachable)" in capsys.readouterr().err
