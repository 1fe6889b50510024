"""A data-parallel learner's ranks are placed as one gang on learner nodes, across several of them
when one cannot hold them all, never on a rollout node; a task for rank 0's bundle (where the group's
rendezvous address is chosen) runs on rank 0's node. Simulated cluster (logical GPUs), in a
subprocess so its cluster never meets the Ray session other tests share."""

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json
    import ray
    from ray.cluster_utils import Cluster

    from orchestrator.contracts.errors import UserError
    from orchestrator.placement.labels import LEARNER_RESOURCE, LEARNER_ROLE, ROLE_LABEL, ROLLOUT_RESOURCE, ROLLOUT_ROLE
    from orchestrator.placement.placement import Placement

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    rollout = cluster.add_node(num_cpus=2, num_gpus=4, labels={ROLE_LABEL: ROLLOUT_ROLE}, resources={ROLLOUT_RESOURCE: 1})
    learners = [
        cluster.add_node(num_cpus=1, num_gpus=1, labels={ROLE_LABEL: LEARNER_ROLE}, resources={LEARNER_RESOURCE: 1})
        for _ in range(2)
    ]
    ray.init(address=cluster.address)

    @ray.remote
    class Probe:
        def where(self):
            return ray.get_runtime_context().get_node_id(), sorted(ray.get_gpu_ids())

    def node():
        return ray.get_runtime_context().get_node_id()

    result = {"learners": sorted(n.node_id for n in learners), "rollout": rollout.node_id, "placed": []}
    for mode in ("labels", "resources"):
        options, group = Placement(mode).gang_options(LEARNER_ROLE, 1.0, 1, 2, timeout_s=60)
        probes = [Probe.options(**rank).remote() for rank in options]
        where = ray.get([probe.where.remote() for probe in probes], timeout=60)
        on_rank_0 = ray.get(ray.remote(node).options(num_cpus=0, scheduling_strategy=options[0]["scheduling_strategy"]).remote())
        result["placed"].append({"mode": mode, "ranks": where, "task_on": on_rank_0})
        for probe in probes:
            ray.kill(probe)
        ray.util.remove_placement_group(group)
    try:
        Placement("labels").gang_options(LEARNER_ROLE, 1.0, 1, 3, timeout_s=3)  # two learner GPUs in all
        result["too_big"] = None
    except UserError as error:
        result["too_big"] = str(error)
    print("RESULT " + json.dumps(result))
    ray.shutdown()
    cluster.shutdown()
    """
)


def test_learner_ranks_are_placed_together_on_learner_nodes():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert len(result["placed"]) == 2
    for placed in result["placed"]:
        nodes = [node for node, _ in placed["ranks"]]
        assert sorted(nodes) == result["learners"], placed  # one rank per learner node: one GPU each
        assert all(len(gpus) == 1 for _, gpus in placed["ranks"]), placed
        assert placed["task_on"] == nodes[0], placed
    assert "learner" in result["too_big"] and "3 x" in result["too_big"]
