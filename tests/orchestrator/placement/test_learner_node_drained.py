"""The learner's node drained by Ray mid-run (`ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION`), on a
multi-node cluster with two learner nodes (`ray.cluster_utils.Cluster`, labelled as in the README): at
the end of the step it is in, the run checkpoints and starts the learner again from that checkpoint on
the other learner node, before the node goes; the node is then killed at its deadline. The run's
per-step rewards equal those of the same run on the same cluster without the drain (the learner-restart
path's exact replay, here with nothing to replay).

Marked slow (about 3 minutes): `make test PYTEST_ARGS="-m slow"` runs it."""

import os
import subprocess
import sys
import time

import pytest

from tests.orchestrator.placement.drains import actor_node, drain
from tests.orchestrator.training.short_run import ARGS, STEPS, metrics

pytestmark = [pytest.mark.engines, pytest.mark.slow]

DEADLINE_S = 60


@pytest.fixture
def cluster():
    from ray.cluster_utils import Cluster

    from orchestrator.placement.labels import LEARNER_RESOURCE, LEARNER_ROLE, ROLE_LABEL, ROLLOUT_RESOURCE, ROLLOUT_ROLE

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        rollout, learner = {ROLE_LABEL: ROLLOUT_ROLE}, {ROLE_LABEL: LEARNER_ROLE}
        cluster.add_node(num_cpus=1, labels=rollout, resources={ROLLOUT_RESOURCE: 1})
        cluster.learners = [cluster.add_node(num_cpus=1, labels=learner, resources={LEARNER_RESOURCE: 1}) for _ in range(2)]
        yield cluster
    finally:
        cluster.shutdown()


def _train(cluster, run, drain_after: int | None = None) -> str:
    env = {**os.environ, "RAY_ADDRESS": cluster.address}
    with open(run.parent / f"{run.name}.err", "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "train", *ARGS, f"output_dir={run}"],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )
    try:
        if drain_after is not None:
            _drain_the_learners_node(cluster, run, proc, drain_after)
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = (run.parent / f"{run.name}.err").read_text()
    assert proc.returncode == 0, err[-4000:]
    return err


def _drain_the_learners_node(cluster, run, proc, steps: int) -> None:
    deadline = time.monotonic() + 600
    while not ((run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").read_text().count("\n") >= steps):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended or stalled before the drain"
        time.sleep(0.05)
    node_id = actor_node(cluster, "Learner")
    drain(cluster, node_id, DEADLINE_S)
    drained_at = time.monotonic()
    while proc.poll() is None and time.monotonic() < drained_at + DEADLINE_S:
        time.sleep(0.2)
    (leaving,) = [node for node in cluster.learners if node.node_id == node_id]
    cluster.remove_node(leaving, allow_graceful=False)  # the deadline: the cloud takes the machine


def test_a_drained_learner_node_is_left_with_a_checkpoint_and_the_run_goes_on_exactly(cluster, tmp_path):
    _train(cluster, tmp_path / "uninterrupted")
    err = _train(cluster, tmp_path / "drained", drain_after=2)
    assert "the learner's node" in err and "is being drained by Ray (deadline in" in err, err[-4000:]
    assert "starting the learner again on another learner node" in err
    steps = metrics(tmp_path / "drained")
    assert [m["step"] for m in steps] == list(range(1, STEPS + 1))
    assert steps[-1]["learner/drains"] == 1
    expected = [m["reward_mean"] for m in metrics(tmp_path / "uninterrupted")]
    assert [m["reward_mean"] for m in steps] == pytest.approx(expected, abs=1e-6)
