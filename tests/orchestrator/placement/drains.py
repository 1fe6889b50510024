"""What the drain tests share: where an actor runs on a `ray.cluster_utils.Cluster`, and Ray's own
`ray drain-node`, as a cloud's preemption notice reaches a node through Ray's autoscaler."""

import os
import shutil
import subprocess
import sys
from pathlib import Path


def actor_node(cluster, class_name: str) -> str:
    """The node (hex id) of the one live actor of `class_name`."""
    actors = [a for a in cluster.global_state.actor_table(None).values() if a["ActorClassName"] == class_name]
    (alive,) = [a for a in actors if a["State"] == "ALIVE"]
    return alive["Address"]["NodeID"]


def drain(cluster, node_id: str, deadline_s: int) -> None:
    """`ray drain-node` for a preemption with `deadline_s` left; the node keeps running until killed."""
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    subprocess.run(
        [ray_cli, "drain-node", "--address", cluster.address, "--node-id", node_id, "--reason",
         "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "spot preemption notice",
         f"--deadline-remaining-seconds={deadline_s}"],
        check=True, timeout=60, env={**os.environ, "RAY_ADDRESS": cluster.address},
    )  # fmt: skip
