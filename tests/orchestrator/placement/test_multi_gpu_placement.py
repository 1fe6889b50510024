"""Actors of several GPUs (a tensor-parallel engine, a multi-GPU learner) get placed and hold all their
GPUs, on a simulated cluster whose GPUs are logical resources (`ray.cluster_utils.Cluster` with
`num_gpus` declared: Ray schedules them on a CPU-only machine too). Runs in a subprocess so its
cluster never meets the Ray session other tests share."""

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
    nodes = {
        ROLLOUT_ROLE: cluster.add_node(num_cpus=2, num_gpus=4, labels={ROLE_LABEL: ROLLOUT_ROLE}, resources={ROLLOUT_RESOURCE: 1}),
        LEARNER_ROLE: cluster.add_node(num_cpus=2, num_gpus=2, labels={ROLE_LABEL: LEARNER_ROLE}, resources={LEARNER_RESOURCE: 1}),
    }
    ray.init(address=cluster.address)

    @ray.remote
    class Probe:
        def where(self):
            return ray.get_runtime_context().get_node_id(), sorted(ray.get_gpu_ids())

    result = {"nodes": {role: node.node_id for role, node in nodes.items()}, "placed": []}
    for mode in ("labels", "resources"):
        for role, gpus in ((ROLLOUT_ROLE, 2), (ROLLOUT_ROLE, 2), (LEARNER_ROLE, 2)):
            options, group = Placement(mode).actor_options(role, 1.0, gpus, timeout_s=60)
            actor = Probe.options(**options).remote()
            node, gpu_ids = ray.get(actor.where.remote(), timeout=60)
            result["placed"].append({"mode": mode, "role": role, "node": node, "gpus": gpu_ids})
            ray.kill(actor)
            ray.util.remove_placement_group(group)
    try:
        Placement("labels").actor_options(LEARNER_ROLE, 1.0, 4, timeout_s=3)  # the learner node has 2
        result["too_big"] = None
    except UserError as error:
        result["too_big"] = str(error)
    print("RESULT " + json.dumps(result))
    ray.shutdown()
    cluster.shutdown()
    """
)


def test_actors_of_several_gpus_are_placed_on_their_node_with_all_their_gpus():
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert len(result["placed"]) == 6
    for placed in result["placed"]:
        assert placed["node"] == result["nodes"][placed["role"]], placed
        assert len(placed["gpus"]) == 2, placed  # the actor holds both GPUs (vLLM's mp workers see them)
    assert "learner" in result["too_big"] and "'GPU': 4" in result["too_big"]
