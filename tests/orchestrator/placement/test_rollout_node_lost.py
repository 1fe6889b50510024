"""A whole rollout node lost mid-run on a multi-node cluster (`ray.cluster_utils.Cluster`: real raylets
on this machine, labelled as in the README). One rollout node's raylet is killed while step 2 runs:
`python -m orchestrator train` says which engine it lost, finishes every step on the surviving rollout
node with current weights, leaves no process of the lost node running, and never places an engine on the learner node or an unlabelled node,
although both have free CPUs and the surviving rollout node has none. The same with LoRA on: the
surviving engine goes on taking the adapter alone."""

import json
import os
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from tests.orchestrator.placement.drains import cmdline, node_processes, take_node_away

pytestmark = [pytest.mark.engines, pytest.mark.slow]

STEPS = 4
ARGS = [
    "prompts_per_step=2",
    "num_generations=4",
    "max_completion_length=12",
    f"max_steps={STEPS}",
    "learning_rate=1e-3",
    "rollout.engines=2",
    "plot_steps=100",
]
# Node death noticed within about a second (Ray's default takes tens of seconds).
FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 200,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 3,
}


@pytest.fixture
def cluster():
    from ray.cluster_utils import Cluster

    from orchestrator.placement.labels import LEARNER_RESOURCE, LEARNER_ROLE, ROLE_LABEL, ROLLOUT_RESOURCE, ROLLOUT_ROLE

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False, "_system_config": FAST_HEALTH_CHECKS}
    )
    try:
        rollout, learner = {ROLE_LABEL: ROLLOUT_ROLE}, {ROLE_LABEL: LEARNER_ROLE}
        cluster.rollout = [cluster.add_node(num_cpus=1, labels=rollout, resources={ROLLOUT_RESOURCE: 1}) for _ in range(2)]
        cluster.learner = cluster.add_node(num_cpus=2, labels=learner, resources={LEARNER_RESOURCE: 1})
        cluster.unlabelled = cluster.add_node(num_cpus=2)
        yield cluster
    finally:
        cluster.shutdown()


@pytest.mark.parametrize("lora", [False, True], ids=["full-model", "lora"])
def test_run_finishes_on_the_surviving_rollout_node(cluster, tmp_path, lora):
    run = tmp_path / "run"
    args = [*ARGS, "lora.r=8", "learning_rate=1e-2"] if lora else ARGS
    env = {**os.environ, "RAY_ADDRESS": cluster.address}
    # to files: a full pipe would stall the run
    with open(tmp_path / "stdout", "w") as stdout, open(tmp_path / "stderr", "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "train", *args, f"output_dir={run}"], stdout=stdout, stderr=stderr, env=env
        )
    try:
        metrics = run / "metrics.jsonl"
        deadline = time.monotonic() + 600
        while not (metrics.is_file() and metrics.read_text().count("\n") >= 1):  # step 2 is running
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended or stalled before step 2"
            time.sleep(0.05)
        lost, survivor = cluster.rollout
        processes = node_processes(lost)
        assert any("EngineCore" in cmdline(p) for p in processes)
        killed_at = time.monotonic()
        orphans = take_node_away(cluster, lost, processes)  # any process still there after 30 s fails the test
        proc.wait(timeout=600)
        print(f"run finished {time.monotonic() - killed_at:.0f}s after the node loss; orphans: {orphans}")
    finally:
        if proc.poll() is None:
            proc.kill()

    out, err = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    assert proc.returncode == 0, err[-4000:]
    assert not orphans, f"processes of the lost node outlived it by 30 s: {orphans}"
    assert f"done: {STEPS} steps" in out
    died = [line for line in err.splitlines() if line.startswith("warning: engine") and " died (" in line]
    assert len(died) == 1, err[-4000:]
    assert "its node has died" in died[0] and "replacement engine 2 is starting" in died[0]
    lost_engine = int(died[0].split()[2])

    steps = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [m["step"] for m in steps] == list(range(1, STEPS + 1))
    rollout_files = sorted(p.name for p in (run / "rollouts").iterdir())
    assert rollout_files == [f"step-{s:06d}.parquet" for s in range(1, STEPS + 1)]
    assert steps[-1]["engines"] == 1 and steps[-1]["engine_restarts"] == 1
    # every engine held the current weights (CPU engines sample in float32, as the learner computes)
    assert max(m["sampling/sampling_logp_difference/mean"] for m in steps) < (1e-4 if lora else 0.01)

    # after the loss, only the engine on the surviving rollout node generated
    rows = pq.read_table(run / "rollouts").to_pylist()
    assert len(rows) == STEPS * 2 * 4
    assert {r["engine_id"] for r in rows if r["step"] > 2} == {1 - lost_engine}

    # every engine ever placed was on a rollout node; the replacement found no room there and was never placed
    engines = [a for a in cluster.global_state.actor_table(None).values() if a["ActorClassName"] == "RolloutWorker"]
    ran_on = sorted(a["Address"]["NodeID"] for a in engines if a["Pid"])  # an actor never started has no pid
    assert len(engines) == 3 and ran_on == sorted([lost.node_id, survivor.node_id]), (
        ran_on,
        cluster.learner.node_id,
        cluster.unlabelled.node_id,
    )
